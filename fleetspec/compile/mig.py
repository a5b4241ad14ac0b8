"""A node group's MIG geometry (``gpu.mig``), resolved against the catalog's MIG profiles.

The spec says either a mig-parted named geometry (``all-1g.10gb``, ``all-balanced``) or one
GPU's instances (``{1g.10gb: 2, 2g.20gb: 1, 3g.40gb: 1}``); every GPU of the group gets the
same. What cannot be made is a located error (fleetspec/catalog/mig.py says what is checked).
"""

from __future__ import annotations

from fleetspec.catalog import GpuModel
from fleetspec.catalog import mig as catalog_mig
from fleetspec.findings import Finding, Severity, SpecPath
from fleetspec.spec import model as m


def resolve(group: m.NodeGroup, gpu: GpuModel, path: SpecPath, findings: list[Finding],
            slinky: bool = False, driver: str | None = None) -> tuple[catalog_mig.Geometry, str]:
    """(one GPU's instances, the mig-parted config name) for the group; ((), "") without MIG
    or after a finding. ``driver``: the group's stack's driver version, for combinations
    older drivers refuse."""
    for i, ref in enumerate(group.other_gpus):
        if ref.mig is not None:
            findings.append(Finding("mig-geometry", Severity.ERROR,
                                    "MIG is declared on the nodes' gpu, not on other_gpus: give MIG nodes a group "
                                    "of their own", path + ("other_gpus", i, "mig")))
    wanted = group.gpu.mig
    if wanted is None:
        return (), ""
    where = path + ("gpu", "mig")
    model = catalog_mig.model_mig(gpu.id)
    if model is None:
        known = ", ".join(catalog_mig.mig_models())
        findings.append(Finding("mig-geometry", Severity.ERROR,
                                f"the catalog has no MIG profiles for {group.gpu.model}: MIG is known for {known}. "
                                "Remove gpu.mig, or use one of those models", where))
        return (), ""
    if group.scheduler == "slurm" and slinky:
        # Why no NodeSet can hold MIG instances (#46; docs/mig.md, "MIG under Slinky"):
        # Slinky's slurmd images have no NVML build (layout/slurm.py SLINKY_AUTODETECT), and
        # the gpu/nvidia plugin they detect with makes one whole GPU, typed by its model, of
        # each /proc/driver/nvidia/gpus entry (Slurm src/plugins/gpu/nvidia/gpu_nvidia.c:
        # count 1, File=/dev/nvidiaN); it never lists MIG instances. A written gres.conf
        # needs each instance's /dev/nvidia-caps minor, which the driver picks when the
        # instance is made, and a MIG job's CUDA_VISIBLE_DEVICES needs its MIG UUID, which
        # only NVML gives slurmd.
        findings.append(Finding("mig-geometry", Severity.ERROR,
                                "gpu.mig under Slinky: the slurmd pod cannot register MIG instances. Slinky's slurmd "
                                "images have no NVML build, and their AutoDetect=nvidia registers each GPU as one "
                                "whole GPU typed by its model, never its instances (Slurm gpu_nvidia.c), so the "
                                "NodeSet would register 0 of its gpu:<profile> GRES. Use mode: native (AutoDetect=nvml) "
                                "or scheduler: kubernetes for MIG nodes",
                                where))
        return (), ""
    if group.other_gpus or group.other_gres:
        findings.append(Finding("mig-geometry", Severity.ERROR,
                                "gpu.mig with other_gpus or other_gres (mps, shard): a MIG node's GRES are its "
                                "instances. Give MIG nodes a group of their own", where))
        return (), ""
    if not group.gpu.typed or group.gpu.gres:
        findings.append(Finding("mig-geometry", Severity.ERROR,
                                "gpu.mig with gres or typed: false: MIG instances are Slurm GRES typed by their "
                                "profile (gpu:1g.10gb). Remove gres / typed", where))
        return (), ""
    if isinstance(wanted, str):
        geometry = catalog_mig.named(model, wanted)
        if geometry is None:
            names = ", ".join(["all-balanced", *(f"all-{p.replace('+me', '.me')}" for p in model.profiles)])
            findings.append(Finding("mig-geometry", Severity.ERROR,
                                    f"{wanted} is not a MIG geometry of {gpu.id}. Use one of {names}, or list one "
                                    f"GPU's instances (source: {model.sources[-1]})", where))
            return (), ""
        named_as = wanted
    else:
        geometry = tuple(sorted(wanted.items()))
        named_as = ""
    if group.scheduler == "slurm" and any(name.endswith("+me") for name, _ in geometry):
        findings.append(Finding("mig-geometry", Severity.ERROR,
                                "a +me (media engines) instance under Slurm: a GRES type cannot hold '+' "
                                "(gres.conf(5) Type=), so Slurm could not name it. Use the profile without +me",
                                where))
        return (), ""
    problem = catalog_mig.check(model, geometry, driver)
    if problem is not None:
        findings.append(Finding("mig-geometry", Severity.ERROR, problem, where))
        return (), ""
    return geometry, catalog_mig.config_name(geometry, named_as)


def time_slicing(group: m.NodeGroup, gpu: GpuModel, path: SpecPath, findings: list[Finding],
                 dra_gpus: bool = False) -> int:
    """The group's time-slicing replicas (``gpu.sharing``), 0 without or after a finding.
    Time-slicing is the device plugin's; with ``dra.gpus`` the Kubernetes-owned NVIDIA nodes
    run no device plugin (render/kubernetes/dra.py), so nothing would slice their GPUs."""
    for i, ref in enumerate(group.other_gpus):
        if ref.sharing is not None:
            findings.append(Finding("mig-geometry", Severity.ERROR, "gpu.sharing is declared on the nodes' gpu, "
                                    "not on other_gpus: remove it there", path + ("other_gpus", i, "sharing")))
    sharing = group.gpu.sharing
    if sharing is None:
        return 0
    where = path + ("gpu", "sharing")
    problem = ("Slurm shares GPUs with other_gres (mps: N, shard: N): use them instead"
               if group.scheduler != "kubernetes" else
               "the NVIDIA device plugin time-slices NVIDIA GPUs only: remove gpu.sharing" if gpu.vendor != "nvidia"
               else "gpu.sharing with gpu.mig: the instances are the sharing. Give one of them" if group.gpu.mig
               else "gpu.sharing with kubernetes.dra.gpus: DRA allocates these GPUs and the device plugin that "
                    "time-slices them does not run there. Remove gpu.sharing, or set dra.gpus: false" if dra_gpus
               else None)
    if problem is not None:
        findings.append(Finding("mig-geometry", Severity.ERROR, problem, where))
        return 0
    return sharing.time_slicing


def check_partitions(nodes: tuple, partitions: tuple, findings: list[Finding]) -> None:
    """A Kubernetes partition's quota is counted in its instances' resources
    (nvidia.com/mig-1g.10gb): all its nodes carry one geometry, or none. (Slurm's typed GRES
    need no such rule: a job asks for a type, and any node with it serves.)"""
    by_host = {n.hostname: n for n in nodes}
    for p in partitions:
        if p.scheduler != "kubernetes":  # quotas are per Kubernetes partition
            continue
        members = [by_host[h] for h in p.nodes if h in by_host]
        geometries = {(n.mig, n.time_slicing) for n in members}
        if len(geometries) > 1:
            first = next(n for n in members if n.mig or n.time_slicing)
            findings.append(Finding("mig-geometry", Severity.ERROR,
                                    f"Kubernetes partition {p.name} mixes MIG geometries or time-slicing (or them and whole GPUs): "
                                    "its quotas could not count one resource. Give the Kubernetes nodes of one "
                                    "generation one geometry, or schedule the others with Slurm",
                                    first.path + ("gpu", "mig" if first.mig else "sharing")))
