"""Fleetspec's renders started on the real Slurm release they are written for (#47).

Only the renders whose syntax differs by release run here, each on the release its spec
declares or the nearest one that can read it (`release_for`): the museum fleet (a tree of
leaf switches, four generations, 22.05 / 24.11 / 25.11 syntax) and the NVL72 fleets
(``TopologyPlugin=topology/block`` with ``BlockName=``/``BlockSizes=``, topology.yaml with a
tree and blocks at once, ``SwitchType=switch/nvidia_imex``). One cluster per case, shared by
the module's checks on it (pytest orders the tests so that one is up at a time).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import pytest
import yaml

from fleetspec.compile.ir import Fleet
from fleetspec.lab.slurm import Cluster, SlurmError
from fleetspec.lab.slurm_releases import release_for, slurm_cluster
from fleetspec.layout.slurm import (
    NVLINK_TOPOLOGY,
    leaf_groups,
    nvlink_blocks,
    slinky_nodesets,
    slurm_nodes,
    slurm_partitions,
)
from fleetspec.node_side.hostlist import compress, expand
from fleetspec.render.slurm import render_slurm

from ..kubernetes import fleets as k8s_fleets
from . import fleets, slinky

pytestmark = [pytest.mark.slurm]


@dataclass(frozen=True)
class Case:
    name: str
    fleet: Callable[[], Fleet]
    version: str | None  # the Slurm syntax rendered (None: as the spec declares)

    def compiled(self) -> Fleet:
        fleet = self.fleet()
        return fleet if self.version is None else fleets.with_version(fleet, self.version)


NVL72_CASES = [
    # Every rack an NVL72 rack: topology/block (23.11+) with BlockSizes (24.05+), IMEX switch.
    Case("nvl72-blocks", lambda: fleets.nvl72(with_tree_nodes=False), None),
    Case("nvl72-blocks", lambda: fleets.nvl72(with_tree_nodes=False), "24.11.5"),
    # NVL72 racks beside a leaf tree: only topology.yaml (25.05+) holds both.
    Case("nvl72-tree-and-blocks", fleets.nvl72, None),
]
# Below 25.05 the same fleet renders as a tree (and validate reports what is missing).
NVL72_TREE_2411 = Case("nvl72-tree-and-blocks", fleets.nvl72, "24.11.5")
# First in CASES, so that the NVLink tests' `started` (parametrised with NVL72_CASES) has the
# same parameter indices and pytest reuses the clusters started for the others.
CASES = [
    *NVL72_CASES,
    NVL72_TREE_2411,
    # The museum declares 25.11.8: started on 26.05 (no 25.11 here); and at 24.11 and 22.05.
    Case("museum", fleets.museum, None),
    Case("museum", fleets.museum, "24.11.5"),
    Case("museum", fleets.museum, "22.05.8"),
]


def _id(case: Case) -> str:
    return f"{case.name}@{case.version or 'declared'}"


@dataclass
class Started:
    fleet: Fleet
    files: dict[PurePosixPath, str]
    release: str
    cluster: Cluster

    @property
    def blocks(self) -> dict[str, set[str]]:
        return {name: set(hosts) for name, hosts in nvlink_blocks(self.fleet)}

    def config(self) -> dict[str, str]:
        out = self.cluster.run("scontrol", "show", "config").stdout
        return {k.strip(): v.strip() for k, sep, v in (line.partition("=") for line in out.splitlines()) if sep}


@pytest.fixture(scope="module", params=CASES, ids=_id)
def started(request: pytest.FixtureRequest, tmp_path_factory, slurm_release) -> Iterator[Started]:
    """The case's fleet rendered at its version and started on `release_for` that version."""
    fleet = request.param.compiled()
    assert fleet.slurm is not None
    release = release_for(fleet.slurm.version).series
    slurm_release(release)
    files = render_slurm(fleet)
    with slurm_cluster(tmp_path_factory.mktemp(f"slurm-{release}"), files, release=release) as cluster:
        yield Started(fleet, files, release, cluster)


def _show(cluster: Cluster, *what: str) -> list[dict[str, str]]:
    out = cluster.run("scontrol", "-o", "show", *what).stdout
    return [dict(f.split("=", 1) for f in line.split() if "=" in f) for line in out.splitlines() if "=" in line]


def test_the_release_runs(started: Started):
    """The daemons are the release the render was meant for (a chroot's, not the host's 22.05)."""
    version = started.cluster.run("scontrol", "--version").stdout.split()[-1]
    assert version.startswith(started.release + "."), version
    assert started.config()["SLURM_VERSION"] == version


def test_every_node_is_idle_in_its_partitions(started: Started):
    fleet, cluster = started.fleet, started.cluster
    assert cluster.node_states() == {n.hostname: "idle" for n in slurm_nodes(fleet)}
    out = cluster.run("sinfo", "-h", "-o", "%R %N").stdout
    seen = {name: set(expand(nodes)) for name, nodes in (line.split() for line in out.splitlines())}
    assert seen == {p.name: set(p.nodes) for p in slurm_partitions(fleet)}


def test_topology_is_the_fabric_and_the_nvlink_racks(started: Started):
    """The leaf switches and the NVLink racks as slurmctld read them, in the form rendered for
    the release: topology/tree (the museum; NVL72 racks beside a tree below 25.05),
    topology/block (every rack an NVL72 rack), topology.yaml (both, 25.05+)."""
    cluster = started.cluster
    conf = started.files[PurePosixPath("slurm/slurm.conf")]
    leaves = {leaf: set(hosts) for leaf, hosts in leaf_groups(started.fleet)}
    if PurePosixPath("slurm/topology.yaml") in started.files:
        tree, shown, blocks = _show(cluster, "topology"), _show(cluster, "topology", NVLINK_TOPOLOGY), started.blocks
    elif "TopologyPlugin=topology/block" in conf:
        assert started.config()["TopologyPlugin"] == "topology/block"
        tree, shown, blocks, leaves = [], _show(cluster, "topology"), started.blocks, {}
    else:
        assert started.config()["TopologyPlugin"] == "topology/tree"
        tree, shown, blocks = _show(cluster, "topology"), [], {}
    assert {b["BlockName"]: set(expand(b["Nodes"])) for b in shown} == blocks
    assert {s["SwitchName"]: set(expand(s["Nodes"])) for s in tree if s.get("Level") == "0"} == leaves


def test_imex_switch_exactly_where_nvl72_racks_are(started: Started):
    assert (started.config()["SwitchType"] == "switch/nvidia_imex") == bool(started.blocks)


@pytest.mark.parametrize("started", NVL72_CASES, ids=_id, indirect=True)
def test_a_job_that_fits_an_nvlink_rack_is_not_split(started: Started):
    """With 17 nodes of rack r07 drained, the first two free nodes in order straddle r07 and
    r08; the block topology must place a two-node job on two nodes of r08 (asked of the
    scheduler with ``sbatch --test-only``: its placement, without launching anything)."""
    cluster, blocks = started.cluster, nvlink_blocks(started.fleet)
    (_, hosts), (other, _) = blocks[0], blocks[1]
    partition = next(p for p in slurm_partitions(started.fleet) if set(hosts) <= set(p.nodes)).name
    if "slurm/topology.yaml" in map(str, started.files):  # the partition picks the block topology
        assert _show(cluster, "partition", partition)[0]["Topology"] == NVLINK_TOPOLOGY
    drained = compress(hosts[:-1])
    cluster.run("scontrol", "update", f"nodename={drained}", "state=drain", "reason=test")
    try:
        plan = cluster.run("sbatch", "--test-only", "-p", partition, "-N", "2", "--gres=gpu:4", "--wrap", "true")
    finally:
        cluster.run("scontrol", "update", f"nodename={drained}", "state=resume")
    nodes = re.search(r" on nodes (\S+) in partition", plan.stderr)
    assert nodes is not None, plan.stderr
    rack_of = {h: block for block, members in blocks for h in members}
    assert {rack_of[h] for h in expand(nodes[1])} == {other}, plan.stderr


def test_a_newer_render_does_not_start_on_an_older_release(tmp_path: Path, slurm_release, slurm_installed):
    """The harness tells releases apart: 25.11's block topology on the host's 22.05 slurmctld
    (which has no topology/block plugin) stops it."""
    slurm_release("22.05")
    files = render_slurm(fleets.nvl72(with_tree_nodes=False))
    with pytest.raises(SlurmError, match="slurmctld"), slurm_cluster(tmp_path, files, release="22.05"):
        pass


def _fake_autodetect(values: dict) -> str:
    """gres.conf for the NodeSets as ``AutoDetect=nvidia`` finds them on a GPU node: each pod's
    GPUs as /dev/nvidia0..N-1 of its NodeSet's type. Here no driver answers (slurmd: "System
    GPU detection failed ... Ignoring file-less GPU"), so the devices are made with mknod and
    named per node, like the native harness's localized gres.conf."""
    lines = []
    for name, nodeset in slinky.nodesets(values).items():
        (gres,) = nodeset["extraConfMap"]["Gres"]
        _, kind, count = gres.split(":")
        lines.append(f"NodeName={name}-[0-{nodeset['replicas'] - 1}] Name=gpu Type={kind} "
                     f"File=/dev/nvidia[0-{int(count) - 1}]")
    return "\n".join(lines) + "\n"


def test_slinky_values_run_on_the_release_they_name(tmp_path: Path, slurm_release):
    """Slinky (museum's Slurm pool under slurm-operator, Slurm 25.11): the slurm.conf the
    operator builds from fleetspec's values (tests/slurm/slinky.py) runs on real 26.05, and
    dynamic slurmds started as NodeSet pods start them (``slurmd -Z --conf``) join their
    NodeSets' partitions IDLE, with the NodeSet's GRES type and fleetspec's features."""
    fleet = k8s_fleets.slinky(fleets.museum())
    assert fleet.slurm is not None
    release = release_for(fleet.slurm.version).series
    slurm_release(release)
    values = yaml.safe_load(render_slurm(fleet)[PurePosixPath("slurm/slinky-values.yaml")])
    files = {PurePosixPath("slurm") / name: text for name, text in values["configFiles"].items()}
    assert files[PurePosixPath("slurm/gres.conf")] == "AutoDetect=nvidia\n"
    files[PurePosixPath("slurm/gres.conf")] = _fake_autodetect(values)
    files[PurePosixPath("slurm/slurm.conf")] = slinky.slurm_conf(values)
    with slurm_cluster(tmp_path, files, release=release, wait_idle=False) as cluster:
        pods = {f"{name}-{i}": (name, nodeset) for name, nodeset in slinky.nodesets(values).items()
                for i in range(nodeset["replicas"])}
        for pod, (name, nodeset) in pods.items():
            cluster.start_node(pod, dynamic_conf=slinky.slurmd_conf(name, nodeset))
        cluster.wait_idle()
        out = cluster.run("sinfo", "-h", "-N", "-o", "%N|%R|%G|%f").stdout
        seen: dict[str, set[str]] = {}
        for line in out.splitlines():
            pod, partition, gres, features = line.split("|")
            name, nodeset = pods[pod]
            assert gres == nodeset['extraConfMap']['Gres'][0], line
            assert features.split(",") == [name, *nodeset["extraConfMap"]["Features"]], line
            seen.setdefault(partition, set()).add(name)
        partitions = {p: set(part["nodesets"]) for p, part in values["partitions"].items() if part["enabled"]}
        assert seen == partitions == {p: {m[0] for m in members} for p, members in slinky_nodesets(fleet).items()}
        hopper = _show(cluster, "partition", "nvidia-hopper")[0]
        assert hopper["Default"] == "YES" and hopper["MaxTime"] == "2-00:00:00" and hopper["DefaultTime"] == "01:00:00"
