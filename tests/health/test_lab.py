"""``fleetspec health --lab`` / ``--inventory`` against real lab hosts (systemd-nspawn, or
unshare, in their own network namespaces, reached over ssh by Ansible).

``fleetspec lab up`` starts the spec's two nodes; each gets the "hardware" the node check
reads, in the form it reads it on a real node:

- ``nvidia-smi`` replaying the real H200 node's ``nvidia-smi -q -x`` capture (the same
  stand-in tests/health/nodes.py puts on PATH: it answers ``-q -x`` and fails for any
  other arguments, as the real tool fails without a driver);
- ``/dev/kmsg`` holding records in the kernel's /dev/kmsg form
  (Documentation/ABI/testing/dev-kmsg). A lab host has no kernel log of its own:
  systemd-nspawn makes ``/dev/kmsg`` unavailable in containers ("we simply make /dev/kmsg
  unavailable to the container", src/nspawn/nspawn.c, setup_kmsg) and the unshare
  launcher mounts a private /dev without it, so the test writes the records there, after
  checking nothing is there (never the host's kernel log).

Then ``fleetspec health SPEC --lab DIR``: healthy nodes give a healthy verdict; an Xid 79
line in one host's log and remapped rows pending in the other's nvidia-smi give their
actions (drain-reboot; quarantine-device), as a table, JSON and JUnit; the check left no
state file behind (it ran read-only).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest
import yaml
from typer.testing import CliRunner

from fleetspec.cli import app
from fleetspec.lab.fleet import LabHandle
from tests.lab.conftest import lab_base  # noqa: F401 - the fixture: a machine that can host a lab

from .nodes import FIXTURES, H200_XML

pytestmark = pytest.mark.lab

SPEC = """\
apiVersion: fleetspec.io/v1alpha1
kind: Fleet
metadata: {name: sickbay}
spec:
  os: ubuntu-24.04
  stacks:
    hopper: {driver: "580.95.05", cuda: "13.0.2", nccl: "2.28.3"}
  racks:
    - name: r01
      nodes:
        - {hosts: "h200-[01-02]", gpu: {model: h200, count: 1}, stack: hopper, scheduler: slurm}
  health: {interval: 60}
"""
# The H200 capture's GPU is at 00000000:00:06.0 (tests/data/fixtures/h200-node/nvidia-smi-q.xml).
XID_79 = ("4,2001,6000000001,-;NVRM: Xid (PCI:0000:00:06): 79, pid='<unknown>', name=<unknown>, "
          "GPU has fallen off the bus.\n")
NVIDIA_SMI = """#!/bin/sh
# Stand-in nvidia-smi: the real H200 node's `nvidia-smi -q -x` capture; any other call fails.
if [ "$*" = "-q -x" ]; then cat /usr/local/share/fleetspec-test/nvidia-smi-q.xml; exit 0; fi
echo "nvidia-smi: stand-in knows only: -q -x" >&2; exit 2
"""


def cli(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def ssh(handle: LabHandle, host: str, script: str, stdin: bytes = b"") -> str:
    done = subprocess.run(handle.ssh_argv(host, "sh", "-c", script), input=stdin, capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout.decode()


def put_gpu(handle: LabHandle, host: str, xml: Path) -> None:
    ssh(handle, host, "mkdir -p /usr/local/share/fleetspec-test && cat > /usr/local/share/fleetspec-test/nvidia-smi-q.xml",
        xml.read_bytes())
    ssh(handle, host, "cat > /usr/local/bin/nvidia-smi && chmod 755 /usr/local/bin/nvidia-smi", NVIDIA_SMI.encode())


def put_kmsg(handle: LabHandle, host: str, records: bytes, *, first: bool = False) -> None:
    # The first write refuses an existing /dev/kmsg: that would be a real kernel log.
    guard = "test ! -e /dev/kmsg || { echo '/dev/kmsg exists: not a lab host without a kernel log' >&2; exit 3; }; "
    ssh(handle, host, (guard if first else "") + "cat >> /dev/kmsg", records)


@pytest.fixture(scope="module")
def sickbay(lab_base: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabHandle]:
    """`fleetspec lab up` for SPEC (two H200 nodes, no Slurm), each with a healthy H200."""
    spec = tmp_path_factory.mktemp("sickbay") / "fleet.yaml"
    spec.write_text(SPEC)
    lab_dir = spec.parent / ".fleetspec" / "lab"
    code, out, err = cli("lab", "up", str(spec), "--nodes", "2")
    assert code == 0, out + err
    handle = LabHandle.load(lab_dir)
    try:
        for host in handle.hosts:
            put_gpu(handle, host, H200_XML)
            put_kmsg(handle, host, (FIXTURES / "kmsg-healthy.txt").read_bytes(), first=True)
        yield handle
    finally:
        cli("lab", "down", "--dir", str(lab_dir))


def test_healthy_lab_nodes_give_a_healthy_verdict(sickbay: LabHandle, tmp_path: Path) -> None:
    assert sickbay.hosts == ("h200-01", "h200-02")
    junit = tmp_path / "health.xml"
    code, out, err = cli("health", str(sickbay.spec), "--lab", str(sickbay.dir), "--format", "json",
                         "--junit", str(junit))
    assert code == 0, out + err
    doc = json.loads(out)
    assert doc["healthy"] and doc["quarantined"] == []
    rows = {r["node"]: r for r in doc["nodes"]}
    assert {n: (r["status"], r["action"], r["faults"], r["errors"]) for n, r in rows.items()} == {
        n: ("healthy", "none", [], []) for n in ("h200-01", "h200-02")}
    suite = ET.parse(junit).getroot()
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("2", "0", "0")
    # Each node checked itself under its inventory name (Ansible templates --node per host).
    from fleetspec.health.fleet import from_lab
    from fleetspec.pipeline import compile_file

    gathered = from_lab(compile_file(sickbay.spec).fleet, sickbay.dir)
    assert {h: v["node"] for h, v in gathered.verdicts.items()} == {"h200-01": "h200-01", "h200-02": "h200-02"}
    # Read-only: the check never wrote the state the scheduled check keeps.
    for host in sickbay.hosts:
        assert ssh(sickbay, host, "ls /var/lib/fleetspec/health 2>&1 || true").strip().endswith("No such file or directory")


def test_planted_faults_give_their_actions(sickbay: LabHandle, tmp_path: Path) -> None:
    put_kmsg(sickbay, "h200-02", XID_79.encode())
    put_gpu(sickbay, "h200-01", FIXTURES / "nvidia-smi-q-remap-pending.xml")
    try:
        code, table, err = cli("health", str(sickbay.spec), "--lab", str(sickbay.dir))
        assert code == 1, table + err
        lines = table.splitlines()
        assert lines[0].split() == ["NODE", "STATUS", "ACTION", "FAULTS"]
        assert lines[1].split()[:3] == ["h200-01", "sick", "quarantine-device"]
        assert "row-remap-pending GPU 0 00000000:00:06.0: remapped rows pending: Yes (reset the GPU)" in lines[1]
        assert lines[2].split()[:3] == ["h200-02", "sick", "drain-reboot"]
        assert lines[2].endswith("gpu-lost 0000:00:06: Xid 79: GPU has fallen off the bus.")
        assert lines[3] == "2 nodes: 2 quarantined (h200-01, h200-02), 0 without a verdict"

        junit = tmp_path / "health.xml"
        # The same through the lab's inventory (what --inventory does on a datacenter).
        code, out, err = cli("health", str(sickbay.spec), "--inventory", str(sickbay.inventory_overlay),
                             "--format", "json", "--junit", str(junit))
        assert code == 1, out + err
        doc = json.loads(out)
        assert not doc["healthy"] and doc["quarantined"] == ["h200-01", "h200-02"]
        rows = {r["node"]: r for r in doc["nodes"]}
        assert [(f["class"], f["action"], f["source"]) for f in rows["h200-02"]["faults"]] == [
            ("gpu-lost", "drain-reboot", "kernel-log")]
        # The capture has remapped rows pending and the uncorrectable error that caused them.
        assert [(f["class"], f["action"], f["device"]) for f in rows["h200-01"]["faults"]] == [
            ("ecc-uncorrectable", "quarantine-device", "GPU 0 00000000:00:06.0"),
            ("row-remap-pending", "reset-when-idle", "GPU 0 00000000:00:06.0")]  # #26 item 8
        suite = ET.parse(junit).getroot()
        failures = {c.get("name"): c.find("failure").get("message") for c in suite if c.find("failure") is not None}
        assert failures == {"h200-01": "quarantine-device: ecc-uncorrectable", "h200-02": "drain-reboot: gpu-lost"}
    finally:  # the next test sees healthy hosts again
        ssh(sickbay, "h200-02", "cat > /dev/kmsg", (FIXTURES / "kmsg-healthy.txt").read_bytes())
        put_gpu(sickbay, "h200-01", H200_XML)


def test_an_unreachable_node_is_unknown_never_healthy(sickbay: LabHandle) -> None:
    inventory = sickbay.dir / "broken-inventory.yml"
    data = yaml.safe_load(sickbay.inventory_overlay.read_text())
    host = data["all"]["hosts"]["h200-02"]
    assert "127.0.0.1 22" in host["ansible_ssh_common_args"]  # the ProxyCommand into its namespace
    # Port 1: nothing listens there; a new ansible_host so no open ssh control socket is reused.
    host["ansible_ssh_common_args"] = host["ansible_ssh_common_args"].replace("127.0.0.1 22", "127.0.0.1 1")
    host["ansible_host"] = "h200-02-gone"
    inventory.write_text(yaml.safe_dump(data))
    try:
        code, out, err = cli("health", str(sickbay.spec), "--inventory", str(inventory), "--format", "json")
    finally:
        inventory.unlink()
    assert code == 1, out + err
    rows = {r["node"]: r for r in json.loads(out)["nodes"]}
    assert rows["h200-01"]["status"] == "healthy"
    assert rows["h200-02"]["status"] == "unknown" and rows["h200-02"]["errors"][0].startswith("unreachable: ")


def test_the_shared_adhoc_runner_runs_commands_on_a_lab_host(sickbay: LabHandle) -> None:
    """apply's Slurm-controller commands go through the same ad-hoc runner (fleetspec.ansible_adhoc)."""
    from fleetspec.apply.control import ansible_runner_on

    run = ansible_runner_on([sickbay.inventory_overlay], "h200-01")
    done = run(["hostname"])
    assert (done.returncode, done.stdout.strip()) == (0, "h200-01")
    failed = run(["ls", "/nonexistent"])
    assert failed.returncode == 2 and "No such file or directory" in failed.stderr
