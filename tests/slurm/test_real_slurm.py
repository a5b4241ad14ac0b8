"""The rendered Slurm configuration, run by a real slurmctld and real slurmds.

One cluster per module (the `lab` fleet: six nodes, two vendors, three leaves) is
checked with sinfo/scontrol/sbatch the way an admin would check a new cluster.
"""

from __future__ import annotations

import re
import time
from pathlib import PurePosixPath

import pytest

from fleetspec.layout.slurm import leaf_groups, slurm_nodes, slurm_partitions
from fleetspec.node_side.hostlist import expand
from fleetspec.render.slurm import node_features, per_gpu_defaults, render_slurm

from . import fleets
from .cluster import Cluster, running

pytestmark = [pytest.mark.slurm, pytest.mark.usefixtures("slurm_installed")]

FLEET = fleets.lab()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, slurm_installed):
    with running(tmp_path_factory.mktemp("slurm-lab"), render_slurm(FLEET)) as c:
        yield c


@pytest.fixture
def lab(cluster: Cluster):
    """The module's cluster, with every job cancelled and every node idle afterwards."""
    yield cluster
    cluster.run("scancel", "--full", "-u", "root", check=False)
    end = time.monotonic() + 15
    while time.monotonic() < end:
        if not cluster.run("squeue", "-h", "-o", "%i").stdout.strip() and set(
            cluster.node_states().values()
        ) == {"idle"}:
            return
        time.sleep(0.1)
    raise AssertionError(f"cluster did not settle: {cluster.node_states()}")


def _nodes(job: dict[str, str]) -> list[str]:
    return expand(job["NodeList"]) if job.get("NodeList") not in (None, "", "(null)") else []


GPU_ECHO = "srun bash -c 'echo $SLURMD_NODENAME CVD=$CUDA_VISIBLE_DEVICES'\n"


def test_every_partition_has_exactly_its_nodes(lab: Cluster):
    out = lab.run("sinfo", "-h", "-o", "%R %N").stdout
    seen = {name: set(expand(nodes)) for name, nodes in (line.split() for line in out.splitlines())}
    expected = {p.name: set(p.nodes) for p in slurm_partitions(FLEET)}
    assert seen == expected
    default = lab.run("scontrol", "-o", "show", "partition", "nvidia-hopper").stdout
    assert "Default=YES" in default and "MaxTime=2-00:00:00" in default


def test_every_node_is_idle_with_its_gres_and_features(lab: Cluster):
    out = lab.run("sinfo", "-h", "-N", "-o", "%N|%T|%G|%f").stdout
    seen = {}
    for line in out.splitlines():
        name, state, gres, features = line.split("|")
        seen[name] = (state, re.sub(r"\(S:[^)]*\)", "", gres), features)
    expected = {
        n.hostname: ("idle", f"gpu:{n.gpu.gres_type}:{n.gpu.count}", ",".join(node_features(n)))
        for n in slurm_nodes(FLEET)
    }
    assert seen == expected


def test_slurmctld_sees_each_gpu_bound_to_its_socket(lab: Cluster):
    """gres.conf Cores= from the socket layout: slurmctld reports the GPUs of each node as
    spread over both sockets (``(S:0-1)``), the binding --gres-flags=enforce-binding uses."""
    out = lab.run("sinfo", "-h", "-N", "-o", "%N|%G").stdout.split()
    gres = dict(line.split("|", 1) for line in out)
    for node in slurm_nodes(FLEET):
        assert gres[node.hostname] == f"gpu:{node.gpu.gres_type}:{node.gpu.count}(S:0-1)", gres


def test_n_nodes_by_8_gpus_run_on_n_distinct_nodes(lab: Cluster):
    hopper = FLEET.partition("nvidia-hopper")
    assert hopper is not None
    n = len(hopper.nodes)
    sub = lab.sbatch("-p", "nvidia-hopper", "-N", str(n), "--gres=gpu:8", script=GPU_ECHO)
    assert sub.returncode == 0, sub.stderr
    job = lab.wait_job(sub.stdout.strip(), {"COMPLETED", "FAILED", "CANCELLED"})
    assert job["JobState"] == "COMPLETED", job
    lines = sorted(lab.output(sub.stdout.strip()).split("\n")[:-1])
    hosts = [line.split()[0] for line in lines]
    assert sorted(hosts) == sorted(hopper.nodes)  # N distinct nodes, all of the partition
    assert all(line.endswith("CVD=0,1,2,3,4,5,6,7") for line in lines), lines


def test_one_gpu_jobs_without_mem_share_a_node(lab: Cluster):
    """DefMemPerGPU/DefCpuPerGPU: a 1-GPU job without --mem or --cpus takes its GPU's share
    of the node, not all of it, so a second one starts beside it; DefaultTime applies."""
    node = next(n for n in slurm_nodes(FLEET) if n.hostname == "h100-01")
    defaults = dict(per_gpu_defaults([node]))
    jobs = [lab.sbatch("-p", "nvidia-hopper", "-w", "h100-01", "--gres=gpu:1", script="sleep 30\n") for _ in range(2)]
    assert all(j.returncode == 0 for j in jobs), [j.stderr for j in jobs]
    infos = [lab.wait_job(j.stdout.strip(), {"RUNNING", "FAILED", "CANCELLED"}) for j in jobs]
    assert [i["JobState"] for i in infos] == ["RUNNING", "RUNNING"], infos
    for info in infos:
        assert f"mem={defaults['DefMemPerGPU']}M" in info["TRES"], info["TRES"]
        assert f"cpu={defaults['DefCpuPerGPU']}," in info["TRES"], info["TRES"]
        assert info["TimeLimit"] == "01:00:00", info


def test_more_nodes_than_the_partition_has_is_refused(lab: Cluster):
    hopper = FLEET.partition("nvidia-hopper")
    assert hopper is not None
    sub = lab.sbatch("-p", "nvidia-hopper", "-N", str(len(hopper.nodes) + 1), "--gres=gpu:8", script="true\n")
    assert sub.returncode != 0
    assert "node count" in sub.stderr.lower() or "not available" in sub.stderr.lower(), sub.stderr
    assert lab.run("squeue", "-h", "-o", "%i").stdout.strip() == ""


def test_gang_job_starts_all_or_nothing(lab: Cluster):
    """A job needing every node of the partition waits while one is busy, holding
    none, then starts on all of them at once."""
    blocker = lab.sbatch("-p", "nvidia-hopper", "-w", "h100-01", "--gres=gpu:8", script="sleep 60\n")
    blocker_id = blocker.stdout.strip()
    assert lab.wait_job(blocker_id, {"RUNNING"})["JobState"] == "RUNNING"
    gang = lab.sbatch("-p", "nvidia-hopper", "-N", "4", "--gres=gpu:8", script=GPU_ECHO)
    gang_id = gang.stdout.strip()
    time.sleep(2)
    pending = lab.job(gang_id)
    assert pending["JobState"] == "PENDING" and not _nodes(pending), pending
    assert lab.node_states()["h200-01"] == "idle"  # nothing held for the waiting gang
    lab.run("scancel", blocker_id)
    done = lab.wait_job(gang_id, {"COMPLETED", "FAILED"})
    assert done["JobState"] == "COMPLETED" and len(_nodes(done)) == 4


def test_gpu_type_of_another_vendor_is_refused(lab: Cluster):
    refused = lab.sbatch("-p", "nvidia-hopper", "--gres=gpu:mi300x:1", script="true\n")
    assert refused.returncode != 0
    assert "Requested node configuration is not available" in refused.stderr
    owned = lab.sbatch("-p", "amd-cdna3", "--gres=gpu:mi300x:8", script="true\n")
    assert owned.returncode == 0, owned.stderr  # the same request where the type lives


def _topology(lab: Cluster) -> dict[str, dict[str, str]]:
    out = lab.run("scontrol", "show", "topology").stdout
    switches = {}
    for line in out.splitlines():
        fields = dict(f.split("=", 1) for f in line.split())
        switches[fields["SwitchName"]] = fields
    return switches


def test_topology_matches_the_fabric(lab: Cluster):
    switches = _topology(lab)
    leaves = dict(leaf_groups(FLEET))
    for leaf, hosts in leaves.items():
        assert switches[leaf]["Level"] == "0"
        assert set(expand(switches[leaf]["Nodes"])) == set(hosts)
    assert FLEET.fabric is not None
    (spine,) = FLEET.fabric.spines
    assert switches[spine]["Level"] == "1"
    assert set(expand(switches[spine]["Switches"])) == set(leaves)
    assert set(switches) == {*leaves, spine}


def test_a_job_that_fits_one_leaf_lands_there(lab: Cluster):
    """With h100-01 busy, the first two free hopper nodes in order are h100-02 and
    h200-01 (two leaves); topology/tree must pick both H200s under leaf-02 instead."""
    blocker = lab.sbatch("-p", "nvidia-hopper", "-w", "h100-01", "--gres=gpu:8", script="sleep 60\n")
    assert lab.wait_job(blocker.stdout.strip(), {"RUNNING"})["JobState"] == "RUNNING"
    sub = lab.sbatch("-p", "nvidia-hopper", "-N", "2", "--gres=gpu:8", script="sleep 1\n")
    job = lab.wait_job(sub.stdout.strip(), {"RUNNING", "COMPLETED"})
    leaf_of = {h: leaf for leaf, hosts in leaf_groups(FLEET) for h in hosts}
    nodes = _nodes(job)
    assert len(nodes) == 2 and len({leaf_of[h] for h in nodes}) == 1, nodes


def test_wrong_gres_conf_makes_the_node_invalid(tmp_path, slurm_installed):
    """The harness can fail: a gres.conf with 4 device files for 8 declared GPUs."""
    files = render_slurm(fleets.single_h100())
    gres = PurePosixPath("slurm/gres.conf")
    lines = files[gres].splitlines(keepends=True)
    second_socket = [line for line in lines if "File=/dev/nvidia[4-7]" in line]
    assert len(second_socket) == 1  # GPUs 4-7 on socket 1 (Cores=)
    files[gres] = "".join(line for line in lines if line not in second_socket)
    with running(tmp_path, files, wait_idle=False) as c:
        end = time.monotonic() + 20
        while time.monotonic() < end and "inval" not in c.node_states().get("h100-01", ""):
            time.sleep(0.1)
        assert "inval" in c.node_states()["h100-01"], c.node_states()
        reason = c.run("sinfo", "-h", "-N", "-o", "%E").stdout
        assert "4 < 8" in reason, reason

