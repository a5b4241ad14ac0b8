"""Rules over the rest of the Kubernetes workload plane: DRA, KubeRay, and whether the
engine that holds quota can count the GPUs it is given (KAI, DRA claims)."""

from __future__ import annotations

from collections.abc import Iterator

from fleetspec.catalog import Catalog
from fleetspec.compile.ir import Fleet
from fleetspec.findings import Finding
from fleetspec.rules.base import error, warning
from fleetspec.versions import at_least, parse_version


def check_dra_k8s_version(fleet: Fleet, catalog: Catalog) -> Iterator[Finding]:
    k = fleet.kubernetes
    if k is None or not k.dra_nvidia_version or not parse_version(k.version):
        return
    feature = catalog.kubernetes_feature("dra_ga")
    if not at_least(k.version, feature["since"]):
        yield error(
            "dra-needs-k8s-1.34",
            f"kubernetes.dra needs Kubernetes >= {feature['since']}, where Dynamic Resource Allocation is GA "
            f"({feature['api']}); this fleet runs {k.version}. Upgrade Kubernetes or remove kubernetes.dra",
            k.path + ("dra",), "key",
        )


def check_kuberay_k8s_version(fleet: Fleet, catalog: Catalog) -> Iterator[Finding]:
    k = fleet.kubernetes
    if k is None or not k.ray_version or not parse_version(k.version):
        return
    feature = catalog.kubernetes_feature("kuberay")
    if not at_least(k.version, feature["since"]):
        yield error(
            "kuberay-needs-k8s-1.23",
            f"kubernetes.ray installs the KubeRay operator, which needs Kubernetes >= {feature['since']}; this "
            f"fleet runs {k.version}. Upgrade Kubernetes or remove kubernetes.ray",
            k.path + ("ray",),
        )


def check_quota_engine_coverage(fleet: Fleet, catalog: Catalog) -> Iterator[Finding]:
    """Quota an engine cannot count is quota anyone can bypass."""
    k = fleet.kubernetes
    if k is None:
        return
    parts = {p.name: p for p in fleet.partitions if p.scheduler == "kubernetes"}
    if "kai" in k.quota_owners:
        counts = ", ".join(catalog.component("kai")["counts"])
        for tenant in k.tenants:
            for partition, gpus in tenant.quota:
                p = parts.get(partition)
                if p is not None and p.vendor == "amd" and gpus > 0:
                    yield error(
                        "quota-engine-coverage",
                        f"tenant '{tenant.name}' has {gpus} GPUs of quota on '{partition}' (AMD), but KAI Scheduler "
                        f"holds quota and its queues count only {counts}: the quota would not be enforced. "
                        "Remove it, or let Kueue or Volcano hold quota",
                        tenant.path + ("quota", partition), "key",
                    )
                uncounted = _kai_uncounted_profiles(fleet, partition)
                if p is not None and uncounted and gpus > 0:
                    yield error(
                        "quota-engine-coverage",
                        f"tenant '{tenant.name}' has {gpus} GPUs of quota on '{partition}', whose GPUs are cut into "
                        f"{', '.join(uncounted)} MIG instances, but KAI Scheduler holds quota and reads a MIG "
                        "instance's GPUs from its resource name (nvidia.com/mig-<N>g.<M>gb): it counts "
                        f"{uncounted[0]} as 0 GPUs, so the quota would not be enforced. Use a geometry without +me "
                        "profiles, or let Kueue or Volcano hold quota",
                        tenant.path + ("quota", partition), "key",
                    )
    if not k.dra_gpus:
        return
    path = k.path + ("dra", "gpus")
    for owner in k.quota_owners:
        if owner in ("kai", "volcano"):
            yield error(
                "quota-engine-coverage",
                f"dra.gpus: true allocates GPUs through ResourceClaims, but {owner} holds quota and its queues "
                "count extended resources (nvidia.com/gpu), not DRA devices: every claimed GPU would run outside "
                "quota. Use queueing: kueue (0.18+ counts DRA devices), or keep the device plugin (dra.gpus: false)",
                path,
            )
        elif owner == "kueue" and k.kueue_version and parse_version(k.kueue_version):
            since = catalog.kubernetes_feature("kueue_dra")["since"]
            if not at_least(k.kueue_version.lstrip("v"), since):
                yield error(
                    "quota-engine-coverage",
                    f"dra.gpus: true needs Kueue >= {since} to count DRA devices against quota "
                    f"(KueueDRAIntegration on by default); this fleet pins Kueue {k.kueue_version}. "
                    "Upgrade Kueue or keep the device plugin (dra.gpus: false)",
                    path,
                )


def _kai_uncounted_profiles(fleet: Fleet, partition: str) -> list[str]:
    """The MIG profiles of ``partition``'s nodes that KAI's queues count as 0 GPUs."""
    from fleetspec.catalog import mig as catalog_mig

    found = {profile for n in fleet.nodes if n.partition == partition and n.scheduler == "kubernetes"
             for profile, _ in n.mig if catalog_mig.kai_gpus(((profile, 1),)) is None}
    return sorted(found)


def check_nvlink_domain_dra(fleet: Fleet, catalog: Catalog) -> Iterator[Finding]:
    """Kubernetes-owned NVL72 racks without NVIDIA's DRA driver: pods get each node's GPUs but
    no IMEX channel, so no multi-node NVLink across the rack."""
    k = fleet.kubernetes
    if k is None or k.dra_nvidia_version:
        return
    racks: dict[str, tuple[str | int, ...]] = {}
    for n in fleet.nodes:
        if n.scheduler == "kubernetes" and n.nvlink_domain and n.gpu.vendor == "nvidia":
            racks.setdefault(n.rack, n.path)
    since = catalog.kubernetes_feature("dra_ga")["since"]
    old = parse_version(k.version) and not at_least(k.version, since)
    for rack, path in sorted(racks.items()):
        why = (f"Kubernetes {k.version} has no DRA (GA from {since}), so NVIDIA's DRA driver cannot run"
               if old else "kubernetes.dra names no NVIDIA driver")
        yield warning(
            "nvlink-domain-needs-dra",
            f"rack '{rack}' is one NVLink domain owned by Kubernetes, but {why}: pods get no ComputeDomain "
            "(IMEX channels), so a job across its nodes runs without multi-node NVLink. "
            f"{'Upgrade Kubernetes to ' + since if old else 'Remove dra: {} or add dra.nvidia: {version}'}",
            path,
        )
