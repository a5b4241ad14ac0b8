"""The state store: per fleet, what was last applied, in one JSON document.

``<dir>/<fleet>.state.json`` holds a format version, a lineage id (uuid4, fixed when
the state is created), a serial (+1 per write), the last fully applied IR (``applied``),
per-node records of nodes that a partly finished apply has already moved (``nodes``:
host -> that node and its resolved stack, or null for a removed node), and an
append-only journal. A node's applied state is its ``nodes`` record when it has one,
else its entry in ``applied``; so state advances per completed wave, and a killed
apply loses nothing. ``record_applied`` folds everything back into ``applied`` when
an apply completes.

Writes are atomic (``atomic.atomic_write``), keep the previous document as ``.bak``,
and are only allowed while this store holds the fleet's lock. A document that is not
valid JSON, comes from a newer fleetspec, or names another fleet is refused with a
clear error and never overwritten.
"""

from __future__ import annotations

import json
import os
import re
import socket
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fleetspec import __version__
from fleetspec.compile.ir import Fleet, Node, StackTuple
from fleetspec.node_side.hostlist import compress
from fleetspec.safe_io import UnsafePathError, atomic_write, loads_json, read_bounded, remove_leftovers
from fleetspec.state.codec import FleetDecodeError, decode, encode, fleet_from_dict
from fleetspec.state.lock import LockHeld, LockInfo, StateLock, current_user, is_stale, read_holder

FORMAT_VERSION = 1
STATE_DIR_ENV = "FLEETSPEC_STATE_DIR"
DEFAULT_DIR_NAME = ".fleetspec"
MAX_STATE_BYTES = 1024 * 1024 * 1024  # the IR of the largest fleet fleetspec accepts, with room
_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


class StateError(Exception):
    """The state cannot be used as it is; the message says why and what to do."""


@dataclass(frozen=True)
class NodeRecord:
    """One node as applied, with its resolved stack (stack names can be re-pinned)."""

    node: Node
    stack: StackTuple | None


@dataclass(frozen=True)
class State:
    fleet_name: str
    lineage: str | None  # None: no state written yet
    serial: int  # 0: no state written yet
    applied: Fleet | None
    nodes: Mapping[str, NodeRecord | None] = field(default_factory=dict)
    journal: tuple[dict[str, Any], ...] = ()
    # A limited apply (--lab, --limit) that finished: what it was limited to, the nodes with
    # changes it left for a later apply, and the control-plane parts it converged.
    limited: LimitedApply | None = None

    @property
    def exists(self) -> bool:
        return self.lineage is not None

    @property
    def in_progress(self) -> bool:
        """An apply moved some nodes but did not finish (a finished limited apply did)."""
        return bool(self.nodes) and self.limited is None


@dataclass(frozen=True)
class LimitedApply:
    """The last apply finished, limited to some hosts (``--lab``, ``--limit``)."""

    restriction: str
    unapplied: tuple[str, ...] = ()  # nodes whose changes it left (not touched)
    # What it converged beyond its nodes, each with the sha256 of what it became: a rendered
    # file by its path ("slurm/slurm.conf", "ansible/group_vars/all.yml"), a Slurm partition
    # as "partition:NAME" (``plan.diff.partition_digest``). The next plan shows none of them
    # while they still render the same.
    converged: Mapping[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"restriction": self.restriction, "unapplied": list(self.unapplied),
                "converged": dict(self.converged)}


def state_dir(spec: Path, explicit: Path | None = None) -> Path:
    """``--state`` wins, then $FLEETSPEC_STATE_DIR, then ``.fleetspec/`` beside the spec."""
    if explicit is not None:
        return Path(explicit)
    if os.environ.get(STATE_DIR_ENV):
        return Path(os.environ[STATE_DIR_ENV])
    return Path(spec).resolve().parent / DEFAULT_DIR_NAME


Change = Callable[[dict[str, Any]], None]


class DocumentWrites:
    """The two writes apply makes, as changes to the state document; a backend supplies
    ``fleet_name`` and ``_write`` (read the latest document, apply the change, store it
    as the next serial, all under the lock)."""

    fleet_name: str

    def _write(self, change: Change, kind: str, hosts: list[str], summary: str) -> State:
        raise NotImplementedError

    def record_wave(self, target: Fleet, hosts: Iterable[str], summary: str) -> State:
        """Record that ``hosts`` now run as ``target`` describes them (a host absent there was removed)."""
        hosts = sorted(set(hosts))
        stacks = {s.name: s for s in target.stacks}
        records: dict[str, NodeRecord | None] = {}
        for host in hosts:
            node = target.node(host)
            records[host] = None if node is None else NodeRecord(node, stacks.get(node.stack))

        def change(document: dict[str, Any]) -> None:
            nodes = document.setdefault("nodes", {})
            for host, record in records.items():
                nodes[host] = None if record is None else _record_to_dict(record)
            document.pop("limited", None)  # an apply is moving nodes again: unfinished until it says so

        return self._write(change, kind="wave", hosts=hosts, summary=summary)

    def record_limited(self, limited: LimitedApply, summary: str) -> State:
        """A limited apply finished: its nodes are recorded (``record_wave``), the rest of the
        fleet is left as it was; the state says so instead of reading as interrupted."""
        data = limited.to_dict()

        def change(document: dict[str, Any]) -> None:
            document["limited"] = data

        return self._write(change, kind="limited", hosts=[], summary=summary)

    def record_applied(self, fleet: Fleet, summary: str) -> State:
        """The whole of ``fleet`` is applied: it becomes ``applied`` and the node records are cleared."""
        if fleet.name != self.fleet_name:
            raise StateError(f"fleet {fleet.name!r} cannot be recorded in the state of {self.fleet_name!r}")
        applied = fleet.to_dict()

        def change(document: dict[str, Any]) -> None:
            document["applied"] = applied
            document["nodes"] = {}
            document.pop("limited", None)

        return self._write(change, kind="apply", hosts=[n.hostname for n in fleet.nodes], summary=summary)


class StateStore(DocumentWrites):
    def __init__(self, directory: Path, fleet_name: str) -> None:
        if not _SAFE_NAME.match(fleet_name):
            raise StateError(f"fleet name {fleet_name!r} cannot name a state file")
        self.directory = Path(directory)
        self.fleet_name = fleet_name
        self.path = self.directory / f"{fleet_name}.state.json"
        self.backup_path = self.directory / f"{fleet_name}.state.json.bak"
        self.lock_path = self.directory / f"{fleet_name}.lock"
        self._lock: StateLock | None = None

    # -- reading ---------------------------------------------------------------------

    def read(self) -> State:
        document = self._read_document()
        if document is None:
            return State(self.fleet_name, None, 0, None)
        return _state_from_document(document, self.path)

    def _read_document(self) -> dict[str, Any] | None:
        try:
            raw = read_bounded(self.path, MAX_STATE_BYTES)
        except UnsafePathError as exc:
            raise StateError(f"{exc}. It was left as it is: point --state at a directory of regular files") from None
        except FileNotFoundError:
            if self.backup_path.exists():
                raise StateError(f"{self.path} is missing but its backup {self.backup_path} exists: "
                                 f"the state was removed by hand. Restore it with "
                                 f"'cp {self.backup_path} {self.path}', or remove both to start over") from None
            return None
        try:
            document = loads_json(raw)
        except ValueError as exc:  # UnicodeDecodeError and too deep nesting included
            raise StateError(f"{self.path} is corrupted or truncated ({len(raw)} bytes: {_clip(str(exc))}). It was "
                             f"left as it is. {self._backup_hint()}") from None
        _check_document(document, self.path, self.fleet_name)
        return document

    def _backup_hint(self) -> str:
        try:
            serial = loads_json(read_bounded(self.backup_path, MAX_STATE_BYTES))["serial"]
        except (OSError, ValueError, KeyError, TypeError, UnsafePathError):
            return "No usable backup: restore it from your own copy."
        return f"The previous state (serial {serial}) is in {self.backup_path}: check it, then copy it over."

    @property
    def location(self) -> str:
        """Where the state lives, in words for messages (the backend interface)."""
        return str(self.directory)

    @property
    def work_dir(self) -> Path:
        """Where apply keeps local files (rendered tree, Pulumi's file backend): the state directory."""
        return self.directory

    def history(self) -> list[dict[str, Any]]:
        """The journal, oldest first: one entry per serial (the file store keeps the latest document only)."""
        return list(self.read().journal)

    def export_document(self) -> dict[str, Any] | None:
        """The latest stored document as it is (``state copy``); None when there is no state."""
        return self._read_document()

    def import_document(self, document: dict[str, Any]) -> State:
        """Store another store's document unchanged (lineage, serial, journal): only into an
        empty state, and only under the lock (``state copy``)."""
        if self._lock is None or not self._lock.held:
            raise StateError("state writes need the lock: use 'with store.lock(command):'")
        _check_document(document, self.path, self.fleet_name)
        state = _state_from_document(document, self.path)
        if self._read_document() is not None:
            raise StateError(f"{self.path} already holds a state: a copy goes only into an empty location")
        try:
            atomic_write(self.path, (json.dumps(document, indent=1) + "\n").encode(), backup=self.backup_path)
        except UnsafePathError as exc:
            raise StateError(f"{exc}. The state was not written") from None
        return state

    # -- locking ---------------------------------------------------------------------

    @contextmanager
    def lock(self, command: str) -> Iterator[StateLock]:
        """Hold the fleet's lock; writes are refused outside it. Raises LockHeld."""
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StateError(f"cannot use {self.directory} as the state directory: {exc.strerror}") from None
        with StateLock(self.lock_path, command) as held:
            self._lock = held
            try:
                yield held
            finally:
                self._lock = None

    def holder(self) -> LockInfo | None:
        """Who holds the lock now (None: nobody, or a holder this host can see is gone)."""
        if not self.lock_path.exists():
            return None
        holder = read_holder(self.lock_path)
        if holder is None:
            raise LockHeld(self.lock_path, None, f"If no fleetspec is running, remove {self.lock_path} by hand.")
        return None if is_stale(holder) else holder

    def force_unlock(self) -> LockInfo | None:
        """Remove the lock whoever holds it (``state unlock --force``); returns the holder removed."""
        holder = read_holder(self.lock_path) if self.lock_path.exists() else None
        self.lock_path.unlink(missing_ok=True)
        return holder

    # -- writing ---------------------------------------------------------------------

    def _write(self, change: Change, kind: str, hosts: list[str], summary: str) -> State:
        if self._lock is None or not self._lock.held:
            raise StateError("state writes need the lock: use 'with store.lock(command):'")
        document = self._read_document() or _new_document(self.fleet_name)
        next_document(document, change, kind, hosts, summary, self._lock.command)
        remove_leftovers(self.directory, self.path.name)
        try:
            atomic_write(self.path, (json.dumps(document, indent=1) + "\n").encode(), backup=self.backup_path)
        except UnsafePathError as exc:
            raise StateError(f"{exc}. The state was not written") from None
        return _state_from_document(document, self.path)


def next_document(document: dict[str, Any], change: Change, kind: str, hosts: list[str], summary: str,
                  command: str) -> dict[str, Any]:
    """``document`` moved to its next serial by ``change``, with a journal entry (in place)."""
    change(document)
    document["format_version"] = FORMAT_VERSION
    document["serial"] += 1
    document["updated"] = _now()
    document["fleetspec_version"] = __version__
    document["journal"].append({
        "serial": document["serial"], "time": document["updated"], "kind": kind,
        "user": current_user(), "host": socket.gethostname(), "pid": os.getpid(),
        "command": command, "hosts": compress(hosts), "summary": summary,
    })
    return document


def _new_document(fleet_name: str) -> dict[str, Any]:
    return {"format_version": FORMAT_VERSION, "fleet": fleet_name, "lineage": str(uuid.uuid4()), "serial": 0,
            "created": _now(), "applied": None, "nodes": {}, "journal": []}


def _check_document(document: Any, path: Path | str, fleet_name: str) -> None:
    if not isinstance(document, dict):
        raise StateError(f"{path} is not a fleetspec state (not a JSON object). It was left as it is")
    version = document.get("format_version")
    if "format_version" not in document:
        raise StateError(f"{path} has no format_version: not a fleetspec state. It was left as it is")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise StateError(f"{path}: format_version {_clip(repr(version), 40)} is not a state format (a whole "
                         f"number from 1; this fleetspec writes {FORMAT_VERSION}): it was edited or damaged. It "
                         "was left as it is")
    if version > FORMAT_VERSION:
        raise StateError(f"{path} was written by a newer fleetspec (state format {version}; this fleetspec "
                         f"{__version__} reads up to {FORMAT_VERSION}). Upgrade fleetspec; the state was not touched")
    if document.get("fleet") != fleet_name:
        raise StateError(f"{path} holds the state of fleet {document.get('fleet')!r}, not {fleet_name!r}: "
                         f"two fleets must not share one state file. Use another --state directory")
    for key, kind in (("lineage", str), ("serial", int), ("nodes", dict), ("journal", list)):
        if not isinstance(document.get(key), kind):
            raise StateError(f"{path}: '{key}' is missing or malformed. It was left as it is")
    if isinstance(document["serial"], bool) or document["serial"] < 0:
        raise StateError(f"{path}: 'serial' is malformed. It was left as it is")
    if not all(isinstance(entry, dict) for entry in document["journal"]):
        raise StateError(f"{path}: 'journal' holds entries that are not records. It was left as it is")
    limited = document.get("limited")
    if limited is not None and not (
            isinstance(limited, dict) and isinstance(limited.get("restriction"), str)
            and isinstance(limited.get("unapplied"), list) and all(isinstance(h, str) for h in limited["unapplied"])
            and isinstance(limited.get("converged"), dict)
            and all(isinstance(k, str) and isinstance(v, str) for k, v in limited["converged"].items())):
        raise StateError(f"{path}: 'limited' is malformed. It was left as it is")


def _state_from_document(document: dict[str, Any], path: Path | str) -> State:
    try:
        applied = None if document.get("applied") is None else fleet_from_dict(document["applied"])
        nodes = {host: None if rec is None else NodeRecord(decode(Node, rec["node"]),
                                                            None if rec.get("stack") is None
                                                            else decode(StackTuple, rec["stack"]))
                 for host, rec in document["nodes"].items()}
    except (FleetDecodeError, KeyError, TypeError, ValueError) as exc:
        raise StateError(f"{path}: the applied fleet cannot be read ({exc}). It was left as it is") from None
    limited = document.get("limited")
    return State(document["fleet"], document["lineage"], document["serial"], applied, nodes,
                 tuple(document["journal"]),
                 None if limited is None else LimitedApply(limited["restriction"], tuple(limited["unapplied"]),
                                                           dict(limited["converged"])))


def _record_to_dict(record: NodeRecord) -> dict[str, Any]:
    return {"node": encode(record.node), "stack": None if record.stack is None else encode(record.stack)}


def _clip(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
