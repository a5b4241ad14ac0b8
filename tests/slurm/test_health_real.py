"""The node check as Slurm's HealthCheckProgram, with a real slurmctld and real slurmds.

Two H200 nodes whose "hardware" is a stand-in node root each (tests/health/nodes.py: a
kernel log in /dev/kmsg form, nvidia-smi printing the real H200's XML, an InfiniBand
sysfs port). slurm.conf is the rendered one, HealthCheck* lines included; only the
program path is pointed at a wrapper that runs the same node check against the node's
stand-in root (production runs it against / from /usr/local/sbin, see render/health.py).
A fault appears in a node's log or tools; slurmd runs the check; the check drains the
node through slurmctld with a reason naming the fault; the fault goes; the node resumes.

The wrapper runs the modules the fleet_health role installs (`NODE_MODULES`, copied under
the scratch directory) with the node's python3: the host's at 22.05, and at 26.05 (#47)
the Debian sid root's own python3 under that release's slurmd, draining through its
scontrol. Every check runs at 22.05; the Xid 79 drain and resume at 26.05 too.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path, PurePosixPath

import pytest

from fleetspec.lab.slurm_releases import release_prefix, slurm_cluster
from fleetspec.pipeline import compile_text
from fleetspec.render.health import HEALTH_CHECK_PROGRAM, NODE_MODULES, PROLOG_PROGRAM, node_config
from fleetspec.render.slurm import render_slurm
from tests.health.nodes import FIXTURES, H200_XML, make_node, set_boot_id, set_ib, set_tool_output

from .cluster import Cluster

pytestmark = [pytest.mark.slurm, pytest.mark.usefixtures("slurm_installed")]

REPO = Path(__file__).resolve().parents[2]
INTERVAL = 5
SPEC = f"""\
apiVersion: fleetspec.io/v1alpha1
kind: Fleet
metadata: {{name: sickbay}}
spec:
  os: ubuntu-24.04
  stacks:
    hopper: {{driver: "580.95.05", cuda: "13.0.2", nccl: "2.28.3"}}
  fabric: {{type: infiniband}}
  racks:
    - name: r01
      nodes:
        - hosts: "h200-[01-02]"
          gpu: {{model: h200, count: 1}}
          stack: hopper
          scheduler: slurm
          cpus: 4
          memory_gb: 1
  slurm: {{version: "22.05.8", controllers: ctl-01}}
  health: {{interval: {INTERVAL}, min_healthy: 1}}
"""
# The releases the node check drains on: the host's, and sid's (one cluster each per module).
RELEASES = ["22.05", "26.05"]
ONLY_2205 = pytest.mark.parametrize("sickbay", ["22.05"], indirect=True)  # release-free behaviour
XID_79 = ("4,2001,6000000001,-;NVRM: Xid (PCI:0000:00:06): 79, pid='<unknown>', name=<unknown>, "
          "GPU has fallen off the bus.\n")


def node_python(base: Path, prefix: tuple[str, ...]) -> tuple[str, Path]:
    """(python, library directory) a node program runs with: the modules the fleet_health
    role installs (`NODE_MODULES`) copied under ``base``, which a release's root sees (/tmp);
    the host's interpreter for 22.05, the root's own python3 inside a newer release's."""
    lib = base / "lib"
    for module in NODE_MODULES:
        (lib / module).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / module, lib / module)
    return ("python3" if prefix else sys.executable), lib


@pytest.fixture(scope="module", params=RELEASES)
def sickbay(request: pytest.FixtureRequest, tmp_path_factory, slurm_release):
    release = request.param
    slurm_release(release)
    fleet = compile_text(SPEC).fleet
    assert fleet is not None and fleet.health is not None
    base = tmp_path_factory.mktemp(f"health-{release}")
    python, lib = node_python(base, release_prefix(release, base))
    roots = base / "nodes"
    for node in ("h200-01", "h200-02"):
        make_node(roots / node)
    config = base / "health.json"
    config.write_text(json.dumps(node_config(fleet)))
    wrapper = base / "fleetspec-health-check"
    files = render_slurm(fleet)
    conf = files[PurePosixPath("slurm/slurm.conf")]
    assert f"HealthCheckProgram={HEALTH_CHECK_PROGRAM}\nHealthCheckInterval={INTERVAL}\nHealthCheckNodeState=ANY" in conf
    # The GPU prolog has its own tests (test_prolog_real.py); here every job starts.
    files[PurePosixPath("slurm/slurm.conf")] = conf.replace(HEALTH_CHECK_PROGRAM, str(wrapper)).replace(
        PROLOG_PROGRAM, "/bin/true")
    cluster_root = base / "slurm"
    wrapper.write_text(
        "#!/bin/sh\n"
        "# The rendered program's command, against this node's stand-in root.\n"
        f'echo "$(date +%T) $SLURMD_NODENAME" >> {base}/runs.log\n'
        f'export PATH="{roots}/$SLURMD_NODENAME/bin:$PATH" SLURM_CONF={cluster_root}/etc/slurm.conf\n'
        f"PYTHONPATH={lib} exec {python} -s -m fleetspec.node_side.node_check --config {config} --slurm "
        f'--root "{roots}/$SLURMD_NODENAME" >> {base}/check.log 2>&1\n'
    )
    wrapper.chmod(0o755)
    with slurm_cluster(cluster_root, files, release=release) as cluster:
        yield cluster, roots, base


def node(cluster: Cluster, name: str) -> dict[str, str]:
    text = cluster.run("scontrol", "-o", "show", "node", name).stdout
    state = text.split("State=", 1)[1].split()[0]
    reason = text.split("Reason=", 1)[1].rsplit(" [", 1)[0] if "Reason=" in text else ""
    return {"state": state, "reason": reason}


def wait_for(cluster: Cluster, name: str, ok, what: str, base: Path, timeout: float = 6 * INTERVAL) -> dict:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        info = node(cluster, name)
        if ok(info):
            return info
        time.sleep(0.5)
    log = (base / "check.log").read_text() if (base / "check.log").exists() else "(no check ran)"
    raise AssertionError(f"{name} never {what}: {node(cluster, name)}\n{log[-3000:]}\n"
                         f"{cluster.log('slurmd-' + name + '.log')[-1500:]}")


def drained(info: dict) -> bool:
    return "DRAIN" in info["state"]


@ONLY_2205
def test_the_check_runs_under_slurmd(sickbay) -> None:
    cluster, roots, base = sickbay
    end = time.monotonic() + 3 * INTERVAL
    while time.monotonic() < end and not (base / "runs.log").exists():
        time.sleep(0.5)
    runs = (base / "runs.log").read_text().split()
    assert "h200-01" in runs and "h200-02" in runs  # slurmd names the node in SLURMD_NODENAME
    assert not drained(node(cluster, "h200-01")) and not drained(node(cluster, "h200-02"))


def test_xid_79_drains_the_node_and_a_reboot_resumes_it(sickbay) -> None:
    cluster, roots, base = sickbay
    submitted = cluster.sbatch("-p", "nvidia-hopper", "-w", "h200-01", "-N1", "--mem=100", script="sleep 30\n")
    job = submitted.stdout.strip()
    assert job, submitted.stderr
    assert cluster.wait_job(job, {"RUNNING"})["JobState"] == "RUNNING"
    with open(roots / "h200-01" / "dev" / "kmsg", "a") as log:
        log.write(XID_79)
    info = wait_for(cluster, "h200-01", drained, "drained", base)
    assert info["reason"].startswith("fleetspec-health: drain-reboot gpu-lost: 0000:00:06 Xid 79: GPU has fallen off the bus"), info
    # Drain, not down: the job already there keeps running; nothing new lands.
    assert cluster.job(job)["JobState"] == "RUNNING"
    assert "DRAIN" in info["state"] and not drained(node(cluster, "h200-02"))
    cluster.run("scancel", job)
    # The node comes back from its reboot: a new boot id, a fresh kernel log.
    set_boot_id(roots / "h200-01", "boot-2")
    (roots / "h200-01" / "dev" / "kmsg").write_text((FIXTURES / "kmsg-healthy.txt").read_text())
    info = wait_for(cluster, "h200-01", lambda i: not drained(i), "resumed", base)
    assert info["reason"] == "" and info["state"].startswith("IDLE"), info


@ONLY_2205
def test_ib_port_down_drains_and_port_up_resumes(sickbay) -> None:
    cluster, roots, base = sickbay
    set_ib(roots / "h200-02", "down")
    info = wait_for(cluster, "h200-02", drained, "drained", base)
    assert info["reason"] == "fleetspec-health: drain ib-port-down: mlx5_0/1 port DOWN, physical Disabled"
    set_ib(roots / "h200-02", "active")
    wait_for(cluster, "h200-02", lambda i: not drained(i), "resumed", base)


@ONLY_2205
def test_an_operators_drain_is_never_resumed_or_overwritten(sickbay) -> None:
    cluster, roots, base = sickbay
    cluster.run("scontrol", "update", "NodeName=h200-02", "State=DRAIN", "Reason=maintenance: reseat PSU")
    runs = len((base / "runs.log").read_text().splitlines())
    end = time.monotonic() + 4 * INTERVAL
    while time.monotonic() < end and len((base / "runs.log").read_text().splitlines()) < runs + 4:
        time.sleep(0.5)  # at least two more checks on each node
    assert node(cluster, "h200-02") == {"state": "IDLE+DRAIN", "reason": "maintenance: reseat PSU"}
    # A fault meanwhile does not overwrite the operator's reason either.
    set_ib(roots / "h200-02", "down")
    time.sleep(2 * INTERVAL + 1)
    assert node(cluster, "h200-02")["reason"] == "maintenance: reseat PSU"
    assert "left drained by someone else" in (base / "check.log").read_text()
    set_ib(roots / "h200-02", "active")
    cluster.run("scontrol", "update", "NodeName=h200-02", "State=RESUME")
    assert os.path.exists(roots)


@ONLY_2205
def test_a_hung_nvidia_smi_drains_the_node_before_slurmd_kills_the_check(sickbay) -> None:
    """A wedged GPU: nvidia-smi never answers. Before, the check gave each of its three
    nvidia-smi calls 30 s, slurmd killed it at 60 s ("health_check killed by signal 15"),
    and the node stayed IDLE. Now the check gives the tool what is left of its 45 s
    deadline, does not call it again, and drains with a probe-failed reason."""
    cluster, roots, base = sickbay
    script = roots / "h200-01" / "bin" / "nvidia-smi"
    script.write_text(f'#!/bin/sh\necho "$*" >> "{base}/nvidia-smi.calls"\nexec sleep 600\n')
    script.chmod(0o755)
    try:
        info = wait_for(cluster, "h200-01", drained, "drained", base, timeout=75)
        assert info["reason"].startswith("fleetspec-health: drain probe-failed: nvidia-smi hung: no answer within"), info
        assert "killed by signal" not in cluster.log("slurmd-h200-01.log")
        calls = (base / "nvidia-smi.calls").read_text().splitlines()
        assert calls and set(calls) == {"-q -x"}, calls  # one call a run: never nvlink after it hung
    finally:
        set_tool_output(roots / "h200-01", "nvidia-smi", H200_XML, "-q -x")
    wait_for(cluster, "h200-01", lambda i: not drained(i), "resumed", base, timeout=75)


@ONLY_2205
def test_a_flapping_ib_link_is_held_then_stays_drained(sickbay) -> None:
    """Before: link_downed rose, the check drained; the next check saw no rise and resumed
    (four cycles in 140 s). Now each onset holds the node drained for three clean checks, and
    the third onset within the window keeps it drained ('flapping') until --clear."""
    cluster, roots, base = sickbay
    root = roots / "h200-02"

    def runs() -> int:
        return (base / "runs.log").read_text().split().count("h200-02")

    try:
        for downed in (1, 2):
            set_ib(root, "active", link_downed=downed)  # the link went down and came back
            info = wait_for(cluster, "h200-02", drained, "drained", base)
            assert info["reason"].startswith("fleetspec-health: drain ib-link-errors: mlx5_0/1"), info
            drained_at = runs()
            wait_for(cluster, "h200-02", lambda i: not drained(i), "resumed", base, timeout=12 * INTERVAL)
            assert runs() - drained_at >= 3, "resumed before three clean checks"
        set_ib(root, "active", link_downed=3)  # the third time within the window
        wait_for(cluster, "h200-02", drained, "drained", base)
        start = runs()
        end = time.monotonic() + 12 * INTERVAL
        while time.monotonic() < end and runs() < start + 5:
            time.sleep(0.5)
        info = node(cluster, "h200-02")
        assert drained(info) and info["reason"].startswith("fleetspec-health: drain flapping: mlx5_0/1"), info
    finally:
        for _ in range(20):  # an operator's --clear; retried while slurmd's own check holds the lock
            done = subprocess.run([sys.executable, "-m", "fleetspec.node_side.node_check", "--config",
                                   str(base / "health.json"), "--root", str(root), "--node", "h200-02", "--clear"],
                                  env={**os.environ, "PYTHONPATH": str(REPO),
                                       "PATH": f"{root / 'bin'}{os.pathsep}{os.environ['PATH']}"},
                                  capture_output=True, text=True, check=False)
            if "another check is still running" not in done.stderr:
                break
            time.sleep(0.5)
    wait_for(cluster, "h200-02", lambda i: not drained(i), "resumed after --clear", base)


@ONLY_2205
def test_a_drain_past_min_healthy_is_held_back_and_said(sickbay) -> None:
    """#26 item 4: the blast-radius limit on Slurm, as Kubernetes has it. With h200-02 out
    (an operator's drain) and min_healthy 1, draining h200-01 would leave no Slurm node in
    service: the check holds the drain back and says so (stderr, the check's output), and
    drains once h200-02 is back in service."""
    cluster, roots, base = sickbay
    cluster.run("scontrol", "update", "NodeName=h200-02", "State=DRAIN", "Reason=maintenance: swap NIC")
    try:
        set_ib(roots / "h200-01", "down")
        end = time.monotonic() + 6 * INTERVAL
        while time.monotonic() < end and "remediation held back" not in (base / "check.log").read_text():
            time.sleep(0.5)
        log = (base / "check.log").read_text()
        assert "h200-01: remediation held back: 2 of 2 GPU nodes look sick, 0 healthy" in log, log[-2000:]
        assert "below min_healthy 1" in log
        assert not drained(node(cluster, "h200-01"))
    finally:
        cluster.run("scontrol", "update", "NodeName=h200-02", "State=RESUME")
    info = wait_for(cluster, "h200-01", drained, "drained", base)
    assert info["reason"].startswith("fleetspec-health: drain ib-port-down"), info
    set_ib(roots / "h200-01", "active")
    wait_for(cluster, "h200-01", lambda i: not drained(i), "resumed", base)


@ONLY_2205
def test_a_crashing_check_drains_with_its_own_reason_and_resumes_when_it_passes(sickbay) -> None:
    """#26 item 8: a check that crashed exited 2 and left the node IDLE with no trace in
    slurmctld. Now it drains with its own reason (the exception type and where), and the first
    check that passes resumes the node. The crash here: a state file whose kernel-log cursor
    is not a number (hand-edited), so the check's comparison raises TypeError."""
    cluster, roots, base = sickbay
    root = roots / "h200-01"
    boot_id = (root / "proc" / "sys" / "kernel" / "random" / "boot_id").read_text().strip()
    state = root / "var" / "lib" / "fleetspec" / "health" / "state.json"
    state.parent.mkdir(parents=True, exist_ok=True)
    state.write_text(json.dumps({"boot_id": boot_id, "kmsg_seq": "not-a-number", "latched": [], "ib": {}}))
    try:
        info = wait_for(cluster, "h200-01", drained, "drained", base)
        assert info["reason"].startswith(
            "fleetspec-health: drain check-crashed: node check crashed (TypeError at node_check.py:"), info
        assert "the check failed: TypeError" in (base / "check.log").read_text()
    finally:
        state.unlink()
    wait_for(cluster, "h200-01", lambda i: not drained(i), "resumed", base)


@ONLY_2205
def test_a_pending_row_remap_keeps_a_busy_node_in_service_and_resets_it_when_idle(sickbay) -> None:
    """#26 item 8: remapped rows pending drained the node at once, though NVIDIA says "new
    workloads can be launched" until the next GPU reset. Now a busy node keeps taking work;
    once idle it is drained, its GPU reset (nvidia-smi -r -i BUS), and resumed when the GPU
    reads healthy. The stand-in nvidia-smi prints the real H200's XML with the pending flag
    set, and a reset clears it, as the driver does."""
    cluster, roots, base = sickbay
    root = roots / "h200-02"
    pending = base / "remap-pending.xml"
    pending.write_text(H200_XML.read_text().replace("<remapped_row_pending>No<", "<remapped_row_pending>Yes<"))
    current, calls = base / "h200-02-now.xml", base / "h200-02-nvidia-smi.calls"
    shutil.copy(pending, current)
    script = root / "bin" / "nvidia-smi"
    script.write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> "{calls}"\n'
        'case "$*" in\n'
        f'  "-q -x") cat "{current}" ;;\n'
        f'  "-r -i 00000000:00:06.0") cp "{H200_XML}" "{current}"; echo "GPU 00000000:00:06.0 was successfully reset." ;;\n'
        '  *) exit 2 ;;\nesac\n')
    script.chmod(0o755)

    def runs() -> int:
        return (base / "runs.log").read_text().split().count("h200-02")

    jobs = []
    try:
        first = cluster.sbatch("-p", "nvidia-hopper", "-w", "h200-02", "-N1", "-n1", "--mem=100", script="sleep 120\n")
        jobs.append(first.stdout.strip())
        assert cluster.wait_job(jobs[0], {"RUNNING"})["JobState"] == "RUNNING"
        start = runs()
        end = time.monotonic() + 8 * INTERVAL
        while time.monotonic() < end and runs() < start + 3:
            time.sleep(0.5)
        info = node(cluster, "h200-02")
        assert not drained(info), info  # before: drained at once (quarantine-device row-remap-pending)
        assert "reset when idle: jobs are running" in (base / "check.log").read_text()
        second = cluster.sbatch("-p", "nvidia-hopper", "-w", "h200-02", "-N1", "-n1", "--mem=100", script="sleep 120\n")
        jobs.append(second.stdout.strip())
        assert cluster.wait_job(jobs[1], {"RUNNING"})["JobState"] == "RUNNING"  # new work still lands
        assert "-r -i 00000000:00:06.0" not in calls.read_text()  # never reset under a job
        for job in jobs:
            cluster.run("scancel", job)
        end = time.monotonic() + 8 * INTERVAL
        while time.monotonic() < end and "-r -i 00000000:00:06.0" not in calls.read_text():
            time.sleep(0.5)
        assert "-r -i 00000000:00:06.0" in calls.read_text(), (base / "check.log").read_text()[-2000:]
        assert "drained while idle and reset 00000000:00:06.0" in (base / "check.log").read_text()
        info = wait_for(cluster, "h200-02", lambda i: not drained(i), "resumed", base)
        assert info["reason"] == "" and current.read_text() == H200_XML.read_text()
    finally:
        for job in jobs:
            cluster.run("scancel", job)
        set_tool_output(root, "nvidia-smi", H200_XML, "-q -x")
