"""The shared state store: PostgreSQL, for teams and CI runners with no disk in common.

Modelled on Terraform's ``pg`` backend (https://developer.hashicorp.com/terraform/language/backend/pg:
"This backend creates one table states in the automatically-managed Postgres schema ...
Locking is supported using Postgres advisory locks"), with history kept:

- ``fleetspec_state``: one row per fleet and serial holding the same JSON document as the
  file store (``store``), so a state moves between backends unchanged. A write reads the
  latest row and inserts the next serial in one transaction; the primary key (fleet,
  serial) means two writers can never both write serial N. Rows are never updated or
  deleted: every serial stays readable (``history``, ``read_serial``).
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

from fleetspec.state.lock import LockHeld, LockInfo, current_holder
from fleetspec.state.store import (
    _SAFE_NAME,
    Change,
    DocumentWrites,
    State,
    StateError,
    _check_document,
    _new_document,
    _state_from_document,
    next_document,
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
        return psycopg.connect(url, autocommit=True, connect_timeout=15, application_name=f"fleetspec {purpose}")
    except psycopg.Error as exc:
        raise StateError(f"cannot open the state database {redact_url(url)}: "
                         f"{redact_message(str(exc).strip(), url)}") from None


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
        row = self._query("SELECT document FROM fleetspec_state WHERE fleet = %s ORDER BY serial DESC LIMIT 1",
                          (self.fleet_name,))
        if not row:
            return State(self.fleet_name, None, 0, None)
        return self._state(row[0][0])

    def read_serial(self, serial: int) -> State:
        """The state as it was at ``serial`` (history is kept)."""
        row = self._query("SELECT document FROM fleetspec_state WHERE fleet = %s AND serial = %s",
                          (self.fleet_name, serial))
        if not row:
            raise StateError(f"{self.location} has no serial {serial}")
        return self._state(row[0][0])

    def history(self) -> list[dict[str, Any]]:
        """One entry per serial kept, oldest first: its journal entry plus when and by whom it was written."""
        rows = self._query("SELECT serial, written_at, written_by, lineage, document->'journal'->-1 "
                           "FROM fleetspec_state WHERE fleet = %s ORDER BY serial", (self.fleet_name,))
        return [{**(entry or {}), "serial": serial, "written_at": written_at.isoformat(), "written_by": by,
                 "lineage": lineage} for serial, written_at, by, lineage, entry in rows]

    def export_document(self) -> dict[str, Any] | None:
        """The latest stored document as it is (``state copy``); None when there is no state."""
        row = self._query("SELECT document FROM fleetspec_state WHERE fleet = %s ORDER BY serial DESC LIMIT 1",
                          (self.fleet_name,))
        return row[0][0] if row else None

    def import_document(self, document: dict[str, Any]) -> State:
        """Store another store's document unchanged (lineage, serial, journal) as this fleet's
        first row: only into an empty state, and only under the lock (``state copy``)."""
        if self._lock is None or self._conn is None:
            raise StateError("state writes need the lock: use 'with store.lock(command):'")
        state = self._state(document)
        psycopg = _psycopg()
        try:
            with self._conn.transaction():
                if self._conn.execute("SELECT 1 FROM fleetspec_state WHERE fleet = %s LIMIT 1",
                                      (self.fleet_name,)).fetchone():
                    raise StateError(f"{self.location} already holds a state: a copy goes only into an empty "
                                     f"location")
                self._conn.execute("INSERT INTO fleetspec_state (fleet, serial, lineage, document, written_by) "
                                   "VALUES (%s, %s, %s, %s, %s)",
                                   (self.fleet_name, document["serial"], document["lineage"], json.dumps(document),
                                    f"state copy by {self._lock.holder.user if self._lock.holder else 'unknown'}"))
        except psycopg.Error as exc:
            raise StateError(f"the copy into {self.location} failed and was not made: {str(exc).strip()}") from None
        return state

    def _state(self, document: Any) -> State:
        _check_document(document, self.location, self.fleet_name)
        return _state_from_document(document, self.location)

    def _query(self, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        """Rows of a read; no table yet reads as no rows (nothing was ever written)."""
        psycopg = _psycopg()
        conn = self._conn or connect(self.url, "read")
        try:
            return conn.execute(sql, params).fetchall()
        except psycopg.errors.UndefinedTable:
            return []
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

    def _write(self, change: Change, kind: str, hosts: list[str], summary: str) -> State:
        if self._lock is None or self._conn is None:
            raise StateError("state writes need the lock: use 'with store.lock(command):'")
        psycopg = _psycopg()
        conn = self._conn
        try:
            with conn.transaction():
                row = conn.execute("SELECT document FROM fleetspec_state WHERE fleet = %s "
                                   "ORDER BY serial DESC LIMIT 1", (self.fleet_name,)).fetchone()
                if row is not None:
                    _check_document(row[0], self.location, self.fleet_name)
                document = row[0] if row is not None else _new_document(self.fleet_name)
                next_document(document, change, kind, hosts, summary, self._lock.command)
                holder = self._lock.holder
                by = f"{holder.user}@{holder.host} pid {holder.pid}" if holder else "unknown"
                conn.execute("INSERT INTO fleetspec_state (fleet, serial, lineage, document, written_by) "
                             "VALUES (%s, %s, %s, %s, %s)",
                             (self.fleet_name, document["serial"], document["lineage"], json.dumps(document), by))
        except psycopg.Error as exc:
            raise StateError(f"the state write to {self.location} failed and was not made: "
                             f"{str(exc).strip()}") from None
        return _state_from_document(document, self.location)


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
        rows = conn.execute("SELECT fleet FROM fleetspec_state UNION SELECT fleet FROM fleetspec_lock "
                            "ORDER BY 1").fetchall()
    except psycopg.errors.UndefinedTable:
        return []
    except psycopg.Error as exc:

        raise StateError(f"cannot list the states at {redact_url(url)}: {redact_message(str(exc).strip(), url)}") from None
    finally:
        conn.close()
    return [r[0] for r in rows]

