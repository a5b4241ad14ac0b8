"""`fleetspec import slurm`: four cluster shapes modelled on real public clusters
(tests/importer/data/*/slurm.conf say which; shared/brownfield has the originals'
sources), the round trip render(import(files)) against the files, and hostile inputs."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetspec.importer.build import import_slurm
from fleetspec.importer.conf import ImportRefused, Problem
from fleetspec.importer.slurm_files import read_slurm_conf
from fleetspec.node_side.hostlist import expand
from tests.importer.facts import amd_facts, nvidia_facts, write_facts

DATA = Path(__file__).parent / "data"
H100, A100, MI300X = "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB", "AMD Instinct MI300X"
RTX2080TI = "NVIDIA GeForce RTX 2080 Ti"


def _facts(**groups: tuple[str, int] | list[tuple[str, int]]) -> dict[str, dict]:
    """Facts per host: (GPU name, count), or [(name, count), ...] for a node with several models."""
    out = {}
    for hostlist, board in groups.items():
        for host in expand(hostlist.replace("_", "-").replace("(", "[").replace(")", "]")):
            if isinstance(board, list):
                out[host] = nvidia_facts(host, board)
            else:
                name, count = board
                out[host] = (amd_facts if "AMD" in name else nvidia_facts)(host, name, count)
    return out


CASES = {
    "shared-include": ({"nu_gpu(01-03)": (H100, 4), "ml_gpu(01-04)": (A100, 8)}, None, None),
    "untyped-hopper": ({"a0(01-12)": (H100, 8)}, None, None),
    "amd-continuation": ({"mi_(01-04)": (MI300X, 8)}, None, None),
    "tree-topology": ({"pod_n(001-004)": (H100, 8)}, "topology.conf", "infiniband"),
    "cpu-beside-gpu": ({"gpu0(1-2)": (A100, 8)}, None, None),
    "workstation-typed": ({"goedel": (RTX2080TI, 8), "turing": (RTX2080TI, 2)}, None, None),
    "legacy-site": ({"GPU(01-02)": (A100, 4)}, None, None),
    "mixed-gpus": ({"viz1": [("NVIDIA GeForce GTX 970", 1), ("NVIDIA GeForce GTX 1060 6GB", 1)],
                    "mix(1-2)": [("Tesla T4", 1), (A100, 2)], "ib(1-2)": (A100, 4)}, None, None),
}


def _import(case: str, facts: dict | None = None, **kwargs):
    groups, topology, fabric = CASES[case]
    d = DATA / case
    return import_slurm(d / "slurm.conf", d / "gres.conf" if (d / "gres.conf").exists() else None,
                        d / topology if topology else None, _facts(**groups) if facts is None else facts,
                        kwargs.get("version", "24.11.5"), fabric)


def _rendered(spec_text: str, tmp_path: Path) -> Path:
    from fleetspec.pipeline import compile_text
    from fleetspec.render.slurm import render_slurm_conf

    result = compile_text(spec_text, "imported.yaml")
    assert result.valid, [f"{f.path}: {f.message}" for f in result.located()]
    out = tmp_path / "rendered.conf"
    out.write_text(render_slurm_conf(result.fleet))
    return out


def _gres(value: str) -> tuple[str | None, int, set[str]]:
    """(GPU types, GPU count, the other GRES as written: mps:800); a node with several
    models (gpu:a100:2,gpu:t4:1) gives its types sorted and joined with '+'."""
    items = value.split(",")
    gpus = [i.split(":") for i in items if i.startswith("gpu:")]
    types = sorted(p[1] for p in gpus if len(p) == 3)
    return ("+".join(types) or None), sum(int(p[-1]) for p in gpus), {i for i in items if not i.startswith("gpu:")}


def _shape(record) -> dict[str, str]:
    a = {k: p.value for k, p in record.attrs.items()}
    if "SocketsPerBoard" in a:
        a["Sockets"] = str(int(a.pop("SocketsPerBoard")) * int(a.pop("Boards", "1")))
    return {k: a[k] for k in ("CPUs", "Sockets", "CoresPerSocket", "ThreadsPerCore", "RealMemory") if k in a}


@pytest.mark.parametrize("case", sorted(CASES))
def test_round_trip_keeps_nodes_gres_shape_memory_and_partitions(case: str, tmp_path: Path) -> None:
    result = _import(case)
    problems: list[Problem] = []
    source = read_slurm_conf(DATA / case / "slurm.conf", problems)
    back = read_slurm_conf(_rendered(result.spec_text, tmp_path), problems)
    assert problems == []
    assert set(back.nodes) == set(source.nodes)
    for host, rec in source.nodes.items():
        again = back.nodes[host]
        assert _shape(again) == _shape(rec), host
        if "Gres" not in rec.attrs:  # a CPU-only node stays one
            assert "Gres" not in again.attrs, host
            continue
        typed, count, other = _gres(rec.attrs["Gres"].value)
        rtype, rcount, rother = _gres(again.attrs["Gres"].value)
        assert rcount == count and (typed is None or rtype == typed) and rother == other, host
        site_features = rec.attrs.get("Features")
        if site_features:
            assert set(site_features.value.split(",")) <= set(again.attrs["Features"].value.split(","))
    for name, part in source.partitions.items():
        assert name in back.partitions, name
        assert sorted(back.partitions[name].nodes or []) == sorted(part.nodes or []), name
        default = part.attrs.get("Default")
        was_default = default is not None and default.value.upper() == "YES"
        got = back.partitions[name].attrs.get("Default")
        assert was_default == (got is not None and got.value == "YES"), name
        for key, pair in part.attrs.items():
            if key not in ("Default", "Nodes"):
                assert back.partitions[name].attrs[key].value.upper() == pair.value.upper(), (name, key)


def test_untyped_gpus_take_the_model_from_facts_and_record_each_tuple() -> None:
    result = _import("untyped-hopper")
    assert "model: h100-sxm" in result.spec_text
    assert result.tuples["a001"] == {"driver": "580.159.04", "cuda": "13.0", "cudnn": "9.14.0", "nccl": "2.28.3"}


def test_untyped_gpus_without_facts_stop_at_the_node_line_naming_the_hosts() -> None:
    with pytest.raises(ImportRefused) as exc:
        _import("untyped-hopper", facts={})
    text = str(exc.value)
    assert "untyped-hopper/slurm.conf:12:" in text and "a[001-012]: Gres=gpu:N has no type" in text
    assert "--facts" in text


def test_a_gres_type_outside_the_catalog_is_declared_from_the_facts_with_a_warning() -> None:
    result = _import("workstation-typed")
    assert ("gpu_models:\n    geforce-rtx-2080-ti:\n      vendor: nvidia\n      name: NVIDIA GeForce RTX 2080 Ti\n"
            "      generation: turing\n      architecture: Turing\n      memory_gb: 11\n      form_factor: other\n"
            "      gres: geforce_rtx_2080_ti") in result.spec_text
    assert any("GRES type geforce_rtx_2080_ti is not a catalog GPU model" in str(w) for w in result.warnings)
    assert [p.name for p in result.fleet.partitions if p.generated] == ["nvidia-turing"]
    assert "other_gres:\n        mps: 800" in result.spec_text


def test_a_gres_type_outside_the_catalog_without_facts_stops() -> None:
    facts = _facts(**{"goedel": (H100, 8), "turing": (H100, 2)})  # facts that do not describe the board
    with pytest.raises(ImportRefused, match="goedel,turing: the files say geforce_rtx_2080_ti but the node's facts report "
                       "NVIDIA H100 80GB HBM3, the catalog's h100-sxm"):
        _import("workstation-typed", facts=facts)
    with pytest.raises(ImportRefused, match="turing: GRES type 'geforce_rtx_2080_ti' names no catalog GPU model "
                       "and the node's facts do not say which board it is"):
        _import("workstation-typed", facts={h: f for h, f in _facts(**CASES["workstation-typed"][0]).items()
                                            if h == "goedel"})


def test_cpu_only_nodes_become_cpu_node_groups_outside_gpu_partitions() -> None:
    result = _import("cpu-beside-gpu")
    assert "cpu_nodes:\n    - hosts: cpu[01-03]\n      cpus: 32\n      real_memory_mb: 128000" in result.spec_text
    fleet = result.fleet
    assert {n.hostname for n in fleet.cpu_nodes} == {"cpu01", "cpu02", "cpu03", "cpu04", "login01"}
    assert {n.hostname for n in fleet.nodes} == {"gpu01", "gpu02"}
    generated = [p for p in fleet.partitions if p.generated]
    assert [p.name for p in generated] == ["nvidia-ampere"] and generated[0].cpu_nodes == ()
    assert fleet.partition("long").cpu_nodes == ("cpu01", "cpu02", "cpu03", "cpu04")
    assert set(result.tuples) == {"gpu01", "gpu02"}  # no stack, no facts needed for CPU nodes


def test_a_node_whose_facts_show_gpus_slurm_does_not_declare_stops() -> None:
    facts = _facts(**{"gpu0(1-2)": (A100, 8), "cpu01": (A100, 2)})
    with pytest.raises(ImportRefused, match="cpu01: slurm.conf declares no GPU GRES, but the node's facts report 2"):
        _import("cpu-beside-gpu", facts=facts)


def test_topology_leaves_become_racks_and_spines_the_fabric() -> None:
    text = _import("tree-topology").spec_text
    assert "name: leaf-01\n    leaf: leaf-01" in text and "spines:\n    - spine-01" in text


def test_site_settings_keep_every_other_key_and_controllers_keep_order() -> None:
    text = _import("shared-include").spec_text
    assert "controllers: sdf-ctl01,sdf-ctl02" in text
    assert "SlurmctldTimeout: 300" in text and "KillWait: 30" in text and "PriorityTier: 10" in text
    assert "state_save_location: /nfs/slurm/state" in text
    assert "allow_mixed_generations: true" in text  # 'shared' spans hopper and ampere, as the site has it


def _write(tmp_path: Path, text: str, name: str = "slurm.conf") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


BASE = "ClusterName=c\nSlurmctldHost=ctl\n"
HOSTILE = {
    "unknown key": (BASE + "SchedulerParamters=bf_continue\n", "slurm.conf:3:1", "Did you mean SchedulerParameters"),
    "broken continuation": (BASE + "NodeName=g01 CPUs=8 \\\n", "slurm.conf:3:1", "nothing follows"),
    "hostlist bomb": (BASE + "NodeName=g[0000000-9999999]x[0000000-9999999] Gres=gpu:h100:8\n",
                      "slurm.conf:3:10", "at most"),
    "include loop": (BASE + "Include slurm.conf\n", "slurm.conf:3:9", "Include loop"),
    "include outside": (BASE + "Include ../passwd\n", "slurm.conf:3:9", "outside"),
    "include missing": (BASE + "Include nodes.conf\n", "slurm.conf:3:9", "cannot read"),
    "unknown node key": (BASE + "NodeName=g01 Gress=gpu:h100:8\n", "slurm.conf:3:14", "Did you mean Gres"),
    "undefined partition host": (BASE + "NodeName=g01 Gres=gpu:h100:8\nPartitionName=p Nodes=g02\n",
                                 "slurm.conf:4:23", "no NodeName line defines"),
    "unclosed quote": (BASE + 'NodeName=g01 Features="a,b\n', "slurm.conf:3:23", "unclosed"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_input_is_a_located_error_and_out_is_left_alone(name: str, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from fleetspec.cli import app

    text, place, words = HOSTILE[name]
    conf = _write(tmp_path / "etc" if (tmp_path / "etc").mkdir() is None else tmp_path, text)
    out = tmp_path / "spec.yaml"
    out.write_text("old\n")
    result = CliRunner().invoke(app, ["import", "slurm", "--conf", str(conf), "--out", str(out),
                                      "--slurm-version", "24.11.5"])
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    assert place in result.output and words in result.output, result.output
    assert out.read_text() == "old\n"


def test_cli_writes_the_spec_from_a_facts_directory(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from fleetspec.cli import app

    facts = write_facts(tmp_path / "facts", _facts(**CASES["amd-continuation"][0]))
    out = tmp_path / "spec.yaml"
    d = DATA / "amd-continuation"
    result = CliRunner().invoke(app, ["import", "slurm", "--conf", str(d / "slurm.conf"), "--gres",
                                      str(d / "gres.conf"), "--facts", str(facts), "--out", str(out),
                                      "--slurm-version", "24.11.5"])
    assert result.exit_code == 0, result.output
    assert "model: mi300x" in out.read_text()


def test_a_managed_key_keeps_the_site_value_and_validate_proposes_fleetspecs(tmp_path: Path) -> None:
    """circe's whole-node scheduling (select/linear) is not what fleetspec renders: the adopted
    spec keeps it (#39 item 3) and validate names fleetspec's value as a proposal."""
    from fleetspec.pipeline import compile_text

    d = tmp_path / "c"
    d.mkdir()
    (d / "slurm.conf").write_text((DATA / "tree-topology" / "slurm.conf").read_text()
                                  + "SelectType=select/linear\nSlurmctldPort=7817\n")
    facts = _facts(**CASES["tree-topology"][0])
    result = import_slurm(d / "slurm.conf", None, DATA / "tree-topology" / "topology.conf", facts, "24.11.5",
                          "infiniband")
    assert not [w for w in result.warnings if "becomes" in str(w)], result.warnings
    text = _rendered(result.spec_text, tmp_path).read_text()
    assert "\nSelectType=select/linear\n" in text and "\nSlurmctldPort=7817\n" in text
    said = [f.message for f in compile_text(result.spec_text, "imported.yaml").located()
            if f.rule == "adopted-site-value"]
    assert any(m.startswith("SelectType=select/linear is the adopted cluster's own value; fleetspec would write "
                            "its own (typed GPU GRES need select/cons_tres)") for m in said), said


def test_adopted_state_makes_the_first_plan_show_only_real_differences(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from fleetspec.cli import app
    from fleetspec.pipeline import compile_text
    from fleetspec.plan.planner import plan_against_state
    from fleetspec.state.store import StateStore

    groups = _facts(**CASES["untyped-hopper"][0])
    facts = write_facts(tmp_path / "facts", groups)
    d, out, state = DATA / "untyped-hopper", tmp_path / "spec.yaml", tmp_path / "state"
    args = ["import", "slurm", "--conf", str(d / "slurm.conf"), "--gres", str(d / "gres.conf"), "--facts",
            str(facts), "--out", str(out), "--slurm-version", "24.11.5", "--state", str(state)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    applied = StateStore(state, "llm").read()
    assert applied.serial == 1 and {n.hostname for n in applied.applied.nodes} == set(groups)
    spec_text = out.read_text()
    assert plan_against_state(compile_text(spec_text).fleet, applied).changes == ()
    bumped = compile_text(spec_text.replace("nccl: 2.28.3", "nccl: 2.28.9")).fleet
    changes = plan_against_state(bumped, applied).changes
    assert {c.host for c in changes} >= {"a001", "a012"}
    again = CliRunner().invoke(app, args)  # a state that exists is never overwritten
    assert again.exit_code == 1 and "already has state" in again.output
    assert StateStore(state, "llm").read().serial == 1


def test_gres_conf_files_must_match_the_gres_count_and_autodetect_is_kept(tmp_path: Path) -> None:
    d = tmp_path / "c"
    d.mkdir()
    (d / "slurm.conf").write_text((DATA / "amd-continuation" / "slurm.conf").read_text())
    (d / "gres.conf").write_text("NodeName=mi-[01-04] Name=gpu Type=mi300x File=/dev/dri/renderD[128-133]\n")
    facts = _facts(**CASES["amd-continuation"][0])
    with pytest.raises(ImportRefused, match=r"mi-\[01-04\]: slurm.conf gives 8 GPU\(s\) but gres.conf's File= lines.*"
                       r"name 6 device\(s\); slurmctld drains such a node"):
        import_slurm(d / "slurm.conf", d / "gres.conf", None, facts, "24.11.5")
    assert "gres_autodetect: true" in _import("workstation-typed").spec_text
    assert "gres_autodetect" not in _import("amd-continuation").spec_text  # AutoDetect=off


def test_topology_yaml_blocks_become_nvlink_domain_racks_and_render_back(tmp_path: Path) -> None:
    from fleetspec.render.slurm import render_slurm

    d = DATA / "nvl-blocks"
    facts = _facts(**{"nvl_a(01-18)": ("NVIDIA GB200", 4), "nvl_b(01-18)": ("NVIDIA GB200", 4)})
    result = import_slurm(d / "slurm.conf", None, d / "topology.yaml", facts, "25.11.8", "infiniband")
    assert "name: nvl-rack-a\n    leaf: leaf-01\n    nvlink_domain: rack" in result.spec_text
    assert "spines:\n    - spine-01" in result.spec_text
    files = {str(k): v for k, v in render_slurm(result.fleet).items()}
    topology = files["slurm/topology.conf"]  # every node is in a block: the block form alone says it
    assert "BlockName=nvl-rack-a Nodes=nvl-a[01-18]\nBlockName=nvl-rack-b Nodes=nvl-b[01-18]\n" in topology


def test_a_topology_yaml_with_an_unknown_attribute_is_a_located_error(tmp_path: Path) -> None:
    (tmp_path / "topology.yaml").write_text("- topology: t\n  blocks: []\n")
    with pytest.raises(ImportRefused, match=r"topology.yaml:2:3: error: 'blocks' is not a topology.yaml attribute"):
        import_slurm(DATA / "tree-topology" / "slurm.conf", None, tmp_path / "topology.yaml", {}, "25.11.8")


def test_obsolete_keys_are_mapped_or_dropped_with_a_located_warning(tmp_path: Path) -> None:
    """#29 item 2: keys the 22.05.8 slurmctld stops on (test_import_slurmctld starts it on
    the rendered legacy-site) are renamed where Slurm says what replaced them, else dropped."""
    result = _import("legacy-site")
    said = "\n".join(str(w) for w in result.warnings)
    conf = "legacy-site/slurm.conf"
    assert f"{conf}:12:1: warning: CacheGroups=0 is dropped" in said
    assert f"{conf}:16:1: warning: SchedulerPort=7321 is dropped" in said
    assert f"{conf}:14:1: warning: FastSchedule=2 becomes SlurmdParameters=config_overrides" in said
    assert f"{conf}:18:1: warning: DefaultStorageType=slurmdbd is read as AccountingStorageType=" in said
    from fleetspec.importer.conf import text_lines
    from fleetspec.importer.slurm_files import slurm_conf_of
    from fleetspec.render.slurm import render_slurm

    text = next(t for p, t in render_slurm(result.fleet).items() if p.name == "slurm.conf")
    back = slurm_conf_of(text_lines(text, "slurm.conf", []), [])
    assert back.settings["SlurmdParameters"].value == "config_overrides"
    assert back.settings["AccountingStorageHost"].value == "HEAD01"
    assert not {"FastSchedule", "CacheGroups", "SchedulerPort"} & set(back.settings)


def test_site_names_and_features_are_kept_as_slurm_spells_them(tmp_path: Path) -> None:
    result = _import("legacy-site")
    text = _rendered(result.spec_text, tmp_path).read_text()
    assert "SlurmctldHost=HEAD01\n" in text
    assert "NodeName=GPU[01-02] " in text and "PartitionName=CPU Nodes=roc[01-03] " in text
    assert "PartitionName=rocsLong " in text and "PartitionName=gpu_long Nodes=GPU[01-02] " in text
    assert " Features=ib,2.4GHz,gpu_a100,CPU_GEN:ICX " in text and " Features=CPU_GEN:SKX,CPU_FRQ:2.30GHz " in text


def test_a_feature_with_a_constraint_operator_is_a_located_error(tmp_path: Path) -> None:
    conf = _write(tmp_path, "ClusterName=c\nSlurmctldHost=h\nNodeName=n1 CPUs=4 Features=ib|eth\n"
                  "PartitionName=p Nodes=n1\n")
    with pytest.raises(ImportRefused, match=r"slurm.conf:3:29: error: feature\(s\) ib\|eth: a feature is"):
        import_slurm(conf, None, None, {}, "24.11.5")


def test_hostnames_differing_only_in_case_are_one_host_and_kubernetes_wants_lower_case() -> None:
    from fleetspec.pipeline import compile_text
    from tests.importer.test_spec_additions import spec

    twice = spec().replace('"login01", cpus: 16', '"LOGIN01", cpus: 16').replace(
        '"c[01-04]", ', '"c[01-04],login01", ')
    messages = [f.message for f in compile_text(twice, "f.yaml").located()]
    assert any("host 'login01' is listed twice" in m and "hostnames ignore case" in m for m in messages), messages
    k8s = spec(cpu_nodes=False).replace('"g[01-02]"', '"G[01-02]"').replace("mode: native", "mode: slinky")
    messages = [f.message for f in compile_text(k8s, "f.yaml").located()]
    assert any("'G01' has upper-case letters: Kubernetes node names" in m for m in messages), messages


def test_partitions_differing_only_in_case_are_refused() -> None:
    from fleetspec.pipeline import compile_text
    from tests.importer.test_spec_additions import spec

    text = spec().replace('      all: {nodes:', '      CPU: {nodes: "c[01-02]"}\n      all: {nodes:')
    messages = [f.message for f in compile_text(text, "f.yaml").located()]
    assert any("slurm.partitions.cpu and 'CPU' differ only in case" in m for m in messages), messages


def test_a_node_with_two_gpu_models_keeps_each_type_and_its_device_order(tmp_path: Path) -> None:
    """#29 item 1: the primary model (spec gpu) is the one at the first device file; the
    render writes gres.conf in the site's device order."""
    import dataclasses

    from fleetspec.render.slurm import render_slurm

    result = _import("mixed-gpus")
    assert "- hosts: mix[1-2]\n      gpu:\n        model: t4\n        count: 1" in result.spec_text
    assert "other_gpus:\n      - model: a100\n        count: 2" in result.spec_text
    # fleetspec's own gres.conf, as once the site drops spec.slurm.adopted.gres_conf
    site = dataclasses.replace(result.fleet.site, adoption=None)
    gres = next(t for p, t in render_slurm(dataclasses.replace(result.fleet, site=site)).items()
                if p.name == "gres.conf")
    assert "NodeName=mix[1-2] Name=gpu Type=t4 File=/dev/nvidia0\nNodeName=mix[1-2] Name=gpu Type=a100 " \
           "File=/dev/nvidia[1-2]\n" in gres
    assert "NodeName=viz1 Name=gpu Type=gtx970 File=/dev/nvidia0\nNodeName=viz1 Name=gpu Type=gtx1060 " \
           "File=/dev/nvidia1\n" in gres


def test_a_mixed_node_whose_facts_show_another_model_or_an_untyped_gpu_stops(tmp_path: Path) -> None:
    facts = _facts(**{"viz1": [("NVIDIA GeForce GTX 970", 1), ("NVIDIA GeForce GTX 1060 6GB", 1)],
                      "mix(1-2)": [("Tesla T4", 1), (H100, 2)], "ib(1-2)": (A100, 4)})
    with pytest.raises(ImportRefused, match=r"mix\[1-2\]: the node's facts report h100-sxm, which Gres="):
        _import("mixed-gpus", facts=facts)
    conf = _write(tmp_path, "ClusterName=c\nSlurmctldHost=h\nNodeName=n1 CPUs=4 Gres=gpu:a100:2,gpu:1\n"
                  "PartitionName=p Nodes=n1\n")
    with pytest.raises(ImportRefused, match=r"slurm.conf:3:25: error: n1: Gres=gpu:a100:2,gpu:1 mixes typed"):
        import_slurm(conf, None, None, {}, "24.11.5")


def test_keys_defunct_at_the_target_release_or_owned_by_fleetspec_are_warnings_not_errors(tmp_path: Path) -> None:
    """What still blocked BioMedIA's and Sussex's files (shared/brownfield): keys the
    written spec could not hold stopped the import with no line; now each is a warning at it."""
    conf = _write(tmp_path, "ClusterName=c\nSlurmctldHost=h\nJobCredentialPrivateKey=/etc/slurm/key.pem\n"
                  "PluginDir=/usr/lib64/slurm\nNodeName=n1 CPUs=4 Gres=gpu:a100:4\nPartitionName=p Nodes=n1\n")
    result = import_slurm(conf, None, None, _facts(n1=(A100, 4)), "24.11.5")
    said = "\n".join(str(w) for w in result.warnings)
    assert "slurm.conf:3:1: warning: JobCredentialPrivateKey=/etc/slurm/key.pem is dropped: defunct" in said
    assert "PluginDir" not in said  # kept by the adoption (#39 item 3); validate proposes fleetspec's
    assert "\n        PluginDir: /usr/lib64/slurm\n" in result.spec_text.split("adopted:")[1]
    assert "JobCredentialPrivateKey" not in result.spec_text


def test_the_os_comes_from_the_facts_or_the_import_stops_never_a_default() -> None:
    """spec.os picks apt or dnf for every role (#42): an OS no fact names is no reason to adopt
    Ubuntu; a Rocky 9.6 node's os-release (ID=rocky, VERSION_ID=9.6) adopts as rocky-9, whose
    pins come only from the EL catalog rows (the H200 node's driver has none: a located stop)."""
    facts = _facts(**{"gpu0(1-2)": (A100, 8)})
    for host in facts.values():
        host.pop("os", None)
    with pytest.raises(ImportRefused, match=r"the OS is not in Slurm's files and no facts say it.*spec.os is one of "
                                            r"ubuntu-22.04, .*rocky-9.*fleetspec never assumes one"):
        _import("cpu-beside-gpu", facts=facts)
    for host in facts.values():
        host["os"] = {"id": "rocky", "version_id": "9.6"}
    with pytest.raises(ImportRefused, match=r"spec.stacks.imported-1.driver: no published EL9 package literal for "
                                            r"driver 580.159.04"):
        _import("cpu-beside-gpu", facts=facts)
