"""Pure checks over a fleet's Kubernetes section, for the rules in ``fleetspec.rules``.

Each returns ``[(message, spec path)]``; the rule that calls it owns the id and severity.
Release facts (which Kubernetes versions and drivers a GPU Operator release supports)
are a parameter: the catalog supplies them, so these functions hold no version data.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from fleetspec.compile.ir import Fleet, SpecPath
from fleetspec.versions import parse_version

Finding = tuple[str, SpecPath]


@dataclass(frozen=True)
class GpuOperatorRelease:
    """What the catalog knows of one NVIDIA GPU Operator release."""

    version: str  # "v26.7.0"
    k8s_min: str | None = None  # "1.32"
    k8s_max: str | None = None  # "1.36"
    drivers: tuple[str, ...] = ()  # driver versions it ships containers for; () = unknown
    default_driver: str | None = None


def tenant_quota_findings(fleet: Fleet) -> list[Finding]:
    """Quota on a partition that does not exist or is not Kubernetes-owned, quota larger
    than the partition, and partitions promised to tenants beyond their size."""
    k8s = fleet.kubernetes
    if k8s is None:
        return []
    parts = {p.name: p for p in fleet.partitions}
    k8s_parts = sorted(n for n, p in parts.items() if p.scheduler == "kubernetes")
    findings: list[Finding] = []
    promised: dict[str, int] = {}
    for tenant in k8s.tenants:
        for partition, gpus in tenant.quota:
            path = (*tenant.path, "quota", partition)
            p = parts.get(partition)
            if p is None:
                known = ", ".join(k8s_parts) or "none"
                findings.append((f"tenant {tenant.name!r} has quota on partition "
                                 f"{partition!r}, which does not exist; Kubernetes "
                                 f"partitions: {known}", path))
            elif p.scheduler != "kubernetes":
                findings.append((f"tenant {tenant.name!r} has quota on partition "
                                 f"{partition!r}, whose GPUs Slurm allocates; give Kubernetes "
                                 f"quota only on Kubernetes partitions ({', '.join(k8s_parts)})"
                                 if k8s_parts else
                                 f"tenant {tenant.name!r} has quota on partition "
                                 f"{partition!r}, whose GPUs Slurm allocates", path))
            elif gpus > p.gpus:
                findings.append((f"tenant {tenant.name!r} asks for {gpus} GPUs of partition "
                                 f"{partition!r}, which has {p.gpus}", path))
            else:
                promised[partition] = promised.get(partition, 0) + gpus
    for partition, total in sorted(promised.items()):
        if total > parts[partition].gpus:
            findings.append((f"tenants are promised {total} GPUs of partition {partition!r}, "
                             f"which has {parts[partition].gpus}; nominal quotas would "
                             "exceed the hardware", (*k8s.path, "tenants")))
    return findings


def gpu_operator_findings(fleet: Fleet,
                          releases: Mapping[str, GpuOperatorRelease]) -> list[Finding]:
    """The GPU Operator release against the spec's Kubernetes version and the drivers of
    the NVIDIA stacks it would install. A release the catalog does not know yields nothing
    here (the ``unknown-version`` rule reports it)."""
    k8s = fleet.kubernetes
    if k8s is None or k8s.gpu_operator is None:
        return []
    op = k8s.gpu_operator
    release = releases.get(op.version) or releases.get(_other_v(op.version))
    if release is None:
        return []
    findings: list[Finding] = []
    path = (*op.path, "version")
    wanted = parse_version(k8s.version)
    low = parse_version(release.k8s_min) if release.k8s_min else None
    high = parse_version(release.k8s_max) if release.k8s_max else None
    if wanted is not None and ((low and wanted[:2] < low[:2]) or (high and wanted[:2] > high[:2])):
        findings.append((f"GPU Operator {op.version} supports Kubernetes "
                         f"{release.k8s_min or '?'}-{release.k8s_max or '?'}, not "
                         f"{k8s.version}; pick a release that supports {k8s.version}", path))
    if op.driver == "operator" and release.drivers:
        stacks = sorted({n.stack for n in fleet.nodes
                         if n.scheduler == "kubernetes" and n.gpu.vendor == "nvidia"})
        for name in stacks:
            stack = fleet.stack(name)
            if stack is not None and stack.driver and stack.driver not in release.drivers:
                findings.append((f"GPU Operator {op.version} ships driver containers for "
                                 f"{', '.join(release.drivers)}; stack {name!r} pins driver "
                                 f"{stack.driver}: pin one of those, or set driver: host and "
                                 "install it with Ansible", path))
    return findings


def gang_findings(fleet: Fleet) -> list[Finding]:
    """``gang: workload-api`` needs Kubernetes 1.37+ (the GenericWorkload gate)."""
    k8s = fleet.kubernetes
    if k8s is None or k8s.gang != "workload-api":
        return []
    version = parse_version(k8s.version)
    if version is not None and version[:2] >= (1, 37):
        return []
    return [(f"gang: workload-api needs Kubernetes 1.37 or newer (the GenericWorkload "
             f"feature gate); the spec says {k8s.version}: use gang: kueue or volcano, or "
             "upgrade", (*k8s.path, "gang"))]


def quota_owner_findings(fleet: Fleet) -> list[Finding]:
    """Kueue and Volcano must not both hold GPU quota: one allocation owner per device."""
    k8s = fleet.kubernetes
    if k8s is None or len(set(k8s.quota_owners)) < 2:
        return []
    return [(f"{' and '.join(sorted(set(k8s.quota_owners)))} would both hold GPU quota; "
             "pick one queueing system to own quota", (*k8s.path, "queueing"))]


def _other_v(version: str) -> str:
    return version[1:] if version.startswith("v") else f"v{version}"
