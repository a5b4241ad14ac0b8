"""Fleets built as IR for the Ansible tests (the compiler is tested elsewhere).

Why as IR: the renderer and the playbooks read only the IR; building it directly
keeps these tests about the node layer, and lets the lab test pick tiny fleets. The
parts with rules of their own come from the compiler: GPUs resolved from the catalog
(``gpu_spec_of``) and partitions from ``build_partitions``.
"""

from __future__ import annotations

from fleetspec.catalog import load_catalog
from fleetspec.compile.compiler import gpu_spec_of
from fleetspec.compile.ir import (
    Fabric,
    Fleet,
    Node,
    Rack,
    SlurmConfig,
    StackTuple,
)
from fleetspec.compile.partitions import build_partitions

# Each model's GPUs as the compiler resolves them from the catalog (vendor, generation,
# GRES type, CPU architecture): 8 to a board, 4 to a GB200 tray.
GPUS = {model: gpu_spec_of(load_catalog().gpus[model], 4 if model == "gb200" else 8)
        for model in ("a100", "h100-sxm", "h200", "b200", "gb200", "mi300x", "mi355x")}


def _nodes(prefix: str, count: int, model: str, rack: str, leaf: str, stack: str, scheduler: str,
           width: int = 2, domain: str | None = None) -> list[Node]:
    return [
        Node(f"{prefix}-{i:0{width}d}", rack, leaf, domain, GPUS[model], stack, scheduler, "")  # type: ignore[arg-type]
        for i in range(1, count + 1)
    ]


def _racks(nodes: list[Node]) -> tuple[Rack, ...]:
    seen: dict[str, list[Node]] = {}
    for n in nodes:
        seen.setdefault(n.rack, []).append(n)
    return tuple(Rack(r, ms[0].leaf, ms[0].nvlink_domain is not None, tuple(m.hostname for m in ms))
                 for r, ms in seen.items())


def lab(nvidia: StackTuple, amd: StackTuple, os: str = "ubuntu-24.04", nvidia_gpu: str = "h100-sxm") -> Fleet:
    """Two Slurm nodes, one per vendor; the NVIDIA node (gpu-h100-01, or gpu-b200-01 for an
    HGX B200 board) is also the controller and slurmdbd host."""
    prefix = f"gpu-{GPUS[nvidia_gpu].gres_type}"
    slurm = SlurmConfig("25.11.8", "native", (f"{prefix}-01",), f"{prefix}-01", "none")
    findings: list = []
    nodes, partitions = build_partitions(
        tuple(_nodes(prefix, 1, nvidia_gpu, "r01", "leaf-01", nvidia.name, "slurm")
              + _nodes("gpu-mi300", 1, "mi300x", "r01", "leaf-01", amd.name, "slurm")), slurm, findings)
    assert findings == [], findings
    return Fleet(
        name="lab",
        os=os,
        stacks=tuple(sorted((nvidia, amd), key=lambda s: s.name)),
        fabric=Fabric("infiniband", ("spine-01",), ("leaf-01",)),
        racks=_racks(list(nodes)),
        nodes=nodes,
        partitions=partitions,
        slurm=slurm,
        kubernetes=None,
    )
