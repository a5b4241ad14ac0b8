"""What the spec gained for imported clusters (#29 item 2): RealMemory as written,
CPU-only node groups, and CPUs counting cores alone on a hyper-threaded node."""

from __future__ import annotations

from fleetspec.pipeline import compile_text
from fleetspec.render.ansible import render_ansible
from fleetspec.render.slurm import render_slurm_conf

HEAD = """apiVersion: fleetspec.io/v1alpha1
kind: Fleet
metadata: {name: mixed}
spec:
  os: ubuntu-24.04
  stacks:
    hopper-cu13: {driver: "580.95.05", cuda: "13.0.2", cudnn: "9.17.0", nccl: "2.28.3"}
  racks:
    - name: r01
"""
GPU = """      nodes:
        - {hosts: "g[01-02]", gpu: {model: h100-sxm, count: 8}, stack: hopper-cu13, scheduler: slurm, %s}
"""
CPU = """      cpu_nodes:
        - {hosts: "login01", cpus: 16, real_memory_mb: 64000, features: [login]}
        - {hosts: "c[01-04]", %s}
"""
TAIL = """  slurm:
    version: "25.11.8"
    mode: %s
    controllers: ctl-01
    partitions:
      cpu: {nodes: "c[01-04]", default: true, max_time: "1-00:00:00"}
      all: {nodes: "g[01-02],c[01-04],login01"}
"""


def spec(gpu: str = "cpus: 224, sockets: 2, cores_per_socket: 56, threads_per_core: 2, real_memory_mb: 2000000",
         cpu: str = "cpus: 64, sockets: 2, cores_per_socket: 32, real_memory_mb: 256000, slurm_settings: {Weight: 5}",
         mode: str = "native", cpu_nodes: bool = True) -> str:
    return HEAD + GPU % gpu + (CPU % cpu if cpu_nodes else "") + TAIL % mode


def _errors(text: str) -> list[str]:
    result = compile_text(text, "fleet.yaml")
    return [f"{f.path}: {f.message}" for f in result.located() if f.severity >= 2]


def test_cpu_nodes_render_into_slurm_and_the_inventory_outside_gpu_partitions() -> None:
    result = compile_text(spec(), "fleet.yaml")
    assert result.valid, _errors(spec())
    conf = render_slurm_conf(result.fleet)
    assert "NodeName=g[01-02] CPUs=224 Sockets=2 CoresPerSocket=56 ThreadsPerCore=2 RealMemory=2000000 " in conf
    assert "NodeName=login01 CPUs=16 RealMemory=64000 Features=r01,login State=UNKNOWN" in conf
    assert "NodeName=c[01-04] CPUs=64 Sockets=2 CoresPerSocket=32 RealMemory=256000 Features=r01 Weight=5" in conf
    assert "PartitionName=nvidia-hopper Nodes=g[01-02] " in conf
    assert "PartitionName=cpu Nodes=c[01-04] Default=YES" in conf
    assert "PartitionName=all Nodes=c[01-04],g[01-02],login01 " in conf
    inventory = render_ansible(result.fleet)[next(p for p in render_ansible(result.fleet) if p.name == "inventory.yml")]
    slurm_node = inventory.split("slurm_node:", 1)[1].split("    ", 1)[0]
    assert "login01" in inventory.split("cpu_node:", 1)[1].split("partition_", 1)[0]
    assert "c01: null" in inventory.split("slurm_node:", 1)[1] and slurm_node is not None
    assert "login01" not in inventory.split("generation_hopper:", 1)[1].split("    generation_", 1)[0].split(
        "partition_", 1)[0]


def test_cpu_nodes_need_native_slurm() -> None:
    assert any("need spec.slurm with mode: native" in e for e in _errors(spec(mode="slinky")))


def test_a_host_in_both_a_gpu_and_a_cpu_group_is_a_duplicate() -> None:
    text = spec().replace('hosts: "c[01-04]"', 'hosts: "c[01-04],g01"')
    assert any("listed twice" in e for e in _errors(text))


def test_memory_gb_and_real_memory_mb_together_are_refused() -> None:
    errors = _errors(spec(gpu="memory_gb: 2048, real_memory_mb: 2000000"))
    assert any("not both" in e for e in errors), errors


def test_cpus_may_count_the_cores_alone_but_not_another_number() -> None:
    assert _errors(spec(gpu="cpus: 112, sockets: 2, cores_per_socket: 56, threads_per_core: 2")) == []
    errors = _errors(spec(gpu="cpus: 100, sockets: 2, cores_per_socket: 56, threads_per_core: 2"))
    assert any("node-shape" not in e and "cpus is 100" in e for e in errors), errors
    errors = _errors(spec(cpu="cpus: 60, sockets: 2, cores_per_socket: 32, threads_per_core: 2"))
    assert any("cpu_nodes[1].cpus: cpus is 60" in e for e in errors), errors


def test_a_rack_needs_some_node_group() -> None:
    text = spec().replace(GPU % "cpus: 224, sockets: 2, cores_per_socket: 56, threads_per_core: 2, "
                          "real_memory_mb: 2000000", "").replace('nodes: "g[01-02],', 'nodes: "')
    assert _errors(text) == []  # CPU nodes alone make a rack
    empty = HEAD.replace("    - name: r01\n", "    - name: r01\n      nodes: []\n") + TAIL % "native"
    assert any("has no node groups" in e for e in _errors(empty))


def test_mps_and_shards_render_per_gpu_device_and_in_gres_types() -> None:
    text = spec(gpu="cpus: 224, other_gres: {mps: 800, shard: 16}")
    result = compile_text(text, "fleet.yaml")
    assert result.valid, _errors(text)
    from fleetspec.render.slurm import render_gres_conf

    conf, gres = render_slurm_conf(result.fleet), render_gres_conf(result.fleet)
    assert "GresTypes=gpu,mps,shard" in conf and "Gres=gpu:h100:8,mps:800,shard:16 " in conf
    assert "NodeName=g[01-02] Name=mps Count=100 File=/dev/nvidia0\n" in gres
    assert "NodeName=g[01-02] Name=shard Count=2 File=/dev/nvidia7\n" in gres
    assert "GresTypes=gpu\n" in render_slurm_conf(compile_text(spec(), "f.yaml").fleet)  # unchanged without them


def test_other_gres_must_split_evenly_and_mps_is_nvidia_only() -> None:
    assert any("does not split evenly over 8 GPUs" in e for e in _errors(spec(gpu="other_gres: {mps: 100}")))
    amd = spec(gpu="other_gres: {mps: 800}").replace("model: h100-sxm", "model: mi300x").replace(
        'hopper-cu13: {driver: "580.95.05", cuda: "13.0.2", cudnn: "9.17.0", nccl: "2.28.3"}',
        'hopper-cu13: {rocm: "6.4.1"}')
    assert any("NVIDIA only" in e for e in _errors(amd)), _errors(amd)


def test_cpu_nodes_are_in_the_plans_per_node_changes() -> None:
    """#29 item 4: adding, reshaping and removing CPU nodes are per-node changes, as for GPU nodes."""
    from fleetspec.plan.model import Action, Disruption
    from fleetspec.plan.planner import make_plan

    old = compile_text(spec(), "old.yaml").fleet
    new_text = spec(cpu="cpus: 64, sockets: 2, cores_per_socket: 32, real_memory_mb: 512000, "
                    "slurm_settings: {Weight: 5}").replace('"login01", cpus: 16', '"login02", cpus: 16')
    new_text = new_text.replace("g[01-02],c[01-04],login01", "g[01-02],c[01-04],login02")
    new = compile_text(new_text, "new.yaml")
    assert new.valid, _errors(new_text)
    changes = {c.target: c for c in make_plan(new.fleet, old).changes if c.host is not None}
    assert changes["node:c01"].action is Action.UPDATE
    assert changes["node:c01"].before == {"real_memory_mb": 256000}
    assert changes["node:c01"].after == {"real_memory_mb": 512000}
    assert "RealMemory (MB) 256000 -> 512000" in changes["node:c01"].reason
    assert changes["node:login02"].action is Action.CREATE
    assert changes["node:login01"].action is Action.DELETE
    assert changes["node:login01"].disruption is Disruption.DRAIN
    assert {"node:c02", "node:c03", "node:c04"} <= set(changes)
    assert "node:g01" not in changes


MIXED = """apiVersion: fleetspec.io/v1alpha1
kind: Fleet
metadata: {name: mixed-models}
spec:
  os: ubuntu-24.04
  gpu_models:
    t4: {vendor: nvidia, name: Tesla T4, generation: turing, architecture: Turing, memory_gb: 16, gres: t4}
  stacks:
    s: {driver: "580.95.05", cuda: "13.0.2", cudnn: "9.17.0", nccl: "2.28.3"}
  racks:
    - name: r01
      nodes:
        - {hosts: "m[01-02]", gpu: {model: a100, count: 2}, other_gpus: [%s], stack: s, scheduler: %s}
        - {hosts: "g01", gpu: {model: a100, count: 4}, stack: s, scheduler: slurm}
  slurm: {version: "25.11.8", mode: native, controllers: ctl-01}
"""


def test_a_node_with_two_gpu_models_renders_a_typed_gres_each_in_device_order() -> None:
    """#29 item 1: gpu:a100:2,gpu:t4:1; the node stays in its primary model's partition."""
    from fleetspec.render.slurm import render_slurm

    result = compile_text(MIXED % ("{model: t4, count: 1}", "slurm"), "fleet.yaml")
    assert result.valid, _errors(MIXED)
    warned = [f for f in result.located() if "other_gpus[0]" in f.path]
    assert warned and "the nodes stay in the ampere partition" in warned[0].message
    files = {p.name: t for p, t in render_slurm(result.fleet).items()}
    assert "NodeName=m[01-02] Gres=gpu:a100:2,gpu:t4:1 Features=nvidia,ampere,a100,turing,t4,r01,s " in \
        files["slurm.conf"]
    assert "PartitionName=nvidia-ampere Nodes=g01,m[01-02] " in files["slurm.conf"]
    assert ("NodeName=m[01-02] Name=gpu Type=a100 File=/dev/nvidia[0-1]\n"
            "NodeName=m[01-02] Name=gpu Type=t4 File=/dev/nvidia2\n") in files["gres.conf"]


def test_two_vendors_in_one_node_and_kubernetes_nodes_are_located_errors() -> None:
    errors = _errors(MIXED % ("{model: mi300x, count: 1}", "slurm"))
    assert any(e.startswith("spec.racks[0].nodes[0].other_gpus[0].model: mi300x is amd") and "NCCL and RCCL" in e
               for e in errors), errors
    errors = _errors(MIXED % ("{model: t4, count: 1}", "kubernetes"))
    assert any("other_gpus are typed Slurm GRES" in e for e in errors), errors
    errors = _errors(MIXED % ("{model: a100, count: 1}", "slurm"))
    assert any("a100 is listed twice" in e for e in errors), errors


def test_the_health_check_counts_every_gpu_of_a_mixed_node() -> None:
    """A lost T4 beside two A100s is a lost GPU: the node check wants all three."""
    import dataclasses

    from fleetspec.compile.ir import HealthPolicy
    from fleetspec.render.health import node_config

    fleet = compile_text(MIXED % ("{model: t4, count: 1}", "slurm"), "fleet.yaml").fleet
    fleet = dataclasses.replace(fleet, health=HealthPolicy(300, ("gpu",), ()))
    groups = {g["hosts"]: g["gpus"] for g in node_config(fleet)["nodes"]}
    assert groups == {"m[01-02]": 3, "g01": 4}


def test_a_site_cluster_name_renders_as_written_and_is_bounded_like_slurms() -> None:
    """slurm.cluster_name (#39: HAL9000_v2, brownfield/hal9000-homelab-2026): ClusterName as
    written, metadata.name stays the fleet's DNS label; at most 40 letters, digits, '_' and '-'
    (slurm.conf(5)); in Slinky mode, the slurm chart's clusterName (tests/kubernetes/test_slinky.py)."""
    text = spec().replace("    controllers: ctl-01\n", "    controllers: ctl-01\n    cluster_name: HAL9000_v2\n")
    result = compile_text(text, "f.yaml")
    assert result.valid, [f.message for f in result.located()]
    assert "ClusterName=HAL9000_v2" in render_slurm_conf(result.fleet).splitlines()
    assert '"cluster_name": "HAL9000_v2"' in result.fleet.to_json()
    assert '"cluster_name"' not in compile_text(spec(), "f.yaml").fleet.to_json()  # fleet.json as before
    for bad in ("hal 9000", "x" * 41, "_lead", "a.b", "'{{x}}'"):
        found = compile_text(text.replace("HAL9000_v2", bad), "f.yaml").located()
        assert {f.rule for f in found if f.severity.name == "ERROR"} == {"schema"}, bad
    slinky = compile_text(spec(mode="slinky", cpu_nodes=False).replace(
        "    controllers: ctl-01\n", "    controllers: ctl-01\n    cluster_name: HAL9000_v2\n"), "f.yaml")
    assert not any("cluster_name" in f.message for f in slinky.located()), [f.message for f in slinky.located()]
