"""The one place rendered files touch the disk: atomically, and only inside DIR.

The whole tree is written to a temporary sibling directory, then swapped in with
renames, so a failed render leaves DIR exactly as it was. DIR is fleetspec's: it
carries a marker file, and a non-empty directory without that marker is refused
rather than replaced (it might be someone's work).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path, PurePosixPath

MARKER = ".fleetspec-render"


class RenderWriteError(Exception):
    pass


def safe_relative(path: PurePosixPath | str) -> PurePosixPath:
    """Refuse absolute paths and '..' segments: a rendered name may not leave DIR."""
    p = PurePosixPath(path)
    if p.is_absolute() or not p.parts or any(part in ("..", "") for part in p.parts) or "\0" in str(p):
        raise RenderWriteError(f"refusing to write '{path}': rendered paths must stay inside the output directory")
    return p


def write_tree(files: dict[PurePosixPath, str], out_dir: Path) -> None:
    out_dir = Path(out_dir)
    checked = {safe_relative(rel): text for rel, text in files.items()}
    if out_dir.exists():
        if not out_dir.is_dir():
            raise RenderWriteError(f"{out_dir} exists and is not a directory. Choose another --out")
        if any(out_dir.iterdir()) and not (out_dir / MARKER).exists():
            raise RenderWriteError(
                f"{out_dir} is not empty and was not written by fleetspec. Choose an empty or new --out directory"
            )
    parent = out_dir.resolve().parent
    parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=parent))
    try:
        for rel, text in checked.items():
            target = staging.joinpath(*rel.parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            with open(target, "w", encoding="utf-8") as fh:
                fh.write(text)
        (staging / MARKER).write_text("This directory is written by 'fleetspec render'; it is replaced as a whole.\n")
        _swap(staging, out_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def _swap(staging: Path, out_dir: Path) -> None:
    if not out_dir.exists():
        os.rename(staging, out_dir)
        return
    backup = staging.with_name(staging.name + ".old")
    os.rename(out_dir, backup)
    try:
        os.rename(staging, out_dir)
    except BaseException:
        os.rename(backup, out_dir)
        raise
    shutil.rmtree(backup, ignore_errors=True)
