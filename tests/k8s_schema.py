"""Check rendered Kubernetes objects against the schemas a real API server would use, offline.

fleetspec renders custom resources (Kueue, Volcano, NVIDIA and AMD GPU operators, Slinky) and
built-in objects (Namespace, ConfigMap, Node label patches). A typo in any of them is only
found when ``kubectl apply`` runs against a live cluster, so this module answers the same
question without one:

* custom kinds are checked against the ``openAPIV3Schema`` of the upstream CRD, walked the
  way the API server treats a *structural* schema: unknown fields are errors wherever the
  schema does not preserve them (the server prunes them, or rejects them under strict field
  validation), ``x-kubernetes-int-or-string`` accepts ``8`` as well as ``"64Gi"``, ``nullable``
  allows ``null``, ``additionalProperties`` is a map schema, and list-type ``set``/``map``
  forbids duplicates;
* built-in kinds are checked with the ``kubernetes-validate`` package (strict schemas) for
  the requested Kubernetes version, or the nearest one it ships, with a note saying so;
* both get the object-metadata rules the server applies before any schema: DNS-1123 names,
  label syntax, and namespaced-versus-cluster scope.

Two checks are stricter than the server, because what it would do silently is a rendering
bug: ``null`` on a field that is not ``nullable`` (the server drops the field) and a namespaced
object without ``metadata.namespace`` (kubectl uses whatever namespace the context has).

CEL rules (``x-kubernetes-validations``) need a CEL interpreter and are *not* evaluated;
they are counted instead, so reports and docs can say how many rules went unchecked.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import functools
import json
import math
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from fleetspec.versions import parse_version

Schema = Mapping[str, Any]
GroupVersionKind = tuple[str, str, str]

_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

# Name rules from k8s.io/apimachinery/pkg/util/validation.
_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_DNS1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_QUALIFIED_NAME_PART = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
_RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})")
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_GO_LEADING_FLAGS = re.compile(r"^\^\(\?([imsU]+)\)")
# The pattern controller-gen puts on every resource.Quantity field.
_QUANTITY_PATTERN = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]"
    r"|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)

_INT_RANGES = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}
_ANNOTATIONS_MAX_BYTES = 256 * 1024

# ObjectMeta fields a manifest may carry; anything else under metadata is an unknown field.
_OBJECT_META_FIELDS = frozenset(
    {
        "name",
        "generateName",
        "namespace",
        "labels",
        "annotations",
        "finalizers",
        "ownerReferences",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "managedFields",
        "selfLink",
    }
)

# API groups served by kube-apiserver itself; only these are looked up in kubernetes-validate,
# so a CRD that happens to reuse a built-in kind name (``storage.example.com`` StorageClass)
# is never checked against the built-in schema.
_BUILTIN_GROUPS = frozenset({"", "apps", "batch", "autoscaling", "policy", "extensions"})

# Built-in cluster-scoped kinds (``kubectl api-resources --namespaced=false`` on 1.3x);
# every other built-in kind is namespaced. kubernetes-validate's schemas carry no scope.
_BUILTIN_CLUSTER_SCOPED = frozenset(
    {
        ("", "Namespace"),
        ("", "Node"),
        ("", "PersistentVolume"),
        ("", "ComponentStatus"),
        ("admissionregistration.k8s.io", "MutatingWebhookConfiguration"),
        ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration"),
        ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy"),
        ("admissionregistration.k8s.io", "ValidatingAdmissionPolicyBinding"),
        ("admissionregistration.k8s.io", "MutatingAdmissionPolicy"),
        ("admissionregistration.k8s.io", "MutatingAdmissionPolicyBinding"),
        ("apiextensions.k8s.io", "CustomResourceDefinition"),
        ("apiregistration.k8s.io", "APIService"),
        ("authentication.k8s.io", "SelfSubjectReview"),
        ("authentication.k8s.io", "TokenReview"),
        ("authorization.k8s.io", "SelfSubjectAccessReview"),
        ("authorization.k8s.io", "SelfSubjectRulesReview"),
        ("authorization.k8s.io", "SubjectAccessReview"),
        ("certificates.k8s.io", "CertificateSigningRequest"),
        ("certificates.k8s.io", "ClusterTrustBundle"),
        ("flowcontrol.apiserver.k8s.io", "FlowSchema"),
        ("flowcontrol.apiserver.k8s.io", "PriorityLevelConfiguration"),
        ("internal.apiserver.k8s.io", "StorageVersion"),
        ("networking.k8s.io", "IngressClass"),
        ("networking.k8s.io", "IPAddress"),
        ("networking.k8s.io", "ServiceCIDR"),
        ("node.k8s.io", "RuntimeClass"),
        ("rbac.authorization.k8s.io", "ClusterRole"),
        ("rbac.authorization.k8s.io", "ClusterRoleBinding"),
        ("resource.k8s.io", "DeviceClass"),
        ("resource.k8s.io", "DeviceTaintRule"),
        ("resource.k8s.io", "ResourceSlice"),
        ("scheduling.k8s.io", "PriorityClass"),
        ("storage.k8s.io", "CSIDriver"),
        ("storage.k8s.io", "CSINode"),
        ("storage.k8s.io", "StorageClass"),
        ("storage.k8s.io", "VolumeAttachment"),
        ("storage.k8s.io", "VolumeAttributesClass"),
        ("storagemigration.k8s.io", "StorageVersionMigration"),
    }
)

# Built-in kinds whose names are stricter than a DNS-1123 subdomain (apiserver validation).
_BUILTIN_NAME_RULES = {
    ("", "Namespace"): "label",
    ("", "Service"): "dns1035",
}


class CrdLoadError(ValueError):
    """A file under the CRD directory is not a usable CustomResourceDefinition set."""


# A cluster holds one CRD per kind. The GPU Operator chart (v26.7.0) bundles a copy of the
# DRA driver's ComputeDomain CRD for its experimental DRA path (GPUCluster CR), older than the
# one nvidia-dra-driver-gpu installs (tests/data/crds/SOURCES.md, sections 4 and 9). fleetspec
# installs the DRA driver's (its release goes first: test_compute_domain_crd_is_the_dra_drivers),
# so the bundled copy is not what objects are checked against.
NOT_INSTALLED = ("nvidia-gpu-operator/resource.nvidia.com_computedomains.yaml",)


@dataclass(frozen=True)
class CrdSchema:
    """One served version of one CRD: what is needed to check an object of that kind."""

    group: str
    version: str
    kind: str
    scope: str  # "Namespaced" or "Cluster", as in the CRD's spec.scope
    schema: Schema
    source: Path
    cel_rules: int  # x-kubernetes-validations rules anywhere in this schema (not evaluated)


@dataclass(frozen=True)
class CrdIndex:
    """CRD schemas keyed by (group, version, kind), served versions only."""

    schemas: Mapping[GroupVersionKind, CrdSchema]

    @classmethod
    def load(cls, crd_dir: Path, skip: Iterable[str] = NOT_INSTALLED) -> CrdIndex:
        """Read every ``*.yaml``/``*.yml`` under ``crd_dir`` except the ``skip`` paths
        (relative to ``crd_dir``); documents that are not CRDs are ignored.

        Raises ``CrdLoadError`` for a missing directory, a legacy ``v1beta1`` CRD, a served
        version without a schema, or two files serving the same kind and version.
        """
        if not crd_dir.is_dir():
            raise CrdLoadError(f"CRD directory {crd_dir} does not exist")
        skipped = {crd_dir / s for s in skip}
        schemas: dict[GroupVersionKind, CrdSchema] = {}
        for path in sorted(p for p in _yaml_files(crd_dir) if p not in skipped):
            for crd in _crd_documents(path):
                for entry in _served_schemas(crd, path):
                    key = (entry.group, entry.version, entry.kind)
                    if key in schemas:
                        raise CrdLoadError(
                            f"{entry.group}/{entry.version} {entry.kind} is defined twice: "
                            f"{schemas[key].source} and {path}"
                        )
                    schemas[key] = entry
        return cls(schemas)

    def get(self, api_version: str, kind: str) -> CrdSchema | None:
        group, version = split_api_version(api_version)
        return self.schemas.get((group, version, kind))

    def served_versions(self, group: str, kind: str) -> list[str]:
        return sorted(v for g, v, k in self.schemas if g == group and k == kind)

    @property
    def cel_rule_count(self) -> int:
        """CEL rules across every indexed schema; all of them are skipped, none evaluated."""
        return sum(entry.cel_rules for entry in self.schemas.values())


@dataclass(frozen=True)
class ObjectCheck:
    """The outcome for one object: errors (empty means valid) and what was not checked."""

    errors: tuple[str, ...]
    schema_source: str  # which schema judged the object, for reports
    skipped_cel_rules: int = 0  # CEL rule evaluations skipped: rules on every schema node visited
    notes: tuple[str, ...] = ()  # e.g. the Kubernetes version that was substituted


def split_api_version(api_version: str) -> tuple[str, str]:
    """``"kueue.x-k8s.io/v1beta2"`` -> ``("kueue.x-k8s.io", "v1beta2")``; ``"v1"`` -> ``("", "v1")``."""
    group, _, version = api_version.rpartition("/")
    return group, version


def builtin_schema_version(k8s_version: str) -> tuple[str, str | None]:
    """The kubernetes-validate schema version to use for ``k8s_version``, and a note if substituted.

    The newest shipped version not newer than the request is used; a request newer than
    everything shipped falls back to the newest (older than everything: the oldest), and
    the note says so, because the schemas may then miss or wrongly have fields.
    """
    import kubernetes_validate  # lazy: jsonschema and the schema files are slow to load
    from kubernetes_validate.utils import all_versions

    wanted = parse_version(k8s_version)
    if wanted is None or len(wanted) < 2:
        raise ValueError(f"not a Kubernetes version: {k8s_version!r} (expected e.g. 1.33)")
    shipped = sorted({parse_version(v)[:2]: v for v in all_versions()}.items())
    package = f"kubernetes-validate {kubernetes_validate.version.__version__}"
    newest_minor, newest = shipped[-1]
    if wanted[:2] > newest_minor:
        return newest, f"{package} ships schemas up to {newest}; used {newest} for {k8s_version}"
    usable = [(minor, full) for minor, full in shipped if minor <= wanted[:2]]
    if not usable:
        oldest = shipped[0][1]
        return oldest, f"{package} ships schemas from {oldest} on; used {oldest} for {k8s_version}"
    minor, chosen = usable[-1]
    if minor == wanted[:2]:
        return chosen, None
    return chosen, f"{package} has no schemas for {k8s_version}; used {chosen}"


def check_object(obj: Mapping[str, Any], index: CrdIndex, k8s_version: str) -> ObjectCheck:
    """Check one object: its schema (CRD or built-in), its metadata, and its scope."""
    if not isinstance(obj, Mapping):
        return ObjectCheck(
            (f"<root>: Invalid value: expected an object, got {_show(obj)}",), "none"
        )
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    if not isinstance(api_version, str) or not api_version or not isinstance(kind, str) or not kind:
        return ObjectCheck(("<root>: apiVersion and kind must be non-empty strings",), "none")
    crd = index.get(api_version, kind)
    if crd is not None:
        return _check_custom(obj, crd)
    group, _ = split_api_version(api_version)
    if group in _BUILTIN_GROUPS or group.endswith(".k8s.io"):
        builtin = _check_builtin(obj, group, k8s_version)
        if builtin is not None:
            return builtin
    return ObjectCheck((_no_schema_message(api_version, kind, index, k8s_version),), "none")


def validate_object(obj: Mapping[str, Any], index: CrdIndex, k8s_version: str) -> list[str]:
    """Human-readable errors, each starting with a field path; an empty list means valid."""
    return list(check_object(obj, index, k8s_version).errors)


def validate_manifests(
    objs: Iterable[Mapping[str, Any]], crd_dir: Path, k8s_version: str
) -> dict[int, list[str]]:
    """Errors keyed by the position of each invalid object; ``{}`` means every object is valid."""
    index = _cached_index(crd_dir)
    results = {i: validate_object(obj, index, k8s_version) for i, obj in enumerate(objs)}
    return {i: errors for i, errors in results.items() if errors}


def _cached_index(crd_dir: Path) -> CrdIndex:
    """Parsing the CRDs takes about a second; reuse it while no file changed."""
    root = crd_dir.resolve()
    stamp = tuple(
        (str(p), p.stat().st_mtime_ns, p.stat().st_size) for p in sorted(_yaml_files(root))
    )
    return _load_index(root, stamp)


@functools.lru_cache(maxsize=4)
def _load_index(root: Path, stamp: tuple[tuple[str, int, int], ...]) -> CrdIndex:
    del stamp  # only part of the cache key
    return CrdIndex.load(root)


# --- loading ------------------------------------------------------------------------------


def _yaml_files(crd_dir: Path) -> Iterator[Path]:
    return (p for p in crd_dir.rglob("*") if p.suffix in (".yaml", ".yml") and p.is_file())


def _crd_documents(path: Path) -> Iterator[Mapping[str, Any]]:
    try:
        with path.open(encoding="utf-8") as stream:
            documents = list(yaml.load_all(stream, Loader=_YAML_LOADER))
    except yaml.YAMLError as exc:
        raise CrdLoadError(f"{path}: not valid YAML: {exc}") from exc
    for doc in documents:
        if not isinstance(doc, Mapping) or doc.get("kind") != "CustomResourceDefinition":
            continue
        if doc.get("apiVersion") != "apiextensions.k8s.io/v1":
            raise CrdLoadError(f"{path}: only apiextensions.k8s.io/v1 CRDs are supported")
        yield doc


def _served_schemas(crd: Mapping[str, Any], path: Path) -> Iterator[CrdSchema]:
    spec = crd["spec"]
    for version in spec["versions"]:
        if not version.get("served", False):
            continue
        schema = (version.get("schema") or {}).get("openAPIV3Schema")
        if not isinstance(schema, Mapping):
            raise CrdLoadError(f"{path}: served version {version['name']} has no openAPIV3Schema")
        yield CrdSchema(
            group=spec["group"],
            version=version["name"],
            kind=spec["names"]["kind"],
            scope=spec["scope"],
            schema=schema,
            source=path,
            cel_rules=_checked_cel_count(schema, path),
        )


def _schema_nodes(schema: Schema) -> Iterator[Schema]:
    """Every schema node below ``schema``, following only schema keywords (not defaults)."""
    yield schema
    children: list[Any] = list((schema.get("properties") or {}).values())
    children += [schema.get(k) for k in ("items", "additionalProperties", "not")]
    children += [b for k in ("allOf", "anyOf", "oneOf") for b in schema.get(k) or ()]
    for child in children:
        if isinstance(child, Mapping):
            yield from _schema_nodes(child)


def _checked_cel_count(schema: Schema, path: Path) -> int:
    """Count the CEL rules (not evaluated) and fail early on a pattern Python cannot compile."""
    rules = 0
    for node in _schema_nodes(schema):
        rules += len(node.get("x-kubernetes-validations") or ())
        if isinstance(node.get("pattern"), str):
            try:
                _compiled(node["pattern"])
            except re.error as exc:
                raise CrdLoadError(
                    f"{path}: pattern {node['pattern']!r} does not compile: {exc}"
                ) from exc
    return rules


# --- custom and built-in kinds ---------------------------------------------------------------


def _check_custom(obj: Mapping[str, Any], crd: CrdSchema) -> ObjectCheck:
    walker = _SchemaWalker()
    walker.check({k: v for k, v in obj.items() if k != "metadata"}, _root_schema(crd.schema), "")
    meta = obj.get("metadata")
    errors = walker.errors + _metadata_errors(meta, check_types=True, require_name=True)
    errors += _crd_name_errors(meta, crd.schema)
    errors += _name_errors(meta, "subdomain")
    errors += _scope_errors(meta, crd.scope == "Namespaced", crd.kind)
    source = f"CRD {crd.group}/{crd.version} {crd.kind} ({crd.source.name})"
    return ObjectCheck(tuple(_dedupe(errors)), source, walker.skipped_cel_rules)


def _crd_name_errors(meta: Any, schema: Schema) -> list[str]:
    """A CRD may restrict metadata.name and generateName, and nothing else of metadata."""
    declared = ((schema.get("properties") or {}).get("metadata") or {}).get("properties") or {}
    walker = _SchemaWalker()
    for key in ("name", "generateName"):
        if key in declared and isinstance(meta, Mapping) and key in meta:
            walker.check(meta[key], declared[key], f"metadata.{key}")
    return walker.errors


def _root_schema(schema: Schema) -> Schema:
    """The server handles apiVersion, kind and metadata itself, whatever the CRD declares."""
    properties = dict(schema.get("properties") or {})
    properties.update({"apiVersion": {"type": "string"}, "kind": {"type": "string"}})
    properties.pop("metadata", None)
    return {**schema, "type": "object", "properties": properties}


def _check_builtin(obj: Mapping[str, Any], group: str, k8s_version: str) -> ObjectCheck | None:
    """kubernetes-validate strict schemas; ``None`` when it has no schema for the kind.

    It stops at the first schema error, so a built-in object reports at most one of those.
    """
    import kubernetes_validate  # lazy, as in builtin_schema_version

    version, note = builtin_schema_version(k8s_version)
    errors: list[str] = []
    try:
        kubernetes_validate.validate(dict(obj), version, strict=True)
    except kubernetes_validate.SchemaNotFoundError:
        return None
    except kubernetes_validate.ValidationError as exc:
        errors.append(f"{_format_path(exc.path)}: {exc.message}")
    kind = obj["kind"]
    errors.extend(_documented_enum_errors(obj, group, version))
    errors.extend(_metadata_errors(obj.get("metadata"), check_types=False, require_name=True))
    errors.extend(
        _name_errors(obj.get("metadata"), _BUILTIN_NAME_RULES.get((group, kind), "subdomain"))
    )
    namespaced = (group, kind) not in _BUILTIN_CLUSTER_SCOPED
    errors.extend(_scope_errors(obj.get("metadata"), namespaced, kind))
    source = f"kubernetes-validate {kubernetes_validate.version.__version__} schemas for {version}"
    return ObjectCheck(tuple(_dedupe(errors)), source, 0, (note,) if note else ())


# Enum fields the OpenAPI v2 schemas cannot constrain (v2 has no enums), checked against the
# values the field's own documentation lists in the same release's schema: the Go doc comment
# on the API type, e.g. DeviceTaint.Effect (kubernetes staging/src/k8s.io/api/resource/*/types.go)
# reads "Valid effects are NoSchedule and NoExecute" in 1.33-1.34 and "Valid effects are None,
# NoSchedule and NoExecute" from 1.35, where DeviceTaintEffectNone was added.
# (group, kind) -> (field path in the object, schema definition, property)
_DOCUMENTED_ENUMS = {
    ("resource.k8s.io", "DeviceTaintRule"): (("spec", "taint", "effect"), "devicetaint", "effect"),
}


def documented_values(schema_version: str, api_version: str, definition: str, prop: str) -> tuple[str, ...] | None:
    """The values ``definition.prop``'s description in kubernetes-validate's schema for
    ``schema_version`` lists after "Valid <word> are", or None when it lists none."""
    from kubernetes_validate.utils import VersionNotSupportedError, schema_contents

    group, version = split_api_version(api_version)
    name = f"kubernetes-json-schema/v{schema_version}-local-strict/{definition}-{group.split('.')[0]}-{version}.json"
    try:
        schema = schema_contents(name, schema_version)
    except (OSError, ValueError, VersionNotSupportedError):
        return None
    text = ((schema.get("properties") or {}).get(prop) or {}).get("description", "")
    listed = re.search(r"Valid \w+ are ([^.]+)\.", text)
    if not listed:
        return None
    return tuple(v.strip() for v in re.split(r",| and ", listed.group(1)) if v.strip())


def _documented_enum_errors(obj: Mapping[str, Any], group: str, schema_version: str) -> list[str]:
    rule = _DOCUMENTED_ENUMS.get((group, obj["kind"]))
    if rule is None:
        return []
    path, definition, prop = rule
    value: Any = obj
    for part in path:
        value = value.get(part) if isinstance(value, Mapping) else None
    allowed = documented_values(schema_version, obj["apiVersion"], definition, prop)
    if value is None or allowed is None or value in allowed:
        return []
    return [f"{'.'.join(path)}: Unsupported value: {json.dumps(value)}: supported values: "
            + ", ".join(json.dumps(v) for v in allowed)]


def _no_schema_message(api_version: str, kind: str, index: CrdIndex, k8s_version: str) -> str:
    group, _ = split_api_version(api_version)
    served = index.served_versions(group, kind)
    if served:
        hint = f"the CRD serves {', '.join(served)}"
    else:
        hint = f"neither a built-in kind for Kubernetes {k8s_version} nor a CRD in the index"
    return f"<root>: no schema for {api_version} {kind}: {hint}"


def _format_path(parts: Iterable[Any]) -> str:
    text = ""
    for part in parts:
        text = (
            f"{text}[{part}]"
            if isinstance(part, int)
            else (f"{text}.{part}" if text else str(part))
        )
    return text or "<root>"


def _dedupe(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))


# --- metadata ---------------------------------------------------------------------------------


def _metadata_errors(meta: Any, check_types: bool, require_name: bool) -> list[str]:
    """ObjectMeta rules the API server applies to every kind, before any schema.

    ``check_types`` is off for built-in kinds, whose schema already checks the types.
    ``require_name`` is off for embedded objects such as pod templates, which have none.
    """
    if meta is None:
        return ["metadata: Required value"]
    if not isinstance(meta, Mapping):
        return [f"metadata: Invalid value: {_show(meta)}: must be an object"]
    errors: list[str] = []
    if check_types:
        errors += [f"metadata.{k}: unknown field" for k in meta if k not in _OBJECT_META_FIELDS]
    if require_name and "name" not in meta and "generateName" not in meta:
        errors.append("metadata.name: Required value")
    namespace = meta.get("namespace")
    if isinstance(namespace, str) and not _is_dns_label(namespace):
        errors.append(f"metadata.namespace: Invalid value: {_show(namespace)}: {_LABEL_RULE}")
    errors += _string_map_errors(
        meta.get("labels"), "metadata.labels", check_types, label_values=True
    )
    errors += _string_map_errors(
        meta.get("annotations"), "metadata.annotations", check_types, label_values=False
    )
    annotations = meta.get("annotations")
    if isinstance(annotations, Mapping):
        size = sum(len(str(k).encode()) + len(str(v).encode()) for k, v in annotations.items())
        if size > _ANNOTATIONS_MAX_BYTES:
            errors.append(
                f"metadata.annotations: Too long: may not be more than {_ANNOTATIONS_MAX_BYTES} bytes"
            )
    return errors


def _string_map_errors(value: Any, path: str, check_types: bool, label_values: bool) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, Mapping):
        return (
            [f"{path}: Invalid value: {_show(value)}: must be a map of strings"]
            if check_types
            else []
        )
    errors: list[str] = []
    for key, item in value.items():
        key_error = _qualified_name_error(key)
        if key_error:
            errors.append(f"{path}: Invalid value: {_show(key)}: {key_error}")
        if not isinstance(item, str):
            if check_types:
                errors.append(f"{path}[{key}]: Invalid value: {_show(item)}: must be a string")
        elif label_values and (len(item) > 63 or not _LABEL_VALUE.fullmatch(item)):
            errors.append(
                f"{path}[{key}]: Invalid value: {_show(item)}: a label value must be at most 63 "
                "characters, empty or alphanumeric with '-', '_' or '.' inside"
            )
    return errors


def _qualified_name_error(key: Any) -> str | None:
    """Label and annotation keys: an optional DNS-subdomain prefix and a '/', then a name."""
    if not isinstance(key, str):
        return "a key must be a string"
    prefix, slash, name = key.rpartition("/")
    if slash and not (len(prefix) <= 253 and _DNS1123_SUBDOMAIN.fullmatch(prefix)):
        return "the prefix must be a DNS-1123 subdomain of at most 253 characters"
    if not (0 < len(name) <= 63 and _QUALIFIED_NAME_PART.fullmatch(name)):
        return (
            "the name part must be 1-63 characters, alphanumeric with '-', '_' or '.' inside "
            "(e.g. 'nvidia.com/gpu.product')"
        )
    return None


_LABEL_RULE = (
    "must be a DNS-1123 label: at most 63 lowercase alphanumerics or '-', alphanumeric at both ends"
)
_NAME_RULES = {
    "subdomain": (
        253,
        _DNS1123_SUBDOMAIN,
        "must be a DNS-1123 subdomain: at most 253 lowercase alphanumerics, '-' or '.', "
        "alphanumeric at both ends",
    ),
    "label": (63, _DNS1123_LABEL, _LABEL_RULE),
    "dns1035": (
        63,
        _DNS1035_LABEL,
        "must be a DNS-1035 label: a DNS-1123 label that starts with a letter",
    ),
}


def _is_dns_label(text: str) -> bool:
    return len(text) <= 63 and bool(_DNS1123_LABEL.fullmatch(text))


def _name_errors(meta: Any, rule: str) -> list[str]:
    if not isinstance(meta, Mapping) or "name" not in meta:
        return []
    name = meta["name"]
    max_len, pattern, explanation = _NAME_RULES[rule]
    if isinstance(name, str) and len(name) <= max_len and pattern.fullmatch(name):
        return []
    return [f"metadata.name: Invalid value: {_show(name)}: {explanation}"]


def _scope_errors(meta: Any, namespaced: bool, kind: str) -> list[str]:
    namespace = meta.get("namespace") if isinstance(meta, Mapping) else None
    if namespaced and not namespace:
        return [
            f"metadata.namespace: Required value: {kind} is namespaced; without a namespace "
            "kubectl puts it in whatever namespace the current context has"
        ]
    if not namespaced and namespace is not None:
        return [f"metadata.namespace: Forbidden: {kind} is cluster-scoped and takes no namespace"]
    return []


# --- the structural-schema walker -------------------------------------------------------------


@dataclass
class _SchemaWalker:
    """Walks a value along a structural schema, collecting errors and skipped CEL rules.

    ``value_only`` is the mode for ``allOf``/``anyOf``/``oneOf``/``not`` branches: in a
    structural schema they only add value checks, so they never make a field unknown.
    """

    errors: list[str] = field(default_factory=list)
    skipped_cel_rules: int = 0

    def check(self, value: Any, schema: Schema, path: str, value_only: bool = False) -> None:
        if not value_only:
            self.skipped_cel_rules += len(schema.get("x-kubernetes-validations") or ())
        if value is None:
            if not value_only and not schema.get("nullable", False):
                self._fail(path, "Invalid value: null: must not be null here")
            return
        value = _as_json_scalar(value)
        if not self._type_ok(value, schema, path):
            return
        self._enum(value, schema, path)
        if isinstance(value, str):
            self._string(value, schema, path)
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            self._number(value, schema, path)
        elif isinstance(value, list):
            self._array(value, schema, path, value_only)
        elif isinstance(value, Mapping):
            self._object(value, schema, path, value_only)
        self._combinators(value, schema, path)

    def _fail(self, path: str, problem: str) -> None:
        self.errors.append(f"{_at(path)}: {problem}")

    def _type_ok(self, value: Any, schema: Schema, path: str) -> bool:
        if _is_int_or_string(schema):
            if isinstance(value, str) or _is_integer(value):
                return True
            self._fail(path, f"Invalid value: {_show(value)}: must be an integer or a string")
            return False
        wanted = schema.get("type")
        if wanted is None or _TYPE_CHECKS[wanted](value):
            return True
        self._fail(path, f"Invalid value: {_show(value)}: must be of type {wanted}")
        return False

    def _enum(self, value: Any, schema: Schema, path: str) -> None:
        options = schema.get("enum")
        if options is not None and not any(_same_json(value, option) for option in options):
            supported = ", ".join(_show(o) for o in options)
            self._fail(path, f"Unsupported value: {_show(value)}: supported values: {supported}")

    def _string(self, value: str, schema: Schema, path: str) -> None:
        if "minLength" in schema and len(value) < schema["minLength"]:
            self._fail(
                path,
                f"Invalid value: {_show(value)}: must be at least {schema['minLength']} characters",
            )
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            self._fail(path, f"Too long: may not be more than {schema['maxLength']} characters")
        pattern = schema.get("pattern")
        if pattern is not None and not _compiled(pattern).search(value):
            wanted = (
                "a quantity such as 8, 500m or 64Gi"
                if pattern == _QUANTITY_PATTERN
                else f"the pattern {pattern}"
            )
            self._fail(path, f"Invalid value: {_show(value)}: must be {wanted}")
        problem = _string_format_problem(value, schema.get("format"))
        if problem:
            self._fail(path, f"Invalid value: {_show(value)}: {problem}")

    def _number(self, value: float, schema: Schema, path: str) -> None:
        bounds = _INT_RANGES.get(schema.get("format", ""))
        if bounds and not bounds[0] <= value <= bounds[1]:
            self._fail(path, f"Invalid value: {value}: out of range for {schema['format']}")
        if "minimum" in schema:
            low, exclusive = schema["minimum"], schema.get("exclusiveMinimum", False)
            if value < low or (exclusive and value == low):
                relation = "greater than" if exclusive else "greater than or equal to"
                self._fail(path, f"Invalid value: {value}: must be {relation} {low}")
        if "maximum" in schema:
            high, exclusive = schema["maximum"], schema.get("exclusiveMaximum", False)
            if value > high or (exclusive and value == high):
                relation = "less than" if exclusive else "less than or equal to"
                self._fail(path, f"Invalid value: {value}: must be {relation} {high}")
        step = schema.get("multipleOf")
        if step and not math.isclose(value / step, round(value / step)):
            self._fail(path, f"Invalid value: {value}: must be a multiple of {step}")

    def _array(self, value: list, schema: Schema, path: str, value_only: bool) -> None:
        if "minItems" in schema and len(value) < schema["minItems"]:
            self._fail(
                path,
                f"Invalid value: {len(value)} items: must have at least {schema['minItems']} items",
            )
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            self._fail(
                path, f"Too many: {len(value)}: must have at most {schema['maxItems']} items"
            )
        items = schema.get("items")
        if isinstance(items, Mapping):
            for i, item in enumerate(value):
                self.check(item, items, f"{path}[{i}]", value_only)
        list_type = schema.get("x-kubernetes-list-type")
        if list_type == "set" or schema.get("uniqueItems"):
            self._duplicates(path, [_canonical(v) for v in value], value)
        elif list_type == "map":
            keys = schema.get("x-kubernetes-list-map-keys") or ()
            identities = [
                (
                    _canonical({k: item.get(k) for k in keys})
                    if isinstance(item, Mapping)
                    else _canonical(item)
                )
                for item in value
            ]
            shown = [
                {k: item.get(k) for k in keys} if isinstance(item, Mapping) else item
                for item in value
            ]
            self._duplicates(path, identities, shown)

    def _duplicates(self, path: str, identities: list[str], shown: list[Any]) -> None:
        seen: set[str] = set()
        for i, identity in enumerate(identities):
            if identity in seen:
                self.errors.append(f"{path}[{i}]: Duplicate value: {_show(shown[i])}")
            seen.add(identity)

    def _object(
        self, value: Mapping[str, Any], schema: Schema, path: str, value_only: bool
    ) -> None:
        properties = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        preserve = schema.get("x-kubernetes-preserve-unknown-fields", False)
        embedded = schema.get("x-kubernetes-embedded-resource", False)
        if embedded and not value_only:
            self._embedded(value, path)
        for raw_key, item in value.items():
            key = str(raw_key)
            if key in properties:
                self.check(item, properties[key], _child(path, key), value_only)
            elif isinstance(extra, Mapping):
                self.check(item, extra, f"{path}[{key}]", value_only)
            elif not (
                value_only
                or preserve
                or extra is True
                or (embedded and key in ("apiVersion", "kind", "metadata"))
            ):
                self.errors.append(f"{_child(path, key)}: unknown field")
        for name in schema.get("required") or ():
            if name not in value and "default" not in properties.get(name, {}):
                self.errors.append(f"{_child(path, name)}: Required value")
        if "minProperties" in schema and len(value) < schema["minProperties"]:
            self._fail(
                path, f"Invalid value: must have at least {schema['minProperties']} properties"
            )
        if "maxProperties" in schema and len(value) > schema["maxProperties"]:
            self._fail(
                path,
                f"Too many: {len(value)}: must have at most {schema['maxProperties']} properties",
            )

    def _embedded(self, value: Mapping[str, Any], path: str) -> None:
        """An embedded object (e.g. a template) must itself look like a Kubernetes object."""
        for key in ("apiVersion", "kind"):
            if not isinstance(value.get(key), str) or not value.get(key):
                self.errors.append(
                    f"{_child(path, key)}: Required value: an embedded resource needs {key}"
                )
        if "metadata" in value:
            problems = _metadata_errors(value["metadata"], check_types=True, require_name=False)
            self.errors.extend(_child(path, problem) for problem in problems)

    def _combinators(self, value: Any, schema: Schema, path: str) -> None:
        for branch in schema.get("allOf") or ():
            self.errors.extend(self._branch_errors(value, branch, path))
        any_of = schema.get("anyOf")
        if any_of and all(self._branch_errors(value, b, path) for b in any_of):
            self._fail(
                path, f"Invalid value: {_show(value)}: matches none of the anyOf alternatives"
            )
        one_of = schema.get("oneOf")
        if one_of:
            matches = sum(not self._branch_errors(value, b, path) for b in one_of)
            if matches != 1:
                self._fail(
                    path,
                    f"Invalid value: {_show(value)}: must match exactly one oneOf alternative, matches {matches}",
                )
        if "not" in schema and not self._branch_errors(value, schema["not"], path):
            self._fail(path, f"Invalid value: {_show(value)}: must not match the 'not' schema")

    def _branch_errors(self, value: Any, branch: Schema, path: str) -> list[str]:
        probe = _SchemaWalker()
        probe.check(value, branch, path, value_only=True)
        return probe.errors


def _is_int_or_string(schema: Schema) -> bool:
    return bool(schema.get("x-kubernetes-int-or-string")) or schema.get("format") == "int-or-string"


def _is_integer(value: Any) -> bool:
    """JSON decoding in the API server turns 8.0 into 8, so a whole float counts as an integer."""
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, float) and value.is_integer())


_TYPE_CHECKS = {
    "object": lambda v: isinstance(v, Mapping),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": _is_integer,
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
}


def _as_json_scalar(value: Any) -> Any:
    """YAML turns an unquoted timestamp into a datetime; on the wire it is an RFC 3339 string."""
    if isinstance(value, dt.datetime):
        return value.isoformat().replace("+00:00", "Z")
    if isinstance(value, dt.date):
        return value.isoformat()
    return value


def _string_format_problem(value: str, fmt: str | None) -> str | None:
    """The string formats the API server checks that fleetspec's CRDs use; others pass."""
    if fmt == "date-time" and not _RFC3339.fullmatch(value):
        return "must be an RFC 3339 date-time (e.g. 2026-01-02T15:04:05Z)"
    if fmt == "date" and not _DATE.fullmatch(value):
        return "must be a date (YYYY-MM-DD)"
    if fmt == "byte":
        try:
            base64.b64decode(value, validate=True)
        except binascii.Error:
            return "must be base64-encoded"
    return None


@functools.lru_cache(maxsize=256)
def _compiled(pattern: str) -> re.Pattern[str]:
    """CRD patterns are Go RE2; Go allows ``^(?i)...``, Python wants the flags first."""
    return re.compile(_GO_LEADING_FLAGS.sub(r"(?\1)^", pattern))


def _same_json(a: Any, b: Any) -> bool:
    """Equality as JSON sees it: ``True`` is not ``1``."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    return a == b


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def _child(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _at(path: str) -> str:
    return path or "<root>"


def _show(value: Any, limit: int = 80) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= limit else text[: limit - 3] + "..."
