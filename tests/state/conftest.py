"""State tests use the real quickstart fleet and a real directory per test."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetspec.compile import compile_file
from fleetspec.compile.ir import Fleet
from fleetspec.state import StateStore

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def fleet() -> Fleet:
    result = compile_file(ROOT / "examples" / "quickstart.yaml")
    assert result.valid and result.fleet is not None
    return result.fleet


@pytest.fixture
def store(tmp_path: Path, fleet: Fleet) -> StateStore:
    return StateStore(tmp_path / "state", fleet.name)
