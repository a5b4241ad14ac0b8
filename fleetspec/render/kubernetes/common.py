"""What every Kubernetes sub-renderer shares: the typed objects of the layer (node labels,
Helm releases, manifests, cluster secrets, prerequisites), the label keys and namespaces
fleetspec owns, the queue rows Kueue, Volcano and KAI all build from, the object and YAML
helpers. Every module of ``fleetspec.render.kubernetes`` imports this one and none imports
``layer`` back (docs/architecture.md).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from fleetspec.compile.ir import Fleet
from fleetspec.layout.kubernetes import kubernetes_nodes, kubernetes_partitions
from fleetspec.node_side import contract

# libyaml's emitter when present: same output, several times faster on 20,000 nodes.
_BaseDumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
LABEL_PREFIX = "fleetspec.io/"
STACK_LABEL = LABEL_PREFIX + "stack"
PARTITION_LABEL = contract.PARTITION_LABEL  # the remediator selects on it too
GPU_MODEL_LABEL = LABEL_PREFIX + "gpu-model"
RACK_LABEL = LABEL_PREFIX + "rack"
LEAF_LABEL = LABEL_PREFIX + "leaf"
HOSTNAME_LABEL = "kubernetes.io/hostname"
VOLCANO_NODEGROUP_LABEL = "volcano.sh/nodegroup-name"  # Volcano's nodegroup plugin key
GPU_RESOURCE = {"nvidia": "nvidia.com/gpu", "amd": "amd.com/gpu"}



NAMESPACES = {
    "gpu-operator": "gpu-operator",
    "amd-gpu-operator": "kube-amd-gpu",
    "kueue": "kueue-system",
    "volcano": "volcano-system",
    "slurm-operator": "slinky",
    "slurm": "slurm",  # the Slinky cluster (the ``slurm`` chart), as Slinky's docs install it
    "network-operator": "nvidia-network-operator",
}


# Kueue integrations for kinds every cluster has (no operator to install): Jobs and plain
# Pods, Deployments and StatefulSets (the pod integration).
KUEUE_BUILTIN_FRAMEWORKS = ("batch/job", "pod", "deployment", "statefulset")


@dataclass(frozen=True)
class NodeLabels:
    """The labels fleetspec owns on one existing Kubernetes node (never creates Nodes)."""

    hostname: str
    labels: Mapping[str, str]

    @property
    def key(self) -> str:
        return f"node/{self.hostname}"


@dataclass(frozen=True)
class HelmRelease:
    """One pinned Helm release. ``repo`` is None for OCI charts (``chart`` is the URL)."""

    name: str
    namespace: str
    chart: str
    repo: str | None
    version: str
    values: Mapping[str, Any]
    depends_on: tuple[str, ...] = ()
    # Declared done once Helm applied it, without waiting for its pods to be ready (they
    # wait for something a later release brings).
    skip_await: bool = False

    @property
    def key(self) -> str:
        return f"release/{self.name}"


@dataclass(frozen=True)
class Manifest:
    """One Kubernetes object, the file it is written to, and what must exist first."""

    body: Mapping[str, Any]
    file: str  # manifest file stem under kubernetes/manifests/
    depends_on: tuple[str, ...] = ()
    # Left in the cluster when it leaves the spec (a tenant's namespace and its PVCs).
    retain_on_delete: bool = False

    @property
    def kind(self) -> str:
        return self.body["kind"]

    @property
    def name(self) -> str:
        return self.body["metadata"]["name"]

    @property
    def namespace(self) -> str | None:
        return self.body["metadata"].get("namespace")

    @property
    def key(self) -> str:
        ns = self.namespace
        return f"{self.kind}/{ns}/{self.name}" if ns else f"{self.kind}/{self.name}"


@dataclass(frozen=True)
class ClusterSecret:
    """A Secret whose value comes from the spec's secret reference ``source`` (its name in
    ``spec.secrets``): created by the Pulumi stack from its config, never rendered."""

    name: str
    namespace: str
    key: str  # the data key in the Secret
    source: str  # e.g. "slurmdbd_password"

    @property
    def ref(self) -> str:
        return f"Secret/{self.namespace}/{self.name}"


@dataclass(frozen=True)
class Prerequisite:
    """Something the cluster itself must provide; fleetspec cannot apply it."""

    id: str
    message: str
    components: tuple[str, ...] = ()
    feature_gates: tuple[str, ...] = ()


@dataclass(frozen=True)
class KubernetesLayer:
    node_labels: tuple[NodeLabels, ...] = ()
    releases: tuple[HelmRelease, ...] = ()
    manifests: tuple[Manifest, ...] = ()  # in dependency order
    prerequisites: tuple[Prerequisite, ...] = ()
    secrets: tuple[ClusterSecret, ...] = ()

    @property
    def empty(self) -> bool:
        return not (self.node_labels or self.releases or self.manifests or self.prerequisites
                    or self.secrets)


@functools.lru_cache(maxsize=4096)
def label_value(text: str) -> str:
    """A valid label value: ``2.28.3-1+cuda13.0`` -> ``2.28.3-1_cuda13.0``; max 63 chars."""
    cleaned = "".join(c if c.isalnum() or c in "-_." else "_" for c in text)[:63]
    return cleaned.strip("-_.")


def obj(api: str, kind: str, name: str, spec: Any = None, *, namespace: str | None = None,
         labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    meta["labels"] = {"app.kubernetes.io/managed-by": "fleetspec", **(labels or {})}
    body: dict[str, Any] = {"apiVersion": api, "kind": kind, "metadata": meta}
    if spec is not None:
        body["spec"] = spec
    return body


def namespace_key(namespace: str) -> str:
    return f"Namespace/{namespace}"


@dataclass(frozen=True)
class QueueRow:
    """One queue: a tenant's quota on one partition (or a whole partition without tenants).

    One partition per queue keeps "one job, one generation": Kueue assigns a flavor per
    PodSet, so a ClusterQueue with two flavors can admit one JobSet or MPIJob with pods on
    both; Volcano's nodegroup affinity lists groups a job's pods may spread over."""

    name: str  # ClusterQueue / Volcano Queue: ``<tenant>-<partition>``, or ``<partition>``
    partition: str  # also the LocalQueue name in each namespace
    namespaces: tuple[str, ...]
    gpus: int
    limit: int | None = None  # the tenant's cap on the partition (tenant ``limit``), if any


def queue_rows(fleet: Fleet) -> list[QueueRow]:
    """A row per (tenant, partition it has quota on), or per partition without tenants.
    Partitions that are not Kubernetes-owned are dropped: checks report them."""
    assert fleet.kubernetes is not None
    parts = {p.name: p for p in kubernetes_partitions(fleet)}
    if fleet.kubernetes.tenants:
        return [
            QueueRow(f"{t.name}-{p}", p, tuple(sorted(t.namespaces)), g, dict(t.limit).get(p))
            for t in sorted(fleet.kubernetes.tenants, key=lambda t: t.name)
            for p, g in sorted(t.quota) if p in parts
        ]
    return [QueueRow(p, p, ("default",), parts[p].gpus) for p in sorted(parts)]


def kueue_topology_levels(fleet: Fleet) -> list[str]:
    """Topology levels from the fabric, widest first: leaf (when every Kubernetes node has
    one), rack (the NVLink domain on NVL72-class racks), then the host."""
    nodes = kubernetes_nodes(fleet)
    levels = [LEAF_LABEL] if nodes and all(n.leaf for n in nodes) else []
    return [*levels, RACK_LABEL, HOSTNAME_LABEL]


def v_prefixed(version: str) -> str:
    return version if version.startswith("v") else f"v{version}"


def v_stripped(version: str) -> str:
    return version[1:] if version.startswith("v") else version


class _Dumper(_BaseDumper):  # type: ignore[misc,valid-type]
    """Block style; multi-line strings (embedded config files) as literal blocks."""


def _str_representer(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    style = "|" if "\n" in data else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_Dumper.add_representer(str, _str_representer)


def dump(data: Any) -> str:
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, default_flow_style=False,
                     width=100)


def dump_all(docs: Iterable[Any]) -> str:
    return yaml.dump_all(list(docs), Dumper=_Dumper, sort_keys=False,
                         default_flow_style=False, explicit_start=True, width=100)


HEADER = "# Generated by fleetspec from the fleet spec; edit the spec, not this file.\n"
