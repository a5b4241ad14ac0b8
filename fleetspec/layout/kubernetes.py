"""How a fleet lays out on Kubernetes, as the Kubernetes renderers, the rules and the site
checks all read it: which nodes and partitions the cluster holds, and the chart versions
fleetspec installs when the spec names none. Kept below render (docs/architecture.md) so
that a rule can ask "which AMD GPU Operator will run" without loading a renderer.
"""

from __future__ import annotations

from fleetspec.compile.ir import Fleet, Node, Partition

# Chart defaults when the IR names no version; each cites the upstream chart it was read from.
# https://github.com/kubernetes-sigs/kueue charts/kueue/Chart.yaml @ v0.19.2
KUEUE_CHART = "oci://registry.k8s.io/kueue/charts/kueue"
KUEUE_DEFAULT_VERSION = "0.19.2"
# https://github.com/volcano-sh/volcano installer/helm/chart/volcano/Chart.yaml @ v1.15.1
VOLCANO_REPO = "https://volcano-sh.github.io/helm-charts"
VOLCANO_DEFAULT_VERSION = "1.15.1"
# https://github.com/NVIDIA/gpu-operator (chart nvidia/gpu-operator, NGC Helm repo)
NVIDIA_REPO = "https://helm.ngc.nvidia.com/nvidia"
# https://github.com/ROCm/gpu-operator helm-charts-k8s/Chart.yaml @ v1.5.1
AMD_REPO = "https://rocm.github.io/gpu-operator"
AMD_DEFAULT_VERSION = "v1.5.1"
AMD_DEVICE_PLUGIN_REPOSITORY = "docker.io/rocm/k8s-device-plugin"


def amd_device_plugin_images(operator_version: str) -> dict[str, str]:
    """DeviceConfig ``devicePluginImage`` and ``nodeLabellerImage`` for an AMD GPU Operator
    release: the device-plugin release the catalog records with it (``<tag>`` and
    ``labeller-<tag>``, ROCm/k8s-device-plugin's chart pairing), instead of the operator's
    ``:latest``, which changes under a running cluster. Empty for a release the catalog
    does not know (the ``unknown-version`` rule warns about it)."""
    from fleetspec.catalog import load_catalog

    release = load_catalog().amd_gpu_operator_release(operator_version)
    tag = release.facts.get("device_plugin") if release else None
    if not tag:
        return {}
    return {"devicePluginImage": f"{AMD_DEVICE_PLUGIN_REPOSITORY}:{tag}",
            "nodeLabellerImage": f"{AMD_DEVICE_PLUGIN_REPOSITORY}:labeller-{tag}"}
# https://github.com/Mellanox/network-operator deployment/network-operator/Chart.yaml @ v26.4.1
# (chart nvidia/network-operator in the NGC Helm repo, as the GPU Operator's)
NETWORK_OPERATOR_DEFAULT_VERSION = "v26.4.1"
# https://github.com/SlinkyProject/slurm-operator helm/*/Chart.yaml @ v1.2.1
SLINKY_CHARTS = "oci://ghcr.io/slinkyproject/charts"
SLINKY_DEFAULT_VERSION = "1.2.1"


# Where the images and OCI charts fleetspec names come from (the constants here, in
# render/kubernetes and layout/slurm). With ``packages.registry_mirror`` every reference under
# one of them moves to MIRROR/<registry>/<path> (oci:// charts too); an image named without a
# registry is not written anywhere (tests/kubernetes/test_registry_mirror.py). Other hosts
# (the site's own, e.g. the AMD operator's driver_image registry) are left as they are.
PUBLIC_REGISTRIES = frozenset({"docker.io", "registry.k8s.io", "nvcr.io", "ghcr.io", "quay.io"})


def mirrored(text: str, mirror: str | None) -> str:
    """An image reference, image repository or ``oci://`` chart under a public registry,
    moved under ``mirror`` (unchanged without one, or for any other string)."""
    if mirror is None:
        return text
    scheme = "oci://" if text.startswith("oci://") else ""
    rest = text[len(scheme):]
    host, slash, _ = rest.partition("/")
    return f"{scheme}{mirror}/{rest}" if slash and host in PUBLIC_REGISTRIES else text


def mirrored_values(value, mirror: str | None):
    """Every string in ``value`` (mappings, lists, nested) through :func:`mirrored`."""
    if mirror is None:
        return value
    if isinstance(value, str):
        return mirrored(value, mirror)
    if isinstance(value, dict):
        return {k: mirrored_values(v, mirror) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [mirrored_values(v, mirror) for v in value]
    return value


def kubernetes_nodes(fleet: Fleet) -> tuple[Node, ...]:
    return tuple(n for n in fleet.nodes if n.scheduler == "kubernetes")


def cluster_gpu_nodes(fleet: Fleet) -> tuple[Node, ...]:
    """Every GPU node the Kubernetes cluster holds: the Kubernetes-owned ones and, in Slinky
    mode, the Slurm-owned ones (kubelet runs there too, and the GPU operators serve them)."""
    slinky = slinky_mode(fleet)
    return tuple(n for n in fleet.nodes if n.scheduler == "kubernetes" or slinky)


def kubernetes_partitions(fleet: Fleet) -> tuple[Partition, ...]:
    """Partitions whose GPUs Kubernetes allocates: every Kubernetes-owned one, generated
    (``nvidia-blackwell``) or named by its node groups (``partition: b200-pool``). Extra
    partitions (``slurm.partitions.<name>.nodes``) are Slurm's only."""
    return tuple(p for p in fleet.partitions if p.scheduler == "kubernetes")


def slinky_mode(fleet: Fleet) -> bool:
    return fleet.slurm is not None and fleet.slurm.mode == "slinky"
