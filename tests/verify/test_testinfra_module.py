"""The shipped pytest-testinfra module against a real host: this machine over local://."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetspec.verify.testinfra_checks import COMPONENTS, collector_command
from tests.verify.testinfra_run import message, outcome, run_module

SPEC = Path(__file__).parent / "specs" / "h200.yaml"


def test_the_module_over_local_checks_this_machine_as_a_spec_node(tmp_path: Path) -> None:
    if Path("/proc/driver/nvidia/version").exists():
        pytest.skip("this machine has an NVIDIA driver loaded")
    rc, cases, output = run_module(tmp_path, f"--fleet-spec={SPEC}", "--hosts=local://", "--fleet-node=h200-001")
    assert rc == 1, output
    assert set(cases) == set(COMPONENTS), output
    assert outcome(cases["facts"]) == "passed"
    assert outcome(cases["driver"]) == "failure"
    assert "expected 580.159.04, found absent" in message(cases["driver"])
    assert "no NVIDIA driver" in message(cases["driver"])
    assert outcome(cases["gpu-count"]) == "failure"
    for amd in ("amdgpu", "rocm", "rccl"):
        assert outcome(cases[amd]) == "skipped"
        assert "not checked on this node" in message(cases[amd])


def test_a_host_that_is_not_a_spec_node_errors_with_the_hint(tmp_path: Path) -> None:
    rc, cases, output = run_module(tmp_path, f"--fleet-spec={SPEC}", "--hosts=local://")
    assert rc == 1
    assert all(outcome(c) == "error" for c in cases.values()), output
    assert "name it with --fleet-node" in message(cases["driver"])


def test_the_module_without_a_spec_says_how_to_give_one(tmp_path: Path) -> None:
    rc, cases, output = run_module(tmp_path, "--hosts=local://")
    assert rc == 1
    assert "--fleet-spec FILE" in message(cases["driver"]), output


def test_the_collector_command_fits_one_argument() -> None:
    assert len(collector_command().encode()) < 128 * 1024  # Linux MAX_ARG_STRLEN
