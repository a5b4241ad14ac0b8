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
"""

from __future__ import annotations

from typing import Any

from fleetspec.compile.ir import Fleet, Partition
from fleetspec.layout.kubernetes import KUEUE_DEFAULT_VERSION, kubernetes_nodes, kubernetes_partitions
from fleetspec.render.kubernetes import common as k8s
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
    classes = [p.name for p in dra_gpu_partitions(fleet)]
    if classes:
        out.append({"name": k8s.GPU_RESOURCE["nvidia"], "deviceClassNames": classes})
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
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{
                "matchExpressions": [{"key": k8s.PARTITION_LABEL, "operator": "In",
                                      "values": sorted({n.partition for n in nvidia_nodes})}],
            }]}}}},
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
    for p in dra_gpu_partitions(fleet):
        arch = ARCHITECTURE.get(p.generation or "", (p.generation or "").capitalize())
        attrs = f"device.attributes['{GPU_DRIVER}']"
        expression = (f"device.driver == '{GPU_DRIVER}' && {attrs}.type == 'gpu' && "
                      f"{attrs}.architecture == '{arch}'")
        if p.device_names:  # the model: B200 and GB200 share an architecture
            names = ", ".join(f"'{n}'" for n in p.device_names)
            expression += f" && {attrs}.productName in [{names}]"
        m = k8s.Manifest(
            k8s.obj(RESOURCE_API, "DeviceClass", p.name,
                     {"selectors": [{"cel": {"expression": expression}}]},
                     labels={k8s.PARTITION_LABEL: p.name}),
            "12-dra-deviceclasses", (release.key,))
        class_keys[p.name] = m.key
        objs.append(m)
    per_node = _gpus_per_node(fleet)
    for tenant in sorted(cfg.tenants, key=lambda t: t.name):
        for partition, _ in tenant.quota:
            if partition not in class_keys:
                continue
            for ns in sorted(tenant.namespaces):
                objs.append(k8s.Manifest(
                    k8s.obj(RESOURCE_API, "ResourceClaimTemplate", claim_template(partition),
                             {"spec": {"devices": {"requests": [{
                                 "name": "gpus",
                                 "exactly": {"deviceClassName": partition,
                                             "allocationMode": "ExactCount",
                                             "count": per_node[partition]}}]}}},
                             namespace=ns, labels={k8s.PARTITION_LABEL: partition}),
                    "13-dra-claimtemplates", (class_keys[partition], k8s.namespace_key(ns))))
    return [release], objs


def claim_template(partition: str) -> str:
    """The ResourceClaimTemplate a pod references for all GPUs of one node of ``partition``."""
    return f"{partition}-node-gpus"


def _gpus_per_node(fleet: Fleet) -> dict[str, int]:
    out: dict[str, int] = {}
    for n in kubernetes_nodes(fleet):
        out[n.partition] = max(out.get(n.partition, 0), n.gpu.count)
    return out
