"""`import slurm` of fleetspec's own render: every example's slurm/ files import (with
facts these tests write from the example's nodes and tuples: illustrative, the real H200
node's collector output with the example's GPU names), the spec validates, and it renders
the same slurm.conf, gres.conf and topology.conf (key by key: slurmctld reads keys in any
case, and the adopted render marks site settings with a comment)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetspec.catalog import load_catalog
from fleetspec.compile.ir import Fleet
from fleetspec.importer.build import import_slurm
from fleetspec.importer.conf import ImportRefused, Problem
from fleetspec.importer.slurm_files import SlurmConf, read_slurm_conf
from fleetspec.pipeline import compile_file, compile_text
from fleetspec.render.slurm import render_slurm
from tests.importer.facts import amd_facts, nvidia_facts, with_tuple

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
WITH_SLURM = ("inference", "museum", "quickstart", "rocky9")


def _facts(fleet: Fleet) -> dict[str, dict]:
    """Each Slurm node's facts: its GPUs by the name nvidia-smi / amd-smi prints (the
    catalog's first smi name) and its stack's tuple."""
    catalog = load_catalog()
    out = {}
    for node in fleet.nodes:
        if node.scheduler != "slurm":
            continue
        model = catalog.gpu(node.gpu.model)
        assert model is not None
        if model.vendor == "amd":
            out[node.hostname] = amd_facts(node.hostname, model.smi_names[0], node.gpu.count)
            continue
        stack = fleet.stack(node.stack)
        assert stack is not None
        out[node.hostname] = with_tuple(nvidia_facts(node.hostname, model.smi_names[0], node.gpu.count),
                                        dict(stack.versions()))
    return out


def _write(files: dict, directory: Path) -> Path:
    directory.mkdir()
    for path, text in files.items():
        if path.parts[0] == "slurm":
            (directory / path.name).write_text(text)
    return directory


def _keys(conf: SlurmConf) -> dict:
    """What slurmctld reads: settings, nodes and partitions, keys case-folded, hostlists expanded."""
    def attrs(pairs: dict) -> dict[str, str]:
        return {k.lower(): p.value for k, p in pairs.items()}

    return {
        "settings": attrs(conf.settings),
        "controllers": [p.value for p in conf.controllers],
        "nodes": {h: attrs(r.attrs) for h, r in conf.nodes.items()},
        "partitions": {n: (sorted(r.nodes or []), attrs(r.attrs)) for n, r in conf.partitions.items()},
    }


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


@pytest.mark.parametrize("example", WITH_SLURM)
def test_importing_its_own_render_gives_a_spec_that_renders_the_same_slurm_files(example: str,
                                                                                  tmp_path: Path) -> None:
    first = compile_file(EXAMPLES / f"{example}.yaml")
    assert first.valid and first.fleet is not None
    fleet = first.fleet
    assert fleet.slurm is not None
    rendered = render_slurm(fleet)
    site = _write(rendered, tmp_path / "site")
    topology = site / "topology.conf"
    result = import_slurm(site / "slurm.conf", site / "gres.conf", topology if topology.exists() else None,
                          _facts(fleet), fleet.slurm.version, fleet.fabric.type)
    again = compile_text(result.spec_text, "imported.yaml")
    assert again.valid and again.fleet is not None, [f"{f.path}: {f.message}" for f in again.located()]
    back = _write(render_slurm(again.fleet), tmp_path / "back")
    problems: list[Problem] = []
    assert _keys(read_slurm_conf(back / "slurm.conf", problems)) == \
        _keys(read_slurm_conf(site / "slurm.conf", problems))
    assert problems == []
    for name in ("gres.conf", "topology.conf"):
        if (site / name).exists():
            assert _lines((back / name).read_text()) == _lines((site / name).read_text()), name
    # The generated names came back as the site's partitions their node groups name.
    generated = {p.name for p in fleet.partitions if p.scheduler == "slurm" and p.generated}
    assert generated and generated <= {p.name for p in again.fleet.partitions if not p.generated}


def test_a_site_partition_with_a_generated_name_but_other_members_is_a_located_error(tmp_path: Path) -> None:
    """nvidia-hopper holding half of the Hopper nodes: fleetspec would build a second
    nvidia-hopper from the rest, so the import stops at the partition's line."""
    fleet = compile_file(EXAMPLES / "quickstart.yaml").fleet
    assert fleet is not None and fleet.slurm is not None
    site = _write(render_slurm(fleet), tmp_path / "site")
    conf = site / "slurm.conf"
    lines = conf.read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("PartitionName=nvidia-hopper "))
    lines[at] = lines[at].replace("Nodes=h100-[001-008]", "Nodes=h100-[001-004]")
    conf.write_text("\n".join(lines) + "\n")
    with pytest.raises(ImportRefused) as refused:
        import_slurm(conf, site / "gres.conf", site / "topology.conf", _facts(fleet), fleet.slurm.version,
                     fleet.fabric.type)
    [problem] = [p for p in refused.value.problems if "nvidia-hopper" in p.message]
    assert (problem.where.line, problem.where.column) == (at + 1, len("PartitionName=") + 1)  # at the name
    assert "h100-[001-008] nodes" in problem.message and "(h100-[001-004])" in problem.message
    assert "Rename the partition" in problem.message
