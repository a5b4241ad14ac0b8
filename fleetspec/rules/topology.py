"""Rules over partitions and the fabric: what can form one collective, and how fast."""

from __future__ import annotations

from collections.abc import Iterator

from fleetspec.catalog import Catalog
from fleetspec.compile.ir import Fleet
from fleetspec.findings import Finding
from fleetspec.rules.base import error, warning


def check_mixed_vendor(fleet: Fleet, catalog: Catalog) -> Iterator[Finding]:
    for p in fleet.partitions:
        if len(p.vendors) > 1:
            yield error(
                "mixed-vendor-partition",
                f"partition '{p.name}' mixes {' and '.join(v.upper() for v in p.vendors)} GPUs "
                f"({', '.join(p.gpu_models)}). NCCL and RCCL cannot form one communicator, so no job can span "
                "them: keep one vendor per partition",
                p.path,
            )


def check_mixed_generation(fleet: Fleet, catalog: Catalog) -> Iterator[Finding]:
    for p in fleet.partitions:
        if len(p.vendors) != 1 or len(p.generations) < 2:
            continue
        gens = ", ".join(p.generations)
        amd = p.vendors == ("amd",)
        lib, link = ("RCCL", "xGMI") if amd else ("NCCL", "NVLink")
        if p.allow_mixed_generations:
            yield warning(
                "mixed-generation-partition",
                f"partition '{p.name}' mixes generations ({gens}) as allowed: {lib} will not build one ring "
                f"across {link} generations, so collectives spanning them fall back to the slowest path. "
                "Constrain jobs with --constraint to one generation",
                p.path,
            )
        else:
            yield error(
                "mixed-generation-partition",
                f"partition '{p.name}' mixes GPU generations ({gens}). {lib} rings do not span {link} generations: "
                "split it, or set allow_mixed_generations: true in slurm.partitions to accept the split communicator",
                p.path,
            )


def check_mixed_stack(fleet: Fleet, catalog: Catalog) -> Iterator[Finding]:
    for p in fleet.partitions:
        if len(p.stacks) > 1:
            yield error(
                "mixed-stack-partition",
                f"partition '{p.name}' runs several stack tuples ({', '.join(p.stacks)}). Every node of a "
                "synchronous job must run the same tuple, or the gang hangs: use one stack for all its nodes",
                p.path,
            )


def check_nvlink_domain(fleet: Fleet, catalog: Catalog) -> Iterator[Finding]:
    for rack in fleet.racks:
        if not rack.nvlink_domain:
            continue
        models = sorted({n.gpu.model for n in fleet.nodes if n.rack == rack.name})
        for model in models:
            gpu = catalog.gpus.get(model)
            if gpu is not None and not gpu.rack_scale_nvlink:
                yield error(
                    "nvlink-domain-model",
                    f"rack '{rack.name}' is declared one NVLink domain (nvlink_domain: rack), but {gpu.name} has "
                    "no rack-scale NVLink (that takes GB200/GB300 NVL72). Remove nvlink_domain or fix the GPU model",
                    rack.path + ("nvlink_domain",),
                )


def check_tcp_fallback(fleet: Fleet, catalog: Catalog) -> Iterator[Finding]:
    if fleet.fabric is None or fleet.fabric.type != "ethernet":
        return
    for p in fleet.partitions:
        if len(p.nodes) > 1:
            yield warning(
                "tcp-fallback-risk",
                f"partition '{p.name}' spans {len(p.nodes)} nodes on plain ethernet: NCCL/RCCL will use TCP "
                "sockets between nodes, an order of magnitude slower than RDMA. Use fabric type roce or "
                "infiniband, or suppress tcp-fallback-risk if this is intended",
                fleet.fabric.path + ("type",),
            )


def check_node_shape(fleet: Fleet, catalog: Catalog) -> Iterator[Finding]:
    """CPUs must equal sockets x cores x threads, or sockets x cores (only the cores of a
    hyper-threaded node scheduled), where all are given: slurmd reports the real layout,
    and a node whose slurm.conf line disagrees is drained as INVALID. slurm.conf(5) of
    Slurm 22.05.8 (Debian's slurm-wlm-doc, /usr/share/man/man5/slurm.conf.5.gz), CPUs:
    "It can be set to the total number of sockets(supported only by select/linear), cores
    or threads. This can be useful when you want to schedule only the cores on a
    hyper-threaded node" (https://slurm.schedmd.com/slurm.conf.html); fleetspec renders
    select/cons_tres, so the sockets form stays refused."""
    seen: set[tuple[str | int, ...]] = set()
    for node in (*fleet.nodes, *fleet.cpu_nodes):
        if node.path in seen or None in (node.cpus, node.sockets, node.cores_per_socket, node.threads_per_core):
            continue
        seen.add(node.path)
        cores = node.sockets * node.cores_per_socket  # type: ignore[operator]
        layout = cores * node.threads_per_core  # type: ignore[operator]
        if node.cpus not in (layout, cores):
            yield error(
                "node-shape",
                f"cpus is {node.cpus} but sockets x cores_per_socket x threads_per_core is "
                f"{node.sockets} x {node.cores_per_socket} x {node.threads_per_core} = {layout} (or {cores}, "
                "the cores alone). Slurm would mark these nodes INVALID: fix whichever number is wrong (lscpu on "
                "a node shows the layout)",
                node.path + ("cpus",),
            )


def check_site_gpu_models(fleet: Fleet, catalog: Catalog) -> Iterator[Finding]:
    """A GPU model the site declared (``spec.gpu_models``) has no sourced facts: the driver,
    CUDA, NCCL and ROCm support rules cannot check its nodes' tuple."""
    used = {g.model for n in fleet.nodes for g in (n.gpu, *n.other_gpus)}
    for gpu_id in sorted(catalog.site_models):
        where = "its nodes" if gpu_id in used else "no node group yet"
        yield warning(
            "site-gpu-model",
            f"GPU model '{gpu_id}' is the site's declaration, not a catalog model: no sourced facts say which "
            f"drivers, CUDA, NCCL or ROCm releases support it, so the tuple rules skip {where}. Check the stack "
            "on a node (fleetspec verify), or use a catalog model (fleetspec catalog) if one matches",
            ("spec", "gpu_models", gpu_id),
        )
