"""The fleetspec Kubernetes program: one function for ``pulumi up`` and the Automation API.

Thin on purpose. ``fleetspec.render.kubernetes.kubernetes_resources`` decides what exists;
this module only declares it with ``pulumi_kubernetes``, keeping the layer's dependencies
explicit (node labels before the operators and the Slinky ``slurm`` chart whose NodeSets
select on them, namespaces before their releases, each operator or Kueue/Volcano release
before its custom resources, flavors before the queues that name them). Nothing is created
at import time.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from pathlib import Path
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from fleetspec.compile import ir
from fleetspec.compile.ir import Fleet
from fleetspec.render.kubernetes import HelmRelease, KubernetesLayer, Manifest, NodeLabels, kubernetes_resources

CONFIG_NAMESPACE = "fleetspec"
IR_PATH_KEY = "irPath"


def program(fleet: Fleet | None = None) -> dict[str, pulumi.Resource]:
    """Declare the Kubernetes layer of ``fleet``, or of the IR named by ``fleetspec:irPath``."""
    if fleet is None:
        fleet = load_fleet(Path(pulumi.Config(CONFIG_NAMESPACE).require(IR_PATH_KEY)))
    return declare(kubernetes_resources(fleet))


def declare(layer: KubernetesLayer) -> dict[str, pulumi.Resource]:
    """One Pulumi resource per layer entry, keyed (and named) by the entry's key."""
    made: dict[str, pulumi.Resource] = {}

    def after(keys: tuple[str, ...]) -> pulumi.ResourceOptions:
        return pulumi.ResourceOptions(depends_on=[made[k] for k in keys])

    for node in layer.node_labels:
        made[node.key] = _node_patch(node)
    namespaces = [m for m in layer.manifests if m.kind == "Namespace"]
    for m in namespaces:
        made[m.key] = k8s.core.v1.Namespace(m.key, metadata=m.body["metadata"],
                                            opts=after(m.depends_on))
    for rel in layer.releases:
        made[rel.key] = _release(rel, after(rel.depends_on))
    for m in layer.manifests:
        if m.kind != "Namespace":
            made[m.key] = _custom_resource(m, after(m.depends_on))
    return made


def _node_patch(node: NodeLabels) -> pulumi.Resource:
    # A patch, never a Node: the node must have joined; fleetspec owns only its labels.
    return k8s.core.v1.NodePatch(
        node.key,
        metadata=k8s.meta.v1.ObjectMetaPatchArgs(
            name=node.hostname,
            labels=dict(node.labels),
            annotations={"pulumi.com/patchForce": "true"},
        ),
    )


def _release(rel: HelmRelease, opts: pulumi.ResourceOptions) -> pulumi.Resource:
    return k8s.helm.v3.Release(
        rel.key,
        k8s.helm.v3.ReleaseArgs(
            name=rel.name,
            namespace=rel.namespace,
            chart=rel.chart,
            version=rel.version,
            repository_opts=k8s.helm.v3.RepositoryOptsArgs(repo=rel.repo) if rel.repo else None,
            values=dict(rel.values),
            create_namespace=False,
        ),
        opts=opts,
    )


def _custom_resource(m: Manifest, opts: pulumi.ResourceOptions) -> pulumi.Resource:
    return k8s.apiextensions.CustomResource(
        m.key,
        api_version=m.body["apiVersion"],
        kind=m.kind,
        metadata=m.body["metadata"],
        spec=m.body.get("spec"),
        opts=opts,
    )


# ----------------------------------------------------------------- reading fleet.json


def load_fleet(path: Path) -> Fleet:
    """Read a compiled ``fleet.json`` (``Fleet.to_json``) back into the IR."""
    data = json.loads(path.read_text())
    if data.get("irVersion") != ir.IR_VERSION:
        raise ValueError(f"{path}: irVersion {data.get('irVersion')!r}, expected {ir.IR_VERSION}")
    return fleet_from_dict(data)


def fleet_from_dict(data: dict[str, Any]) -> Fleet:
    return _build(Fleet, data)


def _build(cls: type, data: dict[str, Any]) -> Any:
    hints = typing.get_type_hints(cls, vars(ir))
    kwargs = {
        f.name: _value(hints[f.name], data[f.name])
        for f in dataclasses.fields(cls)
        if f.name in data and not f.metadata.get("location")
    }
    return cls(**kwargs)


def _value(hint: Any, value: Any) -> Any:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if value is None:
        return None
    if origin in (types.UnionType, typing.Union):
        inner = [a for a in args if a is not type(None)]
        return _value(inner[0], value) if len(inner) == 1 else value
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_value(args[0], v) for v in value)
        return tuple(_value(a, v) for a, v in zip(args, value, strict=True))
    if dataclasses.is_dataclass(hint):
        return _build(hint, value)
    return value
