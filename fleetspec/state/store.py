"""The state store: per fleet, what was last applied, as a snapshot and a journal of changes.

The state is one JSON document: a format version, a lineage id (uuid4, fixed when the
state is created), a serial (+1 per write), the last fully applied IR (``applied``),
per-node records of nodes that a partly finished apply has already moved (``nodes``:
host -> that node and its resolved stack, or null for a removed node), and a journal
(one entry per serial: who, when, what). A node's applied state is its ``nodes`` record
when it has one, else its entry in ``applied``; so state advances per completed wave, and
a killed apply loses nothing. ``record_applied`` folds everything back into ``applied``
when an apply completes.

On disk (format 2, issue 30 item 4) ``<dir>/<fleet>.state.json`` is a snapshot of that
document and ``<dir>/<fleet>.state.journal`` the writes since, one JSON line each holding
only what the write changed (the records of one wave's nodes): a wave appends a line and
fsyncs it instead of rewriting the whole document (12 MB at 20,000 nodes). A line cut off
by a crash is a write that never returned: reading leaves it out, the next write cuts it
away. ``record_applied``, or a journal grown past the snapshot's size, writes a new
snapshot (atomically, the previous one kept as ``.bak``) and removes the journal; lines
the snapshot already holds are skipped, so a crash between the two loses nothing. A
format 1 state (the whole document, no journal) reads as it is and is migrated by its
first write; format 2 is refused by older releases, which would not see the journal.

Writes are only allowed while this store holds the fleet's lock. A document that is not
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
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fleetspec import __version__
from fleetspec.compile.ir import Fleet, Node, StackTuple
from fleetspec.node_side.hostlist import compress
from fleetspec.safe_io import (
    UnsafePathError,
    atomic_write,
    check_output_file,
    fsync_dir,
    loads_json,
    read_bounded,
    remove_leftovers,
)
from fleetspec.state.codec import FleetDecodeError, decode, encode, fleet_from_dict
from fleetspec.state.lock import LockHeld, LockInfo, StateLock, current_user, is_stale, read_holder

# 1: one document rewritten per write. 2: the same document as a snapshot, plus a journal of
# per-write changes (file store) or rows per node and a change log (PostgreSQL); format 1
# states are read as they are and migrated by their first write.
FORMAT_VERSION = 2
COMPACT_MIN_BYTES = 1024 * 1024  # a journal under this is never compacted (small fleets keep one file)
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


@dataclass(frozen=True)
class Delta:
    """One write as a change, not a document: the node records it sets (``progress``: host ->
    record, None for a removed node), the whole fleet it makes ``applied`` (record_applied,
    which also clears the records), and ``limited`` when it sets or clears that. Each backend
    stores it its own way: a journal line (``StateStore``), rows (``postgres``)."""

    progress: Mapping[str, dict[str, Any] | None] = field(default_factory=dict)
    applied: dict[str, Any] | None = None
    set_limited: bool = False
    limited: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"progress": dict(self.progress)}
        if self.applied is not None:
            out["applied"] = self.applied
        if self.set_limited:
            out["limited"] = self.limited
        return out

    @classmethod
    def from_dict(cls, data: Any) -> Delta:
        if not isinstance(data, dict) or not isinstance(data.get("progress"), dict):
            raise ValueError("a change without its node records")
        return cls(data["progress"], data.get("applied"), "limited" in data, data.get("limited"))

    def apply(self, document: dict[str, Any]) -> None:
        """Move ``document`` (in place) by this change."""
        if self.applied is not None:
            document["applied"] = self.applied
            document["nodes"] = {}
        document.setdefault("nodes", {}).update(self.progress)
        if self.set_limited:
            if self.limited is None:
                document.pop("limited", None)
            else:
                document["limited"] = self.limited


class DocumentWrites:
    """The writes apply makes, as changes (``Delta``) to the state; a backend supplies
    ``fleet_name`` and ``_write`` (read the latest state, store the change as the next
    serial, all under the lock)."""

    fleet_name: str

    def _write(self, delta: Delta, kind: str, hosts: list[str], summary: str) -> State:
        raise NotImplementedError

    def record_wave(self, target: Fleet, hosts: Iterable[str], summary: str) -> State:
        """Record that ``hosts`` now run as ``target`` describes them (a host absent there was removed)."""
        hosts = sorted(set(hosts))
        stacks = {s.name: s for s in target.stacks}
        progress: dict[str, dict[str, Any] | None] = {}
        for host in hosts:
            node = target.node(host)
            progress[host] = None if node is None else _record_to_dict(NodeRecord(node, stacks.get(node.stack)))
        # an apply is moving nodes again: unfinished until it says so (limited cleared)
        return self._write(Delta(progress, set_limited=True), kind="wave", hosts=hosts, summary=summary)

    def record_limited(self, limited: LimitedApply, summary: str) -> State:
        """A limited apply finished: its nodes are recorded (``record_wave``), the rest of the
        fleet is left as it was; the state says so instead of reading as interrupted."""
        return self._write(Delta(set_limited=True, limited=limited.to_dict()), kind="limited", hosts=[],
                           summary=summary)

    def record_applied(self, fleet: Fleet, summary: str) -> State:
        """The whole of ``fleet`` is applied: it becomes ``applied`` and the node records are cleared."""
        if fleet.name != self.fleet_name:
            raise StateError(f"fleet {fleet.name!r} cannot be recorded in the state of {self.fleet_name!r}")
        return self._write(Delta(applied=fleet.to_dict(), set_limited=True), kind="apply",
                           hosts=[n.hostname for n in fleet.nodes], summary=summary)


@dataclass
class _Loaded:
    document: dict[str, Any]  # the snapshot with the journal replayed
    snapshot_bytes: int
    journal_bytes: int  # its whole lines
    format_version: int  # the snapshot's


class StateStore(DocumentWrites):
    def __init__(self, directory: Path, fleet_name: str) -> None:
        if not _SAFE_NAME.match(fleet_name):
            raise StateError(f"fleet name {fleet_name!r} cannot name a state file")
        self.directory = Path(directory)
        self.fleet_name = fleet_name
        self.path = self.directory / f"{fleet_name}.state.json"
        self.backup_path = self.directory / f"{fleet_name}.state.json.bak"
        self.lock_path = self.directory / f"{fleet_name}.lock"
        self.journal_path = self.directory / f"{fleet_name}.state.journal"
        self._lock: StateLock | None = None

    # -- reading ---------------------------------------------------------------------

    def read(self) -> State:
        document = self._read_document()
        if document is None:
            return State(self.fleet_name, None, 0, None)
        return _state_from_document(document, self.path)

    def _read_document(self) -> dict[str, Any] | None:
        loaded = self._load()
        return None if loaded is None else loaded.document

    def _load(self) -> _Loaded | None:
        """The snapshot with the journal's changes replayed onto it (None: no state yet)."""
        try:
            raw = read_bounded(self.path, MAX_STATE_BYTES)
        except UnsafePathError as exc:
            raise StateError(f"{exc}. It was left as it is: point --state at a directory of regular files") from None
        except FileNotFoundError:
            if self.backup_path.exists():
                raise StateError(f"{self.path} is missing but its backup {self.backup_path} exists: "
                                 f"the state was removed by hand. Restore it with "
                                 f"'cp {self.backup_path} {self.path}' (and remove {self.journal_path}, whose "
                                 f"serials follow the missing file, not the backup), or remove them all to start "
                                 f"over") from None
            if self.journal_path.exists():
                raise StateError(f"{self.path} is missing but its journal {self.journal_path} exists: the state "
                                 f"was removed by hand. Restore it from your own copy, or remove the journal to "
                                 f"start over") from None
            return None
        try:
            document = loads_json(raw)
        except ValueError as exc:  # UnicodeDecodeError and too deep nesting included
            raise StateError(f"{self.path} is corrupted or truncated ({len(raw)} bytes: {_clip(str(exc))}). It was "
                             f"left as it is. {self._backup_hint()}") from None
        _check_document(document, self.path, self.fleet_name)
        version = document["format_version"]
        good = self._replay(document)
        return _Loaded(document, len(raw), good, version)

    def _replay(self, document: dict[str, Any]) -> int:
        """Apply the journal's whole lines to ``document``; returns their length in bytes.

        A last line without its newline is a write that was cut off (a killed or crashed
        apply never got its serial back): it is left out, and the next write cuts it away.
        Lines the snapshot already holds (a compaction that stopped before it removed the
        journal) are skipped."""
        try:
            raw = read_bounded(self.journal_path, MAX_STATE_BYTES)
        except FileNotFoundError:
            return 0
        except UnsafePathError as exc:
            raise StateError(f"{exc}. It was left as it is: point --state at a directory of regular files") from None
        good = raw.rfind(b"\n") + 1
        for number, line in enumerate(raw[:good].splitlines(), start=1):
            where = f"{self.journal_path}, line {number}"
            try:
                record = loads_json(line)
                serial, lineage, entry = record["serial"], record["lineage"], record["entry"]
                delta = Delta.from_dict(record["change"])
                if not (isinstance(serial, int) and isinstance(entry, dict) and entry.get("serial") == serial):
                    raise ValueError("its serial or journal entry is malformed")
            except (ValueError, KeyError, TypeError) as exc:
                raise StateError(f"{where} is damaged ({_clip(str(exc))}): it was left as it is. Its snapshot "
                                 f"{self.path} holds serial {document['serial']}; restore the journal from your own "
                                 f"copy, or remove it to go back to that serial") from None
            if lineage != document["lineage"]:
                raise StateError(f"{where} belongs to another state (lineage {_clip(str(lineage), 40)}, the snapshot "
                                 f"has {document['lineage']}): it was left as it is. Remove it or restore the "
                                 f"snapshot it belongs to")
            if serial <= document["serial"]:
                continue  # already in the snapshot
            if serial != document["serial"] + 1:
                raise StateError(f"{where} holds serial {serial}, but the state is at serial {document['serial']}: "
                                 f"the snapshot is older than its journal (restored from a backup?). It was left "
                                 f"as it is: restore the snapshot that goes with the journal, or remove the journal")
            next_document(document, delta, {**entry, "fleetspec_version": record.get("fleetspec_version")})
        return good

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

    def _write(self, delta: Delta, kind: str, hosts: list[str], summary: str) -> State:
        """One write: a line appended to the journal (only the nodes it moved), or, when the
        change is the whole fleet, the snapshot is from an older format, or the journal has
        grown past the snapshot's size, a new snapshot (compaction)."""
        if self._lock is None or not self._lock.held:
            raise StateError("state writes need the lock: use 'with store.lock(command):'")
        loaded = self._load()
        document = loaded.document if loaded is not None else _new_document(self.fleet_name)
        entry = journal_entry(document["serial"] + 1, kind, hosts, summary, self._lock.command)
        line = (json.dumps({"serial": entry["serial"], "lineage": document["lineage"], "fleetspec_version": __version__,
                            "entry": entry, "change": delta.to_dict()}, separators=(",", ":")) + "\n").encode()
        next_document(document, delta, entry)
        remove_leftovers(self.directory, self.path.name)
        try:
            if (loaded is None or delta.applied is not None or loaded.format_version < FORMAT_VERSION
                    or loaded.journal_bytes + len(line) > max(loaded.snapshot_bytes, COMPACT_MIN_BYTES)):
                self._compact(document)
            else:
                self._append(line, loaded.journal_bytes)
        except UnsafePathError as exc:
            raise StateError(f"{exc}. The state was not written") from None
        except OSError as exc:
            raise StateError(f"the state write to {self.directory} failed and was not made: {exc}") from None
        return _state_from_document(document, self.path)

    def _compact(self, document: dict[str, Any]) -> None:
        """The whole state as the new snapshot (atomic; the old one kept as ``.bak``), then
        the journal removed: a crash in between leaves lines the snapshot already holds."""
        atomic_write(self.path, (json.dumps(document, indent=1) + "\n").encode(), backup=self.backup_path)
        if self.journal_path.exists():
            self.journal_path.unlink()
            fsync_dir(self.directory)

    def _append(self, line: bytes, good: int) -> None:
        """``line`` after the journal's ``good`` bytes (a cut-off line beyond them goes), fsynced."""
        check_output_file(self.journal_path)
        created = not self.journal_path.exists()
        fd = os.open(self.journal_path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        try:
            if os.fstat(fd).st_size != good:
                os.ftruncate(fd, good)
            view = memoryview(line)
            offset = good
            while view:
                written = os.pwrite(fd, view, offset)
                view, offset = view[written:], offset + written
            os.fsync(fd)
        finally:
            os.close(fd)
        if created:
            fsync_dir(self.directory)


def journal_entry(serial: int, kind: str, hosts: list[str], summary: str, command: str) -> dict[str, Any]:
    """Who wrote ``serial``, when, with which command, and what for (one per serial)."""
    return {"serial": serial, "time": _now(), "kind": kind, "user": current_user(), "host": socket.gethostname(),
            "pid": os.getpid(), "command": command, "hosts": compress(hosts), "summary": summary}


def next_document(document: dict[str, Any], delta: Delta, entry: dict[str, Any]) -> dict[str, Any]:
    """``document`` moved to ``entry``'s serial by ``delta``, with that journal entry (in place)."""
    delta.apply(document)
    document["format_version"] = FORMAT_VERSION
    document["serial"] = entry["serial"]
    document["updated"] = entry["time"]
    document["fleetspec_version"] = entry.get("fleetspec_version", __version__)
    document["journal"].append({k: v for k, v in entry.items() if k != "fleetspec_version"})
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
