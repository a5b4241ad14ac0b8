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
        return conn.execute("SELECT serial, document FROM fleetspec_state WHERE fleet = %s ORDER BY serial",
                            (store.fleet_name,)).fetchall()


def tamper(store: StateBackend, edit: Callable[[dict[str, Any]], None]) -> None:
    """Change the latest stored document behind fleetspec's back (another tool, a newer fleetspec)."""
    if isinstance(store, StateStore):
        document = json.loads(store.path.read_text())
        edit(document)
        store.path.write_text(json.dumps(document))
        return
    import psycopg

    with psycopg.connect(store.url, autocommit=True) as conn:
        serial, document = conn.execute("SELECT serial, document FROM fleetspec_state WHERE fleet = %s "
                                        "ORDER BY serial DESC LIMIT 1", (store.fleet_name,)).fetchone()
        edit(document)
        conn.execute("UPDATE fleetspec_state SET document = %s WHERE fleet = %s AND serial = %s",
                     (json.dumps(document), store.fleet_name, serial))
