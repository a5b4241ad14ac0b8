"""Fleets for the Slurm tests.

The examples are compiled from ``examples/*.yaml`` by fleetspec's compiler. Fleets no
example has (a Slurm-owned NVL72 rack, the real-Slurm lab, one node) are built here
the way the compiler resolves them: partitions by vendor + generation per allocation
owner, plus the user's extra partitions.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from fleetspec.compile.ir import Fabric, Fleet, GpuSpec, Node, Partition, Rack, SlurmConfig
from fleetspec.spec.hostlist import expand

ROOT = Path(__file__).resolve().parents[2]

# model -> (vendor, generation, gres type, memory GB): the catalog facts the tests need.
MODELS = {
    "a100": ("nvidia", "ampere", "a100", 80),
    "h100-sxm": ("nvidia", "hopper", "h100", 80),
    "h200": ("nvidia", "hopper", "h200", 141),
    "b200": ("nvidia", "blackwell", "b200", 180),
    "gb200": ("nvidia", "blackwell", "gb200", 186),
    "mi300x": ("amd", "cdna3", "mi300x", 192),
    "mi355x": ("amd", "cdna4", "mi355x", 288),
}


@dataclass
class Group:
    hosts: str
    model: str
    count: int
    stack: str
    scheduler: str = "slurm"
    cpus: int | None = 224
    sockets: int | None = 2
    cores_per_socket: int | None = 56
    threads_per_core: int | None = 2
    memory_gb: int | None = 2048


@dataclass
class RackDef:
    name: str
    leaf: str | None
    groups: list[Group]
    nvlink_domain: bool = False


@dataclass
class Extra:
    """A user partition: settings for a generated one, or an extra one with ``nodes``."""

    name: str
    nodes: str | None = None
    default: bool = False
    max_time: str | None = None
    state: str | None = None


@dataclass
class FleetDef:
    name: str
    racks: list[RackDef]
    spines: tuple[str, ...] = ("spine-01",)
    fabric: str | None = "infiniband"
    version: str = "25.11.8"
    controllers: tuple[str, ...] = ("ctl-01",)
    accounting_host: str | None = "db-01"
    containers: str = "pyxis"
    mode: str = "native"
    partitions: list[Extra] = field(default_factory=list)


def build(d: FleetDef) -> Fleet:
    """Resolve a FleetDef into the IR, as the compiler does."""
    nodes: list[Node] = []
    racks: list[Rack] = []
    for ri, rack in enumerate(d.racks):
        names: list[str] = []
        for gi, g in enumerate(rack.groups):
            vendor, generation, gres, mem = MODELS[g.model]
            gpu = GpuSpec(g.model, g.count, vendor, generation, gres, mem)  # type: ignore[arg-type]
            for host in expand(g.hosts):
                names.append(host)
                nodes.append(Node(
                    hostname=host, rack=rack.name, leaf=rack.leaf,
                    nvlink_domain=rack.name if rack.nvlink_domain else None,
                    gpu=gpu, stack=g.stack, scheduler=g.scheduler,  # type: ignore[arg-type]
                    partition=f"{vendor}-{generation}", cpus=g.cpus, sockets=g.sockets,
                    cores_per_socket=g.cores_per_socket, threads_per_core=g.threads_per_core,
                    memory_gb=g.memory_gb, path=("spec", "racks", ri, "nodes", gi),
                ))
        racks.append(Rack(rack.name, rack.leaf, rack.nvlink_domain, tuple(names), ("spec", "racks", ri)))
    settings = {p.name: p for p in d.partitions}
    generated: dict[tuple[str, str], list[Node]] = {}
    for n in nodes:
        generated.setdefault((n.scheduler, n.partition), []).append(n)
    partitions = [
        _partition(name, scheduler, members, True, settings.get(name))
        for (scheduler, name), members in sorted(generated.items(), key=lambda kv: kv[0][1])
    ]
    index = {n.hostname: n for n in nodes}
    for extra in sorted((p for p in d.partitions if p.nodes), key=lambda p: p.name):
        members = [index[h] for h in expand(extra.nodes or "")]
        partitions.append(_partition(extra.name, "slurm", members, False, extra))
    leaves = tuple(dict.fromkeys(r.leaf for r in d.racks if r.leaf))
    fabric = Fabric(d.fabric, d.spines, leaves) if d.fabric else None  # type: ignore[arg-type]
    slurm = SlurmConfig(
        version=d.version, mode=d.mode, controllers=d.controllers,  # type: ignore[arg-type]
        accounting_host=d.accounting_host, containers=d.containers,  # type: ignore[arg-type]
        path=("spec", "slurm"),
    )
    return Fleet(
        name=d.name, os="ubuntu-24.04", stacks=(), fabric=fabric, racks=tuple(racks),
        nodes=tuple(nodes), partitions=tuple(partitions), slurm=slurm, kubernetes=None,
    )


def _partition(name: str, scheduler: str, members: list[Node], generated: bool, s: Extra | None) -> Partition:
    return Partition(
        name=name, scheduler=scheduler,  # type: ignore[arg-type]
        vendors=tuple(sorted({n.gpu.vendor for n in members})),
        generations=tuple(sorted({n.gpu.generation for n in members})),
        gpu_models=tuple(sorted({n.gpu.model for n in members})),
        nodes=tuple(sorted(n.hostname for n in members)),
        gpus=sum(n.gpu.count for n in members),
        stacks=tuple(sorted({n.stack for n in members})),
        generated=generated,
        default=bool(s and s.default), max_time=s.max_time if s else None,
        state=s.state if s else None,
        path=("spec", "slurm", "partitions", name) if s else (),
    )


def with_version(fleet: Fleet, version: str) -> Fleet:
    """The same fleet rendered for another Slurm release."""
    assert fleet.slurm is not None
    return dataclasses.replace(fleet, slurm=dataclasses.replace(fleet.slurm, version=version))


def _compiled(example: str) -> Fleet:
    """The example compiled by fleetspec's own compiler (an invalid example fails here)."""
    from fleetspec.compile import compile_file

    result = compile_file(ROOT / "examples" / f"{example}.yaml")
    assert result.fleet is not None, [f.message for f in result.findings]
    return result.fleet


def quickstart() -> Fleet:
    return _compiled("quickstart")


def museum() -> Fleet:
    return _compiled("museum")


def nvl72(with_tree_nodes: bool = True) -> Fleet:
    """Two Slurm-owned GB200 NVL72 racks (one NVLink domain each), and optionally a
    rack of H200s that needs the leaf tree: the fleet that needs tree and block at once."""
    gb200 = Group("", "gb200", 4, "blackwell-cu13", cpus=144, sockets=2, cores_per_socket=72,
                  threads_per_core=1, memory_gb=960)
    racks = [
        RackDef("r07", "leaf-03", [dataclasses.replace(gb200, hosts="gb200-r07-[01-18]")], nvlink_domain=True),
        RackDef("r08", "leaf-04", [dataclasses.replace(gb200, hosts="gb200-r08-[01-18]")], nvlink_domain=True),
    ]
    if with_tree_nodes:
        racks.insert(0, RackDef("r01", "leaf-01", [Group("h200-[001-004]", "h200", 8, "hopper-cu13")]))
    return build(FleetDef(name="nvl72", racks=racks, spines=("spine-01", "spine-02"),
                          partitions=[Extra("nvidia-blackwell", default=True)]))


def lab() -> Fleet:
    """The fleet the real-Slurm tests start: six nodes, two vendors, three leaves.

    nvidia-hopper spans two leaves (H100 under leaf-01, H200 under leaf-02) so a
    topology test can tell a one-leaf placement from a two-leaf one; amd-cdna3 owns the
    mi300x type; ``debug`` is an extra partition over the H100s.
    """
    return build(FleetDef(
        name="lab",
        accounting_host=None,
        containers="none",
        version="22.05.8",
        racks=[
            RackDef("r01", "leaf-01", [Group("h100-[01-02]", "h100-sxm", 8, "hopper-cu13")]),
            RackDef("r02", "leaf-02", [Group("h200-[01-02]", "h200", 8, "hopper-cu13")]),
            RackDef("r03", "leaf-03", [Group("mi300x-[01-02]", "mi300x", 8, "cdna3-rocm7", cpus=192,
                                             cores_per_socket=48)]),
        ],
        partitions=[
            Extra("nvidia-hopper", default=True, max_time="2-00:00:00"),
            Extra("debug", nodes="h100-[01-02]", max_time="00:30:00"),
        ],
    ))


def single_h100() -> Fleet:
    """One H100 node in one partition: the smallest cluster, for negative tests."""
    return build(FleetDef(
        name="single", accounting_host=None, containers="none", version="22.05.8",
        racks=[RackDef("r01", "leaf-01", [Group("h100-01", "h100-sxm", 8, "hopper-cu13")])],
    ))
