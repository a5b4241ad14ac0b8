"""Verify over real lab hosts (namespaced Debian nodes with sshd, stand-in vendor packages):
the testinfra module over ssh, and `fleetspec verify --inventory` through Ansible."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import typer
import yaml
from typer.testing import CliRunner

from fleetspec.lab import Lab
from fleetspec.verify.cli import verify
from tests.lab.conftest import lab, lab_base, lab_nodes, lab_repo  # noqa: F401  (session fixtures)
from tests.verify.testinfra_run import message, outcome, run_module

pytestmark = pytest.mark.lab

# The lab repo's first tuple (tests/lab/conftest.py LAB_TUPLES): the stand-ins report these.
LAB_SPEC = """
apiVersion: fleetspec.io/v1alpha1
kind: Fleet
metadata: {name: lab}
spec:
  os: ubuntu-24.04
  stacks:
    hopper: {driver: "580.95.05", cuda: "13.0.2", nccl: "2.28.3"}
  racks:
    - name: r01
      nodes:
        - {hosts: node-a, gpu: {model: h100-sxm, count: 1}, stack: hopper, scheduler: slurm}
        - {hosts: node-b, gpu: {model: h100-sxm, count: 1}, stack: hopper, scheduler: slurm}
"""


def ssh(lab: Lab, node: str, *command: str) -> str:
    proc = subprocess.run(lab.ssh.argv(node, *command), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.fixture(scope="module")
def provisioned(lab: Lab, lab_nodes) -> str:
    """node-b gets the tuple's CUDA and NCCL stand-ins, NCCL held; node-a stays bare."""
    ssh(lab, "node-b", "apt-get", "update", "-q")
    ssh(lab, "node-b", "env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "install", "-y", "-q",
        "--allow-downgrades", "libnccl2=2.28.3-1+cuda13.0", "cuda-toolkit-13-0=13.0.2-1")
    ssh(lab, "node-b", "apt-mark", "hold", "libnccl2")
    return "node-b"


@pytest.fixture(scope="module")
def spec(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("spec") / "lab.yaml"
    path.write_text(LAB_SPEC)
    return path


def test_the_testinfra_module_over_ssh(lab: Lab, provisioned: str, spec: Path, tmp_path: Path) -> None:
    rc, cases, output = run_module(tmp_path, f"--fleet-spec={spec}", f"--hosts=ssh://{provisioned}",
                                   f"--ssh-config={lab.ssh.config}")
    assert rc == 1, output  # node-b has no driver package installed: drift, said the stand-in way
    assert outcome(cases["facts"]) == "passed", output
    assert outcome(cases["nccl"]) == "passed", message(cases["nccl"])
    assert outcome(cases["cuda"]) == "passed", message(cases["cuda"])
    assert outcome(cases["package-holds"]) == "passed", message(cases["package-holds"])
    assert outcome(cases["driver"]) == "failure" and "stand-in host" in message(cases["driver"])


def test_verify_over_an_inventory_of_lab_hosts(lab: Lab, provisioned: str, spec: Path,
                                               tmp_path: Path) -> None:
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": lab.ansible_vars()}}))
    app = typer.Typer()
    app.command("verify")(verify)
    app.command("noop", hidden=True)(lambda: None)
    result = CliRunner().invoke(app, ["verify", str(spec), "--inventory", str(inventory), "--format", "json"])
    assert result.exit_code == 1, result.stderr
    doc = json.loads(result.stdout)
    nodes = {n["hostname"]: {c["component"]: c for c in n["checks"]} for n in doc["nodes"]}
    assert nodes["node-a"]["facts"]["message"].startswith("facts collected on node-a")
    assert nodes["node-a"]["nccl"]["status"] == "drift" and nodes["node-a"]["nccl"]["found"] == "absent"
    assert (nodes["node-b"]["nccl"]["status"], nodes["node-b"]["nccl"]["found"]) == ("ok", "2.28.3")
    assert nodes["node-b"]["cuda"]["found"] == "13.0.2"
    split = doc["partitions"][0]["checks"][0]
    assert split["status"] == "drift" and "node-a" in split["message"] and "node-b" in split["message"]
