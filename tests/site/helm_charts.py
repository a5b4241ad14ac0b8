"""Helm chart archives for the chart values-schema tests, built the way ``helm pull`` and
``helm dependency build`` leave them: ``<name>-<version>.tgz`` holding ``<name>/Chart.yaml``,
``values.yaml``, ``values.schema.json`` and ``charts/<sub>-<version>.tgz``.

The GPU Operator stand-in is NVIDIA GPU Operator v26.7.0 as it ships: its real
``values.yaml`` (tests/data/crds/nvidia-gpu-operator/values.yaml, SOURCES.md), no schema
of its own, and one dependency, node-feature-discovery 0.19.0 from
``oci://registry.k8s.io/nfd/charts`` under ``condition: nfd.enabled`` (the chart's
Chart.yaml at the v26.7.0 tag, SOURCES.md section 4).

The node-feature-discovery subchart's schema is written here, small, modelled on the
shape of the real one and not copied from it. The real file is
https://github.com/NVIDIA/gpu-operator/blob/v26.7.0/deployments/gpu-operator/charts/node-feature-discovery/values.schema.json
(352,646 bytes, generated upstream since kubernetes-sigs/node-feature-discovery PR #2311):
draft 2020-12; top-level ``properties`` for ``master``, ``worker``, ``gc``, ``topologyUpdater``,
``image``, ``global``, ...; each pod setting typed and also pointing with ``$ref`` into
Kubernetes definitions embedded under ``$defs`` → ``_definitions.json`` → ``definitions``
(``io.k8s.api.core.v1.Toleration``, ``...PodSpec/properties/tolerations``, ...); counts
are ``integer``; maps of strings (labels, node selectors) use ``additionalProperties:
{type: string}``; no ``additionalProperties: false`` on the value sections.
"""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path
from typing import Any

import yaml

from tests.conftest import ROOT

GPU_OPERATOR_VALUES = ROOT / "tests/data/crds/nvidia-gpu-operator/values.yaml"
K8S = "#/$defs/_definitions.json/definitions/"

NFD_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "properties": {
        "nameOverride": {"type": "string"},
        "priorityClassName": {"type": "string"},
        "global": {"type": "object", "properties": {
            "imagePullSecrets": {"$ref": K8S + "io.k8s.api.core.v1.PodSpec/properties/imagePullSecrets",
                                 "type": "array"}}},
        "image": {"type": "object", "properties": {
            "repository": {"type": "string"},
            "tag": {"type": ["string", "null"]},
            "pullPolicy": {"type": "string", "enum": ["Always", "IfNotPresent", "Never"]}}},
        "master": {"type": "object", "properties": {
            "replicaCount": {"type": "integer"},
            "config": {"type": ["object", "null"]},
            "serviceAccount": {"$ref": "#/$defs/serviceAccount"},
            "nodeSelector": {"$ref": K8S + "io.k8s.api.core.v1.PodSpec/properties/nodeSelector", "type": "object"},
            "tolerations": {"$ref": K8S + "io.k8s.api.core.v1.PodSpec/properties/tolerations", "type": "array"}}},
        "worker": {"type": "object", "properties": {
            "config": {"type": ["object", "null"]},
            "serviceAccount": {"$ref": "#/$defs/serviceAccount"},
            "nodeSelector": {"$ref": K8S + "io.k8s.api.core.v1.PodSpec/properties/nodeSelector", "type": "object"},
            "tolerations": {"$ref": K8S + "io.k8s.api.core.v1.PodSpec/properties/tolerations", "type": "array"}}},
        "gc": {"type": "object", "properties": {
            "enable": {"type": "boolean"},
            "interval": {"type": "string"},
            "replicaCount": {"type": "integer"},
            "serviceAccount": {"$ref": "#/$defs/serviceAccount"}}},
    },
    "$defs": {
        "serviceAccount": {"type": "object", "properties": {
            "create": {"type": "boolean"}, "name": {"type": ["string", "null"]}}},
        "_definitions.json": {"definitions": {
            "io.k8s.api.core.v1.PodSpec": {"type": "object", "properties": {
                "imagePullSecrets": {"type": "array",
                                     "items": {"$ref": K8S + "io.k8s.api.core.v1.LocalObjectReference"}},
                "nodeSelector": {"type": "object", "additionalProperties": {"type": "string"}},
                "tolerations": {"type": "array", "items": {"$ref": K8S + "io.k8s.api.core.v1.Toleration"}}}},
            "io.k8s.api.core.v1.LocalObjectReference": {"type": "object", "properties": {"name": {"type": "string"}}},
            "io.k8s.api.core.v1.Toleration": {"type": "object", "properties": {
                "effect": {"type": "string"}, "key": {"type": "string"}, "operator": {"type": "string"},
                "tolerationSeconds": {"type": "integer", "format": "int64"}, "value": {"type": "string"}}},
        }},
    },
}

# The subchart's own defaults, in the real values.yaml's shape (a subset of its keys).
NFD_VALUES: dict[str, Any] = {
    "image": {"repository": "registry.k8s.io/nfd/node-feature-discovery", "pullPolicy": "IfNotPresent", "tag": None},
    "nameOverride": "",
    "master": {"replicaCount": 1, "config": None, "serviceAccount": {"create": True, "name": None},
               "nodeSelector": {}, "tolerations": [{"key": "node-role.kubernetes.io/control-plane",
                                                     "operator": "Equal", "value": "", "effect": "NoSchedule"}]},
    "worker": {"config": None, "serviceAccount": {"create": True, "name": None}, "nodeSelector": {},
               "tolerations": []},
    "gc": {"enable": True, "interval": "1h", "replicaCount": 1, "serviceAccount": {"create": True, "name": None}},
}

NFD_CHART = {"apiVersion": "v2", "name": "node-feature-discovery", "version": "0.19.0", "appVersion": "v0.19.0",
             "type": "application", "description": "Detects hardware features available on each node"}
GPU_OPERATOR_CHART = {
    "apiVersion": "v2", "name": "gpu-operator", "version": "v26.7.0", "appVersion": "v26.7.0",
    "type": "application", "description": "NVIDIA GPU Operator creates/configures/manages GPUs atop Kubernetes",
    "dependencies": [{"name": "node-feature-discovery", "version": "0.19.0",
                      "repository": "oci://registry.k8s.io/nfd/charts", "condition": "nfd.enabled"}],
}


def chart_archive(chart_yaml: dict[str, Any], files: dict[str, bytes | str]) -> bytes:
    """A ``helm package``-shaped archive: every file under ``<name>/``."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        entries = {"Chart.yaml": yaml.safe_dump(chart_yaml, sort_keys=False), **files}
        for rel, data in sorted(entries.items()):
            raw = data.encode() if isinstance(data, str) else data
            info = tarfile.TarInfo(f"{chart_yaml['name']}/{rel}")
            info.size, info.mode = len(raw), 0o644
            archive.addfile(info, io.BytesIO(raw))
    return buffer.getvalue()


def nfd_archive(schema: dict[str, Any] | None = None) -> bytes:
    return chart_archive(NFD_CHART, {"values.yaml": yaml.safe_dump(NFD_VALUES, sort_keys=False),
                                     "values.schema.json": json.dumps(schema or NFD_SCHEMA, indent=2)})


def gpu_operator_archive(nfd_schema: dict[str, Any] | None = None) -> bytes:
    return chart_archive(GPU_OPERATOR_CHART, {
        "values.yaml": GPU_OPERATOR_VALUES.read_bytes(),
        "charts/node-feature-discovery-0.19.0.tgz": nfd_archive(nfd_schema),
    })


def charts_dir(tmp: Path, nfd_schema: dict[str, Any] | None = None) -> Path:
    """A --charts folder as 'helm pull nvidia/gpu-operator --version v26.7.0 -d DIR' leaves it."""
    out = tmp / "charts"
    out.mkdir()
    (out / "gpu-operator-v26.7.0.tgz").write_bytes(gpu_operator_archive(nfd_schema))
    return out
