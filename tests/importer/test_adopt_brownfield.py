"""Adopting the real clusters of ../shared/brownfield (read in place, never copied): each
imports with facts this module writes (illustrative: none of these clusters publishes its
nodes' facts; the boards are the ones each case's SOURCE.md names or, where it names none,
a board of the cluster's era), validates, and renders back key by key with no difference
that no message named: the site's GRES types and counts, untyped GPUs untyped, CPU layout,
memory, features, node states, partitions and their options, global keys, gres.conf and
topology."""

from __future__ import annotations

import json
from pathlib import Path, PurePosixPath
from typing import Any

import pytest

from fleetspec.importer.build import ImportResult, import_slurm
from fleetspec.importer.conf import text_lines
from fleetspec.importer.slurm_files import SlurmConf, read_slurm_conf, slurm_conf_of
from fleetspec.render.slurm import render_slurm
from tests.conftest import shared_tree
from tests.importer.facts import CUDA12, cpu_facts, nvidia_facts, with_tuple

# The board behind each GRES type the sites write (illustrative facts, as nvidia-smi names them).
BOARDS = {"volta": "Tesla V100-PCIE-32GB", "tesla_v100-sxm2-32gb": "Tesla V100-SXM2-32GB",
          "v100": "Tesla V100-SXM2-32GB", "rtx_3090": "NVIDIA GeForce RTX 3090", "rtx_2080": "NVIDIA GeForce RTX 2080",
          "titan": "NVIDIA TITAN RTX", "quadro": "Quadro RTX 5000", "rtx4080s": "NVIDIA GeForce RTX 4080 SUPER",
          "h100": "NVIDIA H100 PCIe", "quadro_rtx_6000": "Quadro RTX 6000",
          "geforce_gtx_1080_ti": "NVIDIA GeForce GTX 1080 Ti", "geforce_rtx_2080_ti": "NVIDIA GeForce RTX 2080 Ti",
          "titan_xp": "NVIDIA TITAN Xp", "titanx": "NVIDIA GeForce GTX TITAN X", "gtx1080": "NVIDIA GeForce GTX 1080",
          "teslak40": "Tesla K40m", "teslak20": "Tesla K20m", "titanrtx": "NVIDIA TITAN RTX"}
# Untyped GPUs: the board each case's SOURCE.md names (biomedia names none: a board of its era).
UNTYPED = {"biomedia-imperial-2018": "NVIDIA TITAN Xp", "llmjp-sakura-2024": "NVIDIA H100 80GB HBM3",
           "dgx1-cluster-2017": "Tesla V100-SXM2-32GB", "janelia-turaga-2017": "NVIDIA GeForce GTX 1080 Ti",
           "panda-cluster-2026": "NVIDIA GeForce RTX 3090"}
# The cases the parser reads today; the others wait for the parser work of #39 item 1
# (blanks around '=', NodeAddr/NodeHostname, removed keys by release, Slurm's defaults).
CASES = ["biomedia-imperial-2018", "diku-ku-2021", "hpclab3-2026", "llmjp-sakura-2024", "nju-amd7763-2026",
         "nvidia-circe-2020", "pal-sussex-2021", "panda-cluster-2026", "slac-sdf-2020", "unibo-cesia-2025"]
VERSION = "22.05.8"  # the release of the slurmctld the tests start (Debian 12)


def case_files(case: str) -> dict[str, Path]:
    d = shared_tree(f"brownfield/{case}")
    return {kind: d / name for kind, name in json.loads((d / "case.json").read_text())["files"].items()}


def case_facts(case: str, source: SlurmConf) -> dict[str, dict[str, Any]]:
    """Facts per node: its GRES boards in order, a CUDA 12 tuple below Hopper (CUDA 13 has no
    Volta and older), none for a node without GPUs. nvidia-circe declares no GRES, so its
    DGX nodes get CPU facts here: the import of a cluster without GPU GRES."""
    out = {}
    for host, rec in source.nodes.items():
        gres = rec.attrs.get("Gres")
        items = [i.split("(")[0].split(":") for i in (gres.value.split(",") if gres else []) if i.startswith("gpu")]
        if not items:
            out[host] = cpu_facts(host)
            continue
        boards = [(BOARDS[i[1]] if len(i) == 3 else UNTYPED[case], int(i[-1])) for i in items]
        doc = nvidia_facts(host, boards)
        out[host] = doc if "H100" in boards[0][0] else with_tuple(doc, CUDA12)
    return out


class Adopted:
    """One case: the site's files read, the import, and the render read back."""

    def __init__(self, case: str) -> None:
        self.files = case_files(case)
        self.source = read_slurm_conf(self.files["conf"], [])
        self.result: ImportResult = import_slurm(
            self.files["conf"], self.files.get("gres"), self.files.get("topology"),
            case_facts(case, self.source), VERSION, "infiniband" if "topology" in self.files else None)
        self.rendered = render_slurm(self.result.fleet)
        self.back = slurm_conf_of(text_lines(self.rendered[PurePosixPath("slurm/slurm.conf")], "rendered", []), [])


@pytest.fixture(scope="module")
def adopted() -> dict[str, Adopted]:
    return {}


def _get(adopted: dict[str, Adopted], case: str) -> Adopted:
    if case not in adopted:
        adopted[case] = Adopted(case)
    return adopted[case]


def _gpus(value: str | None) -> list[str]:
    """The GPU GRES of a Gres= value as written (gpu:volta:2, gpu:8), in any order."""
    return sorted(i.split("(")[0] for i in (value or "").split(",") if i.startswith("gpu:"))


@pytest.mark.parametrize("case", CASES)
def test_the_site_gres_types_and_counts_render_back_as_written(adopted: dict[str, Adopted], case: str) -> None:
    a = _get(adopted, case)
    assert set(a.back.nodes) == set(a.source.nodes)
    for host, rec in a.source.nodes.items():
        site = rec.attrs.get("Gres")
        again = a.back.nodes[host].attrs.get("Gres")
        assert _gpus(site.value if site else None) == _gpus(again.value if again else None), host
    gres = a.rendered[PurePosixPath("slurm/gres.conf")]
    site_types = {i.split(":")[1] for rec in a.source.nodes.values() for i in _gpus(
        rec.attrs["Gres"].value if "Gres" in rec.attrs else None) if i.count(":") == 2}
    assert {t.split("=")[1] for t in gres.split() if t.startswith("Type=")} == site_types


def test_a_site_type_is_an_alias_of_the_model_the_facts_name(adopted: dict[str, Adopted]) -> None:
    text = _get(adopted, "hpclab3-2026").result.spec_text
    assert "gpu:\n        model: v100\n        count: 1\n        gres: tesla_v100-sxm2-32gb" in text
    text = _get(adopted, "unibo-cesia-2025").result.spec_text  # h100 on an H100 PCIe (catalog type h100_pcie)
    assert "model: h100-pcie\n        count: 2\n        gres: h100" in text


def test_untyped_gpus_stay_untyped_and_a_board_outside_the_catalog_is_a_site_model(
        adopted: dict[str, Adopted]) -> None:
    a = _get(adopted, "panda-cluster-2026")
    assert "typed: false" in a.result.spec_text and "geforce-rtx-3090:" in a.result.spec_text
    assert "Type=" not in a.rendered[PurePosixPath("slurm/gres.conf")]
    assert any("the untyped GPUs' board (NVIDIA GeForce RTX 3090) is not a catalog GPU model" in str(w)
               for w in a.result.warnings)
    assert "model: h100-sxm\n        count: 8\n        typed: false" in _get(adopted, "llmjp-sakura-2024").result.spec_text


def test_an_architecture_is_read_as_nvidia_smi_prints_it(adopted: dict[str, Adopted]) -> None:
    text = _get(adopted, "nju-amd7763-2026").result.spec_text
    assert "generation: ada-lovelace\n      architecture: Ada Lovelace" in text


def test_a_cluster_without_gpu_gres_imports_with_no_stack(adopted: dict[str, Adopted]) -> None:
    a = _get(adopted, "nvidia-circe-2020")
    assert "stacks:" not in a.result.spec_text and not a.result.fleet.nodes
    assert len(a.result.fleet.cpu_nodes) == len(a.source.nodes)
