"""The Slurm renderer without daemons: goldens, purity, ownership, secrets, topology
forms per version (including the ones Debian's 22.05 cannot run), Slinky values."""

from __future__ import annotations

import dataclasses
from pathlib import PurePosixPath

import pytest
import yaml

from fleetspec.layout.slurm import (
    detected_gpu_names,
    slinky_problems,
    slurm_nodes,
    topology_problems,
    undetected_type_names,
)
from fleetspec.node_side.hostlist import expand
from fleetspec.render.slurm import (
    autodetect_for,
    default_time_for,
    device_files,
    per_gpu_defaults,
    real_memory_mb,
    render_slurm,
)
from tests.conftest import require_shared

from . import fleets

VERSIONS = {"22.05": "22.05.8", "24.11": "24.11.6", "25.11": "25.11.8"}
EXAMPLES = {"quickstart": fleets.quickstart, "museum": fleets.museum, "nvl72": fleets.nvl72}


def _text(files, name: str) -> str:
    return files[PurePosixPath("slurm") / name]


@pytest.mark.parametrize("series", VERSIONS)
@pytest.mark.parametrize("example", EXAMPLES)
def test_golden_tree(golden, example, series):
    fleet = fleets.with_version(EXAMPLES[example](), VERSIONS[series])
    golden.check_tree(f"slurm/{example}-{series}", render_slurm(fleet))


def test_golden_block_only_topology(golden):
    """Only NVL72 racks in Slurm: topology/block in topology.conf, BlockSizes from 24.05."""
    fleet = fleets.with_version(fleets.nvl72(with_tree_nodes=False), "24.11.6")
    golden.check_tree("slurm/nvl72-racks-24.11", render_slurm(fleet))


def test_golden_slinky(golden):
    museum = fleets.museum()
    assert museum.slurm is not None
    slinky = dataclasses.replace(museum, slurm=dataclasses.replace(museum.slurm, mode="slinky"))
    files = render_slurm(slinky)
    assert list(files) == [PurePosixPath("slurm/slinky-values.yaml")]
    golden.check_tree("slurm/museum-slinky", files)


def test_render_is_pure_and_sorted():
    fleet = fleets.museum()
    first, second = render_slurm(fleet), render_slurm(fleet)
    assert first == second
    assert list(first) == sorted(first)
    assert all(p.parts[0] == "slurm" and len(p.parts) == 2 for p in first)


def test_only_slurm_owned_nodes_appear():
    fleet = fleets.museum()
    files = render_slurm(fleet)
    owned = {n.hostname for n in slurm_nodes(fleet)}
    others = {n.hostname for n in fleet.nodes} - owned
    assert others  # museum has Kubernetes-owned nodes
    named = set()
    for text in files.values():
        for token in text.replace(",", " ").replace("=", " ").split():
            if "-" in token and any(ch.isdigit() for ch in token):
                try:
                    named.update(expand(token))
                except ValueError:
                    continue
    assert named & owned == owned
    assert not named & others
    conf = _text(files, "slurm.conf")
    assert "nvidia-blackwell" not in conf and "amd-cdna4" not in conf


def test_secrets_are_references():
    files = render_slurm(fleets.museum())
    dbd = _text(files, "slurmdbd.conf")
    assert "StoragePass=@@secret:slurmdbd_password@@" in dbd
    assert all("munge.key" not in t for t in files.values())


def test_slurm_conf_essentials():
    conf = _text(render_slurm(fleets.museum()), "slurm.conf").splitlines()
    assert [line for line in conf if line.startswith("SlurmctldHost=")] == [
        "SlurmctldHost=ctl-01", "SlurmctldHost=ctl-02"]
    for line in ("SelectType=select/cons_tres", "GresTypes=gpu", "PriorityType=priority/multifactor",
                 "TopologyPlugin=topology/tree", "ClusterName=museum"):
        assert line in conf
    h200 = next(line for line in conf if line.startswith("NodeName=h200"))
    assert "Gres=gpu:h200:8" in h200 and "Features=nvidia,hopper,h200,r02,hopper-cu13" in h200
    hopper = next(line for line in conf if line.startswith("PartitionName=nvidia-hopper"))
    assert "Default=YES" in hopper and "MaxTime=2-00:00:00" in hopper


def test_no_accounting_means_basic_priority_and_no_slurmdbd():
    files = render_slurm(fleets.lab())
    assert "PriorityType=priority/basic" in _text(files, "slurm.conf")
    assert PurePosixPath("slurm/slurmdbd.conf") not in files
    assert PurePosixPath("slurm/plugstack.conf") not in files


def test_gres_autodetect_follows_the_version():
    assert autodetect_for("nvidia", "22.05.8") == "nvml"
    assert autodetect_for("amd", "20.02.0") == "rsmi"
    assert autodetect_for("amd", "19.05.5") is None


def test_gres_conf_is_explicit_files_unless_autodetect_is_asked_for():
    museum = fleets.museum()
    gres = _text(render_slurm(museum), "gres.conf")
    assert "AutoDetect" not in gres.replace("# ", "")
    assert "NodeName=a100-[01-04] Name=gpu Type=a100 File=/dev/nvidia[0-3] Cores=0-31" in gres
    assert museum.slurm is not None
    opted = dataclasses.replace(museum, slurm=dataclasses.replace(museum.slurm, gres_autodetect=True))
    gres = _text(render_slurm(opted), "gres.conf")
    assert "NodeName=mi300x-[01-04] AutoDetect=rsmi" in gres
    assert "NodeName=a100-[01-04] AutoDetect=nvml" in gres
    assert "NodeName=a100-[01-04] Name=gpu Type=a100 File=/dev/nvidia[0-7]" in gres


def test_mi300_class_gpus_have_every_eighth_render_minor():
    gres = _text(render_slurm(fleets.museum()), "gres.conf")
    files = [line.split("File=")[1].split(" ")[0] for line in gres.splitlines()
             if line.startswith("NodeName=mi300x-[01-04] Name=")]
    assert files == [f"/dev/dri/renderD{128 + 8 * i}" for i in range(8)]
    assert device_files("amd", 4, "cdna2") == ["/dev/dri/renderD[128-131]"]
    assert device_files("amd", 1, "cdna4") == ["/dev/dri/renderD128"]
    assert device_files("nvidia", 8, "hopper") == ["/dev/nvidia[0-7]"]


def test_partitions_get_per_gpu_defaults_from_their_smallest_node():
    node = slurm_nodes(fleets.museum())[0]
    small = dataclasses.replace(node, memory_gb=1024, cpus=64, sockets=None, cores_per_socket=None,
                                threads_per_core=None)
    big = dataclasses.replace(node, memory_gb=2048, cpus=None, sockets=2, cores_per_socket=56, threads_per_core=2)
    assert per_gpu_defaults([big]) == [("DefMemPerGPU", str(real_memory_mb(2048) // 8)), ("DefCpuPerGPU", "28")]
    assert per_gpu_defaults([big, small]) == [("DefMemPerGPU", str(real_memory_mb(1024) // 8)), ("DefCpuPerGPU", "8")]
    unknown = dataclasses.replace(node, memory_gb=None, cpus=None, sockets=None)
    assert per_gpu_defaults([big, unknown]) == []
    assert per_gpu_defaults([]) == []


def test_default_time_is_an_hour_or_max_time_when_shorter():
    assert default_time_for("2-00:00:00") == "1:00:00"
    assert default_time_for("00:30:00") == "00:30:00"
    assert default_time_for("60") == "60"
    assert default_time_for("INFINITE") is None
    assert default_time_for(None) is None
    conf = _text(render_slurm(fleets.museum()), "slurm.conf")
    hopper = next(line for line in conf.splitlines() if line.startswith("PartitionName=nvidia-hopper "))
    assert "MaxTime=2-00:00:00 DefaultTime=1:00:00" in hopper
    ampere = next(line for line in conf.splitlines() if line.startswith("PartitionName=nvidia-ampere "))
    assert "DefaultTime" not in ampere  # no MaxTime: nothing to default below


def test_state_save_location_follows_the_spec():
    museum = fleets.museum()
    assert "StateSaveLocation=/shared/slurm/statesave\n" in _text(render_slurm(museum), "slurm.conf")
    assert museum.slurm is not None
    local = dataclasses.replace(museum, slurm=dataclasses.replace(museum.slurm, state_save_location="/var/spool/slurmctld"))
    assert "StateSaveLocation=/var/spool/slurmctld\n" in _text(render_slurm(local), "slurm.conf")
    shared = dataclasses.replace(museum, slurm=dataclasses.replace(museum.slurm, state_save_location="/shared/ctld"))
    assert "StateSaveLocation=/shared/ctld\n" in _text(render_slurm(shared), "slurm.conf")


def test_plugstack_includes_the_line_the_pyxis_package_ships():
    text = _text(render_slurm(fleets.museum()), "plugstack.conf")
    plugin_lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert plugin_lines == ["include /usr/share/pyxis/*.conf"]
    assert "/usr/local" not in text


# --- topology the Debian 22.05 daemons cannot run: checked by parsing -----------------


def _check_blocks(fleet, blocks: list[tuple[str, str]], base: int) -> None:
    """Every named host exists and is Slurm's; every block is exactly one NVLink domain."""
    index = {n.hostname: n for n in slurm_nodes(fleet)}
    domains = {}
    for n in slurm_nodes(fleet):
        if n.nvlink_domain:
            domains.setdefault(n.nvlink_domain, set()).add(n.hostname)
    seen = {}
    for name, nodes in blocks:
        hosts = set(expand(nodes))
        assert hosts <= set(index), hosts - set(index)
        assert {index[h].nvlink_domain for h in hosts} == {name}
        assert len(hosts) >= base
        seen[name] = hosts
    assert seen == domains


def test_topology_yaml_for_tree_and_blocks():
    fleet = fleets.with_version(fleets.nvl72(), "25.11.8")
    files = render_slurm(fleet)
    assert PurePosixPath("slurm/topology.conf") not in files
    doc = yaml.safe_load(_text(files, "topology.yaml"))
    assert [t["topology"] for t in doc] == ["fabric", "nvlink"]
    assert all(next(iter(t)) == "topology" for t in doc)  # must be the first attribute
    tree, block = doc[0]["tree"], doc[1]["block"]
    leaves = {s["switch"]: set(expand(s["nodes"])) for s in tree["switches"] if "nodes" in s}
    assert set().union(*leaves.values()) == {n.hostname for n in slurm_nodes(fleet)}
    assert sum(len(v) for v in leaves.values()) == len(slurm_nodes(fleet))  # one leaf each
    _check_blocks(fleet, [(b["block"], b["nodes"]) for b in block["blocks"]], block["block_sizes"][0])
    conf = _text(files, "slurm.conf")
    assert "TopologyPlugin" not in conf.replace("# Topology", "")
    assert "PartitionName=nvidia-blackwell" in conf and "Topology=nvlink" in conf
    assert topology_problems(fleet) == []


def test_block_topology_conf():
    fleet = fleets.with_version(fleets.nvl72(with_tree_nodes=False), "24.11.6")
    files = render_slurm(fleet)
    lines = [line for line in _text(files, "topology.conf").splitlines() if not line.startswith("#")]
    blocks = [tuple(f.split("=", 1)[1] for f in line.split()) for line in lines if line.startswith("BlockName=")]
    (sizes,) = [line for line in lines if line.startswith("BlockSizes=")]
    _check_blocks(fleet, blocks, int(sizes.split("=")[1]))  # type: ignore[arg-type]
    assert "TopologyPlugin=topology/block" in _text(files, "slurm.conf")
    older = render_slurm(fleets.with_version(fleet, "23.11.10"))
    assert "BlockSizes" not in _text(older, "topology.conf")  # 23.11 has BlockLevels instead
    assert topology_problems(fleet) == []


@pytest.mark.parametrize(
    ("tree_nodes", "version", "needs"),
    [(True, "24.11.6", "25.05"), (True, "22.05.8", "25.05"), (False, "22.05.8", "23.11")],
)
def test_a_version_that_cannot_express_the_topology_is_a_problem(tree_nodes, version, needs):
    fleet = fleets.with_version(fleets.nvl72(with_tree_nodes=tree_nodes), version)
    problems = topology_problems(fleet)
    assert len(problems) == 1
    message, path = problems[0]
    assert needs in message and version in message
    assert path == ("spec", "slurm", "version")
    files = render_slurm(fleet)  # still the best valid form: a tree
    assert "TopologyPlugin=topology/tree" in _text(files, "slurm.conf")
    assert PurePosixPath("slurm/topology.yaml") not in files


def test_examples_have_no_topology_problems():
    for make in (fleets.quickstart, fleets.museum):
        for version in VERSIONS.values():
            assert topology_problems(fleets.with_version(make(), version)) == []


# --- Slinky ---------------------------------------------------------------------------


def _slinky(fleet):
    assert fleet.slurm is not None
    return dataclasses.replace(fleet, slurm=dataclasses.replace(fleet.slurm, mode="slinky"))


def test_slinky_values_use_the_chart_keys():
    chart = yaml.safe_load(require_shared("crds/slurm-operator/slurm-chart-values.yaml").read_text())
    values = yaml.safe_load(_text(render_slurm(_slinky(fleets.museum())), "slinky-values.yaml"))
    assert set(values) <= set(chart)
    assert set(values["controller"]) <= set(chart["controller"])
    assert set(values["accounting"]["storageConfig"]) <= set(chart["accounting"]["storageConfig"])
    for name, nodeset in values["nodesets"].items():
        assert set(nodeset) <= set(chart["nodesetDefaults"]), name
        assert set(nodeset["podSpec"]) <= set(chart["nodesetDefaults"]["podSpec"])
        assert "fleetspec.io/partition" in nodeset["podSpec"]["nodeSelector"]
    for name, partition in values["partitions"].items():
        assert set(partition) <= set(chart["partitions"]["all"]), name
    for name, loginset in values["loginsets"].items():
        assert set(loginset) <= set(chart["loginsetDefaults"]), name
        assert set(loginset["login"]) <= set(chart["loginsetDefaults"]["login"])


def test_slinky_has_a_submit_host():
    """Users need somewhere to run sbatch: a LoginSet (sackd, sshd, sssd) on the spec's
    series, its Pyxis variant with Pyxis (the chart's default login image is 26.05)."""
    museum = _slinky(fleets.museum())  # Slurm 25.11, containers: pyxis
    values = yaml.safe_load(_text(render_slurm(museum), "slinky-values.yaml"))
    (login,) = values["loginsets"].values()
    assert login["enabled"] is True and login["replicas"] >= 1
    assert login["login"]["image"] == {"repository": "ghcr.io/slinkyproject/login-pyxis",
                                       "tag": "25.11-ubuntu24.04"}
    assert museum.slurm is not None
    plain = dataclasses.replace(museum, slurm=dataclasses.replace(museum.slurm, containers="none"))
    (login,) = yaml.safe_load(_text(render_slurm(plain), "slinky-values.yaml"))["loginsets"].values()
    assert login["login"]["image"]["repository"] == "ghcr.io/slinkyproject/login"


def test_slinky_database_user_needs_named_networks():
    """Slinky's slurmdbd logs in to MariaDB over the network: validate refuses accounting
    without slurm.slinky.database_clients (the role used to make 'slurm'@'%'), and the
    node layer gets the networks as MariaDB account hosts."""
    from fleetspec.pipeline import compile_text
    from fleetspec.render.ansible import render_ansible

    museum = _slinky(fleets.museum())
    assert museum.slurm is not None and museum.slurm.accounting_host
    problems = [(m, p) for m, p in slinky_problems(museum) if "database_clients" in m]
    assert len(problems) == 1 and problems[0][1][-1] == "accounting" and "'%'" in problems[0][0]
    named = dataclasses.replace(museum, slurm=dataclasses.replace(
        museum.slurm, slinky_database_clients=("10.244.0.0/16", "192.0.2.0/24")))
    assert not [m for m, _ in slinky_problems(named) if "database_clients" in m]
    group_vars = yaml.safe_load(next(t for p, t in render_ansible(named).items() if p.name == "all.yml"))
    assert group_vars["fleetspec_slurm"]["slinky_database_clients"] == [
        "10.244.0.0/255.255.0.0", "192.0.2.0/255.255.255.0"]
    text = (fleets.ROOT / "examples" / "quickstart.yaml").read_text()
    for bad, why in (("10.244.0.1/16", "host bits"), ("0.0.0.0/0", "never /0")):
        spec = text.replace("    mode: native\n", f"    mode: slinky\n    slinky: {{database_clients: [{bad}]}}\n", 1)
        result = compile_text(spec)
        assert any(f.rule == "schema" and why in f.message for f in result.findings), bad


def test_slinky_maps_partitions_to_nodesets():
    fleet = _slinky(fleets.museum())
    values = yaml.safe_load(_text(render_slurm(fleet), "slinky-values.yaml"))
    parts = {k: v for k, v in values["partitions"].items() if v.get("enabled")}
    assert set(parts) == {"amd-cdna3", "nvidia-ampere", "nvidia-hopper"}  # Slurm-owned, generated
    # nvidia-hopper mixes H100 and H200: one NodeSet per model, one Gres line each
    assert parts["nvidia-hopper"]["nodesets"] == ["nvidia-hopper-h100-sxm", "nvidia-hopper-h200"]
    h200 = values["nodesets"]["nvidia-hopper-h200"]
    assert h200["extraConfMap"]["Gres"] == ["gpu:h200:8"]
    assert h200["podSpec"]["nodeSelector"] == {
        "fleetspec.io/partition": "nvidia-hopper", "fleetspec.io/gpu-model": "h200"}
    assert values["nodesets"]["amd-cdna3"]["slurmd"]["resources"]["limits"] == {"amd.com/gpu": 8}
    messages = [m for m, _ in slinky_problems(fleet)]
    assert any("'debug'" in m for m in messages)  # host-level extra partition cannot map
    assert any("two vendors" in m for m in messages)  # one gres.conf for NVIDIA and AMD
    single = _slinky(fleets.quickstart())
    assert yaml.safe_load(_text(render_slurm(single), "slinky-values.yaml"))["configFiles"]["gres.conf"] == (
        "AutoDetect=nvidia\n")
    assert topology_problems(fleet) == []


def test_slinky_gres_autodetect_needs_no_vendor_library_and_sees_each_nodesets_type():
    """Slinky's slurmd images have no NVML (SlinkyProject/containers#14): NVIDIA GPUs are
    found by gpu/nvidia (Slurm 24.11+), AMD by rsmi; each NodeSet's GRES type must be part of
    the name the plugin detects, else the GPUs are ignored and the NodeSet goes INVALID."""
    museum = _slinky(fleets.museum())
    amd_only = dataclasses.replace(museum, nodes=tuple(n for n in museum.nodes if n.gpu.vendor == "amd"))
    values = yaml.safe_load(_text(render_slurm(amd_only), "slinky-values.yaml"))
    assert values["configFiles"]["gres.conf"] == "AutoDetect=rsmi\n"
    assert not [m for m, _ in slinky_problems(amd_only) if "AutoDetect" in m]
    single = _slinky(fleets.quickstart())
    assert not [m for m, _ in slinky_problems(single) if "AutoDetect" in m]
    old = [(m, p) for m, p in slinky_problems(fleets.with_version(single, "24.05.8")) if "AutoDetect" in m]
    assert len(old) == 1 and "24.11" in old[0][0] and old[0][1][-1] == "version"
    # What the plugins detect: the driver's name, lower-cased, spaces to underscores.
    assert "nvidia_h100_80gb_hbm3" in detected_gpu_names("h100-sxm")
    assert undetected_type_names("h100", "h100-sxm") == ()
    assert undetected_type_names("mi300x", "mi300x") == ()
    assert undetected_type_names("a100_pcie", "a100-pcie") == ("nvidia_a100_80gb_pcie",)
    assert undetected_type_names("a100_pcie", "a100-pcie-40gb") == ("nvidia_a100-pcie-40gb",)
    assert undetected_type_names("a100", "a100-40gb") == ()


# --- Slurm on an RDMA fabric: memlock, PMIx, GPU-local cores, DefaultTime everywhere ---


def _conf_value(conf: str, key: str) -> str | None:
    return next((line.split("=", 1)[1] for line in conf.splitlines() if line.startswith(key + "=")), None)


def test_rdma_fabric_keeps_the_nodes_memlock_and_pmix_is_the_default_mpi():
    museum = fleets.museum()  # InfiniBand
    conf = _text(render_slurm(museum), "slurm.conf")
    assert _conf_value(conf, "PropagateResourceLimitsExcept") == "MEMLOCK"
    assert _conf_value(conf, "MpiDefault") == "pmix"
    assert museum.fabric is not None
    ethernet = dataclasses.replace(museum, fabric=dataclasses.replace(museum.fabric, type="ethernet"))
    assert _conf_value(_text(render_slurm(ethernet), "slurm.conf"), "PropagateResourceLimitsExcept") is None
    values = yaml.safe_load(_text(render_slurm(_slinky(museum)), "slinky-values.yaml"))
    conf_map = values["controller"]["extraConfMap"]
    assert conf_map["MpiDefault"] == "pmix" and conf_map["PropagateResourceLimitsExcept"] == ["MEMLOCK"]


def test_gres_binds_each_gpu_to_its_sockets_cores():
    gres = _text(render_slurm(fleets.museum()), "gres.conf")
    lines = [line for line in gres.splitlines() if line.startswith("NodeName=h100-")]
    assert lines == [
        "NodeName=h100-[001-004] Name=gpu Type=h100 File=/dev/nvidia[0-3] Cores=0-55",
        "NodeName=h100-[001-004] Name=gpu Type=h100 File=/dev/nvidia[4-7] Cores=56-111",
    ]
    mi300 = [line for line in gres.splitlines() if line.startswith("NodeName=mi300x-")]
    assert mi300[0].endswith("File=/dev/dri/renderD128 Cores=0-47")
    assert mi300[4].endswith("File=/dev/dri/renderD160 Cores=48-95")
    # Every GPU is still declared exactly once.
    assert len(mi300) == 8


def test_every_slinky_partition_with_a_max_time_gets_a_default_time():
    values = yaml.safe_load(_text(render_slurm(_slinky(fleets.museum())), "slinky-values.yaml"))
    for name, part in values["partitions"].items():
        if name == "all":
            continue
        config = part["configMap"]
        if default_time_for(config["MaxTime"]) is not None:
            assert config["DefaultTime"] == default_time_for(config["MaxTime"]), name
    assert values["partitions"]["nvidia-hopper"]["configMap"]["DefaultTime"] == "1:00:00"


# --- Fair share bills GPUs ---------------------------------------------------------------


def _partition_field(conf: str, partition: str, key: str) -> str | None:
    line = next(x for x in conf.splitlines() if x.startswith(f"PartitionName={partition} "))
    return next((f.split("=", 1)[1] for f in line.split() if f.startswith(key + "=")), None)


def test_billing_weights_count_gpus_typed_where_models_share_a_partition():
    museum = fleets.museum()
    assert museum.slurm is not None and museum.slurm.accounting_host
    conf = _text(render_slurm(museum), "slurm.conf")
    assert _conf_value(conf, "PriorityFlags") == "MAX_TRES"
    assert _conf_value(conf, "AccountingStorageTRES") == "gres/gpu,gres/gpu:h100,gres/gpu:h200"
    # One GPU's share of the node's CPUs (28) or memory costs what the GPU costs.
    assert _partition_field(conf, "debug", "TRESBillingWeights") == "CPU=0.0357143,Mem=0.00411186G,GRES/gpu=1"
    weighted = dataclasses.replace(museum, slurm=dataclasses.replace(museum.slurm, gpu_billing_weights=(
        ("h100", 2.0), ("h200", 3.0))))
    conf = _text(render_slurm(weighted), "slurm.conf")
    assert _partition_field(conf, "nvidia-hopper", "TRESBillingWeights") == (
        "CPU=0.0714286,Mem=0.00822372G,GRES/gpu:h100=2,GRES/gpu:h200=3")
    slinky = yaml.safe_load(_text(render_slurm(_slinky(weighted)), "slinky-values.yaml"))
    assert slinky["partitions"]["nvidia-hopper"]["configMap"]["TRESBillingWeights"] == (
        "CPU=0.0714286,Mem=0.00822372G,GRES/gpu:h100=2,GRES/gpu:h200=3")
    assert slinky["controller"]["extraConfMap"]["PriorityFlags"] == ["MAX_TRES"]
    no_accounting = _text(render_slurm(fleets.lab()), "slurm.conf")
    assert "TRESBillingWeights" not in no_accounting  # no fair share without slurmdbd


def test_billing_weights_name_gres_types():
    from fleetspec.pipeline import compile_text

    text = (fleets.ROOT / "examples" / "quickstart.yaml").read_text()
    assert "  slurm:\n" in text
    bad = text.replace("  slurm:\n", "  slurm:\n    gpu_billing_weights: {h100-sxm: 2}\n", 1)
    result = compile_text(bad)
    assert any(f.rule == "schema" and "h100-sxm" in f.message and "h100" in f.message for f in result.findings)
    ok = compile_text(text.replace("  slurm:\n", "  slurm:\n    gpu_billing_weights: {h100: 2}\n", 1))
    assert ok.fleet is not None and ok.fleet.slurm.gpu_billing_weights == (("h100", 2.0),)


# --- Operational settings: backfill sized to MaxTime, GPU-sized timeouts --------------------


def test_backfill_window_covers_the_longest_max_time_and_gpu_teardown_has_time():
    quick = _text(render_slurm(fleets.quickstart()), "slurm.conf")  # longest MaxTime: 2 days
    assert _conf_value(quick, "SchedulerParameters") == "bf_continue,bf_window=2880,bf_resolution=120"
    assert _conf_value(quick, "UnkillableStepTimeout") == "180"
    assert _conf_value(quick, "PrologEpilogTimeout") == "600"
    museum = fleets.museum()  # partitions without a MaxTime: Slurm's longest window
    assert _conf_value(_text(render_slurm(museum), "slurm.conf"), "SchedulerParameters") == (
        "bf_continue,bf_window=43200,bf_resolution=1800")
    conf_map = yaml.safe_load(_text(render_slurm(_slinky(fleets.quickstart())), "slinky-values.yaml"))[
        "controller"]["extraConfMap"]
    assert conf_map["SchedulerParameters"] == ["bf_continue", "bf_window=2880", "bf_resolution=120"]
    assert conf_map["UnkillableStepTimeout"] == 180 and conf_map["PrologEpilogTimeout"] == 600


def test_a_cluster_without_slurmdbd_keeps_cpu_and_mem_billing_only(tmp_path):
    """The one-machine harness runs no slurmdbd, so no gres TRES: the GRES weights go with
    AccountingStorageTRES (slurmctld stops on a weight for a TRES it does not track)."""
    from fleetspec.lab.slurm import localize_slurm_conf

    museum = fleets.museum()
    conf = _text(render_slurm(museum), "slurm.conf")
    ports = {n.hostname: 7000 + i for i, n in enumerate(slurm_nodes(museum))}
    local = localize_slurm_conf(conf, tmp_path, 6817, ports)
    assert _partition_field(local, "debug", "TRESBillingWeights") == "CPU=0.0357143,Mem=0.00411186G"
    kept = localize_slurm_conf(conf, tmp_path, 6817, ports, keep=("AccountingStorageTRES",))
    assert _partition_field(kept, "debug", "TRESBillingWeights") == "CPU=0.0357143,Mem=0.00411186G,GRES/gpu=1"


def test_slinky_images_run_the_spec_s_slurm_series_with_pyxis_where_asked():
    """Chart 1.2.1 defaults every image to 26.05: the spec's series is set on each one."""
    museum = _slinky(fleets.museum())  # Slurm 25.11, containers: pyxis
    values = yaml.safe_load(_text(render_slurm(museum), "slinky-values.yaml"))
    images = [values["controller"]["slurmctld"]["image"], values["controller"]["reconfigure"]["image"],
              values["restapi"]["slurmrestd"]["image"], values["accounting"]["slurmdbd"]["image"],
              *(n["slurmd"]["image"] for n in values["nodesets"].values())]
    assert {i["tag"] for i in images} == {"25.11-ubuntu24.04"}
    assert {n["slurmd"]["image"]["repository"] for n in values["nodesets"].values()} == {
        "ghcr.io/slinkyproject/slurmd-pyxis"}
    assert values["controller"]["slurmctld"]["image"]["repository"] == "ghcr.io/slinkyproject/slurmctld"
    quick = _slinky(fleets.quickstart())
    assert quick.slurm is not None
    plain = dataclasses.replace(quick, slurm=dataclasses.replace(quick.slurm, containers="none"))
    nodesets = yaml.safe_load(_text(render_slurm(plain), "slinky-values.yaml"))["nodesets"]
    assert {n["slurmd"]["image"]["repository"] for n in nodesets.values()} == {"ghcr.io/slinkyproject/slurmd"}
    assert not [m for m, _ in slinky_problems(plain) if "images" in m]
    old = [(m, p) for m, p in slinky_problems(fleets.with_version(plain, "24.05.8")) if "no images" in m]
    assert len(old) == 1 and old[0][1][-1] == "version"


@pytest.mark.parametrize("version", ["22.05.8", "26.05.5"])
def test_a_fabric_without_leaf_switches_renders_a_flat_topology(version: str):
    """No node names a leaf switch: no TopologyPlugin and no topology.conf, at every release
    (26.05.5's slurmctld stops on topology/tree with no switch, #47)."""
    from fleetspec.pipeline import compile_text
    from tests.slurm.test_health_real import SPEC

    fleet = compile_text(SPEC.replace('version: "22.05.8"', f'version: "{version}"')).fleet
    assert fleet is not None and fleet.fabric is not None
    files = render_slurm(fleet)
    assert PurePosixPath("slurm/topology.conf") not in files
    conf = _text(files, "slurm.conf")
    assert "TopologyPlugin" not in conf and "# No leaf switches in the spec: flat topology." in conf
    assert topology_problems(fleet) == []


def test_an_adopted_render_without_the_imex_switch_has_no_imex_comment():
    """The comment follows the setting: an adopted NVL72 cluster that runs without
    SwitchType (spec.slurm.adopted.conf: {SwitchType: null}) gets neither the line nor the
    "one IMEX channel per job" comment above it; the rest of the file is the same."""
    from fleetspec.compile.ir import Adoption, SiteSettings
    from fleetspec.render.slurm import render_slurm_conf

    fleet = fleets.nvl72()
    own = render_slurm_conf(fleet)
    assert "SwitchType=switch/nvidia_imex" in own.splitlines() and "one IMEX channel per job" in own
    site = dataclasses.replace(fleet.site or SiteSettings(), adoption=Adoption(conf=(("SwitchType", None),)))
    adopted = render_slurm_conf(dataclasses.replace(fleet, site=site))
    assert "SwitchType" not in adopted and "IMEX" not in adopted
    at = own.splitlines().index("SwitchType=switch/nvidia_imex")
    gone = own.splitlines()[at - 2:at + 1]
    assert gone[0] == "" and gone[1].startswith("# NVL72 racks")
    assert adopted.splitlines() == own.splitlines()[:at - 2] + own.splitlines()[at + 1:]
    # A paragraph whose only setting went (quickstart's lone TopologyPlugin line) leaves one
    # blank line, not two.
    quick = fleets.quickstart()
    assert "\nTopologyPlugin=topology/tree\n\n" in render_slurm_conf(quick)
    flat = dataclasses.replace(quick.site or SiteSettings(), adoption=Adoption(conf=(("TopologyPlugin", None),)))
    assert "\n\n\n" not in render_slurm_conf(dataclasses.replace(quick, site=flat))
    # A key the site keeps at its own value keeps fleetspec's comment above it.
    kept = render_slurm_conf(dataclasses.replace(fleet, site=dataclasses.replace(
        site, adoption=Adoption(conf=(("SwitchType", "switch/nvidia_imex"),)))))
    assert kept == own
