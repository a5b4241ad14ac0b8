"""Fleets for the Kubernetes-layer tests: the compiled examples, and variants of them.

``museum()`` compiles ``examples/museum.yaml`` when the compiler is importable; until then
it builds the same fleet by hand (``hand_museum``), so the renderer is tested either way.
Variants are ``dataclasses.replace`` edits of museum: the shapes a user would write.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from fleetspec.compile.ir import (
    Fabric,
    Fleet,
    GpuOperatorConfig,
    GpuSpec,
    KubernetesConfig,
    Node,
    Partition,
    Rack,
    SlurmConfig,
    StackTuple,
    Tenant,
)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def compiled(name: str) -> Fleet | None:
    """The compiled example, or None while the compiler is not importable yet."""
    try:
        from fleetspec.compile import compile_file  # type: ignore[attr-defined]

        return compile_file(EXAMPLES / f"{name}.yaml").fleet
    except ImportError:  # the compiler (or the rules it runs) is not in place yet
        return None


def museum() -> Fleet:
    return compiled("museum") or hand_museum()


def _nodes(prefix: str, numbers: range, width: int, **kw) -> list[Node]:
    return [Node(hostname=f"{prefix}{i:0{width}d}", **kw) for i in numbers]


_GPUS = {
    "a100": GpuSpec("a100", 8, "nvidia", "ampere", "a100", 80),
    "h100-sxm": GpuSpec("h100-sxm", 8, "nvidia", "hopper", "h100", 80),
    "h200": GpuSpec("h200", 8, "nvidia", "hopper", "h200", 141),
    "b200": GpuSpec("b200", 8, "nvidia", "blackwell", "b200", 180),
    "gb200": GpuSpec("gb200", 4, "nvidia", "blackwell", "gb200", 186),
    "mi300x": GpuSpec("mi300x", 8, "amd", "cdna3", "mi300x", 192),
    "mi355x": GpuSpec("mi355x", 8, "amd", "cdna4", "mi355x", 288),
}


def _group(prefix, numbers, width, rack, leaf, model, stack, scheduler, partition,
           nvlink=None):
    return _nodes(prefix, numbers, width, rack=rack, leaf=leaf, nvlink_domain=nvlink,
                  gpu=_GPUS[model], stack=stack, scheduler=scheduler, partition=partition)


def _partition(name, scheduler, nodes, generated=True, **kw) -> Partition:
    return Partition(
        name=name,
        scheduler=scheduler,
        vendors=tuple(sorted({n.gpu.vendor for n in nodes})),
        generations=tuple(sorted({n.gpu.generation for n in nodes})),
        gpu_models=tuple(sorted({n.gpu.model for n in nodes})),
        nodes=tuple(sorted(n.hostname for n in nodes)),
        gpus=sum(n.gpu.count for n in nodes),
        stacks=tuple(sorted({n.stack for n in nodes})),
        generated=generated,
        **kw,
    )


def hand_museum() -> Fleet:
    """examples/museum.yaml, compiled by hand."""
    a100 = _group("a100-", range(1, 5), 2, "r01", "leaf-01", "a100", "ampere-cu12", "slurm",
                  "nvidia-ampere")
    h100 = _group("h100-", range(1, 5), 3, "r01", "leaf-01", "h100-sxm", "hopper-cu13",
                  "slurm", "nvidia-hopper")
    h200 = _group("h200-", range(1, 5), 3, "r02", "leaf-01", "h200", "hopper-cu13", "slurm",
                  "nvidia-hopper")
    b200 = _group("b200-", range(1, 5), 2, "r03", "leaf-02", "b200", "blackwell-cu13",
                  "kubernetes", "nvidia-blackwell")
    mi300 = _group("mi300x-", range(1, 5), 2, "r03", "leaf-02", "mi300x", "cdna3-rocm7",
                   "slurm", "amd-cdna3")
    mi355 = _group("mi355x-", range(1, 3), 2, "r04", "leaf-02", "mi355x", "cdna4-rocm7",
                   "kubernetes", "amd-cdna4")
    gb200 = _group("gb200-r07-", range(1, 19), 2, "r07", "leaf-02", "gb200", "blackwell-cu13",
                   "kubernetes", "nvidia-blackwell", nvlink="r07")
    nodes = (*a100, *h100, *h200, *b200, *mi300, *mi355, *gb200)
    stacks = (
        StackTuple("ampere-cu12", "nvidia", driver="580.95.05", cuda="12.8.1", cudnn="9.10.2",
                   nccl="2.26.2"),
        StackTuple("blackwell-cu13", "nvidia", driver="580.173.02", cuda="13.0.2",
                   nccl="2.28.3"),
        StackTuple("cdna3-rocm7", "amd", rocm="7.0.2", rccl="2.26.6"),
        StackTuple("cdna4-rocm7", "amd", rocm="7.0.2", rccl="2.26.6", resolved=("rccl",)),
        StackTuple("hopper-cu13", "nvidia", driver="580.95.05", cuda="13.0.2", cudnn="9.17.0",
                   nccl="2.28.3"),
    )
    partitions = (
        _partition("amd-cdna3", "slurm", mi300),
        _partition("amd-cdna4", "kubernetes", mi355),
        _partition("nvidia-ampere", "slurm", a100),
        _partition("nvidia-blackwell", "kubernetes", [*b200, *gb200]),
        _partition("nvidia-hopper", "slurm", [*h100, *h200], default=True,
                   max_time="2-00:00:00"),
        _partition("debug", "slurm", h100[:2], generated=False, max_time="00:30:00"),
    )
    racks = (
        Rack("r01", "leaf-01", False, tuple(n.hostname for n in (*a100, *h100))),
        Rack("r02", "leaf-01", False, tuple(n.hostname for n in h200)),
        Rack("r03", "leaf-02", False, tuple(n.hostname for n in (*b200, *mi300))),
        Rack("r04", "leaf-02", False, tuple(n.hostname for n in mi355)),
        Rack("r07", "leaf-02", True, tuple(n.hostname for n in gb200)),
    )
    kubernetes = KubernetesConfig(
        version="1.36",
        gpu_operator=GpuOperatorConfig("v26.7.0", "operator"),
        amd_gpu_operator_version="v1.5.1",
        queueing="kueue",
        gang="kueue",
        quota_owners=("kueue",),
        tenants=(
            Tenant("research", ("research",), (("nvidia-blackwell", 64),)),
            Tenant("inference", ("inference", "inference-canary"),
                   (("amd-cdna4", 16), ("nvidia-blackwell", 40))),
        ),
    )
    return Fleet(
        name="museum",
        os="ubuntu-24.04",
        stacks=stacks,
        fabric=Fabric("infiniband", ("spine-01", "spine-02"), ("leaf-01", "leaf-02")),
        racks=racks,
        nodes=nodes,
        partitions=partitions,
        slurm=SlurmConfig("25.11.8", "native", ("ctl-01", "ctl-02"), "db-01", "pyxis"),
        kubernetes=kubernetes,
    )


def _k8s(fleet: Fleet, **changes) -> Fleet:
    assert fleet.kubernetes is not None
    return dataclasses.replace(fleet, kubernetes=dataclasses.replace(fleet.kubernetes,
                                                                     **changes))


def volcano(fleet: Fleet) -> Fleet:
    """Volcano queues and gang instead of Kueue."""
    return _k8s(fleet, queueing="volcano", gang="volcano", quota_owners=("volcano",))


def workload_api(fleet: Fleet) -> Fleet:
    """Kubernetes 1.37 with the Workload API gang, Kueue for quota."""
    return _k8s(fleet, version="1.37", gang="workload-api")


def host_driver(fleet: Fleet) -> Fleet:
    """Drivers preinstalled by Ansible: the operators must not manage them."""
    assert fleet.kubernetes is not None and fleet.kubernetes.gpu_operator is not None
    op = dataclasses.replace(fleet.kubernetes.gpu_operator, driver="host")
    return _k8s(fleet, gpu_operator=op)


def two_nvidia_stacks(fleet: Fleet) -> Fleet:
    """The A100 pool moves from Slurm to Kubernetes: two NVIDIA stacks (ampere-cu12 and
    blackwell-cu13, different drivers) on Kubernetes, so one NVIDIADriver per stack."""
    nodes = tuple(
        dataclasses.replace(n, scheduler="kubernetes") if n.gpu.model == "a100" else n
        for n in fleet.nodes
    )
    parts = tuple(
        dataclasses.replace(p, scheduler="kubernetes") if p.name == "nvidia-ampere" else p
        for p in fleet.partitions
    )
    return dataclasses.replace(fleet, nodes=nodes, partitions=parts)


def no_tenants(fleet: Fleet) -> Fleet:
    return _k8s(fleet, tenants=())


def slinky(fleet: Fleet) -> Fleet:
    """``slurm.mode: slinky`` as validation accepts it: the user's host-list partition
    dropped, and the AMD Slurm pool (MI300X) moved to Kubernetes, so one vendor runs under
    Slinky (one gres.conf for all NodeSets)."""
    assert fleet.slurm is not None
    amd_slurm = {p.name for p in fleet.partitions if p.scheduler == "slurm" and p.generated
                 and p.vendors == ("amd",)}
    nodes = tuple(dataclasses.replace(n, scheduler="kubernetes") if n.partition in amd_slurm
                  else n for n in fleet.nodes)
    parts = tuple(dataclasses.replace(p, scheduler="kubernetes") if p.name in amd_slurm else p
                  for p in fleet.partitions if p.generated or p.scheduler != "slurm")
    slurm = dataclasses.replace(fleet.slurm, mode="slinky", slinky_version="1.2.1")
    return dataclasses.replace(fleet, nodes=nodes, partitions=parts, slurm=slurm)


def kai(fleet: Fleet) -> Fleet:
    """``queueing: kai``: KAI Scheduler queues, quota and gang from the same tenants. KAI's
    queues count NVIDIA GPUs only, so tenants keep their NVIDIA quota and drop the AMD one
    (the quota-engine-coverage rule refuses it)."""
    assert fleet.kubernetes is not None
    amd = {p.name for p in fleet.partitions if p.vendors == ("amd",)}
    tenants = tuple(dataclasses.replace(t, quota=tuple((p, g) for p, g in t.quota if p not in amd))
                    for t in fleet.kubernetes.tenants)
    return _k8s(fleet, queueing="kai", gang="kai", quota_owners=("kai",), tenants=tenants,
                kai_version="v0.17.0")


def dra_gpus(fleet: Fleet) -> Fleet:
    """DRA allocates the NVIDIA GPUs (not the device plugin); Kueue counts the claims."""
    return _k8s(fleet, dra_nvidia_version="0.4.1", dra_gpus=True)
