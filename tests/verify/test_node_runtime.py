"""What the driver runs with, checked by verify: installed != loaded (a reboot is due),
persistence mode, NVSwitches on HGX boards, IMEX and the GPU fabric on NVL72 racks.
Facts come from the real H200 node's outputs and from the collector run over sysfs trees
of real node layouts (tests/data/fixtures/sysfs)."""

from __future__ import annotations

import copy
import json
import subprocess
import sys

import pytest

from fleetspec.catalog import load_catalog
from fleetspec.compile.ir import Fleet
from fleetspec.pipeline import compile_text
from fleetspec.render.slurm import render_slurm
from fleetspec.verify.compare import Status, check_node
from fleetspec.verify.report import check_dict
from tests.conftest import ROOT
from tests.verify.h200_facts import h200_facts

SYSFS = ROOT / "tests/data/fixtures/sysfs"

SPEC = """\
apiVersion: fleetspec.io/v1alpha1
kind: Fleet
metadata: {{name: runtime}}
spec:
  os: ubuntu-24.04
  stacks:
    hopper-h200: {{driver: "580.159.04", cuda: "13.0", cudnn: "9.19.0", nccl: "2.28.3"}}
    blackwell: {{driver: "580.159.04", cuda: "13.0", nccl: "2.28.3"}}
  racks:
    - name: r01
      nodes:
        - {{hosts: "h200-[001-002]", gpu: {{model: {model}, count: {count}}}, stack: hopper-h200, scheduler: slurm}}
    - name: r07
      nvlink_domain: rack
      nodes:
        - {{hosts: "gb200-r07-[01-02]", gpu: {{model: gb200, count: 4}}, stack: blackwell, scheduler: {owner}}}
  slurm: {{version: "{slurm}", mode: native, controllers: ctl-01}}
"""


def fleet(model: str = "h200", count: int = 1, owner: str = "slurm", slurm: str = "25.11.8") -> Fleet:
    compiled = compile_text(SPEC.format(model=model, count=count, owner=owner, slurm=slurm))
    assert compiled.fleet is not None, compiled.located()
    return compiled.fleet


def collected(tree: str) -> dict:
    """The collector itself over a fixture tree (no commands: the tree has no tools)."""
    out = subprocess.run([sys.executable, str(ROOT / "fleetspec/node_side/collector.py"), "--root", str(SYSFS / tree),
                          "--no-commands", "--no-load"], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def checks(f: Fleet, host: str, facts: dict) -> dict:
    node = f.node(host)
    assert node is not None
    return {c.component: c for c in check_node(f, node, facts).checks}


def with_nvidia(facts: dict, **nvidia) -> dict:
    out = copy.deepcopy(facts)
    out["nvidia"].update(nvidia)
    return out


def test_installed_module_newer_than_the_loaded_one_is_drift_that_needs_a_reboot() -> None:
    f = fleet()
    ok = checks(f, "h200-001", with_nvidia(h200_facts(), installed_module_version="580.159.04"))["loaded-module"]
    assert ok.status is Status.OK
    got = checks(f, "h200-001", with_nvidia(h200_facts(), installed_module_version="580.173.02"))["loaded-module"]
    assert got.status is Status.DRIFT and got.disruption == "drain-reboot"
    assert "580.173.02" in got.message and "580.159.04" in got.message
    assert check_dict(got)["disruption"] == "drain-reboot"


def test_a_loaded_driver_with_no_module_on_disk_is_a_warning_not_ok() -> None:
    """Seen on a real H200 (the lent device, driver 580.159.04 loaded from outside
    /lib/modules): modinfo finds no nvidia module while the driver runs. Before, the check
    said ok ("installed module: absent"); the next reboot would come up without a driver."""
    got = checks(fleet(), "h200-001", with_nvidia(h200_facts(), installed_module_version="absent"))["loaded-module"]
    assert got.status is Status.WARNING and "reboot would come up without the driver" in got.message
    assert (got.expected, got.found) == ("an installed module", "580.159.04")


def operator_driver_spec(model: str) -> str:
    """The spec with its node on Kubernetes, the GPU Operator running the driver."""
    return SPEC.format(model=model, count=8, owner="kubernetes", slurm="25.11.8").replace(
        "stack: hopper-h200, scheduler: slurm", "stack: hopper-h200, scheduler: kubernetes").replace(
        "  slurm: {version:", '  kubernetes: {version: "1.36", gpu_operator: {version: v26.7.0, driver: operator}}\n'
        "  slurm: {version:")


def test_no_module_on_disk_is_no_warning_where_the_gpu_operator_runs_the_driver() -> None:
    """The GPU Operator's driver container builds and loads nvidia.ko from its own root file
    system; the host's /lib/modules never holds it, so modinfo on the host finds none on every
    such node, and the container loads the module again after a reboot. Warning there ("a
    reboot would come up without the driver, reinstall it with the playbook's driver role")
    would be wrong on every Kubernetes node of the fleet."""
    spec = operator_driver_spec("h200")
    compiled = compile_text(spec)
    assert compiled.fleet is not None, compiled.located()
    facts = with_nvidia(h200_facts(), installed_module_version="absent")
    got = checks(compiled.fleet, "h200-001", facts)["loaded-module"]
    assert got.status is Status.NOT_APPLICABLE and "GPU Operator" in got.message, got
    # a host-installed driver on a Kubernetes node (driver: host) still warns
    host = compile_text(spec.replace("driver: operator", "driver: host"))
    assert host.fleet is not None, host.located()
    assert checks(host.fleet, "h200-001", facts)["loaded-module"].status is Status.WARNING


def test_a_recorded_pending_reboot_is_drift_until_the_node_reboots() -> None:
    facts = with_nvidia(h200_facts(), installed_module_version="580.159.04",
                        reboot_required="driver packages changed: nvidia-driver-580-open")
    got = checks(fleet(), "h200-001", facts)["loaded-module"]
    assert got.status is Status.DRIFT and "--allow-reboot" in got.message and got.disruption == "drain-reboot"


def test_persistence_mode_off_is_reported() -> None:
    f = fleet()
    daemon = {"service": "active", "exec_start": "/usr/bin/nvidia-persistenced --persistence-mode",
              "no_persistence_mode": False}
    assert checks(f, "h200-001", with_nvidia(h200_facts(), persistenced=daemon))["persistence-mode"].status is Status.OK
    facts = with_nvidia(h200_facts(), persistenced=daemon)
    facts["nvidia"]["gpus"][0]["persistence_mode"] = "Disabled"
    got = checks(f, "h200-001", facts)["persistence-mode"]
    assert got.status is Status.WARNING and "GPU 0" in got.message


def test_ubuntus_unit_without_persistence_mode_is_reported_on_a_stand_in() -> None:
    facts = with_nvidia(h200_facts(), persistenced={"service": "active", "exec_start": "{ path=/usr/bin/nvidia-"
                        "persistenced ; argv[]=/usr/bin/nvidia-persistenced --no-persistence-mode }",
                        "no_persistence_mode": True})
    for gpu in facts["nvidia"]["gpus"]:
        gpu.pop("persistence_mode", None)
    assert checks(fleet(), "h200-001", facts)["persistence-mode"].status is Status.WARNING


@pytest.mark.parametrize(("tree", "status"), [("hgx-h100", Status.OK), ("pcie-h100", Status.DRIFT)])
def test_an_hgx_node_must_show_its_nvswitches(tree: str, status: Status) -> None:
    facts = with_nvidia(h200_facts(), nvswitches=collected(tree)["nvidia"]["nvswitches"])
    got = checks(fleet(count=8), "h200-001", facts)["nvswitch"]
    assert got.status is status
    assert "nvswitch" not in checks(fleet(count=1), "h200-001", facts)


@pytest.mark.parametrize(("tree", "status"), [("hgx-b200", Status.OK), ("hgx-h100", Status.DRIFT)])
def test_an_hgx_b200_node_must_show_its_nvswitch_management_bridges(tree: str, status: Status) -> None:
    """NVLink 5: no NVSwitch on the PCI bus (so no nvswitch check); the ConnectX-7 bridge's
    limited PFs (VPD SW_MNG) must be there, or the fabric manager and nvlsm reach nothing."""
    nvidia = collected(tree)["nvidia"]
    facts = with_nvidia(h200_facts(), nvswitches=nvidia["nvswitches"], nvlink5_bridges=nvidia["nvlink5_bridges"])
    got = checks(fleet(model="b200", count=8), "h200-001", facts)
    assert got["nvlink5-bridge"].status is status and "nvswitch" not in got
    if status is Status.OK:
        assert got["nvlink5-bridge"].found == "2 (mlx5_1, mlx5_3)"
        assert [b["port_guid"] for b in nvidia["nvlink5_bridges"]] == ["0xe09d7303003f3bf8", "0xe09d7303003f3bf9"]
    assert "nvlink5-bridge" not in checks(fleet(count=8), "h200-001", facts)


def test_nvlsm_must_be_installed_at_its_pin_on_nvlink5_boards() -> None:
    pin = load_catalog().nvlink5_packages().nvlsm_version
    facts = h200_facts()
    b200 = fleet(model="b200", count=8)
    assert checks(b200, "h200-001", facts)["nvlsm"].status is Status.NOT_APPLICABLE  # packages not collected
    for installed, status in (([], Status.DRIFT), ([{"name": "nvlsm", "version": "2025.12.211-1", "held": False}],
                                                   Status.DRIFT),
                              ([{"name": "nvlsm", "version": pin, "held": True}], Status.OK)):
        facts["packages"] = {"manager": "dpkg", "installed": installed, "holds": [], "errors": []}
        assert checks(b200, "h200-001", facts)["nvlsm"].status is status
    assert "nvlsm" not in checks(fleet(count=8), "h200-001", facts)


def test_nvlsm_is_the_gpu_operators_on_kubernetes_nodes_whose_driver_it_runs() -> None:
    """The GPU Operator's driver container carries nvlsm (NVIDIA's driver container installs
    it); the host's dpkg has none, and that is not drift."""
    spec = operator_driver_spec("b200")
    compiled = compile_text(spec)
    assert compiled.fleet is not None, compiled.located()
    facts = h200_facts()
    facts["packages"] = {"manager": "dpkg", "installed": [], "holds": [], "errors": []}
    got = checks(compiled.fleet, "h200-001", facts)["nvlsm"]
    assert got.status is Status.NOT_APPLICABLE and "GPU Operator" in got.message


def test_imex_peers_service_and_channel_on_an_nvl72_node() -> None:
    f = fleet(owner="kubernetes")
    base = collected("gb200-tray")["nvidia"]
    good = dict(base["imex"], nodes_config=["10.0.7.1", "10.0.7.2"], service="active", channels=["channel0"])
    got = checks(f, "gb200-r07-01", with_nvidia(h200_facts(), imex=good))
    assert got["imex-peers"].status is Status.OK and got["imex-service"].status is Status.OK
    assert got["imex-channel"].status is Status.OK
    missing = checks(f, "gb200-r07-01", with_nvidia(h200_facts(), imex=base["imex"]))
    assert missing["imex-peers"].status is Status.DRIFT and "nodes_config.cfg is missing" in missing["imex-peers"].message
    assert missing["imex-channel"].status is Status.DRIFT
    short = checks(f, "gb200-r07-01", with_nvidia(h200_facts(), imex=dict(good, nodes_config=["10.0.7.1"])))
    assert short["imex-peers"].status is Status.DRIFT and "has 2 node(s)" in short["imex-peers"].message
    slurm = checks(fleet(owner="slurm"), "gb200-r07-01", with_nvidia(h200_facts(), imex=dict(good, channels=[])))
    assert slurm["imex-channel"].status is Status.NOT_APPLICABLE


def test_gpu_fabric_registration_must_complete_in_one_clique() -> None:
    f = fleet(owner="kubernetes")
    facts = with_nvidia(h200_facts(), imex={"nodes_config": ["a", "b"], "service": "active", "channels": ["channel0"]})
    gpus = facts["nvidia"]["gpus"]
    gpus[0]["fabric"] = {"state": "Completed", "status": "Success", "clique_id": "1", "cluster_uuid": "u"}
    assert checks(f, "gb200-r07-01", facts)["gpu-fabric"].status is Status.OK
    gpus[0]["fabric"]["state"] = "In Progress"
    got = checks(f, "gb200-r07-01", facts)["gpu-fabric"]
    assert got.status is Status.DRIFT and "In Progress" in got.message


def test_slurm_owned_nvl72_racks_get_per_job_imex_channels() -> None:
    conf = render_slurm(fleet(owner="slurm"))
    text = next(t for p, t in conf.items() if p.name == "slurm.conf")
    assert "SwitchType=switch/nvidia_imex" in text.splitlines()
    k8s = next(t for p, t in render_slurm(fleet(owner="kubernetes")).items() if p.name == "slurm.conf")
    assert "SwitchType" not in k8s
    old = next(t for p, t in render_slurm(fleet(owner="slurm", slurm="23.11.10")).items() if p.name == "slurm.conf")
    assert "SwitchType=" not in old and "need Slurm 24.05+" in old


def test_plan_with_facts_drains_and_reboots_a_node_whose_module_is_not_the_installed_one(tmp_path) -> None:
    from fleetspec.plan import make_plan, with_pending_reboots
    from fleetspec.plan.model import Disruption

    f = fleet()
    plan = make_plan(f, f)
    assert plan.empty
    stale = with_nvidia(h200_facts(), installed_module_version="580.173.02")
    fine = with_nvidia(h200_facts(), installed_module_version="580.159.04")
    planned = with_pending_reboots(plan, {"h200-001": stale, "h200-002": fine})
    assert [(c.target, c.disruption) for c in planned.changes] == [("node:h200-001", Disruption.DRAIN_REBOOT)]
    assert planned.changes[0].before == "580.159.04" and planned.changes[0].after == "580.173.02"
    assert [w.hosts for w in planned.waves] == [("h200-001",)]
    standin = dict(stale, standin=["libnvidia-compute-580"])
    assert with_pending_reboots(plan, {"h200-001": standin}).empty


def test_plan_cli_reads_facts(tmp_path) -> None:
    from typer.testing import CliRunner

    from fleetspec.cli import app

    spec = tmp_path / "fleet.yaml"
    spec.write_text(SPEC.format(model="h200", count=1, owner="slurm", slurm="25.11.8"))
    facts = tmp_path / "facts"
    facts.mkdir()
    (facts / "h200-001.json").write_text(json.dumps(with_nvidia(h200_facts(), installed_module_version="580.173.02")))
    result = CliRunner().invoke(app, ["plan", str(spec), "--base", str(spec), "--facts", str(facts), "--format",
                                      "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert [(c["target"], c["disruption"]) for c in data["changes"]] == [("node:h200-001", "drain-reboot")]
