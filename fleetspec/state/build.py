"""The tree apply renders for the playbooks (``<state dir>/<fleet>.build``), and the
proof that it is the tree of the applied fleet.

After a complete apply, ``mark_applied`` writes the state's serial into the tree; a
later plan reads the old side of the rendered files from there (``applied_tree``)
instead of rendering the applied fleet a second time. Any later state write moves the
serial on, and the next apply replaces the whole tree (without the mark) before it
starts, so a tree that does not match the applied fleet is never used. Only the file
store marks and reads the tree: a database state is shared by many machines, whose
serials a local tree cannot follow (and whose local directory a file state may share).
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

from fleetspec.render.writer import MARKER as RENDER_MARK
from fleetspec.safe_io import atomic_write
from fleetspec.state.backend import StateBackend
from fleetspec.state.store import State, StateStore

APPLIED_MARK = ".applied-serial"


def build_dir(store: StateBackend) -> Path:
    """Where apply renders the tree the playbooks read (DIR/ansible and DIR/slurm side by side)."""
    return store.work_dir / f"{store.fleet_name}.build"


def mark_applied(store: StateBackend, serial: int) -> None:
    """The build tree is the applied fleet's, as of state ``serial`` (no tree: nothing to mark)."""
    if not isinstance(store, StateStore):
        return
    tree = build_dir(store)
    if (tree / "fleet.json").is_file():
        atomic_write(tree / APPLIED_MARK, f"{serial}\n".encode())


def applied_tree(store: StateBackend, state: State) -> dict[PurePosixPath, str] | None:
    """The rendered files of the applied fleet, read back, or None when the tree is not
    exactly that (no complete apply yet, per-node records since, a later serial, a database state)."""
    if state.applied is None or state.nodes or not isinstance(store, StateStore):
        return None
    tree = build_dir(store)
    try:
        if (tree / APPLIED_MARK).read_text().strip() != str(state.serial):
            return None
        files: dict[PurePosixPath, str] = {}
        for root, _, names in os.walk(tree):
            for name in names:
                path = Path(root, name)
                rel = PurePosixPath(*path.relative_to(tree).parts)
                if str(rel) in (APPLIED_MARK, RENDER_MARK):
                    continue
                with open(path, encoding="utf-8", newline="") as fh:
                    files[rel] = fh.read()
    except (OSError, UnicodeDecodeError):
        return None
    return files
