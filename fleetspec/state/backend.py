"""Where a fleet's state lives, chosen by a location: a directory (or ``file://`` URL),
the file store in ``store``; or a ``postgresql://`` URL, the shared store in ``postgres``
for teams and CI runners that have no disk in common.

Every backend keeps the same promises, which ``tests/state`` checks against each:
``read()`` returns a whole ``State`` (never half a write); writes happen only under
``lock(command)``, each one a new serial in one atomic step, so a killed apply loses
nothing; a second holder gets ``LockHeld`` naming the first; a holder that died is
replaced; ``holder()`` says who holds the lock without taking it; ``force_unlock()``
removes it whoever holds it (``fleetspec state unlock --force``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import unquote, urlsplit

from fleetspec.compile.ir import Fleet
from fleetspec.config import loaded
from fleetspec.state.lock import LockHeld, LockInfo
from fleetspec.state.store import DEFAULT_DIR_NAME, STATE_DIR_ENV, LimitedApply, State, StateError, StateStore
from fleetspec.state.urls import redact_url

STATE_ENV = "FLEETSPEC_STATE"  # a directory or a URL; $FLEETSPEC_STATE_DIR (a directory) is still read
POSTGRES_SCHEMES = ("postgresql", "postgres")


class HeldLock(Protocol):
    """What ``lock()`` yields: who holds it now, and the dead holder it replaced, if any."""

    command: str
    holder: LockInfo | None
    took_over: LockInfo | None


class StateBackend(Protocol):
    fleet_name: str

    @property
    def location(self) -> str: ...  # for messages; a URL's password is never in it

    @property
    def work_dir(self) -> Path: ...  # local files apply writes (rendered tree); never the state itself

    def read(self) -> State: ...

    def lock(self, command: str) -> AbstractContextManager[HeldLock]: ...

    def holder(self) -> LockInfo | None: ...

    def force_unlock(self) -> LockInfo | None: ...

    def record_wave(self, target: Fleet, hosts: Iterable[str], summary: str) -> State: ...

    def record_applied(self, fleet: Fleet, summary: str) -> State: ...

    def record_limited(self, limited: LimitedApply, summary: str) -> State: ...

    def history(self) -> list[dict[str, Any]]: ...

    def export_document(self) -> dict[str, Any] | None: ...

    def import_document(self, document: dict[str, Any]) -> State: ...


@dataclass(frozen=True)
class StateLocation:
    """A parsed ``--state``: ``kind`` is "file" (``path`` set) or "postgresql" (``url`` set)."""

    kind: str
    path: Path | None = None
    url: str | None = None

    @property
    def shown(self) -> str:
        return str(self.path) if self.path is not None else redact_url(self.url or "")


def parse_location(text: str | os.PathLike[str]) -> StateLocation:
    """A directory, ``file:///dir``, or ``postgresql://[user[:password]@][host][:port]/db[?...]``."""
    raw = os.fspath(text)
    try:
        return _parse_location(raw)
    except ValueError as e:  # urlsplit: "Invalid IPv6 URL" (an unclosed '['), a bad port
        raise StateError(f"state location {redact_url(raw)} is not a valid URL ({e}); write it as "
                         "postgresql://USER@HOST[:PORT]/DB (an IPv6 address in brackets: [::1]) or give a "
                         "directory") from None


def _parse_location(raw: str) -> StateLocation:
    scheme = urlsplit(raw).scheme.lower() if "://" in raw else ""
    if scheme == "":
        return StateLocation("file", path=Path(raw))
    if scheme == "file":
        parts = urlsplit(raw)
        if parts.netloc not in ("", "localhost"):
            raise StateError(f"state location {raw}: a file:// URL names a local directory (file:///path)")
        return StateLocation("file", path=Path(unquote(parts.path)))
    if scheme in POSTGRES_SCHEMES:
        return StateLocation("postgresql", url=raw)
    raise StateError(f"state location {redact_url(raw)}: unknown scheme {scheme!r}; give a directory, "
                     f"file:///DIR or postgresql://USER@HOST/DB")


def state_location(spec: Path | None, explicit: str | os.PathLike[str] | None = None) -> StateLocation:
    """``--state`` wins, then $FLEETSPEC_STATE, then $FLEETSPEC_STATE_DIR, then the config file's
    ``state``, then ``.fleetspec/`` beside the spec.

    A variable that is set but empty is an error, not "no state yet": it is what a CI
    secret that is missing, or not given to this job, looks like, and falling back to an
    empty ``.fleetspec/`` would plan (and apply) the whole fleet as new (#27 item 2)."""
    if explicit is not None and not str(explicit).strip():
        raise StateError("--state is empty: give the state's directory or postgresql:// URL")
    for value in (explicit, os.environ.get(STATE_ENV), os.environ.get(STATE_DIR_ENV)):
        if value and str(value).strip():
            return parse_location(value)
    for name in (STATE_ENV, STATE_DIR_ENV):  # nothing gave a location: an empty one is not "none"
        if name in os.environ:
            raise StateError(f"${name} is set but empty (a CI secret that is missing, or not given to this job, "
                             f"reads so): set it to the state's location, or unset it to use "
                             f"{DEFAULT_DIR_NAME}/ beside the spec")
    configured = loaded().state  # the config file (fleetspec/config.py): below the environment
    if configured is not None:
        return parse_location(configured)
    if spec is None:
        raise StateError(f"no state location: give --state DIR|URL or set ${STATE_ENV}")
    return StateLocation("file", path=Path(spec).resolve().parent / DEFAULT_DIR_NAME)


def local_work_dir(location: StateLocation, spec: Path | None = None) -> Path:
    """Where apply keeps local files (the rendered tree, Pulumi's file backend): the state
    directory itself, or, for a database, ``.fleetspec/`` beside the spec (or here)."""
    if location.path is not None:
        return location.path
    return (Path(spec).resolve().parent if spec is not None else Path.cwd()) / DEFAULT_DIR_NAME


def open_state(location: StateLocation, fleet_name: str, work_dir: Path | None = None) -> StateBackend:
    """The backend for one fleet; ``work_dir`` only matters to a database (``local_work_dir``)."""
    if location.kind == "file":
        assert location.path is not None
        return StateStore(location.path, fleet_name)
    from fleetspec.state.postgres import PostgresStore

    assert location.url is not None
    return PostgresStore(location.url, fleet_name, work_dir or local_work_dir(location))


@contextmanager
def locked(backend: StateBackend, command: str, timeout: float = 0.0, poll: float = 1.0) -> Iterator[HeldLock]:
    """``backend.lock(command)``, trying again for up to ``timeout`` seconds while another
    holder has it (like ``terraform -lock-timeout``); then LockHeld names that holder."""
    deadline = time.monotonic() + timeout
    while True:
        with ExitStack() as stack:
            try:
                held = stack.enter_context(backend.lock(command))
            except LockHeld:
                if time.monotonic() + poll > deadline:
                    raise
                time.sleep(poll)
                continue
            yield held
            return


def wait_unlocked(backend: StateBackend, timeout: float = 0.0, poll: float = 1.0) -> None:
    """Return once nobody holds the lock (reading needs no lock, but a state in the middle of
    an apply is about to move); after ``timeout`` seconds raise LockHeld naming the holder."""
    deadline = time.monotonic() + timeout
    while (holder := backend.holder()) is not None:
        if time.monotonic() + poll > deadline:
            raise LockHeld(backend.location, holder,  # type: ignore[arg-type]
                           "An apply is running: wait for it (--lock-timeout), then plan again.")
        time.sleep(poll)


def copy_state(source: StateBackend, target: StateBackend) -> State:
    """Copy a fleet's latest state document unchanged (same lineage and serial, so saved
    plans stay valid) into an empty location, holding both locks (``fleetspec state copy``)."""
    with source.lock("state copy (source)"), target.lock("state copy"):
        document = source.export_document()
        if document is None:
            raise StateError(f"{source.location} has no state of fleet {source.fleet_name!r} to copy")
        return target.import_document(document)


def list_fleets(location: StateLocation) -> list[str]:
    """The fleets that have a state at ``location``, sorted."""
    if location.kind == "file":
        assert location.path is not None
        return sorted(p.name.removesuffix(".state.json") for p in location.path.glob("*.state.json"))
    from fleetspec.state.postgres import list_fleets as pg_list

    assert location.url is not None
    return pg_list(location.url)
