"""Fair share bills GPUs: the rendered TRESBillingWeights, as a real slurmctld computes them.

Without TRESBillingWeights Slurm bills allocated CPUs (slurm.conf(5)): an 8-GPU job at
--cpus-per-gpu=1 was billed 8 and a default 1-GPU job 28. The billing TRES is computed by
slurmctld itself, so the localized cluster (accounting_storage/none) shows it in
``scontrol show job`` as ``TRES=...,billing=N``.

What this cluster cannot show: the GPU TRES themselves. slurmctld 22.05 refuses
AccountingStorageTRES=gres/gpu without slurmdbd ("fatal: slurmdbd is required to run with
TRES gres/gpu"), and no database runs here, so the localized slurm.conf drops it and the
GRES/gpu weights have nothing to weigh (the harness drops them with AccountingStorageTRES:
fleetspec.lab.slurm._without_gres_weights). What is shown: slurmctld reads the rendered
TRESBillingWeights and PriorityFlags=MAX_TRES, and the CPU and memory weights bill a GPU's
share of a node as one GPU, whatever CPUs it would have been billed before.
"""

from __future__ import annotations

import dataclasses
import re

import pytest

from fleetspec.render.slurm import render_slurm

from . import fleets
from .cluster import Cluster, running

pytestmark = [pytest.mark.slurm, pytest.mark.usefixtures("slurm_installed")]


def _billed_fleet(weights: tuple[tuple[str, float], ...] = ()):
    fleet = fleets.lab()
    assert fleet.slurm is not None
    return dataclasses.replace(fleet, slurm=dataclasses.replace(
        fleet.slurm, accounting_host="db-01", gpu_billing_weights=weights))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, slurm_installed):
    fleet = _billed_fleet((("h200", 1.5),))
    with running(tmp_path_factory.mktemp("slurm-billing"), render_slurm(fleet)) as c:
        yield c


def _billing(c: Cluster, *args: str) -> int:
    submitted = c.sbatch("-p", "nvidia-hopper", "-N", "1", *args, script="sleep 60\n")
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip().split(";")[0]
    try:
        info = c.wait_job(job_id, {"RUNNING"})
        assert info.get("JobState") == "RUNNING", info
        tres = info.get("TRES") or info.get("AllocTRES", "")
        m = re.search(r"billing=(\d+)", tres)
        assert m, info
        return int(m.group(1))
    finally:
        c.run("scancel", job_id, check=False)


def test_a_default_one_gpu_job_costs_one_not_28(cluster: Cluster):
    assert _billing(cluster, "--gres=gpu:h100:1") == 1  # DefCpuPerGPU=28, DefMemPerGPU: one GPU's share


def test_a_job_that_takes_a_nodes_cpus_pays_for_its_gpus(cluster: Cluster):
    # 112 of 224 CPUs with one GPU blocks four GPUs' worth of the node: MAX_TRES bills 4.
    assert _billing(cluster, "--gres=gpu:h100:1", "--cpus-per-gpu=112") == 4

    # An 8-GPU job with one CPU per GPU: 8 (its memory, DefMemPerGPU x 8, is 8 GPUs' share).
    assert _billing(cluster, "--gres=gpu:h100:8", "--cpus-per-gpu=1") == 8


def test_the_partition_carries_the_rendered_weights(cluster: Cluster):
    out = cluster.run("scontrol", "-o", "show", "partition", "nvidia-hopper").stdout
    assert "TRESBillingWeights=CPU=0.0357143,Mem=0.00411186G" in out, out
    conf = cluster.run("scontrol", "show", "config").stdout
    assert re.search(r"PriorityFlags\s*=\s*.*MAX_TRES", conf), conf
