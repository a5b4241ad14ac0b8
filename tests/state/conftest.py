"""State tests use the real quickstart fleet, and run against every backend: a real
directory per test (the file store) and a fresh database per test on a real PostgreSQL
server (tests/postgres_server.py). ``location`` is what a user passes to ``--state``."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from fleetspec.compile.ir import Fleet
from fleetspec.pipeline import compile_file
from fleetspec.state import StateBackend, StateStore, open_state, parse_location

ROOT = Path(__file__).resolve().parents[2]
BACKENDS = ("file", "postgresql")


@pytest.fixture(scope="session")
def fleet() -> Fleet:
    result = compile_file(ROOT / "examples" / "quickstart.yaml")
    assert result.valid and result.fleet is not None
    return result.fleet


@pytest.fixture(params=BACKENDS)
def location(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "file":
        return str(tmp_path / "state")
    return request.getfixturevalue("postgres_url")


@pytest.fixture
def store(location: str, tmp_path: Path, fleet: Fleet) -> StateBackend:
    return open_state(parse_location(location), fleet.name, work_dir=tmp_path / "work")


@pytest.fixture
def file_store(tmp_path: Path, fleet: Fleet) -> StateStore:
    return StateStore(tmp_path / "state", fleet.name)


def latest_document(store: StateBackend) -> Any:
    """The stored document of the latest serial, as the backend keeps it (bytes or a row)."""
    if isinstance(store, StateStore):
        return store.path.read_bytes()
    import psycopg

    with psycopg.connect(store.url) as conn:
        return (conn.execute("SELECT serial, header, applied FROM fleetspec_head WHERE fleet = %s",
                             (store.fleet_name,)).fetchall(),
                conn.execute("SELECT host, position, applied FROM fleetspec_node WHERE fleet = %s ORDER BY host",
                             (store.fleet_name,)).fetchall(),
                conn.execute("SELECT serial, records FROM fleetspec_progress WHERE fleet = %s ORDER BY serial",
                             (store.fleet_name,)).fetchall(),
                conn.execute("SELECT serial, entry FROM fleetspec_serial WHERE fleet = %s ORDER BY serial",
                             (store.fleet_name,)).fetchall())


def tamper(store: StateBackend, edit: Callable[[dict[str, Any]], None]) -> None:
    """Change the latest stored document behind fleetspec's back (another tool, a newer fleetspec)."""
    if isinstance(store, StateStore):  # the whole state as the snapshot, the journal folded into it
        document = store.export_document()
        edit(document)
        store.path.write_text(json.dumps(document))
        store.journal_path.unlink(missing_ok=True)
        return
    import psycopg

    with psycopg.connect(store.url, autocommit=True) as conn:  # the fleet-level part: its head row
        header = conn.execute("SELECT header FROM fleetspec_head WHERE fleet = %s", (store.fleet_name,)).fetchone()[0]
        edit(header)
        conn.execute("UPDATE fleetspec_head SET header = %s WHERE fleet = %s", (json.dumps(header), store.fleet_name))
