"""The GPU prolog (node_side/prolog.py) as Slurm's Prolog, with a real slurmctld and slurmds.

Two H200 nodes whose "hardware" is a stand-in node root each (tests/health/nodes.py),
slurm.conf as rendered with ``spec.health`` (HealthCheck* and Prolog lines), the program
paths pointed at wrappers that run the same modules against the node's stand-in root. The
periodic check's interval is long, so what drains a node here is the prolog alone: a job
starts on a node whose GPU fell off the bus since the last periodic check.

The drain and requeue run at 22.05 and at 26.05 (#47: Debian sid's slurmd runs the prolog
with the root's python3, `node_python`); the healthy path at 22.05.
"""

from __future__ import annotations

import json
import time
from pathlib import PurePosixPath

import pytest

from fleetspec.lab.slurm_releases import release_prefix, slurm_cluster
from fleetspec.pipeline import compile_text
from fleetspec.render.health import HEALTH_CHECK_PROGRAM, PROLOG_PROGRAM, node_config
from fleetspec.render.slurm import PROLOG_EPILOG_TIMEOUT, render_slurm
from tests.health.nodes import H200_XML, make_node, set_tool_output

from .test_health_real import RELEASES, SPEC, node_python

pytestmark = [pytest.mark.slurm, pytest.mark.usefixtures("slurm_installed")]


@pytest.fixture(scope="module", params=RELEASES)
def prolog_cluster(request: pytest.FixtureRequest, tmp_path_factory, slurm_release):
    release = request.param
    slurm_release(release)
    fleet = compile_text(SPEC.replace("interval: 5,", "interval: 600,")).fleet
    assert fleet is not None and fleet.health is not None
    base = tmp_path_factory.mktemp(f"prolog-{release}")
    python, lib = node_python(base, release_prefix(release, base))
    roots = base / "nodes"
    for node in ("h200-01", "h200-02"):
        make_node(roots / node)
    config = base / "health.json"
    config.write_text(json.dumps(node_config(fleet)))
    files = render_slurm(fleet)
    conf = files[PurePosixPath("slurm/slurm.conf")]
    assert f"\nProlog={PROLOG_PROGRAM}\n" in conf and f"PrologEpilogTimeout={PROLOG_EPILOG_TIMEOUT}" in conf
    cluster_root = base / "slurm"
    prolog = base / "fleetspec-prolog"
    prolog.write_text(
        "#!/bin/sh\n"
        "# The rendered program's command, against this node's stand-in root.\n"
        f'echo "$(date +%s.%N) $SLURMD_NODENAME job=$SLURM_JOB_ID gpus=$SLURM_JOB_GPUS start" >> {base}/prolog.log\n'
        f'export PATH="{roots}/$SLURMD_NODENAME/bin:$PATH" SLURM_CONF={cluster_root}/etc/slurm.conf\n'
        f"PYTHONPATH={lib} {python} -s -m fleetspec.node_side.prolog --config {config} "
        f'--root "{roots}/$SLURMD_NODENAME" 2>> {base}/prolog.err\n'
        "rc=$?\n"
        f'echo "$(date +%s.%N) $SLURMD_NODENAME job=$SLURM_JOB_ID rc=$rc" >> {base}/prolog.log\n'
        "exit $rc\n")
    prolog.chmod(0o755)
    files[PurePosixPath("slurm/slurm.conf")] = conf.replace(HEALTH_CHECK_PROGRAM, "/bin/true").replace(
        PROLOG_PROGRAM, str(prolog))
    with slurm_cluster(cluster_root, files, release=release) as cluster:
        yield cluster, roots, base


def node(cluster, name: str) -> dict[str, str]:
    text = cluster.run("scontrol", "-o", "show", "node", name).stdout
    state = text.split("State=", 1)[1].split()[0]
    reason = text.split("Reason=", 1)[1].rsplit(" [", 1)[0] if "Reason=" in text else ""
    return {"state": state, "reason": reason}


@pytest.mark.parametrize("prolog_cluster", ["22.05"], indirect=True)  # release-free
def test_a_healthy_node_runs_the_job_after_the_prolog(prolog_cluster) -> None:
    cluster, roots, base = prolog_cluster
    job = cluster.sbatch("-p", "nvidia-hopper", "-w", "h200-02", "-N1", "--gres=gpu:1", "--mem=100",
                         script="echo ran\n").stdout.strip()
    assert cluster.wait_job(job, {"COMPLETED", "FAILED"})["JobState"] == "COMPLETED", cluster.job(job)
    assert cluster.output(job).strip() == "ran"
    log = (base / "prolog.log").read_text()
    assert f"h200-02 job={job} gpus=0 start" in log and f"h200-02 job={job} rc=0" in log
    assert "DRAIN" not in node(cluster, "h200-02")["state"]


def test_a_node_whose_gpu_fell_off_drains_and_the_job_runs_elsewhere(prolog_cluster) -> None:
    """nvidia-smi lists no GPU on h200-01 (the H200 fell off the bus since the last periodic
    check). h200-02 is out (an operator's drain), so the job lands on h200-01: the prolog fails,
    the node drains with the prolog's reason, the job goes back to the queue, not held
    (nohold_on_prolog_fail), never ran there, and runs on h200-02 once that is back."""
    cluster, roots, base = prolog_cluster
    empty = base / "no-gpu.xml"
    text = H200_XML.read_text()
    empty.write_text(text[:text.index("<gpu id=")] + "</nvidia_smi_log>\n")
    set_tool_output(roots / "h200-01", "nvidia-smi", empty, "-q -x")
    assert "nohold_on_prolog_fail" in cluster.run("scontrol", "show", "config").stdout
    cluster.run("scontrol", "update", "NodeName=h200-02", "State=DRAIN", "Reason=maintenance")
    try:
        started = time.monotonic()
        job = cluster.sbatch("-p", "nvidia-hopper", "-N1", "--gres=gpu:1", "--mem=100",
                             script="hostname >/dev/null; echo ran on $SLURMD_NODENAME\n").stdout.strip()
        end = time.monotonic() + 30
        while time.monotonic() < end and "DRAIN" not in node(cluster, "h200-01")["state"]:
            time.sleep(0.2)
        info = node(cluster, "h200-01")
        assert "DRAIN" in info["state"], (info, (base / "prolog.err").read_text()[-2000:])
        wanted = (f"fleetspec-health: drain-reboot gpu-lost: GPU /dev/nvidia0 allocated to job {job} but not listed "
                  "by nvidia-smi (+1 more)")
        assert info["reason"] == wanted, info
        assert time.monotonic() - started < 20  # well within PrologEpilogTimeout
        assert f"h200-01 job={job} rc=1" in (base / "prolog.log").read_text()
        assert "nvidia-smi lists 0 of 1 GPUs" in (base / "prolog.err").read_text()
        found = cluster.wait_job(job, {"PENDING"})
        assert found["JobState"] == "PENDING" and found.get("Restarts") == "1", found  # requeued
        assert "held" not in found.get("Reason", "").lower() and found.get("Priority") != "0", found
        assert node(cluster, "h200-01")["reason"] == wanted  # Slurm's own drain did not replace it
        cluster.run("scontrol", "update", "NodeName=h200-02", "State=RESUME")
        # Slurm gives a requeued job a short BeginTime delay (Reason=BeginTime, not a hold): skip it here.
        cluster.run("scontrol", "update", f"JobId={job}", "StartTime=now")
        done = cluster.wait_job(job, {"COMPLETED", "FAILED"}, timeout=30)
        assert done["JobState"] == "COMPLETED", {k: done.get(k) for k in ("JobState", "Reason", "EligibleTime",
                                                                          "SubmitTime", "StartTime", "Priority")}
        assert cluster.output(job).strip() == "ran on h200-02"
    finally:
        set_tool_output(roots / "h200-01", "nvidia-smi", H200_XML, "-q -x")
        for name in ("h200-01", "h200-02"):
            cluster.run("scontrol", "update", f"NodeName={name}", "State=RESUME", check=False)
