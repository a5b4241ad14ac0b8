"""The fleetspec Kubernetes program: one function for ``pulumi up`` and the Automation API.

Thin on purpose. ``fleetspec.render.kubernetes.kubernetes_resources`` decides what exists;
this module only declares it with ``pulumi_kubernetes``, keeping the layer's dependencies
explicit (node labels before the operators and the Slinky ``slurm`` chart whose NodeSets
select on them, namespaces before their releases, each operator or Kueue/Volcano release
before its custom resources, flavors before the queues that name them). Nothing is created
at import time.

Every resource goes through one explicit ``k8s.Provider`` built from stack config
(``fleetspec:kubeconfig``, ``fleetspec:context``), never the ambient kubectl context: a
``pulumi up`` from a shell pointed at another cluster must not apply this fleet there.
Tenant namespaces are ``retain_on_delete``: removing a tenant from the spec stops managing
its namespace but leaves it, and the PVCs in it, in the cluster.
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
from fleetspec.render.kubernetes import (
    ClusterSecret,
    HelmRelease,
    KubernetesLayer,
    Manifest,
    NodeLabels,
    kubernetes_resources,
)

CONFIG_NAMESPACE = "fleetspec"
IR_PATH_KEY = "irPath"
KUBECONFIG_KEY = "kubeconfig"  # a kubeconfig file's path or its contents
CONTEXT_KEY = "context"  # required: the context in that kubeconfig to apply to
PROVIDER_NAME = "fleet-cluster"


def program(fleet: Fleet | None = None) -> dict[str, pulumi.Resource]:
    """Declare the Kubernetes layer of ``fleet``, or of the IR named by ``fleetspec:irPath``,
    on the cluster named by ``fleetspec:context`` (and ``fleetspec:kubeconfig``)."""
    config = pulumi.Config(CONFIG_NAMESPACE)
    if fleet is None:
        fleet = load_fleet(Path(config.require(IR_PATH_KEY)))
    layer = kubernetes_resources(fleet)
    if layer.empty:
        return {}  # nothing to declare: no cluster needed
    provider = k8s.Provider(PROVIDER_NAME, kubeconfig=config.get(KUBECONFIG_KEY),
                            context=config.require(CONTEXT_KEY))
    values = {s.source: _secret_input(config, s.source) for s in layer.secrets}
    return declare(layer, provider, {k: v for k, v in values.items() if v is not None})


def _secret_input(config: pulumi.Config, source: str) -> pulumi.Output[str] | None:
    """A spec secret's value from stack config. ``up`` requires it; a preview without it
    (``fleetspec plan`` resolves no secrets) gets None and keeps the applied value."""
    key = secret_config_key(source)
    value = config.get_secret(key)
    if value is None and not pulumi.runtime.is_dry_run():
        return config.require_secret(key)  # raises ConfigMissingError naming the key
    return value


def secret_config_key(source: str) -> str:
    """The stack config key holding a spec secret's value: ``slurmdbd_password`` ->
    ``slurmdbdPassword`` (set with ``pulumi config set --secret fleetspec:slurmdbdPassword``)."""
    head, *rest = source.split("_")
    return head + "".join(part.capitalize() for part in rest)


def declare(layer: KubernetesLayer, provider: pulumi.ProviderResource,
            secret_values: dict[str, pulumi.Input[str]] | None = None) -> dict[str, pulumi.Resource]:
    """One Pulumi resource per layer entry, keyed (and named) by the entry's key, each
    through ``provider``; ``secret_values`` maps a spec secret's name to its value (a Pulumi
    secret) for the layer's Secrets; a Secret missing from it (a preview run without the
    value) keeps the value already applied."""
    made: dict[str, pulumi.Resource] = {}

    def after(keys: tuple[str, ...], retain: bool = False) -> pulumi.ResourceOptions:
        return pulumi.ResourceOptions(provider=provider, depends_on=[made[k] for k in keys],
                                      retain_on_delete=retain)

    for node in layer.node_labels:
        made[node.key] = _node_patch(node, after(()))
    namespaces = [m for m in layer.manifests if m.kind == "Namespace"]
    for m in namespaces:
        made[m.key] = k8s.core.v1.Namespace(m.key, metadata=m.body["metadata"],
                                            opts=after(m.depends_on, m.retain_on_delete))
    for secret in layer.secrets:
        made[secret.ref] = _secret(secret, (secret_values or {}).get(secret.source),
                                   after((f"Namespace/{secret.namespace}",)))
    for rel in layer.releases:
        made[rel.key] = _release(rel, after(rel.depends_on))
    for m in layer.manifests:
        if m.kind != "Namespace":
            made[m.key] = _custom_resource(m, after(m.depends_on, m.retain_on_delete))
    return made


def _node_patch(node: NodeLabels, opts: pulumi.ResourceOptions) -> pulumi.Resource:
    # A patch, never a Node: the node must have joined; fleetspec owns only its labels.
    return k8s.core.v1.NodePatch(
        node.key,
        metadata=k8s.meta.v1.ObjectMetaPatchArgs(
            name=node.hostname,
            labels=dict(node.labels),
            annotations={"pulumi.com/patchForce": "true"},
        ),
        opts=opts,
    )


def _secret(secret: ClusterSecret, value: pulumi.Input[str] | None, opts: pulumi.ResourceOptions) -> pulumi.Resource:
    if value is None:
        # A preview without the value: the Secret keeps the value already applied
        # (ignoreChanges uses the state's inputs for an existing resource, so an unchanged
        # Secret previews as unchanged); only its first create shows, as it should. The
        # placeholder is never applied: up requires the value (_secret_input).
        # https://www.pulumi.com/docs/iac/concepts/options/ignorechanges/
        value = pulumi.Output.secret("")
        opts = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(ignore_changes=["stringData"]))
    return k8s.core.v1.Secret(
        secret.ref,
        metadata=k8s.meta.v1.ObjectMetaArgs(
            name=secret.name, namespace=secret.namespace,
            labels={"app.kubernetes.io/managed-by": "fleetspec"}),
        string_data={secret.key: value},
        opts=opts,
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
            skip_await=rel.skip_await or None,
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
