"""MIG on Kubernetes (#46): the GPU Operator's MIG manager makes each node's geometry, and
the device plugin exposes the instances as resources quotas count.

- ``mig.strategy: mixed``: every instance is its profile's resource (``nvidia.com/mig-1g.10gb``),
  whatever the node's geometry (GPU Operator docs, gpu-operator-mig.html: "mixed ... exposes
  the MIG devices as nvidia.com/mig-<profile>").
- ``nvidia.com/mig.config=<config>`` on each MIG node: the MIG manager applies that mig-parted
  configuration to the node's GPUs (it drains the GPU's clients first).
- Named geometries are mig-parted's own defaults (the chart's ``default-mig-parted-config``).
  Where the fleet has an explicit geometry, fleetspec writes a ConfigMap holding every
  geometry its nodes use (mig-parted config v1: ``mig-configs: {name: [{devices: all,
  mig-enabled: true, mig-devices: {profile: count}}]}``) and points ``migManager.config.name``
  at it; ``all-disabled`` stays in it so the MIG manager's default still resolves.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from fleetspec.catalog import mig as catalog_mig
from fleetspec.compile.ir import Fleet, Node
from fleetspec.layout.kubernetes import kubernetes_nodes, kubernetes_partitions
from fleetspec.render.kubernetes.common import Manifest, dump, namespace_key, obj

MIG_CONFIG_LABEL = "nvidia.com/mig.config"
# What the MIG manager reports on the node while and after it applies the label's geometry:
# ``pending`` (``rebooting`` with WITH_REBOOT), then ``success`` or ``failed`` (GPU Operator
# docs, gpu-operator-mig.html, "Configuring MIG Profiles": "MIG Manager ... sets the
# nvidia.com/mig.config.state label"). ``success`` is the only state in which the node's
# instances are the declared ones.
MIG_STATE_LABEL = "nvidia.com/mig.config.state"
MIG_STATE_APPLIED = "success"
CONFIGMAP = "fleetspec-mig-parted"
MIG_RESOURCE = "nvidia.com/mig-"
# The device plugin's per-node configuration (GPU Operator docs, gpu-sharing.html: the
# ConfigMap named by devicePlugin.config.name holds one config per key, and a node takes
# the one its nvidia.com/device-plugin.config label names).
DEVICE_PLUGIN_LABEL = "nvidia.com/device-plugin.config"
DEVICE_PLUGIN_CONFIGMAP = "fleetspec-device-plugin"


def mig_nodes(nodes: Iterable[Node]) -> list[Node]:
    return [n for n in nodes if n.mig]


def explicit(nodes: Iterable[Node]) -> bool:
    """Whether any MIG node's geometry is not one of mig-parted's named ones."""
    return any(not n.mig_config.startswith("all-") for n in mig_nodes(nodes))


def config_label(node: Node, custom: bool) -> str:
    """The node's ``nvidia.com/mig.config``: the named geometry, or, with fleetspec's own
    ConfigMap, the geometry spelled out (one name per distinct geometry: a named one such
    as all-balanced differs per model, so it cannot be one entry of one ConfigMap)."""
    return catalog_mig.config_name(node.mig, "") if custom else node.mig_config


def time_slicing_config(replicas: int) -> str:
    """The device-plugin config key of a node whose GPUs are time-sliced ``replicas`` ways."""
    return f"time-sliced-{replicas}"


def operator_values(nodes: list[Node]) -> dict[str, Any]:
    """The gpu-operator chart's values for MIG and time-slicing, or {} without either."""
    values: dict[str, Any] = {}
    if any(n.time_slicing for n in nodes):
        # default: the config of nodes without the label (whole GPUs, MIG instances unshared)
        values["devicePlugin"] = {"config": {"name": DEVICE_PLUGIN_CONFIGMAP, "default": "default"}}
    if not mig_nodes(nodes):
        return values
    values["mig"] = {"strategy": "mixed"}
    if explicit(nodes):
        # values.yaml migManager: "To use an existing ConfigMap: Set name=... with create=false;
        # ConfigMap MUST have a key named config.yaml"
        values["migManager"] = {"enabled": True, "config": {"name": CONFIGMAP, "default": "all-disabled"}}
    return values


def configmap(nodes: list[Node], namespace: str) -> list[Manifest]:
    """fleetspec's mig-parted ConfigMap where a geometry is explicit, and its device-plugin
    ConfigMap where GPUs are time-sliced."""
    return _mig_parted(nodes, namespace) + _device_plugin(nodes, namespace)


def _device_plugin(nodes: list[Node], namespace: str) -> list[Manifest]:
    """One device-plugin config per replica count (config v1 as the GPU Operator's GPU
    sharing page writes it: flags.migStrategy, sharing.timeSlicing.resources)."""
    counts = sorted({n.time_slicing for n in nodes if n.time_slicing})
    if not counts:
        return []
    strategy = "mixed" if mig_nodes(nodes) else "none"
    body = obj("v1", "ConfigMap", DEVICE_PLUGIN_CONFIGMAP, namespace=namespace)
    body["data"] = {"default": dump({"version": "v1", "flags": {"migStrategy": strategy}}),
                    **{time_slicing_config(r): dump({"version": "v1", "flags": {"migStrategy": strategy},
                                                     "sharing": {"timeSlicing": {"resources": [
                                                         {"name": "nvidia.com/gpu", "replicas": r}]}}})
                       for r in counts}}
    return [Manifest(body, "10-nvidia-device-plugin", (namespace_key(namespace),))]


def _mig_parted(nodes: list[Node], namespace: str) -> list[Manifest]:
    if not explicit(nodes):
        return []
    configs: dict[str, Any] = {"all-disabled": [{"devices": "all", "mig-enabled": False}]}
    for n in mig_nodes(nodes):
        configs[config_label(n, True)] = [{"devices": "all", "mig-enabled": True,
                                           "mig-devices": dict(n.mig)}]
    text = dump({"version": "v1", "mig-configs": dict(sorted(configs.items()))})
    body = obj("v1", "ConfigMap", CONFIGMAP, namespace=namespace)
    body["data"] = {"config.yaml": text}
    return [Manifest(body, "10-nvidia-mig", (namespace_key(namespace),))]


def resource_name(profile: str) -> str:
    """The extended resource the device plugin advertises a MIG profile's instances as under
    the mixed strategy: ``nvidia.com/mig-<profile>`` with ``+`` as ``.`` (a resource name is
    a DNS subdomain), so 1g.10gb+me is nvidia.com/mig-1g.10gb.me (NVIDIA/k8s-device-plugin
    internal/rm/rm.go AddDefaultResourcesToConfig: ``strings.ReplaceAll("mig-"+p.String(),
    "+", ".")``)."""
    return MIG_RESOURCE + profile.replace("+", ".")


def resources(nodes: Iterable[Node]) -> tuple[tuple[str, int], ...]:
    """(resource, instances per GPU) the nodes expose under the mixed strategy; () when
    they are whole GPUs. The compiler keeps one geometry per Kubernetes partition."""
    for n in nodes:
        if n.mig:
            return tuple((resource_name(profile), count) for profile, count in n.mig)
        if n.time_slicing:  # each GPU is advertised as that many nvidia.com/gpu
            return (("nvidia.com/gpu", n.time_slicing),)
    return ()


def partition_resources(fleet: Fleet) -> dict[str, tuple[tuple[str, int], ...]]:
    """Per Kubernetes partition with MIG or time-sliced nodes: ``resources`` of its nodes."""
    by_host = {n.hostname: n for n in kubernetes_nodes(fleet)}
    out = {}
    for p in kubernetes_partitions(fleet):
        found = resources(by_host[h] for h in p.nodes if h in by_host)
        if found:
            out[p.name] = found
    return out


def partition_geometry(fleet: Fleet) -> dict[str, tuple[tuple[str, int], ...]]:
    """Per Kubernetes partition with MIG nodes: one GPU's instances ((profile, count), ...)
    as nvidia-smi names the profiles."""
    by_host = {n.hostname: n for n in kubernetes_nodes(fleet)}
    out: dict[str, tuple[tuple[str, int], ...]] = {}
    for p in kubernetes_partitions(fleet):
        geometry = next((by_host[h].mig for h in p.nodes if h in by_host and by_host[h].mig), ())
        if geometry:
            out[p.name] = geometry
    return out
