"""#25 item 10: the node line's socket/core layout against the real ``slurmd -C``.

slurmd is installed by scripts/test (Debian slurmd); ``slurmd -C`` prints this machine's
own node line, which the collector records and verify/plan hold the spec against.
"""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from fleetspec.node_side import collector
from fleetspec.pipeline import compile_text
from fleetspec.verify.compare import Status, check_node
from tests.verify.h200_facts import h200_facts

SLURMD = shutil.which("slurmd", path="/usr/sbin:/usr/bin:/sbin")

SPEC = """\
apiVersion: fleetspec.io/v1alpha1
kind: Fleet
metadata: {{name: layout}}
spec:
  os: ubuntu-24.04
  stacks:
    hopper-h200: {{driver: "580.159.04", cuda: "13.0", cudnn: "9.19.0", nccl: "2.28.3"}}
  racks:
    - name: r01
      nodes:
        - {{hosts: "h200-001", gpu: {{model: h200, count: 1}}, stack: hopper-h200, scheduler: slurm{layout}}}
  slurm: {{version: "25.11.8", mode: native, controllers: ctl-01}}
"""


@pytest.fixture(scope="module")
def real(slurm_installed) -> dict:
    """What the real ``slurmd -C`` says about this machine, through the collector."""
    assert SLURMD is not None, "slurmd is missing although ensure_slurm passed"
    printed = subprocess.run([SLURMD, "-C"], capture_output=True, text=True, timeout=60, check=True).stdout
    assert printed.startswith("NodeName=") and "CoresPerSocket=" in printed, printed
    host = collector.Host("/")
    facts = collector.collect_slurm(host)
    layout = facts["layout"]
    assert isinstance(layout, dict), facts
    # The collector read the same line slurmd printed, key for key.
    fields = dict(t.split("=", 1) for t in printed.splitlines()[0].split())
    for key in collector.SLURMD_LAYOUT_KEYS:
        assert layout[key] == int(fields[key]), key
    assert layout["Sockets"] == int(fields["Boards"]) * int(fields["SocketsPerBoard"])
    assert layout["CPUs"] == layout["Sockets"] * layout["CoresPerSocket"] * layout["ThreadsPerCore"]
    return layout


def facts_with(layout: dict) -> dict:
    facts = h200_facts()
    facts["slurm"] = {"slurmd_version": "22.05.8", "layout": layout, "errors": []}
    return facts


def layout_check(layout_yaml: str, real: dict):
    compiled = compile_text(SPEC.format(layout=layout_yaml))
    assert compiled.fleet is not None, compiled.located()
    node = compiled.fleet.node("h200-001")
    (check,) = [c for c in check_node(compiled.fleet, node, facts_with(real)).checks if c.component == "slurm-layout"]
    return compiled.fleet, check


def spec_layout(sockets: int, cores: int, threads: int) -> str:
    return (f", sockets: {sockets}, cores_per_socket: {cores}, threads_per_core: {threads}, "
            f"cpus: {sockets * cores * threads}")


def test_a_spec_layout_slurmd_agrees_with_is_ok(real) -> None:
    _, check = layout_check(spec_layout(real["Sockets"], real["CoresPerSocket"], real["ThreadsPerCore"]), real)
    assert check.status is Status.OK, check


def test_a_spec_layout_slurmd_disagrees_with_is_drift_naming_both(real) -> None:
    # An HGX H200 head node: 2 sockets of 48 cores, SMT on. This machine is not one.
    _, check = layout_check(spec_layout(2, 48, 2), real)
    assert check.status is Status.DRIFT
    assert "Sockets=2" in check.message and f"Sockets={real['Sockets']}" in check.message
    assert "CoresPerSocket=48" in check.message and f"CoresPerSocket={real['CoresPerSocket']}" in check.message
    assert check.expected == "Sockets=2 CoresPerSocket=48 ThreadsPerCore=2 CPUs=192"
    assert check.found == (f"Sockets={real['Sockets']} CoresPerSocket={real['CoresPerSocket']} "
                           f"ThreadsPerCore={real['ThreadsPerCore']} CPUs={real['CPUs']}")


def test_a_spec_without_a_layout_is_warned_with_slurmds(real) -> None:
    _, check = layout_check("", real)
    assert check.status is Status.WARNING
    assert f"CoresPerSocket={real['CoresPerSocket']}" in check.message and "one-core sockets" in check.message


def test_no_slurmd_no_check() -> None:
    compiled = compile_text(SPEC.format(layout=spec_layout(2, 48, 2)))
    node = compiled.fleet.node("h200-001")
    assert not [c for c in check_node(compiled.fleet, node, h200_facts()).checks if c.component == "slurm-layout"]


def test_plan_with_facts_names_the_layout_drift(real, tmp_path) -> None:
    from typer.testing import CliRunner

    from fleetspec.cli import app

    spec = tmp_path / "fleet.yaml"
    spec.write_text(SPEC.format(layout=spec_layout(2, 48, 2)))
    facts = tmp_path / "facts"
    facts.mkdir()
    (facts / "h200-001.json").write_text(json.dumps(facts_with(real)))
    result = CliRunner().invoke(app, ["plan", str(spec), "--base", str(spec), "--facts", str(facts), "--format",
                                      "json"])
    assert result.exit_code == 0, result.output
    assert "warning: h200-001: slurm-layout:" in result.stderr
    assert "says Sockets=2 CoresPerSocket=48" in result.stderr.replace("\n", " ")
    assert f"slurmd -C on h200-001 says Sockets={real['Sockets']}" in result.stderr.replace("\n", " ")


def test_parse_slurmd_config_refuses_what_is_not_its_line() -> None:
    assert collector.parse_slurmd_config("") is None
    assert collector.parse_slurmd_config("NodeName=x CPUs=two Boards=1") is None
    assert collector.parse_slurmd_config("UpTime=0-05:30:37\n") is None
