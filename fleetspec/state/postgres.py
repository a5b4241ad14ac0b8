"""The shared state store: PostgreSQL, for teams and CI runners with no disk in common.

Modelled on Terraform's ``pg`` backend (https://developer.hashicorp.com/terraform/language/backend/pg:
"This backend creates one table states in the automatically-managed Postgres schema ...
Locking is supported using Postgres advisory locks"), with history kept:

- State format 2 (issue 30 item 4): the state in rows, so a wave writes its nodes' records
  and not the whole document. ``fleetspec_head``: the fleet-level part (the document's
  small fields, the applied fleet without its nodes); ``fleetspec_node``: a row per node of
  the applied fleet, updated only where a node changed; ``fleetspec_progress``: the node
  records each write set, one row per serial (compressed whole by TOAST), never updated;
  ``fleetspec_change``: what each other changed row was before, so ``read_serial`` rebuilds
  any serial from the current rows; ``fleetspec_serial``: a row per serial with its journal
  entry, whose primary key (fleet, serial) means two writers can never both write serial
  N. A write is one transaction. ``read()`` assembles the same document as the file store
  (``store``), so a state moves between backends unchanged.
- Format 1, ``fleetspec_state`` (a whole document per fleet and serial), is read as it is
  and migrated by the first write (``_migrate``); its rows stay for ``read_serial``.
- The lock is a session advisory lock (``pg_try_advisory_lock``) on the connection that
  then makes every write, plus a row in ``fleetspec_lock`` naming the holder (user, host,
  pid, command, since when, database session pid). The server drops the advisory lock
  when that session ends, so the lock of a killed apply frees itself; and since the
  writes go through the same session, an apply that lost its session cannot write.
  Advisory locks: https://www.postgresql.org/docs/15/explicit-locking.html#ADVISORY-LOCKS

Tables are created on first lock (``CREATE TABLE IF NOT EXISTS``, serialised by a
transaction advisory lock) in the connection's schema (libpq ``options=-csearch_path=...``
picks another). Credentials come from the URL or libpq's usual sources (PGPASSWORD,
~/.pgpass, PGSSLMODE); messages show the URL with its password masked.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fleetspec import __version__
from fleetspec.safe_io import loads_json
from fleetspec.state.lock import LockHeld, LockInfo, current_holder
from fleetspec.state.store import (
    _SAFE_NAME,
    FORMAT_VERSION,
    Delta,
    DocumentWrites,
    State,
    StateError,
    _check_document,
    _new_document,
    _state_from_document,
    journal_entry,
)
from fleetspec.state.urls import redact_message, redact_url

if TYPE_CHECKING:
    import psycopg

# Advisory lock keys (#27 item 7). A fleet's key is collision-free: ``fleetspec_fleet``
# gives every fleet name a unique integer (its primary key is the name), and the key is
# that integer with the OID of the schema holding the tables above it, in the one-bigint
# form (pg_locks: classid = key >> 32, objid = the low 32 bits, objsubid = 1). Two fleet
# names never share a key, nor do two schemas' fleets of the same name; advisory locks are
# per database already, and every pg_locks query here is limited to the current database.
# The table creation is serialised by a transaction lock in the two-int form
# (LOCK_CLASS, 0), objsubid = 2. Releases before this one keyed fleets by (LOCK_CLASS,
# crc32(name)), where two names with the same CRC32 shared one lock: ``LEGACY`` below
# still sees a live older holder of this fleet (the lock row names its session), so a
# mixed upgrade cannot run two applies at once.
LOCK_CLASS = int.from_bytes(b"flsp", "big")
_SETUP_KEY = (LOCK_CLASS, 0)
_KEY_SQL = ("SELECT (c.relnamespace::bigint << 31) | f.lock_id FROM fleetspec_fleet f "
            "JOIN pg_class c ON c.oid = 'fleetspec_fleet'::regclass WHERE f.fleet = %s")
_HOLDING_SQL = ("l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 "
                "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
                "AND l.classid::bigint = %s AND l.objid::bigint = %s")

SCHEMA_SQL = """
CREATE TABLE IF NOT EXISTS fleetspec_state (
    fleet      text        NOT NULL,
    serial     integer     NOT NULL CHECK (serial > 0),
    lineage    text        NOT NULL,
    document   jsonb       NOT NULL,
    written_at timestamptz NOT NULL DEFAULT now(),
    written_by text        NOT NULL,
    PRIMARY KEY (fleet, serial)
);
CREATE TABLE IF NOT EXISTS fleetspec_head (
    fleet       text    PRIMARY KEY,
    lineage     text    NOT NULL,
    serial      integer NOT NULL CHECK (serial > 0),
    base_serial integer NOT NULL CHECK (base_serial >= 0),
    cleared     integer NOT NULL DEFAULT 0,
    header      jsonb   NOT NULL,
    applied     jsonb
);
CREATE TABLE IF NOT EXISTS fleetspec_node (
    fleet    text    NOT NULL,
    host     text    NOT NULL,
    position integer NOT NULL,
    applied  jsonb   NOT NULL,
    PRIMARY KEY (fleet, host)
);
CREATE TABLE IF NOT EXISTS fleetspec_progress (
    fleet   text    NOT NULL,
    serial  integer NOT NULL,
    records jsonb   NOT NULL,
    PRIMARY KEY (fleet, serial)
);
CREATE TABLE IF NOT EXISTS fleetspec_serial (
    fleet      text        NOT NULL,
    serial     integer     NOT NULL CHECK (serial > 0),
    lineage    text        NOT NULL,
    written_at timestamptz NOT NULL DEFAULT now(),
    written_by text        NOT NULL,
    entry      jsonb       NOT NULL,
    PRIMARY KEY (fleet, serial)
);
CREATE TABLE IF NOT EXISTS fleetspec_change (
    fleet  text    NOT NULL,
    serial integer NOT NULL,
    part   text    NOT NULL CHECK (part IN ('header', 'fleet', 'node')),
    host   text    NOT NULL,
    before jsonb,
    PRIMARY KEY (fleet, serial, part, host)
);
CREATE TABLE IF NOT EXISTS fleetspec_fleet (
    fleet   text    PRIMARY KEY,
    lock_id integer GENERATED ALWAYS AS IDENTITY UNIQUE
);
CREATE TABLE IF NOT EXISTS fleetspec_lock (
    fleet       text        PRIMARY KEY,
    holder      jsonb       NOT NULL,
    backend_pid integer     NOT NULL,
    since       timestamptz NOT NULL DEFAULT now()
);
"""


def _psycopg() -> Any:
    try:
        import psycopg
    except ImportError:
        raise StateError("a postgresql:// state needs the psycopg driver: pip install 'fleetspec[postgres]'") from None
    return psycopg


def connect(url: str, purpose: str) -> psycopg.Connection[Any]:

    psycopg = _psycopg()
    try:
        conn = psycopg.connect(url, autocommit=True, connect_timeout=15, application_name=f"fleetspec {purpose}")
    except psycopg.Error as exc:
        raise StateError(f"cannot open the state database {redact_url(url)}: "
                         f"{redact_message(str(exc).strip(), url)}") from None
    from psycopg.types.json import set_json_loads

    set_json_loads(_bounded_loads(redact_url(url)), conn)
    return conn


def _bounded_loads(where: str) -> Any:
    """The json/jsonb loader of a state connection (#41 item 11): the file store's guard
    (`loads_json`: nested too deeply, a number over 4,300 digits) for every value a row
    holds, as a worded `StateError` naming the database, never a RecursionError. Whoever can
    write the database can nest a value as deep as its jsonb takes (thousands of levels)."""
    def loads(data: Any) -> Any:
        try:
            return loads_json(data)
        except ValueError as exc:
            raise StateError(f"the state database {where} holds a value fleetspec cannot read ({exc}): the rows "
                             "were not written by fleetspec; restore them from a backup") from None

    return loads


def legacy_lock_keys(fleet_name: str) -> tuple[int, int]:
    """The key releases before #27 item 7 used: (LOCK_CLASS, crc32 of the name), two-int form."""
    key = zlib.crc32(fleet_name.encode())
    return LOCK_CLASS, key - (1 << 32) if key >= 1 << 31 else key


def lock_key(conn: psycopg.Connection[Any], fleet_name: str, *, create: bool) -> int | None:
    """The fleet's advisory lock key in this database and schema; None when the fleet has
    none yet and ``create`` is false (then nobody can hold its lock)."""
    if create:
        conn.execute("INSERT INTO fleetspec_fleet (fleet) VALUES (%s) ON CONFLICT (fleet) DO NOTHING",
                     (fleet_name,))
    row = conn.execute(_KEY_SQL, (fleet_name,)).fetchone()
    return None if row is None else int(row[0])


def _split(key: int) -> tuple[int, int]:
    """(classid, objid) as pg_locks shows a one-bigint advisory key."""
    return key >> 32, key & 0xFFFFFFFF


def _legacy_holder(conn: psycopg.Connection[Any], fleet_name: str) -> tuple[int, Any] | None:
    """(session pid, holder record) when an older fleetspec's live session holds this
    fleet's lock: its lock row names a session that holds the old CRC32 key of this fleet."""
    k1, k2 = legacy_lock_keys(fleet_name)
    return conn.execute(
        "SELECT k.backend_pid, k.holder FROM fleetspec_lock k JOIN pg_locks l ON l.pid = k.backend_pid "
        "WHERE k.fleet = %s AND l.locktype = 'advisory' AND l.granted AND l.objsubid = 2 "
        "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
        "AND l.classid::bigint = %s AND l.objid::bigint = %s",
        (fleet_name, k1, k2 & 0xFFFFFFFF)).fetchone()


@dataclass
class PgLock:
    """The held lock (``lock()`` yields it): the same fields as the file store's ``StateLock``."""

    command: str
    holder: LockInfo | None = None
    took_over: LockInfo | None = None
    session_pid: int | None = None

    @property
    def held(self) -> bool:
        return self.holder is not None


class PostgresStore(DocumentWrites):
    def __init__(self, url: str, fleet_name: str, work_dir: Path) -> None:

        if not _SAFE_NAME.match(fleet_name):
            raise StateError(f"fleet name {fleet_name!r} cannot name a state")
        self.url = url
        self.fleet_name = fleet_name
        self._work_dir = Path(work_dir)
        self._shown = f"{redact_url(url)} (fleet {fleet_name})"
        self._conn: psycopg.Connection[Any] | None = None
        self._lock: PgLock | None = None

    @property
    def location(self) -> str:
        return self._shown

    @property
    def work_dir(self) -> Path:
        return self._work_dir

    # -- reading ---------------------------------------------------------------------

    def read(self) -> State:
        document = self.export_document()
        if document is None:
            return State(self.fleet_name, None, 0, None)
        return self._state(document)

    def read_serial(self, serial: int) -> State:
        """The state as it was at ``serial``: rebuilt from the change log (from where the
        rows began: 0, or the serial a copy or a migration started them at), or, before
        that, a whole document of the format 1 table."""
        def rebuild(conn: psycopg.Connection[Any]) -> dict[str, Any] | None:
            head = _head(conn, self.fleet_name)
            if head is None or serial < head.base_serial:
                return _legacy_document(conn, self.fleet_name, serial)
            if serial > head.serial:
                return None
            return _rebuild(conn, self.fleet_name, head, serial)

        document = self._reading(rebuild)
        if document is None:
            raise StateError(f"{self.location} has no serial {serial}")
        return self._state(document)

    def history(self) -> list[dict[str, Any]]:
        """One entry per serial, oldest first: its journal entry plus when and by whom it was written."""
        def rows(conn: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
            if _head(conn, self.fleet_name) is not None:
                return conn.execute("SELECT serial, written_at, written_by, lineage, entry FROM fleetspec_serial "
                                    "WHERE fleet = %s ORDER BY serial", (self.fleet_name,)).fetchall()
            return conn.execute("SELECT serial, written_at, written_by, lineage, document->'journal'->-1 "
                                "FROM fleetspec_state WHERE fleet = %s ORDER BY serial", (self.fleet_name,)).fetchall()

        return [{**(entry or {}), "serial": serial, "written_at": written_at.isoformat(), "written_by": by,
                 "lineage": lineage} for serial, written_at, by, lineage, entry in self._reading(rows) or []]

    def export_document(self) -> dict[str, Any] | None:
        """The latest state as one document (``read``, ``state copy``); None when there is none."""
        def latest(conn: psycopg.Connection[Any]) -> dict[str, Any] | None:
            head = _head(conn, self.fleet_name)
            if head is None:
                return _legacy_document(conn, self.fleet_name, None)
            return _assemble(conn, self.fleet_name, head)

        return self._reading(latest)

    def import_document(self, document: dict[str, Any]) -> State:
        """Store another store's document (lineage, serial, journal) as this fleet's rows:
        only into an empty state, and only under the lock (``state copy``). The document is
        kept whole once, as the base the change log starts from."""
        if self._lock is None or self._conn is None:
            raise StateError("state writes need the lock: use 'with store.lock(command):'")
        state = self._state(document)
        psycopg = _psycopg()
        by = f"state copy by {self._lock.holder.user if self._lock.holder else 'unknown'}"
        try:
            with self._conn.transaction():
                if _head(self._conn, self.fleet_name) is not None or _legacy_document(
                        self._conn, self.fleet_name, None) is not None:
                    raise StateError(f"{self.location} already holds a state: a copy goes only into an empty "
                                     f"location")
                _store_base(self._conn, self.fleet_name, document, by)
        except psycopg.Error as exc:
            raise StateError(f"the copy into {self.location} failed and was not made: {str(exc).strip()}") from None
        return state

    def _state(self, document: Any) -> State:
        _check_document(document, self.location, self.fleet_name)
        return _state_from_document(document, self.location)

    def _reading(self, read: Any) -> Any:
        """``read(conn)`` in one repeatable-read transaction (a write is one transaction: the
        reader sees all of it or none); no tables yet reads as None (nothing was written)."""
        psycopg = _psycopg()
        conn = self._conn or connect(self.url, "read")
        try:
            with conn.transaction():
                conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
                return read(conn)
        except psycopg.errors.UndefinedTable:
            return None
        except psycopg.Error as exc:
            raise StateError(f"cannot read the state at {self.location}: {str(exc).strip()}") from None
        finally:
            if conn is not self._conn:
                conn.close()

    # -- locking ---------------------------------------------------------------------

    @contextmanager
    def lock(self, command: str) -> Iterator[PgLock]:
        """Hold the fleet's lock (session advisory lock + lock row); writes are refused outside it."""
        if self._lock is not None:
            raise RuntimeError(f"{self.location} is already locked by this process")
        psycopg = _psycopg()
        conn = connect(self.url, command)
        held = PgLock(command)
        try:
            _ensure_tables(conn)
            key = lock_key(conn, self.fleet_name, create=True)
            got = conn.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()[0]
            if got and _legacy_holder(conn, self.fleet_name) is not None:
                conn.execute("SELECT pg_advisory_unlock(%s)", (key,))
                got = False
            if not got:
                raise LockHeld(self.location, self._live_holder(conn),  # type: ignore[arg-type]
                               "Its database session holds the lock; the lock goes when that session ends. "
                               "If that apply is gone but its session is not, 'fleetspec state unlock --force' "
                               "ends the session.")
            me = current_holder(command)
            session = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
            with conn.transaction():
                previous = conn.execute("SELECT holder FROM fleetspec_lock WHERE fleet = %s FOR UPDATE",
                                        (self.fleet_name,)).fetchone()
                conn.execute("INSERT INTO fleetspec_lock (fleet, holder, backend_pid) VALUES (%s, %s, %s) "
                             "ON CONFLICT (fleet) DO UPDATE SET holder = EXCLUDED.holder, "
                             "backend_pid = EXCLUDED.backend_pid, since = now()",
                             (self.fleet_name, json.dumps(asdict(me)), session))
            held.holder, held.session_pid = me, session
            held.took_over = _lock_info(previous[0]) if previous else None
        except psycopg.Error as exc:
            conn.close()
            raise StateError(f"cannot lock the state at {self.location}: {str(exc).strip()}") from None
        except BaseException:
            conn.close()
            raise
        self._conn, self._lock = conn, held
        try:
            yield held
        finally:
            self._conn = self._lock = None
            held.holder = None
            try:
                conn.execute("DELETE FROM fleetspec_lock WHERE fleet = %s AND backend_pid = pg_backend_pid()",
                             (self.fleet_name,))
                conn.execute("SELECT pg_advisory_unlock(%s)", (key,))
            except psycopg.Error:
                pass  # the session is gone, and the server dropped its advisory lock with it
            finally:
                conn.close()

    def holder(self) -> LockInfo | None:
        """Who holds the lock now, without taking it (None: nobody's session holds it)."""
        psycopg = _psycopg()
        conn = self._conn or connect(self.url, "lock check")
        try:
            return self._live_holder(conn)
        except psycopg.errors.UndefinedTable:
            return None
        except psycopg.Error as exc:
            raise StateError(f"cannot read the lock at {self.location}: {str(exc).strip()}") from None
        finally:
            if conn is not self._conn:
                conn.close()

    def _live_holder(self, conn: psycopg.Connection[Any]) -> LockInfo | None:
        """The lock row's holder when a live session holds the advisory lock; a session with
        no row yet (it is writing it) is named by its session pid."""
        key = lock_key(conn, self.fleet_name, create=False)
        if key is None:
            return None
        legacy = _legacy_holder(conn, self.fleet_name)
        if legacy is not None:
            return _lock_info(legacy[1])
        row = conn.execute(
            "SELECT l.pid, k.holder, k.backend_pid, a.usename, a.client_addr::text, a.backend_start "
            "FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
            "LEFT JOIN fleetspec_lock k ON k.fleet = %s "
            f"WHERE {_HOLDING_SQL}", (self.fleet_name, *_split(key))).fetchone()
        if row is None:
            return None
        session, holder, row_session, db_user, client, started = row
        if holder is not None and row_session == session:
            return _lock_info(holder)
        return LockInfo(host=client or "local socket", pid=0, pid_started=None, user=db_user,
                        command=f"database session {session} (its lock record is not written yet)",
                        started=started.strftime("%Y-%m-%dT%H:%M:%SZ"))

    def force_unlock(self) -> LockInfo | None:
        """Remove the lock whoever holds it: end the holding database session (its apply can
        then no longer write) and delete the lock row. Returns the holder removed."""
        psycopg = _psycopg()
        conn = connect(self.url, "state unlock --force")
        try:
            holder = self._live_holder(conn)
            key = lock_key(conn, self.fleet_name, create=False)
            if key is not None:  # only this database's session holding this fleet's key
                conn.execute("SELECT pg_terminate_backend(l.pid, 5000) FROM pg_locks l "
                             f"WHERE {_HOLDING_SQL} AND l.pid <> pg_backend_pid()", _split(key))
            legacy = _legacy_holder(conn, self.fleet_name)
            if legacy is not None:  # an older release's session, named by this fleet's lock row
                conn.execute("SELECT pg_terminate_backend(%s, 5000)", (legacy[0],))
            row = conn.execute("DELETE FROM fleetspec_lock WHERE fleet = %s RETURNING holder",
                               (self.fleet_name,)).fetchone()
            return holder or (_lock_info(row[0]) if row else None)
        except psycopg.errors.UndefinedTable:
            return None
        except psycopg.errors.InsufficientPrivilege as exc:
            raise StateError(f"cannot end the holder's session at {self.location}: {str(exc).strip()}. "
                             f"Ask the database owner (pg_terminate_backend needs the holder's role "
                             f"or pg_signal_backend)") from None
        except psycopg.Error as exc:
            raise StateError(f"cannot unlock the state at {self.location}: {str(exc).strip()}") from None
        finally:
            conn.close()

    # -- writing ---------------------------------------------------------------------

    def _write(self, delta: Delta, kind: str, hosts: list[str], summary: str) -> State:
        """One write, one transaction: the rows of the nodes it changed, the fleet's head row
        (serial + 1, checked against the serial read), a serial row (its journal entry) and
        the change log's rows. A format 1 state is migrated to rows first, in the same
        transaction."""
        if self._lock is None or self._conn is None:
            raise StateError("state writes need the lock: use 'with store.lock(command):'")
        psycopg = _psycopg()
        conn = self._conn
        holder = self._lock.holder
        by = f"{holder.user}@{holder.host} pid {holder.pid}" if holder else "unknown"
        try:
            with conn.transaction():
                head = _head(conn, self.fleet_name, for_update=True)
                if head is None:
                    legacy = _legacy_document(conn, self.fleet_name, None)
                    if legacy is not None:
                        _check_document(legacy, self.location, self.fleet_name)
                        head = _migrate(conn, self.fleet_name, legacy)
                if head is not None:
                    _check_document({**head.header, "nodes": {}, "journal": []}, self.location, self.fleet_name)
                entry = journal_entry((head.serial if head else 0) + 1, kind, hosts, summary, self._lock.command)
                serial = _write_rows(conn, self.fleet_name, head, delta, entry)
                conn.execute("INSERT INTO fleetspec_serial (fleet, serial, lineage, written_by, entry) "
                             "VALUES (%s, %s, (SELECT lineage FROM fleetspec_head WHERE fleet = %s), %s, %s)",
                             (self.fleet_name, serial, self.fleet_name, by, json.dumps(entry)))
                document = _assemble(conn, self.fleet_name, _head(conn, self.fleet_name))
        except psycopg.Error as exc:
            raise StateError(f"the state write to {self.location} failed and was not made: "
                             f"{str(exc).strip()}") from None
        return self._state(document)


@dataclass(frozen=True)
class _Head:
    lineage: str
    serial: int
    base_serial: int  # the serial the rows began at (0; a copy's or a migration's): older ones are not rebuilt
    cleared: int  # the last serial that recorded the whole fleet: node records after it are current
    header: dict[str, Any]  # the document without applied, nodes, journal
    applied: dict[str, Any] | None  # the applied fleet without its nodes


_VOLATILE = ("serial", "updated", "fleetspec_version", "format_version")  # the serial row says them
_NO_CHANGE: dict[str, Any] = {"set": {}, "unset": []}


def _head(conn: psycopg.Connection[Any], fleet: str, *, for_update: bool = False) -> _Head | None:
    """The fleet's head row; None before its first format 2 write (a database that only an
    older release has used has no such table yet: its state is in ``fleetspec_state``)."""
    try:
        with conn.transaction():  # a savepoint, so a missing table leaves the caller's transaction usable
            row = conn.execute("SELECT lineage, serial, base_serial, cleared, header, applied FROM fleetspec_head "
                               "WHERE fleet = %s" + (" FOR UPDATE" if for_update else ""), (fleet,)).fetchone()
    except _psycopg().errors.UndefinedTable:
        return None
    return None if row is None else _Head(*row)


def _legacy_document(conn: psycopg.Connection[Any], fleet: str, serial: int | None) -> dict[str, Any] | None:
    """A whole document of the format 1 table (``fleetspec_state``): the latest, or ``serial``'s.
    The marker row a migration leaves (format 2: it stops older releases) is not a state."""
    sql = ("SELECT document FROM fleetspec_state WHERE fleet = %s "
           "AND coalesce((document->>'format_version')::int, 1) < 2")
    try:
        with conn.transaction():  # a savepoint: a database without the table reads as no rows
            row = (conn.execute(sql + " ORDER BY serial DESC LIMIT 1", (fleet,)) if serial is None
                   else conn.execute(sql + " AND serial = %s", (fleet, serial))).fetchone()
    except _psycopg().errors.UndefinedTable:
        return None
    return None if row is None else row[0]


def _progress(conn: psycopg.Connection[Any], fleet: str, after: int, upto: int) -> dict[str, Any]:
    """The node records current at ``upto``: each host's latest after the serial ``after``
    that recorded the whole fleet (null: a removed node)."""
    records: dict[str, Any] = {}
    for (wave,) in conn.execute("SELECT records FROM fleetspec_progress WHERE fleet = %s AND serial > %s "
                                "AND serial <= %s ORDER BY serial", (fleet, after, upto)):
        records.update(wave)
    return records


def _journal(conn: psycopg.Connection[Any], fleet: str, upto: int) -> list[Any]:
    return [r[0] for r in conn.execute("SELECT entry FROM fleetspec_serial WHERE fleet = %s AND serial <= %s "
                                       "ORDER BY serial", (fleet, upto))]


def _assemble(conn: psycopg.Connection[Any], fleet: str, head: _Head | None) -> dict[str, Any] | None:
    """The latest state as one document, from its rows."""
    if head is None:
        return None
    nodes = [r[0] for r in conn.execute("SELECT applied FROM fleetspec_node WHERE fleet = %s ORDER BY position",
                                        (fleet,))]
    return {**head.header, "serial": head.serial, "lineage": head.lineage,
            "applied": None if head.applied is None else _with_nodes(head.applied, nodes),
            "nodes": _progress(conn, fleet, head.cleared, head.serial), "journal": _journal(conn, fleet, head.serial)}


def _with_nodes(part: dict[str, Any], nodes: list[Any]) -> dict[str, Any]:
    """The applied fleet from its part without nodes, the nodes in their place (``Fleet.to_dict``'s order)."""
    out: dict[str, Any] = {}
    for key, value in part.items():
        out[key] = value
        if key == "racks":
            out["nodes"] = nodes
    out.setdefault("nodes", nodes)
    return out


def _split_applied(applied: dict[str, Any] | None) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    if applied is None:
        return None, []
    return {k: v for k, v in applied.items() if k != "nodes"}, list(applied.get("nodes") or [])


def _undo(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any] | None:
    """What turns ``new`` back into ``old`` (``_patch``): the old values of the top-level keys
    that changed or went, and the keys that are new. None: nothing changed."""
    back = {k: v for k, v in old.items() if k not in new or new[k] != v}
    added = [k for k in new if k not in old]
    return {"set": back, "unset": added} if back or added else None


def _patch(value: dict[str, Any], change: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in value.items() if k not in change.get("unset", ())}
    out.update(change.get("set", {}))
    return out


def _rows(conn: psycopg.Connection[Any], sql: str, params: tuple[Any, ...], rows: list[dict[str, Any]]) -> None:
    """One statement for many rows: ``sql`` reads them from ``x``, the jsonb_to_recordset of its
    last parameter (a JSON array); ``params`` are the ones before it."""
    if rows:
        conn.execute(sql, (*params, json.dumps(rows)))


_INSERT_NODES = ("INSERT INTO fleetspec_node (fleet, host, position, applied) SELECT %s, host, position, applied "
                 "FROM jsonb_to_recordset(%s::jsonb) AS x(host text, position integer, applied jsonb) "
                 "ON CONFLICT (fleet, host) DO UPDATE SET position = EXCLUDED.position, applied = EXCLUDED.applied")


def _insert_progress(conn: psycopg.Connection[Any], fleet: str, serial: int, records: dict[str, Any]) -> None:
    """One serial's node records, one row: PostgreSQL compresses it whole (TOAST), where a row
    per node (a few hundred bytes each) would be stored as it is."""
    if records:
        conn.execute("INSERT INTO fleetspec_progress (fleet, serial, records) VALUES (%s, %s, %s)",
                     (fleet, serial, json.dumps(records, separators=(",", ":"))))


def _write_rows(conn: psycopg.Connection[Any], fleet: str, head: _Head | None, delta: Delta,
                entry: dict[str, Any]) -> int:
    """The rows ``delta`` changes at ``entry``'s serial, and the change log (what each changed
    row was before); returns that serial. A wave inserts its nodes' records and nothing else."""
    serial = entry["serial"]
    changes: list[dict[str, Any]] = []
    header = {} if head is None else dict(head.header)
    new_header = {**header, "format_version": FORMAT_VERSION, "serial": serial, "updated": entry["time"],
                  "fleetspec_version": __version__}
    if head is None:
        fresh = _new_document(fleet)
        new_header.update({k: v for k, v in fresh.items() if k not in ("applied", "nodes", "journal", *_VOLATILE)})
    if delta.set_limited:
        if delta.limited is None:
            new_header.pop("limited", None)
        else:
            new_header["limited"] = delta.limited
    steady = {k: v for k, v in header.items() if k not in _VOLATILE}
    if {k: v for k, v in new_header.items() if k not in _VOLATILE} != steady:
        changes.append({"part": "header", "host": "", "before": steady if head is not None else None})
    applied_part = None if head is None else head.applied
    cleared = 0 if head is None else head.cleared
    if delta.applied is not None:
        part, nodes = _split_applied(delta.applied)
        assert part is not None
        back = None if applied_part is None else _undo(applied_part, part)
        if applied_part is None or back is not None:
            changes.append({"part": "fleet", "host": "", "before": back})
        applied_part, cleared = part, serial
        current = {host: (position, node) for host, position, node in conn.execute(
            "SELECT host, position, applied FROM fleetspec_node WHERE fleet = %s", (fleet,))}
        upserts = []
        for position, node in enumerate(nodes):
            host = node["hostname"]
            if host not in current:
                if head is not None and head.applied is not None:  # before the first: no applied fleet to rebuild
                    changes.append({"part": "node", "host": host, "before": None})
            else:
                old_position, old = current.pop(host)
                back = _undo(old, node)
                if back is None and old_position == position:
                    continue
                changes.append({"part": "node", "host": host, "before": {**(back or _NO_CHANGE),
                                                                         "position": old_position}})
            upserts.append({"host": host, "position": position, "applied": node})
        _rows(conn, _INSERT_NODES, (fleet,), upserts)
        for host, (old_position, old) in sorted(current.items()):  # removed from the fleet
            changes.append({"part": "node", "host": host, "before": {"set": old, "unset": [],
                                                                     "position": old_position}})
        if current:
            conn.execute("DELETE FROM fleetspec_node WHERE fleet = %s AND host = ANY(%s)", (fleet, sorted(current)))
    if delta.progress:
        now = _progress(conn, fleet, cleared, serial - 1)
        _insert_progress(conn, fleet, serial, {h: record for h, record in sorted(delta.progress.items())
                                               if h not in now or now[h] != record})
    if head is None:
        conn.execute("INSERT INTO fleetspec_head (fleet, lineage, serial, base_serial, cleared, header, applied) "
                     "VALUES (%s, %s, %s, 0, %s, %s, %s)",
                     (fleet, new_header["lineage"], serial, cleared, json.dumps(new_header),
                      None if applied_part is None else json.dumps(applied_part)))
    else:
        updated = conn.execute(
            "UPDATE fleetspec_head SET serial = %s, cleared = %s, header = %s"
            + (", applied = %s" if delta.applied is not None else "") + " WHERE fleet = %s AND serial = %s",
            (serial, cleared, json.dumps(new_header),
             *([json.dumps(applied_part)] if delta.applied is not None else []), fleet, head.serial))
        if updated.rowcount != 1:
            raise StateError(f"the state of {fleet} moved past serial {head.serial} during this write: "
                             "it was not made")
    _rows(conn, "INSERT INTO fleetspec_change (fleet, serial, part, host, before) SELECT %s, %s, part, host, "
                "CASE WHEN jsonb_typeof(before) = 'null' THEN NULL ELSE before END "
                "FROM jsonb_to_recordset(%s::jsonb) AS x(part text, host text, before jsonb)", (fleet, serial), changes)
    return serial


def _store_base(conn: psycopg.Connection[Any], fleet: str, document: dict[str, Any], by: str) -> _Head:
    """A whole document as this fleet's rows (a copy, a migration): head, nodes, records, a
    serial row per journal entry. Serials before it are not rebuilt from these rows."""
    header = {k: v for k, v in document.items() if k not in ("applied", "nodes", "journal")}
    header["format_version"] = FORMAT_VERSION
    part, nodes = _split_applied(document.get("applied"))
    serial = document["serial"]
    conn.execute("INSERT INTO fleetspec_head (fleet, lineage, serial, base_serial, cleared, header, applied) "
                 "VALUES (%s, %s, %s, %s, 0, %s, %s)",
                 (fleet, document["lineage"], serial, serial, json.dumps(header),
                  None if part is None else json.dumps(part)))
    _rows(conn, _INSERT_NODES, (fleet,), [{"host": n["hostname"], "position": i, "applied": n}
                                          for i, n in enumerate(nodes)])
    _insert_progress(conn, fleet, serial, dict(document.get("nodes", {})))
    entries = [e for e in document.get("journal", []) if isinstance(e.get("serial"), int) and e["serial"] > 0]
    _rows(conn, "INSERT INTO fleetspec_serial (fleet, serial, lineage, written_by, entry) SELECT %s, "
                "(entry->>'serial')::int, %s, %s, entry FROM jsonb_to_recordset(%s::jsonb) AS x(entry jsonb) "
                "ON CONFLICT DO NOTHING", (fleet, document["lineage"], by), [{"entry": e} for e in entries])
    return _Head(document["lineage"], serial, serial, 0, header, part)


def _migrate(conn: psycopg.Connection[Any], fleet: str, document: dict[str, Any]) -> _Head:
    """A format 1 state (a whole document per serial in ``fleetspec_state``) moved to rows, in
    the caller's transaction. Its serial rows keep when and by whom each serial was written;
    its documents stay where they are (``read_serial`` reads them), and a format 2 marker
    row after them makes an older release refuse the state instead of writing beside it."""
    head = _store_base(conn, fleet, document, "migrated")
    conn.execute("UPDATE fleetspec_serial s SET written_at = l.written_at, written_by = l.written_by "
                 "FROM fleetspec_state l WHERE s.fleet = %s AND l.fleet = s.fleet AND l.serial = s.serial",
                 (fleet,))
    conn.execute("INSERT INTO fleetspec_state (fleet, serial, lineage, document, written_by) VALUES (%s, %s, %s, %s, %s)",
                 (fleet, document["serial"] + 1, document["lineage"],
                  json.dumps({"format_version": FORMAT_VERSION, "fleet": fleet, "lineage": document["lineage"],
                              "serial": document["serial"] + 1, "nodes": {}, "journal": [],
                              "moved_to": "fleetspec_head, fleetspec_node (state format 2)"}),
                  f"fleetspec {__version__}: state moved to per-node rows"))
    return head


def _rebuild(conn: psycopg.Connection[Any], fleet: str, head: _Head, serial: int) -> dict[str, Any]:
    """The document at ``serial`` (base_serial <= serial <= head.serial): the current rows with
    the changes after ``serial`` undone, newest first; the node records current then."""
    header = dict(head.header)
    part = head.applied
    nodes = {host: (position, node) for host, position, node in conn.execute(
        "SELECT host, position, applied FROM fleetspec_node WHERE fleet = %s", (fleet,))}
    for kind, host, before in conn.execute(
            "SELECT part, host, before FROM fleetspec_change WHERE fleet = %s AND serial > %s "
            "ORDER BY serial DESC, part, host", (fleet, serial)):
        if kind == "header":
            header = {**{k: v for k, v in header.items() if k in _VOLATILE}, **(before or {})}
        elif kind == "fleet":
            part = None if before is None or part is None else _patch(part, before)
        elif before is None:
            nodes.pop(host, None)
        else:
            _, node = nodes.get(host, (None, {}))
            nodes[host] = (before["position"], _patch(node, before))
    (cleared,) = conn.execute("SELECT coalesce(max(serial), 0) FROM fleetspec_serial WHERE fleet = %s "
                              "AND serial <= %s AND entry->>'kind' = 'apply'", (fleet, serial)).fetchone()
    journal = _journal(conn, fleet, serial)
    header.update(serial=serial, lineage=head.lineage, format_version=FORMAT_VERSION)
    if journal and journal[-1].get("serial") == serial:
        header["updated"] = journal[-1].get("time")
    ordered = [node for _, node in sorted(nodes.values(), key=lambda item: item[0])]
    return {**header, "applied": None if part is None else _with_nodes(part, ordered),
            "nodes": _progress(conn, fleet, cleared, serial), "journal": journal}


def _ensure_tables(conn: psycopg.Connection[Any]) -> None:
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", _SETUP_KEY)
        conn.execute(SCHEMA_SQL)


def _lock_info(data: Any) -> LockInfo | None:
    try:
        return LockInfo(**(json.loads(data) if isinstance(data, str) else data))
    except (TypeError, ValueError):
        return None


def list_fleets(url: str) -> list[str]:
    """Fleets with a state or a lock in this database."""
    psycopg = _psycopg()
    conn = connect(url, "state list")
    try:
        rows = conn.execute("SELECT fleet FROM fleetspec_head UNION SELECT fleet FROM fleetspec_state "
                            "UNION SELECT fleet FROM fleetspec_lock ORDER BY 1").fetchall()
    except psycopg.errors.UndefinedTable:
        return []
    except psycopg.Error as exc:

        raise StateError(f"cannot list the states at {redact_url(url)}: {redact_message(str(exc).strip(), url)}") from None
    finally:
        conn.close()
    return [r[0] for r in rows]

