"""spec.health rendered: the node's policy file, the Slurm entry point, the role's module list."""

from __future__ import annotations

import json
from pathlib import PurePosixPath

import yaml

from fleetspec.pipeline import compile_text
from fleetspec.render.health import HEALTH_CHECK_PROGRAM, NODE_MODULES, PROLOG_PROGRAM, render_health
from fleetspec.render.slurm import render_slurm
from tests.conftest import ROOT

from .test_node_check import SPEC


def test_policy_file_and_program() -> None:
    fleet = compile_text(SPEC.replace("health: {interval: 60}",
                                      "health: {interval: 120, actions: {xid-unknown: drain}, checks: [kernel-log, gpu-memory]}")).fleet
    files = render_health(fleet)
    config = json.loads(files[PurePosixPath("health/node-check.json")])
    assert config["schema"] == "fleetspec.io/health/v1"
    assert config["actions"]["xid-unknown"] == "drain" and config["actions"]["gpu-lost"] == "drain-reboot"
    assert config["checks"] == ["kernel-log", "gpu-memory"]
    assert config["nodes"] == [
        {"hosts": "mi300x-01", "vendor": "amd", "model": "mi300x", "gpus": 2, "owner": "slurm", "fabric": "infiniband"},
        {"hosts": "h200-[01-02]", "vendor": "nvidia", "model": "h200", "gpus": 1, "owner": "slurm",
         "fabric": "infiniband"},
    ]
    program = files[PurePosixPath("health/fleetspec-health-check")]
    assert "-m fleetspec.node_side.node_check" in program and "--slurm" in program
    conf = render_slurm(fleet)[PurePosixPath("slurm/slurm.conf")]
    assert f"HealthCheckProgram={HEALTH_CHECK_PROGRAM}\nHealthCheckInterval=120\nHealthCheckNodeState=ANY\n" in conf
    # The GPU check before each job (#25 item 12): rendered, installed, requeued jobs not held.
    assert f"\nProlog={PROLOG_PROGRAM}\n" in conf and ",nohold_on_prolog_fail\n" in conf
    assert "-m fleetspec.node_side.prolog --config /etc/fleetspec/health.json" in files[
        PurePosixPath("health/fleetspec-prolog")]


def test_no_health_section_renders_nothing() -> None:
    fleet = compile_text(SPEC.replace("  health: {interval: 60}\n", "")).fleet
    assert fleet.health is None
    assert render_health(fleet) == {}
    conf = render_slurm(fleet)[PurePosixPath("slurm/slurm.conf")]
    assert "HealthCheck" not in conf and "Prolog=" not in conf and "nohold_on_prolog_fail" not in conf


def test_unknown_fault_class_is_a_located_error() -> None:
    result = compile_text(SPEC.replace("health: {interval: 60}", "health: {actions: {xid-79: drain}}"), "f.yaml")
    [finding] = result.located()
    assert "unknown fault class xid-79" in finding.message and finding.line == 16


def test_the_role_installs_exactly_the_node_modules() -> None:
    defaults = yaml.safe_load((ROOT / "playbooks/roles/fleet_health/defaults/main.yml").read_text())
    assert tuple(defaults["fleetspec_health_modules"]) == NODE_MODULES
    for module in NODE_MODULES:
        assert (ROOT / module).is_file()
