"""Fleets for plan tests: the quickstart example and its variants in specs/."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetspec.compile.ir import Fleet
from fleetspec.pipeline import compile_file, compile_text
from fleetspec.plan import make_plan
from fleetspec.plan.model import Plan

ROOT = Path(__file__).resolve().parents[2]
SPECS = Path(__file__).resolve().parent / "specs"
QUICKSTART = ROOT / "examples" / "quickstart.yaml"
MUSEUM = ROOT / "examples" / "museum.yaml"


def compiled(path: Path) -> Fleet:
    result = compile_file(path)
    assert result.valid and result.fleet is not None, [f.message for f in result.findings]
    return result.fleet


def compiled_text(text: str) -> Fleet:
    result = compile_text(text, "variant.yaml")
    assert result.valid and result.fleet is not None, [f.message for f in result.findings]
    return result.fleet


@pytest.fixture(scope="session")
def quickstart() -> Fleet:
    return compiled(QUICKSTART)


@pytest.fixture(scope="session")
def museum() -> Fleet:
    return compiled(MUSEUM)


def variant(name: str) -> Fleet:
    return compiled(SPECS / f"{name}.yaml")


@pytest.fixture(scope="session")
def fleets_20k() -> tuple[Fleet, Fleet]:
    """The 20,000-node benchmark fleet (``benchmarks/fleetgen.py``) and its driver bump:
    (old, new), compiled once for every plan test that needs them (~4 s)."""
    import sys

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from fleetgen import driver_bump_yaml

    return compiled_text(driver_bump_yaml(20000)), compiled_text(driver_bump_yaml(20000, bumped=True))


def shared_lane_spec() -> str:
    """Two generations (nvidia-hopper, nvidia-ampere) and a debug partition over a node of each."""
    base = (ROOT / "tests" / "apply" / "specs" / "v1.yaml").read_text()
    return base.replace("""        - hosts: h200-[003-004]
          gpu: {model: h200, count: 1}""", """        - hosts: a100-[003-004]
          gpu: {model: a100, count: 1}""").replace(
        'controllers: ctl-01', 'controllers: ctl-01\n    partitions:\n      debug: {nodes: "h200-001,a100-003", allow_mixed_generations: true}')


def shared_lane_plan() -> tuple[Fleet, Plan]:
    """The driver bump of ``shared_lane_spec``, one node out at a time: one lane."""
    two = shared_lane_spec()
    old = compiled_text(two)
    new = compiled_text(two.replace('driver: "580.159.04"', 'driver: "580.173.02"'))
    return new, make_plan(new, old, max_unavailable=1)
