"""Fleets for the Kubernetes-layer tests: the compiled examples, and variants of them.

``museum()`` compiles ``examples/museum.yaml``. Variants are ``dataclasses.replace`` edits
of museum: the shapes a user would write.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from fleetspec.compile.ir import Fleet

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def compiled(name: str) -> Fleet:
    """The compiled example (examples/<name>.yaml); a compile failure fails the test."""
    from fleetspec.pipeline import compile_file

    result = compile_file(EXAMPLES / f"{name}.yaml")
    assert result.valid and result.fleet is not None, [f.message for f in result.findings]
    return result.fleet


def museum() -> Fleet:
    return compiled("museum")


def named_pool() -> Fleet:
    """museum with its B200 node group in a partition it names (``partition: b200-pool``)
    and the inference tenant's Blackwell quota moved onto it: a Kubernetes partition that
    is not generated, written as a user would (compiled from the YAML, not edited)."""
    from fleetspec.pipeline import compile_text

    text = (EXAMPLES / "museum.yaml").read_text()
    group = "          stack: blackwell-cu13\n          scheduler: kubernetes\n          cpus: 224\n"
    assert text.count(group) == 1 and text.count("quota: {nvidia-blackwell: 32,") == 1
    text = text.replace(group, group + "          partition: b200-pool\n").replace(
        "quota: {nvidia-blackwell: 32,", "quota: {b200-pool: 32,")
    result = compile_text(text, "museum-named-pool.yaml")
    assert result.valid and result.fleet is not None, [f.message for f in result.findings]
    return result.fleet


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


def rdma_sriov(fleet: Fleet) -> Fleet:
    """RDMA NICs as host devices, one per pod, with their secondary network."""
    return _k8s(fleet, network_rdma="sriov")
