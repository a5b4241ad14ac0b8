"""A real slurmctld (Debian's 22.05.8, tests/slurm's harness) reads the slurm.conf and
gres.conf rendered from each imported cluster: the nodes, their GRES, CPU layout and
memory, and the partitions with their members are what the site's files say."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fleetspec.importer.conf import Problem
from fleetspec.importer.slurm_files import read_slurm_conf
from fleetspec.node_side.hostlist import expand
from fleetspec.pipeline import compile_text
from fleetspec.render.slurm import render_slurm
from tests.importer.test_import import CASES, DATA, _import
from tests.slurm.cluster import running

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
