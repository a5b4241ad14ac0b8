"""Dynamic Resource Allocation for NVIDIA GPUs: ``kubernetes.dra`` (Kubernetes 1.34+).

``resource.k8s.io/v1`` is GA from Kubernetes 1.34 (KEP-4381; kubernetes.io blog
"Kubernetes v1.34: DRA has graduated to GA"); the ``dra-needs-k8s-1.34`` rule refuses it below.

* **NVIDIA's DRA driver for GPUs** (kubernetes-sigs/dra-driver-nvidia-gpu, chart
  ``dra-driver-nvidia-gpu``, values in tests/data/crds/nvidia-dra-driver-gpu) is installed
  and pinned on the Kubernetes-owned NVIDIA partitions only (``kubeletPlugin.affinity``;
  never on Slinky's Slurm-owned hosts), *before* the GPU Operator: both charts ship the
  ``computedomains.resource.nvidia.com`` CRD in ``crds/``, the GPU Operator's (v26.7.0) an
  older copy (``numNodes`` required, DRA driver v25.12.0's), and Helm creates a ``crds/``
  CRD only when it is absent and never upgrades it (helm.sh, chart best practices, Custom
  Resource Definitions), so the release installed first decides the schema. The DRA
  driver's goes first and its copy is the one installed, once; the GPU Operator's install
  skips it and keeps its own CRDs (``skipCrds`` on it would drop ClusterPolicy and
  NVIDIADriver too; ``operator.upgradeCRD: false`` would stop their upgrades, and its hook
  applies only those and NFD's, not ComputeDomain: gpu-operator
  ``templates/upgrade_crd.yaml``, ``docker/Dockerfile``). With the operator's driver the
  kubelet plugin waits for the driver root the GPU Operator brings, so the release is not
  awaited (``skip_await``).
* **ComputeDomains** (multi-node NVLink, IMEX channels) are on when Kubernetes owns an
  NVLink-domain rack (GB200 NVL72). A ComputeDomain belongs to one workload, so fleetspec
  writes an example per tenant and NVLink partition (``kubernetes/examples``), not a
  standing object.
* **``dra.gpus: true``** moves GPU allocation from the device plugin to DRA, for all
  Kubernetes-owned NVIDIA GPUs at once (one allocator per device: those nodes carry
  ``nvidia.com/gpu.deploy.device-plugin=false``, so the GPU Operator runs no device plugin
  there): a ``DeviceClass`` per NVIDIA
  partition selecting the driver's devices by type, architecture and product name (the
  model: nvidia-smi's names from the catalog), and in every tenant
  namespace a ``ResourceClaimTemplate`` per partition the tenant has quota on, claiming the
  GPUs of one node. Kueue counts those claims as ``nvidia.com/gpu`` against the same
  ClusterQueues (``resources.deviceClassMappings``, Kueue 0.18+: the ``quota-engine-coverage``
  rule refuses DRA GPUs under an engine whose quota cannot count them).
* **MIG partitions under ``dra.gpus``** (#46): the GPU Operator's MIG manager still makes
  each node's geometry (the ``nvidia.com/mig.config`` label, render/kubernetes/mig.py); the
  driver publishes a GPU in MIG mode as its instances only, never the whole GPU
  (cmd/gpu-kubelet-plugin/nvlib.go: "Process statically pre-configured MIG devices"), each
  with ``type: mig`` and ``profile`` beside the parent's ``architecture`` and
  ``productName`` (cmd/gpu-kubelet-plugin/mig.go ``CommonAttributesMig``). fleetspec writes
  a DeviceClass per partition and profile (``<partition>-<profile>``: ``type == 'mig' &&
  profile == '1g.18gb'`` and the model), a ResourceClaimTemplate per tenant namespace for
  one instance of each, and maps each class to the profile's ``nvidia.com/mig-<profile>``
  in Kueue, the resource the ClusterQueues already count instances in: a claim is counted
  as the instance it is, never as a GPU. The chart's own ``mig.nvidia.com`` class selects
  every instance of every model and profile, so Kueue could map it to one resource only.
  The plugin finds static MIG devices when it starts (device_state.go ``NewDeviceState``
  enumerates them once), so on MIG nodes it is scheduled only where the MIG manager reports
  the geometry applied (``nvidia.com/mig.config.state=success``); a new geometry takes that
  label away while it is applied, which moves the plugin off the node until it is back.
"""

from __future__ import annotations

from typing import Any

from fleetspec.compile.ir import Fleet, Partition
from fleetspec.layout.kubernetes import KUEUE_DEFAULT_VERSION, kubernetes_nodes, kubernetes_partitions
from fleetspec.render.kubernetes import common as k8s
from fleetspec.render.kubernetes import mig
from fleetspec.versions import at_least

DRA_CHART = "oci://registry.k8s.io/dra-driver-nvidia/charts/dra-driver-nvidia-gpu"
DRA_NAMESPACE = "dra-driver-nvidia-gpu"  # the namespace the driver's docs install into
GPU_DRIVER = "gpu.nvidia.com"  # the kubelet plugin's driver name (deviceinfo.go attributes)
RESOURCE_API = "resource.k8s.io/v1"
# The GPU Operator's per-node operand switch (its operands' nodeSelectors read these labels).
DEVICE_PLUGIN_LABEL = "nvidia.com/gpu.deploy.device-plugin"
# The ``architecture`` attribute: go-nvlib's GetArchitectureAsString (NVIDIA/go-nvlib
# pkg/nvlib/device/device.go), which the driver publishes; fleetspec generation -> that name.
ARCHITECTURE = {"volta": "Volta", "turing": "Turing", "ampere": "Ampere", "ada": "Ada Lovelace",
                "hopper": "Hopper", "blackwell": "Blackwell"}
# The driver root: the GPU Operator's driver container, or the host's own driver.
DRIVER_ROOT = {"operator": "/run/nvidia/driver", "host": "/"}
# The IMEX channel DeviceClass the driver installs with ComputeDomains: a ComputeDomain's
# ResourceClaimTemplate requests ``deviceClassName: compute-domain-default-channel.nvidia.com``
# (the driver's own RCT, quoted in kubernetes-sigs/kueue#5149; ``kubectl get deviceclass``
# in the driver's install docs). Kueue 0.18+ marks a workload whose claim names a class
# missing from ``deviceClassMappings`` WorkloadInadmissible ("DeviceClass ... is not mapped
# in DRA configuration", kueue#6949; "If ComputeDomain is not mapped, the workload is
# rejected", kueue#10504), so the class is mapped to a logical resource of its own, counted
# one per pod, never as a GPU.
CHANNEL_CLASS = "compute-domain-default-channel.nvidia.com"
CHANNEL_RESOURCE = "nvidia.com/compute-domain-channel"
KUEUE_DRA_SINCE = "0.18"  # Kueue's deviceClassMappings (KueueDRAIntegration)


def nvl_partitions(fleet: Fleet) -> tuple[str, ...]:
    """Kubernetes-owned NVIDIA partitions with nodes in an NVLink-domain rack."""
    nvl = {n.partition for n in kubernetes_nodes(fleet)
           if n.nvlink_domain and n.gpu.vendor == "nvidia"}
    return tuple(sorted(nvl))


def dra_gpu_partitions(fleet: Fleet) -> tuple[Partition, ...]:
    cfg = fleet.kubernetes
    if cfg is None or not cfg.dra_nvidia_version or not cfg.dra_gpus:
        return ()
    return tuple(p for p in kubernetes_partitions(fleet) if p.vendor == "nvidia")


def mig_classes(fleet: Fleet) -> dict[str, tuple[tuple[str, str], ...]]:
    """Per DRA partition with MIG nodes: (profile, DeviceClass name) for each profile of
    its geometry (one per partition: compile/mig.py)."""
    parts = {p.name for p in dra_gpu_partitions(fleet)}
    return {name: tuple((profile, mig_class_name(name, profile)) for profile, _ in geometry)
            for name, geometry in sorted(mig.partition_geometry(fleet).items()) if name in parts}


def mig_class_name(partition: str, profile: str) -> str:
    """The DeviceClass (and ResourceClaimTemplate) of one MIG profile on ``partition``:
    nvidia-hopper-1g.18gb (a DNS subdomain: ``+`` of ``+me`` becomes ``.``, as in the
    profile's resource name)."""
    return f"{partition}-{profile.replace('+', '.')}"


def with_dra_labels(fleet: Fleet, labels: tuple[k8s.NodeLabels, ...]) -> tuple[k8s.NodeLabels, ...]:
    """With DRA allocating GPUs, the Kubernetes-owned NVIDIA nodes carry the GPU Operator's
    operand label ``nvidia.com/gpu.deploy.device-plugin=false``: no device plugin there, one
    allocator per device. Per node, not ``devicePlugin.enabled: false``, because Slinky's
    slurmd pods on the Slurm-owned hosts still take their GPUs from the device plugin."""
    if not dra_gpu_partitions(fleet):
        return labels
    nvidia = {n.hostname for n in kubernetes_nodes(fleet) if n.gpu.vendor == "nvidia"}
    return tuple(
        k8s.NodeLabels(n.hostname, dict(sorted({**n.labels, DEVICE_PLUGIN_LABEL: "false"}.items())))
        if n.hostname in nvidia else n for n in labels)


def channel_partitions(fleet: Fleet) -> tuple[str, ...]:
    """NVLink partitions whose workloads claim an IMEX channel that Kueue counts (the DRA
    driver runs ComputeDomains and Kueue, 0.18+, holds their quota)."""
    cfg = fleet.kubernetes
    if (cfg is None or not cfg.dra_nvidia_version or "kueue" not in cfg.quota_owners
            or not at_least(cfg.kueue_version or KUEUE_DEFAULT_VERSION, KUEUE_DRA_SINCE)):
        return ()
    return nvl_partitions(fleet)


def kueue_device_class_mappings(fleet: Fleet) -> list[dict[str, Any]]:
    """Kueue ``resources.deviceClassMappings``: every partition's DeviceClass counts as
    ``nvidia.com/gpu``, the resource the ClusterQueues already cover; the ComputeDomain
    channel class counts as ``nvidia.com/compute-domain-channel``, which the NVLink
    partitions' ClusterQueues cover (layer.py)."""
    out = []
    instances = mig_classes(fleet)
    classes = [p.name for p in dra_gpu_partitions(fleet) if p.name not in instances]
    if classes:
        out.append({"name": k8s.GPU_RESOURCE["nvidia"], "deviceClassNames": classes})
    by_resource: dict[str, list[str]] = {}
    for _, profiles in sorted(instances.items()):
        for profile, name in profiles:
            by_resource.setdefault(mig.resource_name(profile), []).append(name)
    out.extend({"name": resource, "deviceClassNames": names} for resource, names in sorted(by_resource.items()))
    if channel_partitions(fleet):
        out.append({"name": CHANNEL_RESOURCE, "deviceClassNames": [CHANNEL_CLASS]})
    return out


def dra(fleet: Fleet, label_keys: tuple[str, ...]):
    """([release], [objects]). The GPU Operator's release comes after this one (layer.py)."""
    cfg = fleet.kubernetes
    assert cfg is not None
    nvidia_nodes = [n for n in kubernetes_nodes(fleet) if n.gpu.vendor == "nvidia"]
    if not cfg.dra_nvidia_version or not nvidia_nodes:
        return [], []
    gpus = bool(dra_gpu_partitions(fleet))
    driver = cfg.gpu_operator.driver if cfg.gpu_operator else "host"
    values = {
        "nvidiaDriverRoot": DRIVER_ROOT[driver],
        "resourceApiVersion": RESOURCE_API,
        "gpuResourcesEnabledOverride": gpus,
        "resources": {"gpus": {"enabled": gpus},
                      "computeDomains": {"enabled": bool(nvl_partitions(fleet))}},
        # The chart's default affinity is every node with an NVIDIA PCI device (NFD labels),
        # which in Slinky mode includes the Slurm-owned hosts: a second allocator for GPUs
        # slurmd owns. Only the Kubernetes-owned NVIDIA partitions instead.
        "kubeletPlugin": {"affinity": {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": _plugin_terms(
                fleet, sorted({n.partition for n in nvidia_nodes}))}}}},
    }
    release = k8s.HelmRelease(
        name="dra-driver-nvidia-gpu",
        namespace=DRA_NAMESPACE,
        chart=DRA_CHART,
        repo=None,
        version=k8s.v_stripped(cfg.dra_nvidia_version),
        values=values,
        depends_on=(k8s.namespace_key(DRA_NAMESPACE), *label_keys),
        # Its kubelet plugin waits for /run/nvidia/driver, which the GPU Operator (after
        # this release) brings: awaiting its pods would wait for ever.
        skip_await=cfg.gpu_operator is not None and driver == "operator",
    )
    objs: list[k8s.Manifest] = []
    class_keys: dict[str, str] = {}
    instances = mig_classes(fleet)
    for p in dra_gpu_partitions(fleet):
        for name, selector in _classes(p, instances.get(p.name, ())):
            m = k8s.Manifest(
                k8s.obj(RESOURCE_API, "DeviceClass", name,
                         {"selectors": [{"cel": {"expression": selector}}]},
                         labels={k8s.PARTITION_LABEL: p.name}),
                "12-dra-deviceclasses", (release.key,))
            class_keys[name] = m.key
            objs.append(m)
    per_node = _gpus_per_node(fleet)
    for tenant in sorted(cfg.tenants, key=lambda t: t.name):
        for partition, _ in tenant.quota:
            # A MIG partition: a template per profile claiming one instance (the unit its
            # quota counts); whole GPUs: all GPUs of one node.
            claims = ([(name, name, "instance", 1) for _, name in instances[partition]]
                      if partition in instances else
                      [(claim_template(partition), partition, "gpus", per_node.get(partition, 0))])
            for template, device_class, request, count in claims:
                if device_class not in class_keys:
                    continue
                for ns in sorted(tenant.namespaces):
                    objs.append(k8s.Manifest(
                        k8s.obj(RESOURCE_API, "ResourceClaimTemplate", template,
                                 {"spec": {"devices": {"requests": [{
                                     "name": request,
                                     "exactly": {"deviceClassName": device_class,
                                                 "allocationMode": "ExactCount",
                                                 "count": count}}]}}},
                                 namespace=ns, labels={k8s.PARTITION_LABEL: partition}),
                        "13-dra-claimtemplates", (class_keys[device_class], k8s.namespace_key(ns))))
    return [release], objs


def _classes(p: Partition, profiles: tuple[tuple[str, str], ...]) -> list[tuple[str, str]]:
    """(DeviceClass name, CEL selector) for a partition: its whole GPUs, or one per MIG
    profile (the driver's ``type: mig`` devices of that ``profile``)."""
    arch = ARCHITECTURE.get(p.generation or "", (p.generation or "").capitalize())
    attrs = f"device.attributes['{GPU_DRIVER}']"
    model = f"{attrs}.architecture == '{arch}'"
    if p.device_names:  # the model: B200 and GB200 share an architecture
        names = ", ".join(f"'{n}'" for n in p.device_names)
        model += f" && {attrs}.productName in [{names}]"
    if not profiles:
        return [(p.name, f"device.driver == '{GPU_DRIVER}' && {attrs}.type == 'gpu' && {model}")]
    return [(name, f"device.driver == '{GPU_DRIVER}' && {attrs}.type == 'mig' && "
                   f"{attrs}.profile == '{profile}' && {model}") for profile, name in profiles]


def _plugin_terms(fleet: Fleet, partitions: list[str]) -> list[dict[str, Any]]:
    """Where the kubelet plugin runs: the Kubernetes-owned NVIDIA partitions; a MIG partition
    whose GPUs DRA allocates only once the MIG manager has applied the node's geometry (the
    plugin enumerates static MIG devices when it starts)."""
    gated = sorted(p for p in mig_classes(fleet) if p in partitions)
    plain = [p for p in partitions if p not in gated]
    terms: list[dict[str, Any]] = []
    if plain:
        terms.append({"matchExpressions": [{"key": k8s.PARTITION_LABEL, "operator": "In", "values": plain}]})
    if gated:
        terms.append({"matchExpressions": [
            {"key": k8s.PARTITION_LABEL, "operator": "In", "values": gated},
            {"key": mig.MIG_STATE_LABEL, "operator": "In", "values": [mig.MIG_STATE_APPLIED]}]})
    return terms


def claim_template(partition: str) -> str:
    """The ResourceClaimTemplate a pod references for all GPUs of one node of ``partition``."""
    return f"{partition}-node-gpus"


def _gpus_per_node(fleet: Fleet) -> dict[str, int]:
    out: dict[str, int] = {}
    for n in kubernetes_nodes(fleet):
        out[n.partition] = max(out.get(n.partition, 0), n.gpu.count)
    return out
