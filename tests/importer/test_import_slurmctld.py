"""A real slurmctld (Debian's 22.05.8, tests/slurm's harness) reads the slurm.conf and
gres.conf rendered from each imported cluster: the nodes, their GRES, CPU layout and
memory, and the partitions with their members are what the site's files say. The NVL72
blocks cluster, whose topology.yaml no 22.05 reads, is imported at the release it declares
(25.11) and started on real 26.05 (#47, `release_for`)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fleetspec.importer.build import import_slurm
from fleetspec.importer.conf import Problem
from fleetspec.importer.slurm_files import read_slurm_conf
from fleetspec.lab.slurm_releases import release_for, slurm_cluster
from fleetspec.node_side.hostlist import expand
from fleetspec.pipeline import compile_text
from fleetspec.render.slurm import render_slurm
from tests.importer.test_import import CASES, DATA, _facts, _import
from tests.slurm.cluster import running
from tests.slurm.conftest import slurm_release  # noqa: F401  (the release fixture, for the NVL72 case)

pytestmark = [pytest.mark.slurm, pytest.mark.usefixtures("slurm_installed")]


def _fields(text: str) -> dict[str, str]:
    return dict(m.groups() for m in re.finditer(r"(\w+)=(\S*)", text))


@pytest.mark.parametrize("case", sorted(CASES))
def test_slurmctld_reads_the_rendered_import(case: str, tmp_path: Path) -> None:
    result = compile_text(_import(case, version="22.05.8").spec_text, "imported.yaml")
    assert result.valid, [f.message for f in result.located()]
    problems: list[Problem] = []
    source = read_slurm_conf(DATA / case / "slurm.conf", problems)
    with running(tmp_path, render_slurm(result.fleet), wait_idle=False) as c:
        for host, rec in source.nodes.items():
            node = _fields(c.run("scontrol", "show", "node", host).stdout)
            a = {k: p.value for k, p in rec.attrs.items()}
            if "RealMemory" in a:
                assert node["RealMemory"] == a["RealMemory"], host
            if "CPUs" in a:
                assert node["CPUTot"] == a["CPUs"], host
            if "CoresPerSocket" in a:
                assert node["CoresPerSocket"] == a["CoresPerSocket"], host
            if "Gres" not in a:  # CPU-only
                assert node["Gres"] == "(null)", (host, node["Gres"])
                continue
            items = a["Gres"].split(",")
            gpus = sorted(i for i in items if i.startswith("gpu:"))
            got = [g.split("(")[0] for g in node["Gres"].split(",")]
            got_gpus = sorted(g for g in got if g.startswith("gpu:"))
            if len(gpus) > 1 or gpus[0].count(":") == 2:  # each type as the site wrote it (#39 item 2)
                assert got_gpus == gpus, (host, node["Gres"])
            else:  # untyped as the site wrote it; typed where its gres.conf gives Type=
                count = gpus[0].split(":")[-1]
                assert len(got_gpus) == 1 and re.fullmatch(rf"gpu:([a-z0-9_.-]+:)?{count}", got_gpus[0]), \
                    (host, node["Gres"])
            assert sorted(g for g in got if not g.startswith("gpu:")) == \
                sorted(i for i in items if not i.startswith("gpu:"))
        for name, part in source.partitions.items():
            got = _fields(c.run("scontrol", "show", "partition", name).stdout)
            assert sorted(expand(got["Nodes"])) == sorted(part.nodes or []), name
            default = part.attrs.get("Default")
            assert (got["Default"] == "YES") == (default is not None and default.value.upper() == "YES"), name


def test_the_nvl72_blocks_import_starts_on_the_release_it_declares(tmp_path_factory, slurm_release) -> None:
    """tests/importer/data/nvl-blocks (topology.yaml: a leaf tree and one block per NVLink
    domain, 25.05+) imported at 25.11.8 and rendered: on real 26.05 every node is IDLE in the
    site's partition, in the block its topology.yaml names (the render writes the block form:
    every node is in a block)."""
    d = DATA / "nvl-blocks"
    facts = _facts(**{"nvl_a(01-18)": ("NVIDIA GB200", 4), "nvl_b(01-18)": ("NVIDIA GB200", 4)})
    spec = import_slurm(d / "slurm.conf", None, d / "topology.yaml", facts, "25.11.8", "infiniband").spec_text
    # The site gave no gres.conf: as import's warning advises, delete gres_conf so that
    # fleetspec writes the device files (kept empty, no slurmd reports the GPUs: INVAL).
    assert spec.count("      gres_conf: []\n") == 1
    fleet = compile_text(spec.replace("      gres_conf: []\n", ""), "imported.yaml").fleet
    assert fleet is not None and fleet.slurm is not None
    release = release_for(fleet.slurm.version).series
    assert release == "26.05"
    slurm_release(release)
    with slurm_cluster(tmp_path_factory.mktemp("nvl-blocks"), render_slurm(fleet), release=release) as c:
        assert c.run("scontrol", "--version").stdout.split()[-1].startswith("26.05.")
        hosts = expand("nvl-a[01-18],nvl-b[01-18]")
        assert c.node_states() == dict.fromkeys(hosts, "idle")
        assert sorted(expand(_fields(c.run("scontrol", "show", "partition", "batch").stdout)["Nodes"])) == hosts
        shown = [_fields(line) for line in c.run("scontrol", "-o", "show", "topology").stdout.splitlines()]
        assert {b["BlockName"]: expand(b["Nodes"]) for b in shown if "BlockName" in b} == {
            "nvl-rack-a": expand("nvl-a[01-18]"), "nvl-rack-b": expand("nvl-b[01-18]")}
        config = c.run("scontrol", "show", "config").stdout
        assert re.search(r"^TopologyPlugin\s+= topology/block$", config, re.MULTILINE), config
