"""Lab hosts carry stand-in packages: verify checks their user space and says so."""

import copy
from pathlib import Path

from fleetspec.pipeline import compile_file
from fleetspec.verify.compare import Status, compare
from tests.verify.h200_facts import h200_facts

SPEC = Path(__file__).resolve().parent / "specs" / "h200.yaml"


def _standin(facts: dict, smi_driver: str) -> dict:
    facts = copy.deepcopy(facts)
    facts["nvidia"].update(driver_version="absent", kernel_module="absent", gpus=[], smi_driver_version=smi_driver)
    facts["standin"] = ["libnccl2", "nvidia-driver-580-open"]
    return facts


def test_standin_host_checks_user_space_driver_and_not_hardware():
    fleet = compile_file(SPEC).fleet
    host = fleet.nodes[0].hostname
    expected = fleet.stack(fleet.nodes[0].stack).driver
    report = compare(fleet, {host: _standin(h200_facts(host), expected)}, hosts=[host])
    node = report.nodes[0]
    checks = {c.component: c for c in node.checks}
    assert checks["driver"].status is Status.OK and "stand-in host" in checks["driver"].message
    assert checks["gpus"].status is Status.NOT_APPLICABLE
    assert "gpu-count" not in checks and "kernel-module" not in checks


def test_standin_with_the_wrong_driver_package_is_drift():
    fleet = compile_file(SPEC).fleet
    host = fleet.nodes[0].hostname
    report = compare(fleet, {host: _standin(h200_facts(host), "570.124.06")}, hosts=[host])
    assert {c.component: c.status for c in report.nodes[0].checks}["driver"] is Status.DRIFT


def test_a_real_node_without_driver_is_still_drift():
    fleet = compile_file(SPEC).fleet
    host = fleet.nodes[0].hostname
    facts = _standin(h200_facts(host), "580.159.04")
    facts["standin"] = []
    checks = {c.component: c.status for c in compare(fleet, {host: facts}, hosts=[host]).nodes[0].checks}
    assert checks["driver"] is Status.DRIFT and checks["gpu-count"] is Status.DRIFT
