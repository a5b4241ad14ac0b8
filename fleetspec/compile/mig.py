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

# Aliases the catalog folds into an 80GB model whose MIG profiles differ (the 40GB boards
# split 40GB: 1g.5gb .. 7g.40gb; catalog/data/mig.yaml lists the 80GB ones only).
_OTHER_MEMORY = ("40gb",)


def resolve(group: m.NodeGroup, gpu: GpuModel, path: SpecPath, findings: list[Finding],
            slinky: bool = False) -> tuple[catalog_mig.Geometry, str]:
    """(one GPU's instances, the mig-parted config name) for the group; ((), "") without MIG
    or after a finding."""
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
    if model is None or any(group.gpu.model.lower().endswith(s) for s in _OTHER_MEMORY):
        known = ", ".join(catalog_mig.mig_models())
        findings.append(Finding("mig-geometry", Severity.ERROR,
                                f"the catalog has no MIG profiles for {group.gpu.model}: MIG is known for {known}. "
                                "Remove gpu.mig, or use one of those models", where))
        return (), ""
    if group.scheduler == "slurm" and slinky:
        findings.append(Finding("mig-geometry", Severity.ERROR,
                                "gpu.mig under Slinky: its NodeSets declare whole GPUs, and fleetspec does not yet "
                                "render MIG instances for slurmd pods. Use native Slurm or Kubernetes for MIG nodes",
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
    problem = catalog_mig.check(model, geometry)
    if problem is not None:
        findings.append(Finding("mig-geometry", Severity.ERROR, problem, where))
        return (), ""
    return geometry, catalog_mig.config_name(geometry, named_as)


def time_slicing(group: m.NodeGroup, gpu: GpuModel, path: SpecPath, findings: list[Finding]) -> int:
    """The group's time-slicing replicas (``gpu.sharing``), 0 without or after a finding."""
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
