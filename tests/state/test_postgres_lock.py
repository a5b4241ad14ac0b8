"""#27 item 7 on a real PostgreSQL server: a fleet's lock key is collision-free (two fleet
names with the same CRC32 lock independently), and a forced unlock ends only a session
of the state's own database that holds this fleet's lock."""

from __future__ import annotations

import zlib
from pathlib import Path

import psycopg
import pytest

from fleetspec.state import LockHeld
from fleetspec.state.postgres import PostgresStore, legacy_lock_keys

# Two fleet names with the same CRC32 (found by search; checked below).
COLLIDING = ("fleet-29685295", "fleet-32060020")


def test_fleet_names_with_the_same_crc32_do_not_share_a_lock(postgres_url: str, tmp_path: Path) -> None:
    a, b = COLLIDING
    assert zlib.crc32(a.encode()) == zlib.crc32(b.encode())
    first, second = PostgresStore(postgres_url, a, tmp_path), PostgresStore(postgres_url, b, tmp_path)
    with first.lock("fleetspec apply a") as held_a, second.lock("fleetspec apply b") as held_b:
        assert held_a.held and held_b.held
        assert first.holder() == held_a.holder and second.holder() == held_b.holder
        with pytest.raises(LockHeld), PostgresStore(postgres_url, a, tmp_path).lock("again"):
            pass  # the same fleet still excludes itself
    assert first.holder() is None and second.holder() is None


def test_force_unlock_ends_no_session_of_another_database(postgres_server, fleet, tmp_path: Path) -> None:
    """The same fleet in two databases of one server: both get the same key (the same
    schema OID and first fleet id), so only the database filter keeps a forced unlock in
    one from ending the other's apply."""
    one, two = postgres_server.new_database(), postgres_server.new_database()
    holder = PostgresStore(one, fleet.name, tmp_path)
    other = PostgresStore(two, fleet.name, tmp_path)
    with other.lock("set up the tables"):
        pass
    with holder.lock("fleetspec apply") as held:
        assert other.force_unlock() is None
        assert holder.holder() == held.holder
        assert holder.record_wave(fleet, ["h100-001"], "wave").serial == 1  # its session is alive


def test_a_live_holder_of_the_old_crc32_key_still_holds_the_fleet(postgres_url: str, tmp_path: Path) -> None:
    """A runner on an older fleetspec (CRC32 key, lock row naming its session) keeps the
    lock during a mixed upgrade; a different fleet with that CRC32 is not blocked by it."""
    name, twin = COLLIDING
    with PostgresStore(postgres_url, name, tmp_path).lock("create the tables"):
        pass
    with psycopg.connect(postgres_url, autocommit=True) as old:
        old.execute("SELECT pg_advisory_lock(%s, %s)", legacy_lock_keys(name))
        pid = old.execute("SELECT pg_backend_pid()").fetchone()[0]
        old.execute("INSERT INTO fleetspec_lock (fleet, holder, backend_pid) VALUES (%s, %s, %s)",
                    (name, '{"host": "old", "pid": 1, "pid_started": null, "user": "ci", '
                           '"command": "fleetspec apply (older release)", "started": "2026-01-01T00:00:00Z"}', pid))
        with pytest.raises(LockHeld, match="older release"), \
                PostgresStore(postgres_url, name, tmp_path).lock("fleetspec apply"):
            pass
        with PostgresStore(postgres_url, twin, tmp_path).lock("fleetspec apply") as held:
            assert held.held
        assert PostgresStore(postgres_url, name, tmp_path).force_unlock().command == "fleetspec apply (older release)"
    with PostgresStore(postgres_url, name, tmp_path).lock("fleetspec apply") as held:
        assert held.held


def test_a_read_only_role_plans_but_cannot_lock(postgres_url: str, fleet, tmp_path: Path) -> None:
    """docs/gitops.md "Database roles": pull-request plans use a role with SELECT only. It
    reads the state and names the holder; taking the lock (and so writing) is refused."""
    from fleetspec.state import StateError

    owner = PostgresStore(postgres_url, fleet.name, tmp_path)
    with owner.lock("fleetspec apply"):
        owner.record_applied(fleet, "first apply")
    role = "ro_" + postgres_url.rsplit("/", 1)[1].split("?")[0]
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f'CREATE ROLE "{role}" LOGIN')
        conn.execute(f'GRANT SELECT ON fleetspec_state, fleetspec_head, fleetspec_node, fleetspec_progress, fleetspec_serial, '
                     f'fleetspec_change, fleetspec_lock, fleetspec_fleet TO "{role}"')
    user = postgres_url.split("://", 1)[1].split("@", 1)[0]
    readonly = postgres_url.replace(f"://{user}@", f"://{role}@", 1)
    reader = PostgresStore(readonly, fleet.name, tmp_path)
    with owner.lock("fleetspec apply") as held:
        assert reader.read().serial == 1 and reader.holder() == held.holder
    with pytest.raises(StateError, match="cannot lock"), reader.lock("fleetspec apply"):
        pass
