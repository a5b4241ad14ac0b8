"""`fleetspec import slurm` of a cluster whose nodes run MIG (#46 item 6): MIG-typed GRES
(Gres=gpu:<profile>:N, gres.conf AutoDetect=nvml) import as each node group's gpu.mig, the
GPUs they are cut from taken from the nodes' facts."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from fleetspec.importer.build import import_slurm
from fleetspec.importer.conf import ImportRefused
from tests.importer.facts import nvidia_facts

H200, H100 = "NVIDIA H200", "NVIDIA H100 80GB HBM3"


# A site's files for MIG nodes, as Slurm's GRES guide writes them (slurm.schedmd.com/gres.html,
# MIG Management: AutoDetect=nvml in gres.conf, the instances' types and counts in slurm.conf).
SLURM_CONF = """\
ClusterName=inference
SlurmctldHost=ctl-01
GresTypes=gpu
NodeName=h200-mig-[01-02] CPUs=224 RealMemory=1992294 Gres=gpu:1g.18gb:16,gpu:2g.35gb:8,gpu:3g.71gb:8
NodeName=h100-mig-01 CPUs=224 RealMemory=1992294 Gres=gpu:1g.10gb:56
PartitionName=inference Nodes=h200-mig-[01-02],h100-mig-01 Default=YES MaxTime=INFINITE State=UP
"""
GRES_CONF = "AutoDetect=nvml\n"


def _files(tmp_path: Path) -> tuple[Path, Path]:
    (tmp_path / "slurm.conf").write_text(SLURM_CONF)
    (tmp_path / "gres.conf").write_text(GRES_CONF)
    return tmp_path / "slurm.conf", tmp_path / "gres.conf"


def _facts(h200: str = H200, count: int = 8) -> dict:
    return {**{h: nvidia_facts(h, h200, count) for h in ("h200-mig-01", "h200-mig-02")},
            "h100-mig-01": nvidia_facts("h100-mig-01", H100, 8)}


def test_mig_nodes_import_their_geometry(tmp_path: Path):
    conf, gres = _files(tmp_path)
    result = import_slurm(conf, gres, None, _facts(), "25.11.8", None)
    nodes = {n.hostname: n for n in result.fleet.nodes}
    assert nodes["h200-mig-01"].gpu.model == "h200" and nodes["h200-mig-01"].gpu.count == 8
    assert nodes["h200-mig-01"].mig == (("1g.18gb", 2), ("2g.35gb", 1), ("3g.71gb", 1))
    assert nodes["h100-mig-01"].mig == (("1g.10gb", 7),)
    spec = yaml.safe_load(result.spec_text)
    groups = [g for r in spec["spec"]["racks"] for g in r["nodes"]]
    assert sorted(str(g["gpu"].get("mig")) for g in groups) == [
        "{'1g.10gb': 7}", "{'1g.18gb': 2, '2g.35gb': 1, '3g.71gb': 1}"]


@pytest.mark.parametrize(("facts", "says"), [
    ({}, "comes from the node's facts"),
    (dict(count=3), "does not split evenly over the node's 3 GPUs"),
    (dict(h200="NVIDIA H100 80GB HBM3"), "has no MIG profile 1g.18gb"),
])
def test_what_the_files_and_facts_cannot_say_stops_at_the_node_line(tmp_path: Path, facts, says):
    conf, gres = _files(tmp_path)
    with pytest.raises(ImportRefused) as refused:
        import_slurm(conf, gres, None, _facts(**facts) if facts else {}, "25.11.8", None)
    assert any(says in p.message for p in refused.value.problems), [p.message for p in refused.value.problems]


def test_an_a100_40gb_node_imports_its_own_profiles(tmp_path: Path):
    """The 40GB A100 is its own catalog model (#46): its 1g.5gb instances import where the
    nodes' facts name the board ("NVIDIA A100-SXM4-40GB"), and the 80GB board's name does not
    take them."""
    (tmp_path / "slurm.conf").write_text(
        "ClusterName=inference\nSlurmctldHost=ctl-01\nGresTypes=gpu\n"
        "NodeName=a100-mig-01 CPUs=128 RealMemory=1031894 Gres=gpu:1g.5gb:16,gpu:2g.10gb:8,gpu:3g.20gb:8\n"
        "PartitionName=inference Nodes=a100-mig-01 Default=YES MaxTime=INFINITE State=UP\n")
    (tmp_path / "gres.conf").write_text(GRES_CONF)
    conf, gres = tmp_path / "slurm.conf", tmp_path / "gres.conf"
    facts = {"a100-mig-01": nvidia_facts("a100-mig-01", "NVIDIA A100-SXM4-40GB", 8)}
    node = import_slurm(conf, gres, None, facts, "25.11.8", None).fleet.nodes[0]
    assert (node.gpu.model, node.gpu.count) == ("a100-40gb", 8)
    assert node.mig == (("1g.5gb", 2), ("2g.10gb", 1), ("3g.20gb", 1))
    with pytest.raises(ImportRefused) as refused:
        import_slurm(conf, gres, None, {"a100-mig-01": nvidia_facts("a100-mig-01", "NVIDIA A100-SXM4-80GB", 8)},
                     "25.11.8", None)
    assert any("has no MIG profile 1g.5gb" in p.message for p in refused.value.problems)


def test_an_old_driver_refuses_4g_with_3g_at_import(tmp_path: Path):
    """An A100 40GB with 4g.20gb + 3g.20gb (which places) under a driver before R510 (which
    refused that combination: the MIG guide's Concepts) stops at the node line, as the
    imported spec's compile would refuse it; the same node on R535 imports."""
    from tests.importer.facts import with_tuple

    (tmp_path / "slurm.conf").write_text(
        "ClusterName=inference\nSlurmctldHost=ctl-01\nGresTypes=gpu\n"
        "NodeName=a100-mig-01 CPUs=128 RealMemory=1031894 Gres=gpu:4g.20gb:8,gpu:3g.20gb:8\n"
        "PartitionName=inference Nodes=a100-mig-01 Default=YES MaxTime=INFINITE State=UP\n")
    (tmp_path / "gres.conf").write_text(GRES_CONF)
    conf, gres = tmp_path / "slurm.conf", tmp_path / "gres.conf"
    board = nvidia_facts("a100-mig-01", "NVIDIA A100-SXM4-40GB", 8)

    def facts(driver: str) -> dict:
        return {"a100-mig-01": with_tuple(board, {"driver": driver, "cuda": "11.4.4", "nccl": "2.11.4"})}

    with pytest.raises(ImportRefused) as refused:
        import_slurm(conf, gres, None, facts("470.256.02"), "25.11.8", None)
    (problem,) = [p for p in refused.value.problems if "R510" in p.message]
    assert "drivers before R510 refuse that combination (this group's driver is 470.256.02)" in problem.message
    assert problem.where.line == 4, problem.where  # the NodeName line's Gres=
    node = import_slurm(conf, gres, None, facts("535.261.03"), "25.11.8", None).fleet.nodes[0]
    assert node.mig == (("3g.20gb", 1), ("4g.20gb", 1))
