"""MIG nodes under a real slurmctld and slurmds (#46): the rendered slurm.conf declares each
node's instances as GRES typed by profile, and a job asking ``--gres=gpu:1g.18gb:1`` runs.

One cluster for the module. The rendered gres.conf says ``AutoDetect=nvml`` for MIG nodes:
NVML finds the instances there. Debian's slurmd (22.05.8, the lab's) is built without NVML,
so the lab stands in for what NVML would report: one line per instance, typed by its
profile, with the GPU's device file and the instance's capability file (gres.conf(5),
MultipleFiles: "Graphics cards using Multi-Instance GPU (MIG) technology will present
multiple device files that should be managed as a single generic resource"), made as
stand-in device files. (A GPU GRES without files registers 0 GPUs: slurmd 22.05 said
"gres/gpu count reported lower than configured (0 < 32)".) The capability minors the
driver gives are not modelled; only a MIG-capable GPU has them (docs/mig.md).
"""

from __future__ import annotations

import re
import time
from pathlib import PurePosixPath

import pytest

from fleetspec.layout.slurm import slurm_nodes
from fleetspec.render.slurm import render_slurm

from . import fleets
from .cluster import Cluster, running

pytestmark = [pytest.mark.slurm, pytest.mark.usefixtures("slurm_installed")]

FLEET = fleets.mig()
GRES = PurePosixPath("gres.conf")


def _as_nvml_reports(files: dict[PurePosixPath, str]) -> dict[PurePosixPath, str]:
    """The rendered files with each MIG node's AutoDetect=nvml line replaced by the instances
    NVML would report there, as counts (the lab's slurmd has no NVML)."""
    by_host = {n.hostname: n for n in slurm_nodes(FLEET)}
    lines = []
    for line in files[GRES].splitlines():
        m = re.match(r"^NodeName=(\S+) AutoDetect=nvml$", line)
        if m is None:
            lines.append(line)
            continue
        node = next(n for h, n in by_host.items() if h in _expand(m.group(1)))
        cap = 12  # /proc/driver/nvidia-caps/mig-minors numbers them; sequential stand-ins here
        for gpu in range(node.gpu.count):
            for profile, count in node.mig:
                for _ in range(count):
                    lines.append(f"NodeName={m.group(1)} Name=gpu Type={profile} "
                                 f"MultipleFiles=/dev/nvidia{gpu},/dev/nvidia-caps/nvidia-cap{cap}")
                    cap += 1
    return {**files, GRES: "\n".join(lines) + "\n"}


def _expand(hostlist: str) -> list[str]:
    from fleetspec.node_side.hostlist import expand

    return expand(hostlist)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, slurm_installed):
    files = dict(render_slurm(FLEET))
    gres = next(p for p in files if p.name == "gres.conf")
    files[gres] = _as_nvml_reports({GRES: files[gres]})[GRES]
    with running(tmp_path_factory.mktemp("slurm-mig"), files) as c:
        yield c


def test_each_mig_node_offers_its_instances_by_profile(cluster: Cluster):
    out = cluster.run("sinfo", "-h", "-N", "-o", "%N|%T|%G").stdout
    seen = {name: (state, re.sub(r"\(S:[^)]*\)", "", gres)) for name, state, gres in
            (line.split("|") for line in out.splitlines())}
    assert seen == {
        "h200-mig-01": ("idle", "gpu:1g.18gb:16,gpu:2g.35gb:8,gpu:3g.71gb:8"),
        "h200-mig-02": ("idle", "gpu:1g.18gb:16,gpu:2g.35gb:8,gpu:3g.71gb:8"),
        "h100-mig-01": ("idle", "gpu:1g.10gb:56"),
    }


def test_a_job_asking_one_instance_runs_on_a_node_that_has_that_profile(cluster: Cluster):
    job = cluster.run("sbatch", "-p", "nvidia-hopper", "--parsable", "--output=/dev/null", "--gres=gpu:1g.18gb:1", "--wrap", "sleep 30").stdout.strip()
    end = time.monotonic() + 20
    while time.monotonic() < end:
        info = cluster.run("scontrol", "-o", "show", "job", job).stdout
        if "JobState=RUNNING" in info:
            break
        time.sleep(0.2)
    assert "JobState=RUNNING" in info, info
    assert re.search(r"NodeList=h200-mig-0[12]\b", info), info
    assert "gres/gpu:1g.18gb=1" in info or "gpu:1g.18gb:1" in info, info
    cluster.run("scancel", job)


def test_a_profile_no_node_has_is_refused(cluster: Cluster):
    """The H100's 1g.10gb is not on the H200 nodes and vice versa; 3g.40gb is on none."""
    refused = cluster.run("sbatch", "-p", "nvidia-hopper", "--gres=gpu:3g.40gb:1", "--wrap", "true", check=False)
    assert refused.returncode != 0 and "Requested node configuration is not available" in refused.stderr
    fits = cluster.run("sbatch", "-p", "nvidia-hopper", "--test-only", "--gres=gpu:1g.10gb:8", "--wrap", "true", check=False)
    assert "h100-mig-01" in fits.stderr, fits.stderr
