"""Rules over the schedulers: Slurm releases and Kubernetes queueing, quota and gang."""

from __future__ import annotations

from collections.abc import Iterator

from fleetspec.catalog import Catalog
from fleetspec.compile.ir import DEFAULT_STATE_SAVE_LOCATION, Fleet, Node
from fleetspec.findings import Finding
from fleetspec.layout.slurm import slinky_problems, tenant_accounts, topology_problems
from fleetspec.rules.base import error, warning
from fleetspec.versions import at_least, major_minor, parse_version


def check_slurm_security(fleet: Fleet, catalog: Catalog) -> Iterator[Finding]:
    s = fleet.slurm
    if s is None or not parse_version(s.version):
        return
    path = s.path + ("version",)
    series = catalog.slurm_series(s.version)
    if series is None:
        yield warning(
            "slurm-security-release",
            f"Slurm {s.version} is not a release series the catalog knows. Use a supported series "
            "(25.05, 25.11, 26.05) at or above its security fix release",
            path,
        )
        return
    fix = series.facts.get("security_fix")
    if fix and not at_least(s.version, str(fix)):
        yield warning(
            "slurm-security-release",
            f"Slurm {s.version} predates the {series.version} security fix release {fix} (sbcast credential "
            "bypass, OCI cleanup outside the spool directory, accounting privilege escalation). "
            f"Upgrade to {fix} or later",
            path,
        )
    elif not fix:
        yield warning(
            "slurm-security-release",
            f"Slurm {series.version} gets no security fixes: its support has ended"
            f"{'' if series.facts.get('eos') in (None, 'ended') else ' (' + str(series.facts['eos']) + ')'}. "
            "Upgrade to 25.11.8, 26.05.4 or later",
            path,
        )


def check_state_save_shared(fleet: Fleet, catalog: Catalog) -> Iterator[Finding]:
    """HA controllers take over from the state the active one saved: on each controller's
    local disk, a takeover starts from an empty queue."""
    s = fleet.slurm
    if s is None or s.mode != "native" or len(s.controllers) < 2:
        return
    if s.state_save_location == DEFAULT_STATE_SAVE_LOCATION:
        # An error: with the default path the takeover is known to lose the queue.
        yield error(
            "slurm-state-not-shared",
            f"{len(s.controllers)} controllers keep slurmctld state in the local {DEFAULT_STATE_SAVE_LOCATION}: "
            "a takeover then starts from an empty queue. Set slurm.state_save_location to a directory on "
            "storage every controller mounts (NFS or another shared file system)",
            s.path + ("controllers",),
        )


def check_controller_overlap(fleet: Fleet, catalog: Catalog) -> Iterator[Finding]:
    s = fleet.slurm
    if s is None:
        return
    gpu_hosts = {n.hostname for n in fleet.nodes}
    both = [c for c in s.controllers if c in gpu_hosts]
    if both:
        yield warning(
            "controller-on-gpu-node",
            f"controller(s) {', '.join(both)} are also GPU nodes: slurmctld then competes with jobs for CPU "
            "and memory, and a drain for a tuple change takes the controller with it. Use dedicated controllers",
            s.path + ("controllers",),
        )


def check_quota_owner(fleet: Fleet, catalog: Catalog) -> Iterator[Finding]:
    k = fleet.kubernetes
    if k is None:
        return
    if len(k.quota_owners) > 1:
        yield error(
            "quota-owner-ambiguous",
            f"both {' and '.join(k.quota_owners)} are set to hold GPU quota. Two quota systems admit "
            "workloads independently and will over-commit the same GPUs: let one of them own quota",
            k.path + ("quota_owners",),
        )
    engines = ("kueue", "volcano", "kai")
    mixed = k.queueing in engines and k.gang in engines and k.queueing != k.gang
    if mixed and not (k.quota_owners_explicit and len(k.quota_owners) == 1):
        # Kueue over Volcano or KAI works when Kueue alone holds quota and the other only
        # gang-schedules what Kueue admitted; that has to be said, not guessed.
        yield error(
            "quota-owner-ambiguous",
            f"queueing is {k.queueing} but gang scheduling is {k.gang}: both would admit the same pods. "
            f"Use one system for queueing and gang scheduling, or name the one quota owner "
            f"(quota_owners: [{k.queueing}])",
            k.path + ("gang",),
        )


KUEUE_DEFAULT_READY_TIMEOUT_S = 30 * 60  # DefaultWaitForPodsReadyTimeout (apis/config/v1beta2, v0.19.2)
_UNIT_S = {"s": 1, "m": 60, "h": 3600}


def _seconds(duration: str) -> int:
    """A spec duration (``[0-9]+(s|m|h)``, the schema's pattern) in seconds."""
    return int(duration[:-1]) * _UNIT_S[duration[-1]]


def check_pods_ready_timeout(fleet: Fleet, catalog: Catalog) -> Iterator[Finding]:
    """Kueue's waitForPodsReady is cluster-wide: a model server that takes longer than the
    timeout to load is evicted and requeued, again and again."""
    k = fleet.kubernetes
    if k is None or k.gang != "kueue" or "kueue" not in k.quota_owners:
        return
    floor = KUEUE_DEFAULT_READY_TIMEOUT_S
    short = [(field, value) for field, value in (
        ("timeout", k.gang_timeout),
        ("recovery_timeout", k.gang_recovery_timeout or k.gang_timeout))
        if 0 < _seconds(value) < floor]
    if not short:
        return
    field, value = short[0]
    again = ("forever" if k.gang_requeue_limit is None
             else f"up to {k.gang_requeue_limit} times, then deactivated")
    yield warning(
        "kueue-pods-ready-timeout",
        f"gang_policy.{field} is {value}: Kueue's waitForPodsReady applies to every workload it "
        "admits, model servers too (pod, deployment and statefulset integrations; it has no "
        f"per-namespace scope), so a server not ready within {value} is evicted and requeued "
        f"{again}. Size gang_policy.timeout and recovery_timeout for the slowest model-server "
        "start, at least Kueue's own default 30m (recovery_timeout: 0s never evicts a workload "
        "that was once ready)",
        k.path + ("gang_policy", field if k.gang_recovery_timeout or field == "timeout"
                  else "timeout"),
    )


def check_gang_k8s_version(fleet: Fleet, catalog: Catalog) -> Iterator[Finding]:
    k = fleet.kubernetes
    if k is None or k.gang != "workload-api" or not parse_version(k.version):
        return
    feature = catalog.kubernetes_feature("workload_api_gang")
    if not at_least(k.version, feature["since"]):
        yield error(
            "gang-needs-k8s-1.37",
            f"gang: workload-api needs Kubernetes >= {feature['since']} with the {feature['feature_gate']} feature "
            f"gate on {', '.join(feature['components'])}; this fleet runs {k.version}. "
            "Upgrade Kubernetes or use gang: kueue",
            k.path + ("gang",),
        )


def check_tenant_quota(fleet: Fleet, catalog: Catalog) -> Iterator[Finding]:
    k = fleet.kubernetes
    if k is None:
        return
    totals: dict[str, int] = {}
    queues: dict[str, str] = {}  # ClusterQueue name -> tenant/partition that makes it
    for tenant in k.tenants:
        for partition, _ in tenant.quota:
            name, owner = f"{tenant.name}-{partition}", f"{tenant.name}/{partition}"
            if queues.setdefault(name, owner) != owner:
                yield error("tenant-quota", f"tenant/partition {owner} and {queues[name]} both make the queue "
                            f"'{name}'. Rename one tenant so queue names stay distinct",
                            tenant.path + ("name",))
        if "kai" in k.quota_owners and tenant.name == fleet.name and tenant.quota:
            # KAI's parent queue per partition is <fleet>-<partition>: the same name.
            yield error("tenant-quota", f"tenant '{tenant.name}' has the fleet's name, so under KAI its queues "
                        f"'{tenant.name}-<partition>' are the names of the partitions' parent queues. Rename the "
                        "tenant", tenant.path + ("name",))
    for tenant in k.tenants:
        for partition, gpus in tenant.quota:
            path = tenant.path + ("quota", partition)
            p = fleet.partition(partition)
            if p is None:
                known = ", ".join(x.name for x in fleet.partitions if x.scheduler == "kubernetes") or "none"
                yield error("tenant-quota", f"tenant '{tenant.name}' has quota on partition '{partition}', which "
                            f"does not exist (Kubernetes partitions: {known}). Fix the name", path, "key")
                continue
            if p.scheduler != "kubernetes":
                yield error(
                    "double-allocation-owner",
                    f"tenant '{tenant.name}' has Kubernetes quota on '{partition}', a Slurm-owned partition. "
                    "Slurm allocates those GPUs; Kueue or Volcano must not: remove the quota",
                    path, "key",
                )
                continue
            totals[partition] = totals.get(partition, 0) + gpus
    for partition, total in sorted(totals.items()):
        p = fleet.partition(partition)
        if p is not None and total > p.gpus:
            yield warning(
                "tenant-quota",
                f"tenants' nominal quotas on '{partition}' add up to {total} GPUs, but it has {p.gpus}. "
                "Quota beyond the fleet is never admitted: lower it, or lend it through the cohort on purpose",
                k.path + ("tenants",),
            )


def cluster_gpu_nodes(fleet: Fleet) -> list[Node]:
    """GPU nodes the Kubernetes cluster holds: Kubernetes-owned ones, and in Slinky mode the
    Slurm-owned ones too (their slurmd pods run on kubelet, served by the GPU operators)."""
    slinky = fleet.slurm is not None and fleet.slurm.mode == "slinky"
    return [n for n in fleet.nodes if n.scheduler == "kubernetes" or slinky]


def check_gpu_operator(fleet: Fleet, catalog: Catalog) -> Iterator[Finding]:
    yield from _check_nvidia_operator(fleet, catalog)
    yield from _check_amd_operator_release(fleet, catalog)
    yield from _check_amd_operator(fleet)


def _check_amd_operator_release(fleet: Fleet, catalog: Catalog) -> Iterator[Finding]:
    """The AMD GPU Operator release fleetspec installs (the spec's, else the renderer's
    default) must be in the catalog and support the cluster's Kubernetes version."""
    k = fleet.kubernetes
    if k is None or not any(n.gpu.vendor == "amd" for n in cluster_gpu_nodes(fleet)):
        return
    from fleetspec.layout.kubernetes import AMD_DEFAULT_VERSION

    version = k.amd_gpu_operator_version or AMD_DEFAULT_VERSION
    path = k.path + (("amd_gpu_operator", "version") if k.amd_gpu_operator_version else ("version",))
    release = catalog.amd_gpu_operator_release(version)
    if release is None:
        yield warning("unknown-version", f"AMD GPU Operator {version} is not in the catalog, so its Kubernetes "
                      "support is not checked. Pick a release 'fleetspec catalog' lists", path)
        return
    low, high = release.facts.get("k8s") or (None, None)
    if k8s_outside(k.version, low, high):
        make = warning if "k8s" in release.unconfirmed else error
        yield make(
            "gpu-operator-unsupported",
            f"AMD GPU Operator {release.version} supports Kubernetes {k8s_range(low, high)}, not {k.version}"
            f"{' (an unconfirmed catalog fact)' if make is warning else ''}. "
            "Pick an operator release that supports this Kubernetes version, or change the cluster's",
            path,
        )


def k8s_outside(version: str, low: str | None, high: str | None) -> bool:
    """Whether Kubernetes ``version`` lies outside a release's supported ``low``-``high``
    minor versions (either end open when None; an unparsable version is not judged)."""
    if not parse_version(version):
        return False
    kv = major_minor(version)
    return bool((low and not at_least(kv, low)) or (high and at_least(kv, high) and kv != high))


def k8s_range(low: str | None, high: str | None) -> str:
    return f"{low or 'any'}-{high}" if high else f"{low} or later"


def _check_amd_operator(fleet: Fleet) -> Iterator[Finding]:
    """The AMD GPU Operator builds a pinned amdgpu with KMM and pushes the image to
    ``driver_image``; without one it uses ``image-registry:5000/...``, a registry vanilla
    Kubernetes does not have (DeviceConfig CRD, spec.driver.image)."""
    k = fleet.kubernetes
    if k is None or k.amd_driver != "operator" or k.amd_driver_image:
        return
    pinned = sorted({n.stack for n in cluster_gpu_nodes(fleet) if n.gpu.vendor == "amd"
                     and (s := fleet.stack(n.stack)) is not None and s.amdgpu})
    if pinned:
        yield error(
            "gpu-operator-unsupported",
            f"the AMD GPU Operator installs the amdgpu of {', '.join(repr(p) for p in pinned)} on Kubernetes "
            "nodes, building the driver image and pushing it to a registry, but amd_gpu_operator names none. "
            "Set amd_gpu_operator.driver_image (a repository, no tag) and registry_secret, or driver: host",
            k.path + ("amd_gpu_operator",),
        )


def _check_nvidia_operator(fleet: Fleet, catalog: Catalog) -> Iterator[Finding]:
    k = fleet.kubernetes
    if k is None or k.gpu_operator is None:
        return
    op = k.gpu_operator
    path = op.path + ("version",)
    release = catalog.gpu_operator_release(op.version)
    if release is None:
        yield warning("unknown-version", f"GPU Operator {op.version} is not in the catalog, so its Kubernetes and "
                      "driver support are not checked. Pick a release 'fleetspec catalog' lists", path)
        return
    if k8s_outside(k.version, release.k8s_min, release.k8s_max):
        make = warning if "k8s" in release.unconfirmed else error
        yield make(
            "gpu-operator-unsupported",
            f"GPU Operator {release.version} supports Kubernetes {release.k8s_min}-{release.k8s_max}, not "
            f"{k.version}{' (an unconfirmed catalog fact)' if make is warning else ''}. "
            "Pick an operator release that lists this Kubernetes version",
            path,
        )
    if op.driver == "operator" and len(release.drivers) > 1:
        k8s_stacks = {n.stack for n in cluster_gpu_nodes(fleet) if n.gpu.vendor == "nvidia"}
        for name in sorted(k8s_stacks):
            stack = fleet.stack(name)
            if stack and stack.driver and stack.driver not in release.drivers:
                yield warning(
                    "gpu-operator-unsupported",
                    f"stack '{name}' pins driver {stack.driver}, which GPU Operator {release.version} does not list "
                    f"among its tested drivers ({', '.join(release.drivers)}). Pick one of them, or use driver: host",
                    stack.path + ("driver",),
                )


def check_slurm_topology(fleet: Fleet, catalog: Catalog) -> Iterator[Finding]:
    for message, path in topology_problems(fleet):
        yield error("slurm-topology", message, path)


def check_slurm_tenants(fleet: Fleet, catalog: Catalog) -> Iterator[Finding]:
    for message, path in tenant_accounts(fleet)[1]:
        yield error("slurm-tenants", message, path, "key" if "quota" in path or path[-1] == "tenants" else "value")


def check_slinky_mapping(fleet: Fleet, catalog: Catalog) -> Iterator[Finding]:
    if fleet.slurm is not None and fleet.slurm.mode == "slinky" and fleet.kubernetes is None:
        yield error("slinky-mapping", "slurm.mode: slinky runs Slurm on Kubernetes (slurm-operator), but the spec "
                    "has no kubernetes section, so nothing would install it. Add spec.kubernetes, or use "
                    "mode: native", fleet.slurm.path + ("mode",))
    for message, path in slinky_problems(fleet):
        # Losing topology costs placement quality, not correctness: a warning.
        make = warning if "topology" in message.lower() else error
        yield make("slinky-mapping", message, path)
