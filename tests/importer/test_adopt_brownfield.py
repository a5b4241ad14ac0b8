"""Adopting the real clusters of shared/brownfield (read in place from the shared tree): each
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
from tests.slurm.conftest import slurm_release  # noqa: F401  (the release fixture, for NEWER)

# The board behind each GRES type the sites write (illustrative facts, as nvidia-smi names them).
BOARDS = {"volta": "Tesla V100-PCIE-32GB", "tesla_v100-sxm2-32gb": "Tesla V100-SXM2-32GB",
          "v100": "Tesla V100-SXM2-32GB", "rtx_3090": "NVIDIA GeForce RTX 3090", "rtx_2080": "NVIDIA GeForce RTX 2080",
          "titan": "NVIDIA TITAN RTX", "quadro": "Quadro RTX 5000", "rtx4080s": "NVIDIA GeForce RTX 4080 SUPER",
          "h100": "NVIDIA H100 PCIe", "quadro_rtx_6000": "Quadro RTX 6000",
          "geforce_gtx_1080_ti": "NVIDIA GeForce GTX 1080 Ti", "geforce_rtx_2080_ti": "NVIDIA GeForce RTX 2080 Ti",
          "titan_xp": "NVIDIA TITAN Xp", "titanx": "NVIDIA GeForce GTX TITAN X", "gtx1080": "NVIDIA GeForce GTX 1080",
          "teslak40": "Tesla K40m", "teslak20": "Tesla K20m", "titanrtx": "NVIDIA TITAN RTX",
          "m2070q": "Tesla M2070-Q", "gtx970": "NVIDIA GeForce GTX 970", "gtx1060": "NVIDIA GeForce GTX 1060 6GB",
          "rtx2080": "NVIDIA GeForce RTX 2080", "orin": "Orin (nvgpu)", "nano": "NVIDIA Tegra X1"}
# GRES types of GPUs the collector cannot see (it reads NVIDIA and AMD only): HAL9000's Intel
# iGPU. Their nodes' facts show no GPU, and the import keeps the GRES as the site's own.
UNSEEN = {"iris"}
# Untyped GPUs: the board each case's SOURCE.md names (biomedia names none: a board of its era).
UNTYPED = {"biomedia-imperial-2018": "NVIDIA TITAN Xp", "llmjp-sakura-2024": "NVIDIA H100 80GB HBM3",
           "dgx1-cluster-2017": "Tesla V100-SXM2-32GB", "janelia-turaga-2017": "NVIDIA GeForce GTX 1080 Ti",
           "panda-cluster-2026": "NVIDIA GeForce RTX 3090"}
# The cases that adopt today, at 22.05.8 or the site's own release (RELEASES; ocotillo's
# MaxTime=7-0:00:99 is kept: slurmctld carries the seconds over; BNL's quoted
# InteractiveStepOptions renders back quoted; hal9000's Intel iGPU keeps its gpu:iris:1).
CASES = ["biomedia-imperial-2018", "bnl-nsls2-2025", "dgx1-cluster-2017", "diku-ku-2021", "hal9000-homelab-2026",
         "hpclab3-2026", "janelia-turaga-2017", "llmjp-sakura-2024", "nju-amd7763-2026", "nvidia-circe-2020", "ocotillo-2020", "pal-sussex-2021",
         "panda-cluster-2026", "rainey-r2labs-2026", "slac-sdf-2020", "unibo-cesia-2025"]
VERSION = "22.05.8"  # the release of the slurmctld the tests start (Debian 12)
# A site's own release where its files need it. SLAC built slurm-19-05-4-1 (slaclab/slurm-docker,
# Dockerfile: ARG SLURM_TAG=slurm-19-05-4-1), which reads AccountingStorageEnforce=...,limit
# (22.05.8 stops on it), FastSchedule=1 and AccountingStoreJobComment=YES: all kept as written.
RELEASES = {"slac-sdf-2020": "19.05.4"}


def release(case: str) -> str:
    return RELEASES.get(case, VERSION)


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
        if not items or all(len(i) == 3 and i[1] in UNSEEN for i in items):
            out[host] = cpu_facts(host)
            continue
        boards = [(BOARDS[i[1]] if len(i) == 3 else UNTYPED[case], int(i[-1])) for i in items]
        doc = nvidia_facts(host, boards)
        out[host] = doc if "H100" in boards[0][0] else with_tuple(doc, CUDA12)
    return out


class Adopted:
    """One case: the site's files read, the import, and the render read back."""

    def __init__(self, case: str, version: str | None = None) -> None:
        self.files = case_files(case)
        self.source = read_slurm_conf(self.files["conf"], [])
        self.result: ImportResult = import_slurm(
            self.files["conf"], self.files.get("gres"), self.files.get("topology"),
            case_facts(case, self.source), version or release(case),
            "infiniband" if "topology" in self.files else None)
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
    site_types = {i.split(":")[1] for rec in a.source.nodes.values() for i in _gpus(
        rec.attrs["Gres"].value if "Gres" in rec.attrs else None) if i.count(":") == 2}
    fleet = a.result.fleet  # the spec's own GRES types (what plan and the generated gres.conf use)
    carried = {i.split(":")[1] for n in fleet.cpu_nodes for i in n.site_gres}  # GPUs no catalog model describes
    assert {g.gres_type for n in fleet.nodes for g in (n.gpu, *n.other_gpus)} - {""} | carried == site_types
    assert carried <= UNSEEN


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


# Slurm's own value of a key the site left out, where the render writes it (slurm.conf(5)):
# a partition is UP, not the default, with no time limit; a node's state is UNKNOWN.
PARTITION_DEFAULTS = {"state": "UP", "default": "NO", "maxtime": "UNLIMITED"}
NODE_DEFAULTS = {"state": "UNKNOWN"}
_SAME = {"infinite": "unlimited"}


def _norm(value: str | None) -> str | None:
    if value is None:
        return None
    v = value.strip('"').lower()
    return _SAME.get(v, v)


def _node_keys(rec: Any) -> dict[str, str]:
    """A node's keys in one spelling: Procs as CPUs, Boards x SocketsPerBoard as Sockets,
    Feature as Features, the GPU GRES in any order."""
    a = {k.lower(): p.value for k, p in rec.attrs.items() if k.lower() != "nodename"}
    if "procs" in a:  # the old spelling; beside CPUs= the import keeps CPUs, with a warning
        a.setdefault("cpus", a["procs"])
        del a["procs"]
    if "feature" in a:
        a["features"] = a.pop("feature")
    if "socketsperboard" in a:
        a["sockets"] = str(int(a.pop("socketsperboard")) * int(a.pop("boards", "1")))
    a.pop("boards", None)
    if "gres" in a:
        items = a["gres"].split(",")
        a["gres"] = ",".join(sorted(i for i in items if i.startswith("gpu:")) + [i for i in items if not i.startswith("gpu:")])
    for key, default in NODE_DEFAULTS.items():
        a.setdefault(key, default)
    return {k: _norm(v) for k, v in a.items()}  # type: ignore[misc]


def _partition_keys(rec: Any) -> dict[str, str]:
    a = {k.lower(): _norm(p.value) for k, p in rec.attrs.items() if k.lower() != "nodes"}
    for key, default in PARTITION_DEFAULTS.items():
        a.setdefault(key, _norm(default))
    return a  # type: ignore[return-value]


def _named(result: ImportResult, key: str) -> bool:
    """Whether a warning of the import names ``key`` (a removed key, a translation)."""
    return any(str(w).split(": warning: ", 1)[-1].startswith(f"{key}=") for w in result.warnings)


@pytest.mark.parametrize("case", CASES)
def test_the_render_is_the_site_key_by_key(adopted: dict[str, Adopted], case: str) -> None:
    """Nodes (GRES, CPU layout, memory, features, state), partitions (members and every
    option), global keys, gres.conf and topology.conf: what differs is named by a warning."""
    a = _get(adopted, case)
    for host, rec in a.source.nodes.items():
        assert _node_keys(a.back.nodes[host]) == _node_keys(rec), host
    assert set(a.back.partitions) == set(a.source.partitions)
    for name, part in a.source.partitions.items():
        again = a.back.partitions[name]
        assert sorted(again.nodes or []) == sorted(part.nodes or []), name
        assert _partition_keys(again) == _partition_keys(part), name
    site = {k: p.value for k, p in a.source.settings.items()}
    back = {k: p.value for k, p in a.back.settings.items()}
    for key, value in site.items():
        if key == "ClusterName":  # as written, or folded where metadata.name carries it (Slurm folds it)
            assert back[key] == value or (back[key] == value.lower() and "cluster_name:" not in a.result.spec_text)
        elif key not in back or _norm(back[key]) != _norm(value):
            assert _named(a.result, key), (key, value, back.get(key))
    assert not set(back) - set(site) - {k for k in back if any(k in str(w) for w in a.result.warnings)}, \
        sorted(set(back) - set(site))
    gres = [line for line in a.rendered[PurePosixPath("slurm/gres.conf")].splitlines() if not line.startswith("#")]
    site_gres = [" ".join(line.split("#")[0].split()) for line in a.files["gres"].read_text().splitlines()] \
        if "gres" in a.files else []
    assert gres == [line for line in site_gres if line]
    if "topology" in a.files:
        topology = a.rendered[PurePosixPath("slurm/topology.conf")]
        assert {line for line in topology.splitlines() if not line.startswith("#")} == \
            {" ".join(line.split()) for line in a.files["topology"].read_text().splitlines()
             if line.strip() and not line.startswith("#")}


def test_a_drained_node_stays_drained_and_validate_names_every_declined_default(
        adopted: dict[str, Adopted]) -> None:
    from fleetspec.pipeline import compile_text

    a = _get(adopted, "janelia-turaga-2017")
    assert a.back.nodes["c04u01"].attrs["State"].value == "DRAIN"
    found = compile_text(a.result.spec_text, "imported.yaml")
    by_rule: dict[str, list[str]] = {}
    for f in found.located():
        by_rule.setdefault(f.rule, []).append(f.message)
    assert any(m.startswith("SelectTypeParameters=CR_CPU_Memory is the adopted cluster's own value") and
               "spec.slurm.adopted.conf.SelectTypeParameters" in m for m in by_rule["adopted-site-value"])
    assert any("declines generated-partitions" in m for m in by_rule["adopted-declines-default"])
    assert any(m.startswith("gres.conf is the adopted cluster's") for m in by_rule["adopted-site-file"])


# --- a real slurmctld (Debian 12's 22.05.8) on the site's files and on the render -----------

_VOLATILE = {"Port", "LastBusyTime", "BootTime", "SlurmdStartTime", "ResumeAfterTime", "Comment", "Extra", "OS",
             "Arch", "CPULoad", "FreeMem", "AllocMem", "AllocTRES", "CPUAlloc", "CapWatts", "Reason"}


def _blocks(text: str, first: str) -> dict[str, dict[str, str]]:
    """`scontrol show node|partition` as {name: {key: value}}."""
    import re

    out = {}
    for block in text.split("\n\n"):
        fields = dict(m.groups() for m in re.finditer(r"(\w+)=(\S*)", block))
        # Not behaviour: the order of a node's GPU types (jobs ask by type) and of its partitions
        # (the render writes partitions by name; docs/import.md says so).
        for key in ("Gres", "Partitions"):
            if key in fields:
                fields[key] = ",".join(sorted(fields[key].split(",")))
        if first in fields:
            out[fields[first]] = {k: v for k, v in fields.items() if k not in _VOLATILE}
    return out


def _removed(result: ImportResult, key: str) -> bool:
    """Whether the import said the release no longer takes ``key`` (dropped or translated)."""
    return any(str(w).split(": warning: ", 1)[-1].startswith(f"{key}=") and ("dropped" in str(w) or "removed"
               in str(w)) for w in result.warnings)


# Keys that need what this machine lacks, left out of both sides: the site's PluginDir (not
# Debian's /usr/lib/x86_64-linux-gnu/slurm-wlm), auth/jwt (Debian 12 builds none), the site's
# job_submit.lua (not published), TRES weights (need slurmdbd's TRES; none runs here), and
# TaskPluginParam=Sched, which 22.05.8 refuses on the site's own files ("Bad TaskPluginParam:
# Sched": biomedia, nvidia-circe; the import drops the word with a warning). gres.conf too:
# slurmctld takes the GRES from slurm.conf (gres.conf is compared as text above).
_THIS_MACHINE = {"plugindir", "authalttypes", "authaltparameters", "jobsubmitplugins", "priorityweighttres",
                 "taskpluginparam", "slurmschedlogfile"}


# A case imported at its own older release keeps keys 22.05.8 stops on, on both sides: left out
# of both here. SLAC at 19.05.4: 22.05.8 says "Invalid parameter for AccountingStorageEnforce:
# limit", "fatal: The AccountingStoreJobComment option has been removed", "fatal: The
# AccountingStorageLoc option has been removed" (none changes a node or a partition).
_NOT_AT_2205 = {"slac-sdf-2020": frozenset({"accountingstorageenforce", "accountingstorejobcomment",
                                            "accountingstorageloc", "fastschedule"})}


def _runnable(text: str, drop: frozenset[str] = frozenset()) -> str:
    import re

    lines = [line for line in text.splitlines()
             if line.split("=", 1)[0].strip().lower() not in _THIS_MACHINE | drop]
    # a quoted one-token value, as slurmctld unquotes it (the harness edits the bare value);
    # a node's address and hostname: the harness gives each node its own on 127.0.0.1
    lines = [re.sub(r'=\"([^"\s]*)\"', r"=\1", line) for line in lines]
    # blanks around '=' (BNL's "NodeName  = hpc[001-014]"), as slurmctld reads them: the harness
    # takes a node line's first word as NodeName=HOSTS
    lines = [re.sub(r"^(\S+?)\s*=\s*", r"\1=", line) for line in lines]
    lines = [re.sub(r"\s+(\w+)\s*=\s+", r" \1=", line) for line in lines]
    return "\n".join(re.sub(r"\s(NodeAddr|NodeHostname)=\S+", "", line, flags=re.I) for line in lines) + "\n"


def _site_files(a: Adopted) -> dict[PurePosixPath, str]:
    """The site's files as its slurmctld reads them: Include inlined, and the keys the import
    named as removed by the release left out (22.05.8 stops on them)."""
    lines = []
    for line in a.files["conf"].read_text().splitlines():
        if line.strip().lower().startswith("include "):
            lines += (a.files["conf"].parent / line.split()[1]).read_text().splitlines()
        elif not _removed(a.result, line.split("=", 1)[0].strip()):
            lines.append(line)
    files = {PurePosixPath("slurm/slurm.conf"): "\n".join(lines) + "\n"}
    if "topology" in a.files:
        files[PurePosixPath("slurm/topology.conf")] = a.files["topology"].read_text()
    return files


def _shown(root: Path, files: dict[PurePosixPath, str], drop: frozenset[str] = frozenset(),
           release: str = "22.05") -> tuple[dict, dict]:
    """slurmctld of ``release`` alone (no slurmd: what it reads from the files) on ``files``."""
    from fleetspec.lab.slurm_releases import release_prefix
    from tests.slurm.cluster import Cluster

    cluster = Cluster(root, {p: _runnable(t, drop) if p.name == "slurm.conf" else t for p, t in files.items()
                             if p.name in ("slurm.conf", "topology.conf")}, prefix=release_prefix(release, root))
    try:
        cluster.start(wait_idle=False, nodes=())
        return (_blocks(cluster.run("scontrol", "show", "node").stdout, "NodeName"),
                _blocks(cluster.run("scontrol", "show", "partition").stdout, "PartitionName"))
    finally:
        cluster.stop()


@pytest.mark.slurm
@pytest.mark.usefixtures("slurm_installed")
@pytest.mark.parametrize("case", CASES)
def test_slurmctld_shows_the_same_nodes_and_partitions_on_the_render(adopted: dict[str, Adopted], case: str,
                                                                     tmp_path: Path) -> None:
    a = _get(adopted, case)
    drop = _NOT_AT_2205.get(case, frozenset())
    nodes, partitions = _shown(tmp_path / "render", a.rendered, drop)
    site_nodes, site_partitions = _shown(tmp_path / "site", _site_files(a), drop)
    assert nodes == site_nodes
    assert partitions == site_partitions


# The cases whose SOURCE.md names a release newer than 22.05 (#47): imported at it and both
# sides started on the release here nearest at or above it (`release_for`: 24.11.5).
NEWER = {"unibo-cesia-2025": "23.11.4",  # "Written from the Slurm 23.11.4 configurator"
         "hpclab3-2026": "24.11.5"}  # gres.conf AutoDetect=nvidia, "Slurm 24.11+"


@pytest.mark.slurm
@pytest.mark.usefixtures("slurm_installed")
@pytest.mark.parametrize("case", sorted(NEWER))
def test_a_newer_site_shows_the_same_on_its_release(case: str, tmp_path: Path, slurm_release) -> None:
    from fleetspec.lab.slurm_releases import release_for

    release = release_for(NEWER[case]).series
    slurm_release(release)
    a = Adopted(case, NEWER[case])
    assert a.result.fleet is not None
    nodes, partitions = _shown(tmp_path / "render", a.rendered, release=release)
    assert (nodes, partitions) == _shown(tmp_path / "site", _site_files(a), release=release)
    assert nodes and partitions


# --- import --state, then plan -----------------------------------------------------------


def _import_with_state(case: str, tmp_path: Path) -> tuple[Path, Path]:
    """`fleetspec import slurm ... --state` through the CLI: (spec, state)."""
    from typer.testing import CliRunner

    from fleetspec.cli import app
    from tests.importer.facts import write_facts

    files = case_files(case)
    facts = write_facts(tmp_path / "facts", case_facts(case, read_slurm_conf(files["conf"], [])))
    out, state = tmp_path / "fleet.yaml", tmp_path / "state"
    args = ["import", "slurm", "--conf", str(files["conf"]), "--facts", str(facts), "--out", str(out),
            "--slurm-version", release(case), "--state", str(state)]
    for kind in ("gres", "topology"):
        if kind in files:
            args += [f"--{kind}", str(files[kind])]
    if "topology" in files:
        args += ["--fabric", "infiniband"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    return out, state


def _plan(spec: Path, state: Path) -> tuple[int, str]:
    from typer.testing import CliRunner

    from fleetspec.cli import app

    result = CliRunner().invoke(app, ["plan", str(spec), "--state", str(state), "--detailed-exitcode",
                                      "--format", "json"])
    return result.exit_code, result.output


@pytest.mark.parametrize("case", CASES)
def test_the_first_plan_after_import_state_has_no_changes(case: str, tmp_path: Path) -> None:
    spec, state = _import_with_state(case, tmp_path)
    code, output = _plan(spec, state)
    assert code == 0, output


def test_taking_a_proposal_plans_as_a_change_with_its_disruption(tmp_path: Path) -> None:
    """janelia keeps select/cons_res with CR_CPU_Memory and declines DefaultTime-like defaults:
    deleting a pin or a decline is a change plan shows, with its disruption."""
    spec, state = _import_with_state("janelia-turaga-2017", tmp_path)
    text = spec.read_text()
    assert "        SelectTypeParameters: CR_CPU_Memory\n" in text and "      - generated-partitions\n" in text
    spec.write_text(text.replace("        SelectTypeParameters: CR_CPU_Memory\n", ""))
    code, output = _plan(spec, state)
    assert code == 2, output
    changes = {c["target"]: c for c in json.loads(output)["changes"]}
    conf = changes["slurm:slurm.conf"]
    assert conf["disruption"] == "restart-daemon" and "SelectTypeParameters=CR_Core_Memory" in json.dumps(conf)
    spec.write_text(text.replace("      - generated-partitions\n", ""))
    code, output = _plan(spec, state)
    assert code == 2, output
    conf = {c["target"]: c for c in json.loads(output)["changes"]}["slurm:slurm.conf"]
    assert conf["disruption"] == "reconfigure" and "PartitionName=nvidia-pascal " in json.dumps(conf), conf


@pytest.mark.slurm
@pytest.mark.usefixtures("slurm_installed")
def test_a_jetsons_render_device_a_node_without_gres_conf_lines_and_the_cluster_name_stay_as_written(
        tmp_path: Path) -> None:
    """A home lab modelled on brownfield/hal9000-homelab-2026 (its ClusterName, slurm.conf and
    gres.conf, without the Intel iGPU node: the case itself adopts above, the iGPU as site_gres): gres.conf names only the
    Orin's /dev/dri/renderD128 and nothing for the Nano, and ClusterName=HAL9000_v2 is no DNS
    label. The render keeps all three as written (fleetspec's own would invent /dev/nvidia0 for
    both GPUs); a real slurmctld knows the cluster as hal9000_v2, as on the site's file, and the
    first plan after import --state has no changes."""
    from typer.testing import CliRunner

    from fleetspec.cli import app
    from tests.importer.facts import write_facts

    site_conf = ("ClusterName=HAL9000_v2\nControlMachine=head\nSelectType=select/cons_tres\n"
                 "SelectTypeParameters=CR_Core\nGresTypes=gpu\n"
                 "NodeName=jetson-orin CPUs=6 Sockets=2 CoresPerSocket=3 ThreadsPerCore=1 RealMemory=7619 "
                 "Gres=gpu:orin:1 State=UNKNOWN\n"
                 "NodeName=jetson-nano CPUs=4 Sockets=1 CoresPerSocket=4 ThreadsPerCore=1 RealMemory=1979 "
                 "Gres=gpu:nano:1 State=UNKNOWN\n"
                 "PartitionName=all Nodes=jetson-orin,jetson-nano Default=YES MaxTime=INFINITE State=UP\n")
    conf = tmp_path / "slurm.conf"
    conf.write_text(site_conf)
    gres = tmp_path / "gres.conf"
    gres.write_text("Name=gpu Type=orin File=/dev/dri/renderD128\n")
    # What a Jetson's GPU reports (illustrative): Orin is Ampere, the Nano Maxwell; memory shared.
    boards = {"jetson-orin": ("Orin (nvgpu)", "Ampere", 7619), "jetson-nano": ("NVIDIA Tegra X1", "Maxwell", 1979)}
    facts = {}
    for host, (name, arch, mib) in boards.items():
        doc = with_tuple(nvidia_facts(host, name, 1), CUDA12)
        doc["nvidia"]["gpus"][0].update(architecture=arch, memory_mib=mib)
        facts[host] = doc
    result = import_slurm(conf, gres, None, facts, VERSION)
    assert "metadata:\n  name: hal9000-v2\n" in result.spec_text and "cluster_name: HAL9000_v2\n" in result.spec_text
    rendered = render_slurm(result.fleet)
    lines = [line for line in rendered[PurePosixPath("slurm/gres.conf")].splitlines() if not line.startswith("#")]
    assert lines == ["Name=gpu Type=orin File=/dev/dri/renderD128"]
    back = slurm_conf_of(text_lines(rendered[PurePosixPath("slurm/slurm.conf")], "rendered", []), [])
    assert back.settings["ClusterName"].value == "HAL9000_v2"
    assert back.settings["SelectTypeParameters"].value == "CR_Core"
    assert [back.nodes[h].attrs["Gres"].value for h in boards] == ["gpu:orin:1", "gpu:nano:1"]

    def cluster_name_seen(root: Path, text: str) -> str:
        from tests.slurm.cluster import Cluster

        cluster = Cluster(root, {PurePosixPath("slurm/slurm.conf"): _runnable(text)})
        try:
            cluster.start(wait_idle=False, nodes=())
            return next(line.split("=", 1)[1].strip() for line in cluster.run("scontrol", "show", "config")
                        .stdout.splitlines() if line.startswith("ClusterName "))
        finally:
            cluster.stop()

    assert cluster_name_seen(tmp_path / "render", rendered[PurePosixPath("slurm/slurm.conf")]) == "hal9000_v2"
    assert cluster_name_seen(tmp_path / "site", site_conf) == "hal9000_v2"
    out, state = tmp_path / "fleet.yaml", tmp_path / "state"
    imported = CliRunner().invoke(app, ["import", "slurm", "--conf", str(conf), "--gres", str(gres), "--facts",
                                        str(write_facts(tmp_path / "facts", facts)), "--out", str(out),
                                        "--slurm-version", VERSION, "--state", str(state)])
    assert imported.exit_code == 0, imported.output
    code, output = _plan(out, state)
    assert code == 0, output


def test_a_gpu_no_catalog_model_describes_is_the_sites_own_gres_with_a_warning(adopted: dict[str, Adopted]) -> None:
    """HAL9000's head node declares its Intel iGPU (Gres=gpu:iris:1), which the collector
    cannot see: the import keeps it on a cpu_nodes group as site_gres, with a warning at the
    value that fleetspec manages no stack on it, and the render writes the same Gres back.
    A site_gres naming a catalog GPU is refused: those nodes are a GPU node group."""
    from fleetspec.pipeline import compile_text

    a = _get(adopted, "hal9000-homelab-2026")
    [head] = [n for n in a.result.fleet.cpu_nodes if n.hostname == "intel-head"]
    assert head.site_gres == ("gpu:iris:1",)
    assert a.back.nodes["intel-head"].attrs["Gres"].value == "gpu:iris:1"
    pair = a.source.nodes["intel-head"].attrs["Gres"]
    [warning] = [w for w in a.result.warnings if "gpu:iris:1" in w.message]
    assert warning.where == pair.value_at and "manages no driver or stack" in warning.message
    assert "site_gres:\n      - gpu:iris:1\n" in a.result.spec_text
    spec = a.result.spec_text.replace("- gpu:iris:1", "- gpu:h100:1")
    result = compile_text(spec, "fleet.yaml")
    assert not result.valid
    [error] = [f for f in result.findings if "site_gres gpu:h100:1" in f.message]
    assert error.path[-2:] == ("site_gres", 0) and "GPU node group" in error.message
    junk = compile_text(a.result.spec_text.replace("- gpu:iris:1", "- gpu:iris:1 File=/dev/mem"), "fleet.yaml")
    assert not junk.valid and any(f.rule == "schema" and "site_gres" in f.path for f in junk.findings)
