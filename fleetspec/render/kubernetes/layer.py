"""The Kubernetes layer: Fleet IR -> node labels, Helm releases and objects.

Two views of one computation. :func:`kubernetes_resources` gives the typed layer that the
Pulumi program (``stacks/kubernetes``) declares and that ``plan`` reports from;
:func:`render_kubernetes` writes the same layer as plain files under ``kubernetes/`` that a
platform engineer, Argo CD or Flux can apply as they are. Both are pure and deterministic:
the same Fleet gives the same bytes, with no timestamps.

Kubernetes-owned nodes (``scheduler: kubernetes``) get the full label set, flavors,
queues and quota. Slurm-owned nodes never get flavors, queues or quota: one allocation
owner per device. In Slinky mode the Slurm-owned nodes are Kubernetes nodes running slurmd
in pods, so they get the labels their NodeSets select on and their stack, nothing more.

Every GPU node the cluster holds (:func:`cluster_gpu_nodes`) gets its driver from exactly
one object whose version is its stack's: an NVIDIADriver per NVIDIA stack (the ClusterPolicy
supports one driver version for all nodes) and a DeviceConfig per AMD stack, each selecting
on ``fleetspec.io/stack``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Collection, Iterable, Mapping
from pathlib import PurePosixPath
from typing import Any

import yaml

from fleetspec.compile.ir import Fleet, Node, Partition
from fleetspec.layout.kubernetes import (
    AMD_DEFAULT_VERSION,
    AMD_REPO,
    KUEUE_CHART,
    KUEUE_DEFAULT_VERSION,
    NETWORK_OPERATOR_DEFAULT_VERSION,
    NVIDIA_REPO,
    SLINKY_CHARTS,
    SLINKY_DEFAULT_VERSION,
    VOLCANO_DEFAULT_VERSION,
    VOLCANO_REPO,
    amd_device_plugin_images,
    cluster_gpu_nodes,
    kubernetes_nodes,
    kubernetes_partitions,
    mirrored,
    mirrored_values,
    slinky_mode,
)
from fleetspec.layout.slurm import slurm_nodes, slurm_partitions
from fleetspec.node_side.contract import PARTITION_LABEL
from fleetspec.render.kubernetes import mig
from fleetspec.render.kubernetes.common import (
    GPU_MODEL_LABEL,
    GPU_RESOURCE,
    HEADER,
    LABEL_PREFIX,
    LEAF_LABEL,
    NAMESPACES,
    RACK_LABEL,
    STACK_LABEL,
    VOLCANO_NODEGROUP_LABEL,
    ClusterSecret,
    HelmRelease,
    KubernetesLayer,
    Manifest,
    NodeLabels,
    Prerequisite,
    dump,
    dump_all,
    kueue_topology_levels,
    label_value,
    namespace_key,
    obj,
    queue_rows,
    v_prefixed,
    v_stripped,
)
from fleetspec.render.kubernetes.health import with_health
from fleetspec.render.slurm import SLINKY_DB_SECRET, SLINKY_DB_SECRET_KEY, render_slinky_values
from fleetspec.site.helm import apply_overlays

# Fabrics whose NICs do RDMA, where pods need the RDMA devices (and GPUDirect RDMA).
RDMA_FABRICS = ("infiniband", "roce")

# Operators that run privileged DaemonSets, and slurmd pods (privileged: they own the node's
# devices and cgroups), need the privileged Pod Security level.
PRIVILEGED_NAMESPACES = frozenset({"gpu-operator", "kube-amd-gpu", "slurm", "nvidia-network-operator",
                                   "dra-driver-nvidia-gpu"})  # DRA kubelet plugin too
# With both GPU operators, NFD runs once: the NVIDIA chart's (``nfd.enabled``, default true),
# with the AMD chart's off (``node-feature-discovery.enabled``, default true; chart values at
# v26.7.0 and v1.5.1 in tests/data/crds). Its worker must then also run on AMD nodes (KMM
# builds the amdgpu module per kernel from NFD's labels): the NVIDIA chart's default worker
# tolerations plus the AMD chart's. A Helm list value replaces the default, hence both.
NFD_WORKER_TOLERATIONS = (
    # NVIDIA gpu-operator v26.7.0 values.yaml node-feature-discovery.worker.tolerations
    {"key": "node-role.kubernetes.io/control-plane", "operator": "Equal", "value": "",
     "effect": "NoSchedule"},
    {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
    # AMD gpu-operator v1.5.1 values.yaml node-feature-discovery.worker.tolerations
    {"key": "amd-dcm", "operator": "Equal", "value": "up", "effect": "NoExecute"},
    {"key": "amd-gpu-unhealthy", "operator": "Exists", "effect": "NoSchedule"},
)
# Kueue counts only GPUs: fleetspec quotas are in GPUs, and a resource a ClusterQueue does
# not cover would make every workload that requests it inadmissible.
# RDMA devices (the Network Operator's rdma/ shared devices and nvidia.com/hostdev) too:
# they come with the GPUs of the node, and an uncovered resource would block admission.
KUEUE_EXCLUDED_RESOURCES = ("cpu", "memory", "ephemeral-storage", "hugepages-", "pods",
                            "rdma/", "nvidia.com/hostdev")
# The RDMA resources pods request (NicClusterPolicy device plugin configs below).
RDMA_SHARED_RESOURCE = "rdma_shared_device_a"  # -> rdma/rdma_shared_device_a
RDMA_HOSTDEV_RESOURCE = "hostdev"  # -> nvidia.com/hostdev
HOSTDEV_NETWORK = "hostdev"  # HostDeviceNetwork hostdev-<namespace>: the pods' network annotation
HOSTDEV_POOL = "hostdev-pool"  # the nv-ipam IPPool (the site's subnet) those networks draw from
# PCI vendor id of NVIDIA (Mellanox) NICs, the devices the Network Operator serves.
MELLANOX_PCI_VENDOR = "15b3"
WORKLOAD_API_COMPONENTS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")


# --------------------------------------------------------------------------- the layer


def kubernetes_resources(fleet: Fleet) -> KubernetesLayer:
    """The whole Kubernetes layer of ``fleet``; empty without Kubernetes-owned nodes and
    without Slinky. Kept with the (immutable) fleet: render and plan both ask for it."""
    cached = fleet.__dict__.get("_kubernetes_layer")
    if cached is None:
        cached = fleet.__dict__["_kubernetes_layer"] = _kubernetes_resources(fleet)
    return cached


def _kubernetes_resources(fleet: Fleet) -> KubernetesLayer:
    k8s = fleet.kubernetes
    nodes = kubernetes_nodes(fleet)
    slinky = slinky_mode(fleet)
    if k8s is None or (not nodes and not slinky):
        return KubernetesLayer()
    owners = set(k8s.quota_owners) or ({k8s.queueing} - {"none"})
    volcano_quota = "volcano" in owners
    # KAI, the workload operators and DRA live in their own modules (kubernetes_*.py).
    from fleetspec.render.kubernetes import dra, kai, operators

    labels = dra.with_dra_labels(
        fleet, tuple(_node_labels(fleet, n, volcano_quota) for n in nodes))
    label_keys = tuple(n.key for n in labels)
    slinky_labels = slinky_node_labels(fleet) if slinky else ()
    all_label_keys = label_keys + tuple(n.key for n in slinky_labels)

    releases: list[HelmRelease] = []
    manifests: list[Manifest] = []
    nvidia_releases, nvidia_crs = _nvidia(fleet, all_label_keys)
    dra_releases, dra_objs = dra.dra(fleet, label_keys)
    if dra_releases:
        # The ComputeDomain CRD is in both charts' crds/ and Helm creates it only when
        # absent: the DRA driver's release goes first, so its copy is the one installed
        # (dra.py).
        nvidia_releases = [dataclasses.replace(
            r, depends_on=(*r.depends_on, *(d.key for d in dra_releases)))
            for r in nvidia_releases]
    nfd_from = nvidia_releases[0] if nvidia_releases else None
    engines = [
        _kueue(fleet, "kueue" in owners, label_keys),
        _volcano(fleet, volcano_quota, label_keys),
        kai.kai(fleet, "kai" in owners, label_keys),
    ]
    engine_keys = {r.name: r.key for rel, _ in engines for r in rel}
    releases_and_crs = [
        (dra_releases, dra_objs),
        (nvidia_releases, nvidia_crs),
        _amd(fleet, all_label_keys, nfd_from=nfd_from),
        *engines,
        operators.operators(fleet, {
            engine: engine_keys[name] for engine, name in
            (("volcano", "volcano"), ("kai", kai.KAI_RELEASE)) if name in engine_keys}),
        _slinky(fleet, tuple(n.key for n in slinky_labels)),
        _network_operator(fleet, all_label_keys, nfd_from=nfd_from),
    ]
    for rel, objs in releases_and_crs:
        releases.extend(rel)
        manifests.extend(objs)
    from fleetspec.render.kubernetes.admission import queue_gate, scheduler_gate

    release_keys = {r.name: r.key for r in releases}
    manifests.extend(scheduler_gate(fleet, release_keys))
    manifests.extend(queue_gate(fleet, release_keys))
    releases, manifests = with_health(fleet, releases, manifests, NAMESPACES)
    releases, manifests = _from_site_sources(fleet, releases, manifests)
    if fleet.site is not None and fleet.site.helm_values:  # kubernetes.values: the site's overlays
        releases = list(apply_overlays(releases, fleet.site.helm_values))
    namespaces = _namespaces(fleet, releases)
    return KubernetesLayer(
        node_labels=labels + slinky_labels,
        releases=tuple(releases),
        manifests=tuple(namespaces) + tuple(manifests),
        prerequisites=_prerequisites(fleet, releases),
        secrets=_slinky_secrets(fleet),
    )


def _from_site_sources(fleet: Fleet, releases: list[HelmRelease], manifests: list[Manifest]
                       ) -> tuple[list[HelmRelease], list[Manifest]]:
    """Air-gapped sites (``packages.registry_mirror``, ``packages.chart_repository``): every
    image and ``oci://`` chart under a public registry moves to the mirror, every chart from
    a public https repository comes from the site's chart repository (by the same name).
    Before the site's own ``kubernetes.values``, which stay as the site wrote them."""
    mirror, charts = fleet.registry_mirror, fleet.chart_repository
    if mirror is None and charts is None:
        return releases, manifests
    releases = [dataclasses.replace(
        r, chart=mirrored(r.chart, mirror), repo=charts if r.repo is not None and charts else r.repo,
        values=mirrored_values(dict(r.values), mirror)) for r in releases]
    manifests = [dataclasses.replace(m, body=mirrored_values(dict(m.body), mirror)) for m in manifests]
    return releases, manifests


def _slinky_secrets(fleet: Fleet) -> tuple[ClusterSecret, ...]:
    """Slinky's accounting reads the database password from a Secret the chart does not
    create (accounting.storageConfig.passwordKeyRef): the stack creates it."""
    if not slinky_mode(fleet) or fleet.slurm is None or not fleet.slurm.accounting_host:
        return ()
    return (ClusterSecret(SLINKY_DB_SECRET, NAMESPACES["slurm"], SLINKY_DB_SECRET_KEY,
                          "slurmdbd_password"),)


def _node_labels(fleet: Fleet, node: Node, volcano_quota: bool) -> NodeLabels:
    labels = {
        PARTITION_LABEL: node.partition,
        LABEL_PREFIX + "vendor": node.gpu.vendor,
        LABEL_PREFIX + "generation": node.gpu.generation,
        GPU_MODEL_LABEL: node.gpu.model,
        STACK_LABEL: node.stack,
        RACK_LABEL: node.rack,
    }
    if node.leaf:
        labels[LEAF_LABEL] = node.leaf
    if node.nvlink_domain:
        labels[LABEL_PREFIX + "nvlink-domain"] = node.nvlink_domain
    stack = fleet.stack(node.stack)
    if stack is not None:
        for component, version in stack.versions().items():
            labels[LABEL_PREFIX + component] = version
    if volcano_quota:
        labels[VOLCANO_NODEGROUP_LABEL] = node.partition
    if node.mig:  # the GPU Operator's MIG manager makes this geometry (render/kubernetes/mig.py)
        labels[mig.MIG_CONFIG_LABEL] = mig.config_label(node, mig.explicit(kubernetes_nodes(fleet)))
    if node.time_slicing:  # the device plugin advertises each GPU time_slicing times
        labels[mig.DEVICE_PLUGIN_LABEL] = mig.time_slicing_config(node.time_slicing)
    return NodeLabels(node.hostname, {k: label_value(v) for k, v in sorted(labels.items())})


def slinky_node_labels(fleet: Fleet) -> tuple[NodeLabels, ...]:
    """Labels for the Kubernetes nodes that host Slinky's slurmd pods: the generated Slurm
    partition and the GPU model, the keys the ``slurm`` chart's NodeSets select on
    (``render_slinky_values``), and the stack, which the stack's NVIDIADriver or DeviceConfig
    selects on so the node gets its own driver. No Kueue flavor or Volcano nodegroup selects
    these: flavors name Kubernetes-owned partitions, and the nodegroup label is not set."""
    generated = {h: p.name for p in slurm_partitions(fleet) if p.generated for h in p.nodes}
    return tuple(
        NodeLabels(n.hostname, dict(sorted({
            GPU_MODEL_LABEL: label_value(n.gpu.model),
            STACK_LABEL: label_value(n.stack),
            LABEL_PREFIX + "vendor": n.gpu.vendor,
            **({PARTITION_LABEL: label_value(generated[n.hostname])}
               if n.hostname in generated else {}),
        }.items())))
        for n in slurm_nodes(fleet)
    )


def _namespaces(fleet: Fleet, releases: Iterable[HelmRelease]) -> list[Manifest]:
    wanted: dict[str, dict[str, str]] = {}
    for rel in releases:
        extra = {"pod-security.kubernetes.io/enforce": "privileged"}
        wanted[rel.namespace] = extra if rel.namespace in PRIVILEGED_NAMESPACES else {}
    assert fleet.kubernetes is not None
    for tenant in fleet.kubernetes.tenants:
        for ns in tenant.namespaces:
            wanted[ns] = {LABEL_PREFIX + "tenant": tenant.name}
    tenant_spaces = {ns for t in fleet.kubernetes.tenants for ns in t.namespaces}
    return [
        Manifest(obj("v1", "Namespace", ns, labels=wanted[ns]), "00-namespaces",
                 retain_on_delete=ns in tenant_spaces)
        for ns in sorted(wanted)
    ]


# The wave policy of apply's SSH path (plan --max-unavailable's default, apply's drain
# timeout), handed to the GPU Operator's upgrade controller for the pools it upgrades
# (#30 item 2): the operator drains, upgrades and uncordons per node on its own.
WAVE_MAX_UNAVAILABLE = "25%"
WAVE_DRAIN_TIMEOUT_S = 3600


def upgrade_policy(pool_size: int, max_unavailable: int | str = WAVE_MAX_UNAVAILABLE,
                   drain_timeout_s: int = WAVE_DRAIN_TIMEOUT_S) -> dict[str, Any]:
    """An NVIDIADriver's ``spec.upgradePolicy`` (nvidia.com_nvidiadrivers.yaml, the operator's
    UpgradePolicySpec) from the wave policy: ``maxUnavailable`` as the plan states it (an
    absolute number or a share, which the operator rounds up), ``maxParallelUpgrades`` the
    nodes one wave of the pool takes (plan/waves.py ``budget``: the share rounded down, at
    least one), a drain (``kubectl drain`` semantics, as apply's KubernetesControl) with
    apply's drain timeout. autoUpgrade on: the operator, not apply, rolls the driver."""
    text = str(max_unavailable)
    if text.endswith("%"):
        parallel = max(1, math.floor(pool_size * float(text[:-1]) / 100))
        unavailable: int | str = text
    else:
        parallel = unavailable = max(1, int(text))
    return {"autoUpgrade": True, "maxParallelUpgrades": parallel, "maxUnavailable": unavailable,
            "drain": {"enable": True, "force": False, "deleteEmptyDir": True, "timeoutSeconds": drain_timeout_s},
            "podDeletion": {"force": False, "deleteEmptyDir": True, "timeoutSeconds": drain_timeout_s}}


def _vendor_stacks(fleet: Fleet, vendor: str) -> list[str]:
    """The ``vendor`` stacks of every GPU node the cluster holds (Slinky hosts included)."""
    return sorted({n.stack for n in cluster_gpu_nodes(fleet) if n.gpu.vendor == vendor})


def _nvidia(fleet: Fleet, label_keys: tuple[str, ...]):
    k8s = fleet.kubernetes
    stacks = _vendor_stacks(fleet, "nvidia")
    if k8s is None or k8s.gpu_operator is None or not stacks:
        return [], []
    op = k8s.gpu_operator
    ns = NAMESPACES["gpu-operator"]
    driver: dict[str, Any] = {"enabled": op.driver == "operator"}
    per_stack = op.driver == "operator"
    if per_stack:
        # One NVIDIADriver per stack, even for one stack: the ClusterPolicy's driver goes
        # to every NVIDIA node at one version, including nodes of another stack (Slinky
        # hosts, a pool added later). No default CR: it would select every GPU node too.
        # https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/gpu-driver-configuration.html
        driver["nvidiaDriverCRD"] = {"enabled": True, "deployDefaultCR": False}
    values: dict[str, Any] = {"driver": driver, **mig.operator_values(list(kubernetes_nodes(fleet)))}
    mig_configmap = mig.configmap(list(kubernetes_nodes(fleet)), ns)
    if _vendor_stacks(fleet, "amd"):
        # The one NFD of a mixed-vendor cluster (the AMD chart's is off): on AMD nodes too.
        values["nfd"] = {"enabled": True}
        values["node-feature-discovery"] = {"worker": {
            "tolerations": [dict(t) for t in NFD_WORKER_TOLERATIONS]}}
    release = HelmRelease(
        name="gpu-operator",
        namespace=ns,
        chart="gpu-operator",
        repo=NVIDIA_REPO,
        version=v_prefixed(op.version),
        values=values,
        depends_on=(namespace_key(ns), *label_keys, *(m.key for m in mig_configmap)),
    )
    crs = list(mig_configmap)
    if per_stack:
        for name in stacks:
            stack = fleet.stack(name)
            spec = {"driverType": "gpu", "default": False, "repository": "nvcr.io/nvidia",
                    "image": "driver"}
            if stack is not None and stack.driver:
                spec["version"] = stack.driver
            spec["nodeSelector"] = {STACK_LABEL: name}
            pool = sum(1 for n in cluster_gpu_nodes(fleet) if n.stack == name)
            spec["upgradePolicy"] = upgrade_policy(pool)
            crs.append(Manifest(
                obj("nvidia.com/v1alpha1", "NVIDIADriver", name, spec),
                "10-nvidia-drivers",
                (release.key,),
            ))
    return [release], crs


def _amd(fleet: Fleet, label_keys: tuple[str, ...], nfd_from: HelmRelease | None):
    """``nfd_from``: the NVIDIA release when there is one. Its NFD then serves both vendors
    (and brings the NodeFeatureRule CRD the AMD chart's default rule needs), so the AMD
    chart's own NFD is off and the AMD release comes after it."""
    k8s = fleet.kubernetes
    stacks = _vendor_stacks(fleet, "amd")
    if k8s is None or not stacks:
        return [], []
    ns = NAMESPACES["amd-gpu-operator"]
    host_driver = k8s.amd_driver == "host"
    # fleetspec writes one DeviceConfig per stack instead of the chart's default one.
    values: dict[str, Any] = {"crds": {"defaultCR": {"install": False}}}
    after: tuple[str, ...] = ()
    if nfd_from is not None:
        values["node-feature-discovery"] = {"enabled": False}
        after = (nfd_from.key,)
    release = HelmRelease(
        name="amd-gpu-operator",
        namespace=ns,
        chart="gpu-operator-charts",
        repo=AMD_REPO,
        version=v_prefixed(k8s.amd_gpu_operator_version or AMD_DEFAULT_VERSION),
        values=values,
        depends_on=(namespace_key(ns), *label_keys, *after),
    )
    crs = []
    for name in stacks:
        stack = fleet.stack(name)
        amdgpu = stack.amdgpu if stack is not None else None
        driver: dict[str, Any] = {"enable": amdgpu is not None and not host_driver}
        if driver["enable"]:
            # AMD GPU Operator, Full Reference Config (DeviceConfig spec.driver): KMM builds
            # the amdgpu image for each kernel, pushes it to ``image`` (no tag: the operator
            # tags it) with ``imageRegistrySecret``, and loads it once the inbox module is
            # blacklisted (``blacklist`` needs the node labeller; a reboot applies it).
            # https://instinct.docs.amd.com/projects/gpu-operator/en/latest/fulldeviceconfig.html
            driver["blacklist"] = True
            driver["version"] = amdgpu
            if k8s.amd_driver_image:
                driver["image"] = k8s.amd_driver_image
            if k8s.amd_registry_secret:
                driver["imageRegistrySecret"] = {"name": k8s.amd_registry_secret}
        spec = {
            "selector": {STACK_LABEL: name},
            "driver": driver,
            "devicePlugin": {"enableNodeLabeller": True, **amd_device_plugin_images(
                k8s.amd_gpu_operator_version or AMD_DEFAULT_VERSION)},
            # GPU health and utilisation for Prometheus (off by default in the CRD).
            "metricsExporter": {"enable": True},
        }
        crs.append(Manifest(
            obj("amd.com/v1alpha1", "DeviceConfig", name, spec, namespace=ns),
            "11-amd-deviceconfigs",
            (release.key, namespace_key(ns)),
        ))
    return [release], crs


def _resource_groups(quota: Mapping[str, int], parts: Mapping[str, Partition],
                     channels: Collection[str] = (),
                     mig_resources: Mapping[str, tuple[tuple[str, int], ...]] | None = None) -> list[dict]:
    """One resource group per GPU resource, a flavor per partition. Where a partition's
    workloads claim ComputeDomain channels (``channels``), its group also covers
    ``nvidia.com/compute-domain-channel`` (Kueue requires every flavor of a group to list
    every covered resource: 0 for the others), one channel per GPU of quota: a pod with a
    GPU never waits on channels, and a claim is counted instead of refused."""
    from fleetspec.render.kubernetes.dra import CHANNEL_RESOURCE

    mig_resources = mig_resources or {}
    by_resource: dict[tuple[tuple[str, int], ...], list[str]] = {}
    for partition in sorted(quota):
        by_resource.setdefault(_gpu_resources(parts[partition], mig_resources), []).append(partition)
    groups = []
    for resources, partitions in sorted(by_resource.items()):
        extra = [CHANNEL_RESOURCE] if any(p in channels for p in partitions) else []
        groups.append({"coveredResources": [r for r, _ in resources] + extra, "flavors": [
            {"name": p, "resources": [*({"name": r, "nominalQuota": quota[p] * per_gpu} for r, per_gpu in resources),
                                      *({"name": r, "nominalQuota": quota[p] if p in channels else 0}
                                        for r in extra)]}
            for p in partitions]})
    return groups


def _gpu_resources(partition: Partition, mig_resources: Mapping[str, tuple[tuple[str, int], ...]]
                   ) -> tuple[tuple[str, int], ...]:
    """(resource, per GPU of quota) a partition's GPUs are requested as: the vendor's GPU
    resource, or a MIG partition's instance resources (a quota of N GPUs is N GPUs' instances)."""
    return mig_resources.get(partition.name) or ((GPU_RESOURCE[partition.vendor or "nvidia"], 1),)


def _kueue(fleet: Fleet, holds_quota: bool, label_keys: tuple[str, ...]):
    k8s = fleet.kubernetes
    assert k8s is not None
    if "kueue" not in (k8s.queueing, k8s.gang) and not holds_quota:
        return [], []
    ns = NAMESPACES["kueue"]
    release = HelmRelease(
        name="kueue",
        namespace=ns,
        chart=KUEUE_CHART,
        repo=None,
        version=v_stripped(k8s.kueue_version or KUEUE_DEFAULT_VERSION),
        values={"managerConfig": {"controllerManagerConfigYaml": kueue_configuration(fleet)}},
        depends_on=(namespace_key(ns),),
    )
    if not holds_quota:
        return [release], []
    rk = release.key
    parts = {p.name: p for p in kubernetes_partitions(fleet)}
    topo_name = f"{fleet.name}-fabric"
    objs = [Manifest(
        obj("kueue.x-k8s.io/v1beta2", "Topology", topo_name,
             {"levels": [{"nodeLabel": lvl} for lvl in kueue_topology_levels(fleet)]}),
        "20-kueue-topology", (rk,),
    )]
    topo_key = objs[0].key
    # Kueue does not combine DRA with Topology Aware Scheduling (Kueue docs, Dynamic Resource
    # Allocation, Limitations: "No DRA + Topology Aware Scheduling"): a flavor whose GPUs are
    # claimed through DRA (dra.gpus) carries no topologyName, so its workloads are admitted
    # by quota without a TAS placement instead of never fitting one.
    from fleetspec.render.kubernetes.dra import channel_partitions, dra_gpu_partitions

    # Workloads on an NVLink partition claim ComputeDomain channels through DRA, so their
    # flavor leaves TAS as well; the example jobs keep a ComputeDomain in one rack by pod
    # affinity instead (ray.py).
    channels = set(channel_partitions(fleet))
    dra_flavors = {p.name for p in dra_gpu_partitions(fleet)} | channels
    if not set(parts) - dra_flavors:
        objs = []
    flavor_keys = {}
    for name in sorted(parts):
        # No tolerations: fleetspec sets no taint on GPU nodes (the partition label keeps
        # workloads on their generation), and a toleration for a taint nothing sets only
        # hides which pods were meant for the node.
        tas = name not in dra_flavors
        spec = {"nodeLabels": {PARTITION_LABEL: name}, **({"topologyName": topo_name} if tas else {})}
        m = Manifest(obj("kueue.x-k8s.io/v1beta2", "ResourceFlavor", name, spec),
                     "21-kueue-flavors", (rk, *((topo_key,) if tas else ()), *label_keys))
        flavor_keys[name] = m.key
        objs.append(m)
    rows = queue_rows(fleet)
    migs = mig.partition_resources(fleet)
    # Whatever no tenant holds stays in the cohort, for every queue to borrow.
    spare = {p: parts[p].gpus - sum(r.gpus for r in rows if r.partition == p) for p in parts}
    spare = {p: g for p, g in spare.items() if g > 0}
    cohort_spec = {"resourceGroups": _resource_groups(spare, parts, channels, migs)} if spare else {}
    cohort = Manifest(obj("kueue.x-k8s.io/v1beta2", "Cohort", fleet.name, cohort_spec),
                      "22-kueue-cohort", (rk, *(flavor_keys[p] for p in sorted(spare))))
    objs.append(cohort)
    for row in rows:
        # One flavor per ClusterQueue: every PodSet of a workload gets that flavor, and it
        # borrows only that flavor from the cohort. Users pick the generation by LocalQueue.
        spec = {
            "cohortName": fleet.name,
            "namespaceSelector": {"matchExpressions": [{
                "key": "kubernetes.io/metadata.name", "operator": "In",
                "values": list(row.namespaces)}]},
            "queueingStrategy": "BestEffortFIFO",
            "preemption": {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"},
            "resourceGroups": _resource_groups({row.partition: row.gpus}, parts, channels, migs),
        }
        if row.limit is not None:  # the tenant's cap: borrow at most up to it
            for resource, (_, per_gpu) in zip(spec["resourceGroups"][0]["flavors"][0]["resources"],
                                              _gpu_resources(parts[row.partition], migs)):
                resource["borrowingLimit"] = max(0, row.limit - row.gpus) * per_gpu
        cq = Manifest(obj("kueue.x-k8s.io/v1beta2", "ClusterQueue", row.name, spec,
                           labels={PARTITION_LABEL: row.partition}),
                      "23-kueue-clusterqueues", (rk, cohort.key, flavor_keys[row.partition]))
        objs.append(cq)
        for namespace in row.namespaces:
            objs.append(Manifest(
                obj("kueue.x-k8s.io/v1beta2", "LocalQueue", row.partition,
                     {"clusterQueue": row.name}, namespace=namespace),
                "24-kueue-localqueues", (rk, cq.key, namespace_key(namespace)),
            ))
    return [release], objs


def kueue_configuration(fleet: Fleet) -> str:
    """The Kueue ``Configuration`` (config.kueue.x-k8s.io/v1beta2) as the chart's
    ``managerConfig.controllerManagerConfigYaml`` text. The base is the chart's own default
    at v0.19.2; fleetspec adds gang admission and GPU-only accounting."""
    k8s = fleet.kubernetes
    assert k8s is not None
    config: dict[str, Any] = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "health": {"healthProbeBindAddress": ":8081"},
        "metrics": {"bindAddress": ":8443"},
        "webhook": {"port": 9443},
        "leaderElection": {"leaderElect": True, "resourceName": "c1f6bfd2.kueue.x-k8s.io"},
        "controller": {"groupKindConcurrency": {
            "Job.batch": 5, "Pod": 5, "Workload.kueue.x-k8s.io": 10,
            "LocalQueue.kueue.x-k8s.io": 5, "ClusterQueue.kueue.x-k8s.io": 5,
            "ResourceFlavor.kueue.x-k8s.io": 1}},
        "clientConnection": {"qps": 300, "burst": 500},
    }
    # Every workload in a tenant namespace goes through Kueue, with or without a queue name:
    # one without stays suspended instead of taking GPUs outside quota. Only the tenants'
    # namespaces: system namespaces (operators, kube-system) are never gated.
    # https://kueue.sigs.k8s.io/docs/reference/kueue-config.v1beta2/
    config["manageJobsWithoutQueueName"] = True
    config["managedJobsNamespaceSelector"] = {"matchExpressions": [{
        "key": "kubernetes.io/metadata.name", "operator": "In",
        "values": list(tenant_namespaces(fleet))}]}
    if k8s.gang == "kueue":
        # All-or-nothing: evict and requeue a gang whose pods are not all ready within the
        # timeout. blockAdmission stays false: true admits one workload at a time until its
        # pods are ready, serialising admission for the whole cluster (KEP-349), and Kueue
        # documents false with topology-aware scheduling.
        # https://kueue.sigs.k8s.io/docs/tasks/manage/setup_wait_for_pods_ready/
        # Cluster-wide: Kueue has no per-namespace or per-kind scope for it, so model
        # servers (pod, deployment, statefulset integrations) get the same timeouts.
        # recoveryTimeout (v1beta2: defaults to timeout, "0s" turns it off; kueue-config
        # v1beta2 reference) is written out so what evicts a running server is visible.
        requeue: dict[str, Any] = {"timestamp": "Eviction"}
        if k8s.gang_requeue_limit is not None:
            requeue["backoffLimitCount"] = k8s.gang_requeue_limit
        config["waitForPodsReady"] = {
            "timeout": k8s.gang_timeout,
            "recoveryTimeout": k8s.gang_recovery_timeout or k8s.gang_timeout,
            "blockAdmission": False,
            "requeuingStrategy": requeue,
        }
    from fleetspec.render.kubernetes.dra import kueue_device_class_mappings
    from fleetspec.render.kubernetes.operators import kueue_frameworks

    config["resources"] = {"excludeResourcePrefixes": list(KUEUE_EXCLUDED_RESOURCES)}
    mappings = kueue_device_class_mappings(fleet)
    if mappings:  # DRA GPUs as nvidia.com/gpu, IMEX channels as their own resource (Kueue 0.18+)
        config["resources"]["deviceClassMappings"] = mappings
    # Only the kinds this cluster has: the built-in workloads and the operators this stack
    # installs (operators.py). A framework whose operator is not installed has no
    # CRD for Kueue to watch.
    config["integrations"] = {"frameworks": kueue_frameworks(fleet)}
    return dump(config)


def tenant_namespaces(fleet: Fleet) -> tuple[str, ...]:
    """The namespaces tenants' workloads run in (``default`` without tenants), sorted."""
    assert fleet.kubernetes is not None
    spaces = {ns for t in fleet.kubernetes.tenants for ns in t.namespaces}
    return tuple(sorted(spaces or {"default"}))


def volcano_scheduler_conf(with_nodegroups: bool, with_topology: bool) -> str:
    """The chart default (installer/helm/chart/volcano/config/volcano-scheduler.conf at
    v1.15.1, gang in the first tier) plus nodegroup (queue -> partition) and
    network-topology-aware (HyperNodes) when fleetspec renders them.

    With queues (``with_nodegroups``, Volcano holding quota) ``proportion`` becomes
    ``capacity`` and the ``reclaim`` action is on: each queue's quota is its per-resource
    ``deserved``, idle GPUs are lent to other queues up to ``capability`` and reclaimed when
    their owner needs them, as Kueue's cohort does. The two plugins cannot be used together
    (volcano docs/user-guide/how_to_use_capacity_plugin.md)."""
    queue_plugin = "capacity" if with_nodegroups else "proportion"
    second = [{"name": "overcommit"}, {"name": "drf", "enablePreemptable": False},
              {"name": "predicates"}, {"name": queue_plugin}, {"name": "nodeorder"},
              {"name": "binpack"}]
    if with_nodegroups:
        second.append({"name": "nodegroup"})
    if with_topology:
        second.append({"name": "network-topology-aware"})
    actions = "enqueue, allocate, backfill" + (", reclaim" if with_nodegroups else "")
    conf = {
        "actions": actions,
        "tiers": [
            {"plugins": [{"name": "priority"}, {"name": "gang", "enablePreemptable": False},
                         {"name": "conformance"}]},
            {"plugins": second},
        ],
    }
    return dump(conf)


def hypernode_name(tier: str, name: str) -> str:
    """``rack-r03``, ``leaf-02`` (not ``leaf-leaf-02``): the tier once, as a prefix. Names
    of one tier always start with it, so a rack and a leaf never share a name."""
    return name if name.startswith(f"{tier}-") else f"{tier}-{name}"


def _hypernodes(fleet: Fleet) -> list[Manifest]:
    """Tier 1: a rack (an NVLink domain on NVL72 racks); tier 2: a leaf; tier 3: the
    spine layer joining the leaves, when there is more than one."""
    nodes = kubernetes_nodes(fleet)
    racks: dict[str, list[str]] = {}
    leaf_of: dict[str, str | None] = {}
    for n in nodes:
        racks.setdefault(n.rack, []).append(n.hostname)
        leaf_of[n.rack] = n.leaf
    api = "topology.volcano.sh/v1alpha1"
    objs = []
    for rack in sorted(racks):
        members = [{"type": "Node", "selector": {"exactMatch": {"name": h}}}
                   for h in sorted(racks[rack])]
        objs.append(Manifest(obj(api, "HyperNode", hypernode_name("rack", rack),
                                  {"tier": 1, "tierName": "rack", "members": members}),
                             "20-volcano-hypernodes"))
    leaves: dict[str, list[str]] = {}
    for rack, leaf in leaf_of.items():
        if leaf:
            leaves.setdefault(leaf, []).append(rack)
    for leaf in sorted(leaves):
        members = [{"type": "HyperNode",
                    "selector": {"exactMatch": {"name": hypernode_name("rack", r)}}}
                   for r in sorted(leaves[leaf])]
        objs.append(Manifest(obj(api, "HyperNode", hypernode_name("leaf", leaf),
                                  {"tier": 2, "tierName": "leaf", "members": members}),
                             "20-volcano-hypernodes",
                             tuple(f"HyperNode/{hypernode_name('rack', r)}"
                                   for r in sorted(leaves[leaf]))))
    if len(leaves) > 1:
        members = [{"type": "HyperNode",
                    "selector": {"exactMatch": {"name": hypernode_name("leaf", lf)}}}
                   for lf in sorted(leaves)]
        objs.append(Manifest(obj(api, "HyperNode", f"{fleet.name}-spine",
                                  {"tier": 3, "tierName": "spine", "members": members}),
                             "20-volcano-hypernodes",
                             tuple(f"HyperNode/{hypernode_name('leaf', lf)}"
                                   for lf in sorted(leaves))))
    return objs


def _volcano(fleet: Fleet, holds_quota: bool, label_keys: tuple[str, ...]):
    k8s = fleet.kubernetes
    assert k8s is not None
    if "volcano" not in (k8s.queueing, k8s.gang) and not holds_quota:
        return [], []
    ns = NAMESPACES["volcano"]
    hypernodes = _hypernodes(fleet)
    release = HelmRelease(
        name="volcano",
        namespace=ns,
        chart="volcano",
        repo=VOLCANO_REPO,
        version=v_stripped(k8s.volcano_version or VOLCANO_DEFAULT_VERSION),
        values={"custom": {"scheduler_config_override": volcano_scheduler_conf(
            holds_quota, bool(hypernodes))}},
        depends_on=(namespace_key(ns),),
    )
    rk = release.key
    objs = [Manifest(m.body, m.file, (rk, *label_keys, *m.depends_on)) for m in hypernodes]
    if holds_quota:
        parts = {p.name: p for p in kubernetes_partitions(fleet)}
        migs = mig.partition_resources(fleet)
        for row in queue_rows(fleet):
            resources = _gpu_resources(parts[row.partition], migs)
            # The same declaration as Kueue's: the tenant's GPUs are its own (deserved,
            # Kueue's nominalQuota), it may borrow idle GPUs of its partition up to all of
            # them (capability, Kueue's unlimited borrowing within the cohort), and what it
            # borrowed is reclaimed when their owner needs them (reclaimable + the reclaim
            # action, Kueue's reclaimWithinCohort). Only GPUs, as Kueue counts only GPUs.
            spec = {
                "reclaimable": True,
                "deserved": {resource: row.gpus * per_gpu for resource, per_gpu in resources},
                # The tenant's limit, when it has one, caps it below the partition.
                "capability": {resource: per_gpu * (parts[row.partition].gpus if row.limit is None
                               else max(row.gpus, min(row.limit, parts[row.partition].gpus)))
                               for resource, per_gpu in resources},
                # One node group: the nodegroup plugin keeps every pod of the queue's jobs
                # on the nodes labelled volcano.sh/nodegroup-name=<partition>.
                "affinity": {"nodeGroupAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [row.partition]}},
            }
            objs.append(Manifest(obj("scheduling.volcano.sh/v1beta1", "Queue", row.name, spec,
                                      labels={PARTITION_LABEL: row.partition}),
                                 "21-volcano-queues", (rk,)))
    return [release], objs


def _slinky(fleet: Fleet, label_keys: tuple[str, ...]):
    """Slinky's CRDs, its operator, and the Slurm cluster itself: the ``slurm`` chart with
    the Slinky values of the Slurm layer (``render_slinky_values``), after the operator
    (its CRs) and after the labels its NodeSets select on. All three charts share one
    version (slurm-operator v1.2.1: helm/*/Chart.yaml)."""
    if not slinky_mode(fleet):
        return [], []
    assert fleet.slurm is not None
    ns = NAMESPACES["slurm-operator"]
    version = v_stripped(fleet.slurm.slinky_version or SLINKY_DEFAULT_VERSION)
    crds = HelmRelease("slurm-operator-crds", ns, f"{SLINKY_CHARTS}/slurm-operator-crds", None,
                       version, {}, (namespace_key(ns),))
    operator = HelmRelease("slurm-operator", ns, f"{SLINKY_CHARTS}/slurm-operator", None,
                           version, {"crds": {"enabled": False}}, (namespace_key(ns), crds.key))
    cluster_ns = NAMESPACES["slurm"]
    cluster = HelmRelease("slurm", cluster_ns, f"{SLINKY_CHARTS}/slurm", None, version,
                          yaml.safe_load(render_slinky_values(fleet)),
                          (namespace_key(cluster_ns), operator.key, *label_keys,
                           *(s.ref for s in _slinky_secrets(fleet))))
    return [crds, operator, cluster], []


def _network_operator(fleet: Fleet, label_keys: tuple[str, ...], nfd_from: HelmRelease | None):
    """NVIDIA's Network Operator on an InfiniBand or RoCE fabric with GPU nodes in the
    cluster: pods get the node's RDMA devices, through the RDMA shared device plugin
    (``rdma: shared``, every pod on a node shares its HCAs) or the SR-IOV/host-device plugin
    (``rdma: sriov``, a NIC or VF per pod). The node's NICs keep their host driver (DOCA or
    inbox): no ofedDriver container. GPUDirect RDMA then goes through DMA-BUF, which the GPU
    Operator's open kernel modules (kernelModuleType auto) support without nvidia-peermem.
    https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/gpu-operator-rdma.html
    """
    k8s = fleet.kubernetes
    assert k8s is not None
    fabric = fleet.fabric
    if (not k8s.network_operator_enabled or fabric is None or fabric.type not in RDMA_FABRICS
            or not cluster_gpu_nodes(fleet)):
        return [], []
    ns = NAMESPACES["network-operator"]
    version = v_prefixed(k8s.network_operator_version or NETWORK_OPERATOR_DEFAULT_VERSION)
    values: dict[str, Any] = {}
    after: tuple[str, ...] = ()
    if nfd_from is not None:
        # NFD once, as for the AMD chart: the GPU Operator's serves PCI labels for the NICs;
        # the network operator keeps its NodeFeatureRules (NFD's CRDs come with that NFD).
        values["nfd"] = {"enabled": False, "deployNodeFeatureRules": True}
        after = (nfd_from.key,)
    release = HelmRelease(
        name="network-operator",
        namespace=ns,
        chart="network-operator",
        repo=NVIDIA_REPO,
        version=version,
        values=values,
        depends_on=(namespace_key(ns), *label_keys, *after),
    )
    link = "infiniband" if fabric.type == "infiniband" else "ether"
    image = {"repository": "nvcr.io/nvidia/mellanox", "version": f"network-operator-{version}"}
    spec: dict[str, Any] = {
        # Only the cluster's GPU nodes (every one carries its stack label).
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": STACK_LABEL, "operator": "Exists"}]}]}},
    }
    if k8s.network_rdma == "shared":
        config = {"configList": [{
            "resourceName": RDMA_SHARED_RESOURCE,
            "rdmaHcaMax": 63,
            "selectors": {"vendors": [MELLANOX_PCI_VENDOR], "linkTypes": [link]},
        }]}
        spec["rdmaSharedDevicePlugin"] = {"image": "k8s-rdma-shared-dev-plugin", **image,
                                          "config": json.dumps(config, indent=2)}
    else:
        config = {"resourceList": [{
            "resourcePrefix": "nvidia.com",
            "resourceName": RDMA_HOSTDEV_RESOURCE,
            "selectors": {"vendors": [MELLANOX_PCI_VENDOR], "linkTypes": [link], "isRdma": True},
        }]}
        spec["sriovDevicePlugin"] = {"image": "sriov-network-device-plugin", **image,
                                     "config": json.dumps(config, indent=2)}
        # A host device has no address of its own: the secondary network (Multus, the CNI
        # plugins) and NVIDIA's IPAM give it one, per NVIDIA's "Host Device Network with
        # RDMA" deployment. The pool's subnet is the site's (a Prerequisite).
        # https://docs.nvidia.com/networking/display/kubernetes2570/quick-start/host-device-rdma.html
        spec["nvIpam"] = {"image": "nvidia-k8s-ipam", **image, "enableWebhook": False}
        spec["secondaryNetwork"] = {"cniPlugins": {"image": "plugins", **image},
                                    "multus": {"image": "multus-cni", **image}}
    policy = Manifest(obj("mellanox.com/v1alpha1", "NicClusterPolicy", "nic-cluster-policy", spec),
                      "12-network-operator", (release.key, *label_keys))
    networks = [
        Manifest(obj("mellanox.com/v1alpha1", "HostDeviceNetwork", f"{HOSTDEV_NETWORK}-{ns}", {
            "networkNamespace": ns,
            "resourceName": RDMA_HOSTDEV_RESOURCE,
            "ipam": json.dumps({"type": "nv-ipam", "poolName": HOSTDEV_POOL}, indent=2),
        }), "12-network-operator", (release.key, policy.key, namespace_key(ns)))
        for ns in sorted({ns for t in k8s.tenants for ns in t.namespaces})
    ] if k8s.network_rdma == "sriov" else []
    return [release], [policy, *networks]


def _prerequisites(fleet: Fleet, releases: Iterable[HelmRelease]) -> tuple[Prerequisite, ...]:
    k8s = fleet.kubernetes
    found: list[Prerequisite] = []
    if k8s is not None and k8s.gang == "workload-api":
        found.append(Prerequisite(
            id="feature-gate-GenericWorkload",
            message=("gang: workload-api needs the GenericWorkload feature gate "
                     "(--feature-gates=GenericWorkload=true) on kube-apiserver, "
                     "kube-controller-manager and kube-scheduler (Kubernetes 1.37+)"),
            components=WORKLOAD_API_COMPONENTS,
            feature_gates=("GenericWorkload=true",),
        ))
    if any(r.name == "amd-gpu-operator" for r in releases):
        # ROCm/gpu-operator docs/installation/kubernetes-helm.md: "The AMD GPU Operator
        # requires cert-manager for TLS certificate management" (its webhooks and KMM's).
        found.append(Prerequisite(
            id="cert-manager",
            message=("the AMD GPU Operator needs cert-manager running in the cluster before "
                     "amd-gpu-operator is installed (TLS certificates for its webhooks and "
                     "KMM's), e.g. the jetstack/cert-manager chart with crds.enabled=true"),
        ))
    if (k8s is not None and k8s.network_rdma == "sriov"
            and any(r.name == "network-operator" for r in releases)):
        found.append(Prerequisite(
            id="nv-ipam-pool",
            message=(f"rdma: sriov: create the nv-ipam IPPool {HOSTDEV_POOL} (nv-ipam.nvidia.com/v1alpha1) in "
                     f"{NAMESPACES['network-operator']} with your RDMA network's subnet, perNodeBlockSize and "
                     f"gateway; the HostDeviceNetworks {HOSTDEV_NETWORK}-<namespace> take pod addresses "
                     "from it"),
        ))
    return tuple(found)


# --------------------------------------------------------------------------- files


def render_kubernetes(fleet: Fleet) -> dict[PurePosixPath, str]:
    """``{kubernetes/...: text}``: manifests, Helm values, a node-label script, a README."""
    layer = kubernetes_resources(fleet)
    if layer.empty:
        return {}
    base = PurePosixPath("kubernetes")
    files: dict[PurePosixPath, str] = {}
    by_file: dict[str, list[Mapping[str, Any]]] = {}
    for m in layer.manifests:
        by_file.setdefault(m.file, []).append(m.body)
    for stem, bodies in by_file.items():
        files[base / "manifests" / f"{stem}.yaml"] = HEADER + dump_all(bodies)
    for rel in layer.releases:
        files[base / "helm" / f"{rel.name}.values.yaml"] = HEADER + dump(dict(rel.values))
    if layer.releases:
        files[base / "helm" / "releases.yaml"] = HEADER + dump({"releases": [
            {"name": r.name, "namespace": r.namespace, "chart": r.chart,
             **({"repo": r.repo} if r.repo else {}), "version": r.version,
             "valuesFile": f"{r.name}.values.yaml"} for r in layer.releases]})
        files[base / "helm" / "install.sh"] = _install_script(layer.releases)
    if layer.node_labels:
        files[base / "node-labels.sh"] = _label_script(layer.node_labels)
    from fleetspec.render.kubernetes.ray import render_examples

    examples = render_examples(fleet)
    files.update(examples)
    readme = _readme(fleet, layer, sorted(by_file))
    if examples:
        readme += ("\n`examples/`: a RayJob per tenant and NVIDIA partition, queued through the engine "
                   "that owns quota\n(and a ComputeDomain on NVLink-domain racks); copy them, "
                   "fleetspec does not apply them.\n")
    files[base / "README.md"] = readme
    return dict(sorted(files.items()))


_SH_SAFE = re.compile(r"[A-Za-z0-9_./:=+@,-]*")


def _sh_quote(text: str) -> str:
    if _SH_SAFE.fullmatch(text) or all(c.isalnum() or c in "-_./:=+@," for c in text):
        return text
    return "'" + text.replace("'", "'\"'\"'") + "'"


def _label_script(nodes: Iterable[NodeLabels]) -> str:
    lines = [
        "#!/bin/sh",
        "# Generated by fleetspec: the labels fleetspec owns on each Kubernetes-owned node",
        "# and on each node hosting Slinky's slurmd pods (slurm.mode: slinky).",
        "# Nodes join the cluster through kubelet; this only labels them, and fails on a",
        "# node that has not joined yet. Set KUBECTL to use another client or context.",
        "set -eu",
        'KUBECTL="${KUBECTL:-kubectl}"',
        "",
    ]
    for node in nodes:
        pairs = [f"{k}={v}" for k, v in node.labels.items()]
        lines.append(f"$KUBECTL label node --overwrite {_sh_quote(node.hostname)} \\")
        lines.extend(f"  {_sh_quote(p)} \\" for p in pairs[:-1])
        lines.append(f"  {_sh_quote(pairs[-1])}")
    return "\n".join(lines) + "\n"


def _install_script(releases: Iterable[HelmRelease]) -> str:
    lines = [
        "#!/bin/sh",
        "# Generated by fleetspec: install or upgrade the pinned Helm releases, in order.",
        "# Run from this directory after manifests/00-namespaces.yaml is applied.",
        "set -eu",
        'HELM="${HELM:-helm}"',
        "",
    ]
    for r in releases:
        chart = r.chart if r.repo is None else f"{r.chart} --repo {r.repo}"
        # --wait, except for a release whose pods wait for a later one (HelmRelease.skip_await).
        wait = "" if r.skip_await else " --wait"
        lines.append(f"$HELM upgrade --install {r.name} {chart} --version {r.version} "
                     f"--namespace {r.namespace} --values {r.name}.values.yaml{wait}")
    return "\n".join(lines) + "\n"


def _readme(fleet: Fleet, layer: KubernetesLayer, stems: list[str]) -> str:
    out = [
        f"# Kubernetes layer of fleet `{fleet.name}`",
        "",
        "Generated by fleetspec; `fleetspec apply` declares the same objects through the",
        "Pulumi stack in `stacks/kubernetes`. To apply by hand, in this order:",
        "",
    ]
    step = 1
    if layer.prerequisites:
        out.append(f"{step}. Cluster prerequisites (fleetspec cannot apply these):")
        out.extend(f"   - {p.message}" for p in layer.prerequisites)
        step += 1
    if layer.node_labels:
        owned = len(kubernetes_nodes(fleet))
        hosts = len(layer.node_labels) - owned
        which = " and ".join(part for part in (
            f"{owned} Kubernetes-owned" if owned else "",
            f"{hosts} Slinky-hosted (slurmd pods)" if hosts else "") if part)
        out.append(f"{step}. `sh node-labels.sh`: label the {which} nodes "
                   "(they must have joined).")
        step += 1
    if "00-namespaces" in stems:
        out.append(f"{step}. `kubectl apply -f manifests/00-namespaces.yaml`")
        step += 1
    for secret in layer.secrets:
        out.append(f"{step}. Create the Secret `{secret.name}` in `{secret.namespace}` from your "
                   f"`{secret.source}` secret (the Pulumi stack does this itself): "
                   f"`kubectl create secret generic {secret.name} --namespace {secret.namespace} "
                   f"--from-file={secret.key}=<file holding it>`")
        step += 1
    if layer.releases:
        names = ", ".join(r.name for r in layer.releases)
        out.append(f"{step}. `cd helm && sh install.sh`: Helm releases {names} "
                   "(pinned in `helm/releases.yaml`; the operators install their CRDs).")
        step += 1
    rest = [s for s in stems if s != "00-namespaces"]
    if rest:
        out.append(f"{step}. `kubectl apply --server-side -f manifests/`: "
                   + ", ".join(f"`{s}.yaml`" for s in rest) + ".")
    out.extend(["", "Argo CD or Flux can sync `manifests/` as it is, with the releases in",
                "`helm/releases.yaml` declared as Helm sources."])
    return "\n".join(out) + "\n"
