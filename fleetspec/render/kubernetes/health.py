"""The Kubernetes side of ``spec.health``: metrics, alerts, node conditions, AMD remediation.

``with_health`` is the one hook ``kubernetes.kubernetes_resources`` calls; pure, like
the rest of the layer. For Kubernetes-owned nodes it adds:

- NVIDIA pools: the GPU Operator's DCGM exporter on, with its ServiceMonitor, and a
  metrics list (the chart's ``dcgmExporter.config``: name, create, data) that is the
  exporter's default counters plus the health fields its default leaves out (row remap
  pending, volatile DBE, pending page retirement, NVLink recovery errors);
- a PrometheusRule with one alert per fault class DCGM can see, labelled with the fault
  class and the policy's action (``fleetspec_fault_class``, ``fleetspec_action``);
- the node check as a node-problem-detector custom plugin (a ConfigMap in NPD's
  custom-plugin-monitor format): its exit codes are NPD's (0 OK, 1 NonOK, 2 Unknown),
  so a sick node gets the ``GPUProblem`` condition with the check's verdict as message;
- AMD pools: the DeviceConfig's metrics exporter and remediation workflow on (the AMD GPU
  Operator drains the node through the eviction API and runs its own test before it
  returns the node).

Sources: dcgm-exporter etc/default-counters.csv; GPU Operator values.yaml
(``dcgmExporter``); node-problem-detector docs/custom_plugin_monitor.md; AMD GPU Operator
DeviceConfig CRD (``remediationWorkflow``, ``metricsExporter``).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from fleetspec.compile.ir import Fleet
from fleetspec.layout.kubernetes import kubernetes_partitions
from fleetspec.node_side import min_healthy
from fleetspec.node_side.contract import NPD_MAX_OUTPUT, PARTITION_LABEL
from fleetspec.node_side.faults import FAULTS, XID_CLASSES
from fleetspec.render.health import CONFIG_PATH, LIB_DIR
from fleetspec.render.kubernetes.common import Manifest, label_value, obj

NAMESPACE = "kube-system"
# kubernetes/node-problem-detector deployment/node-problem-detector-healthchecker.yaml names
# this image; its Dockerfile installs util-linux (nsenter) in the image.
NPD_IMAGE = "registry.k8s.io/node-problem-detector/node-problem-detector:v0.8.19"
NPD_NAME = "fleetspec-node-problem-detector"
# The remediator is one stdlib module; the official Python image runs it.
REMEDIATOR_IMAGE = "docker.io/library/python:3.12-slim"
REMEDIATOR_NAME = "fleetspec-health-remediator"

RULE_NAME = "fleetspec-gpu-health"
NPD_CONFIGMAP = "fleetspec-node-problem-detector"
DCGM_METRICS_CONFIGMAP = "fleetspec-dcgm-metrics"
NPD_CONDITION = "GPUProblem"
SEVERITY = {"none": "info", "reset-when-idle": "warning", "quarantine-device": "warning", "drain": "warning", "drain-reboot": "critical",
            "replace": "critical"}

# dcgm-exporter etc/default-counters.csv (the fields it exports unless told otherwise) ...
DCGM_DEFAULT_COUNTERS = (
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz)."),
    ("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz)."),
    ("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C)."),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C)."),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W)."),
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter", "Total energy consumption since boot (in mJ)."),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "Total number of PCIe retries."),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %)."),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %)."),
    ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered."),
    ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB)."),
    ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB)."),
    ("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "counter", "Total number of NVLink bandwidth counters for all lanes"),
    ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "counter", "Number of remapped rows for uncorrectable errors"),
    ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "counter", "Number of remapped rows for correctable errors"),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed"),
)
# ... and the health fields it leaves commented out or does not list.
DCGM_HEALTH_COUNTERS = (
    ("DCGM_FI_DEV_ROW_REMAP_PENDING", "gauge", "Whether remapping of rows is pending (reset the GPU)"),
    ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "counter", "Total number of double-bit volatile ECC errors."),
    ("DCGM_FI_DEV_RETIRED_PENDING", "counter", "Total number of pages pending retirement."),
    ("DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", "counter", "Total number of NVLink recovery errors."),
)

# Fault class -> PromQL over DCGM fields (beside the Xid alerts built from XID_CLASSES).
DCGM_ALERTS = {
    "row-remap-pending": "DCGM_FI_DEV_ROW_REMAP_PENDING > 0",
    "row-remap-failure": "DCGM_FI_DEV_ROW_REMAP_FAILURE > 0",
    "ecc-uncorrectable": "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL > 0",
    "page-retirement-pending": "DCGM_FI_DEV_RETIRED_PENDING > 0",
    "nvlink-error": "increase(DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL[10m]) > 0",
}


def with_health(fleet: Fleet, releases: list, manifests: list, namespaces: dict[str, str]) -> tuple[list, list]:
    """``releases`` and ``manifests`` of the Kubernetes layer with the health parts added;
    unchanged without ``spec.health`` or without Kubernetes-owned nodes."""
    k8s_nodes = [n for n in fleet.nodes if n.scheduler == "kubernetes"]
    if fleet.health is None or not k8s_nodes:
        return releases, manifests
    releases = list(releases)
    manifests = list(manifests)
    extra: list[Manifest] = []
    amd: list[Manifest] = []  # the AMD operator's workflow ConfigMap, once
    vendors = {n.gpu.vendor for n in k8s_nodes}
    mig_namespace: str | None = None  # the GPU Operator's, where MIG nodes are Kubernetes-owned
    gpu_operator = next((r for r in releases if r.name == "gpu-operator"), None)
    if "nvidia" in vendors and gpu_operator is not None:
        values = dict(gpu_operator.values)
        values["dcgmExporter"] = dcgm_exporter_values()
        releases[releases.index(gpu_operator)] = dataclasses.replace(gpu_operator, values=values)
        ns = namespaces["gpu-operator"]
        extra.append(Manifest(obj("monitoring.coreos.com/v1", "PrometheusRule", RULE_NAME,
                                   prometheus_rule_spec(fleet), namespace=ns),
                              "30-health", (gpu_operator.key,)))
        if any(n.mig for n in k8s_nodes):
            mig_namespace = ns
            extra += [Manifest(body, "30-health", (gpu_operator.key,)) for body in mig_reapply_rbac(ns)]
    for i, m in enumerate(manifests):
        if m.kind == "DeviceConfig":
            body = json.loads(json.dumps(m.body))  # a deep copy of plain data
            body["spec"].update(amd_remediation(fleet, body["spec"].get("selector") or {}))
            manifests[i] = dataclasses.replace(m, body=body)
            if not amd:
                amd.append(Manifest(obj("v1", "ConfigMap", AMD_REMEDIATION_CONFIGMAP,
                                        namespace=body["metadata"].get("namespace")) | {
                    "data": {"workflow": json.dumps(amd_workflow_mappings(), indent=2) + "\n"}}, "30-health",
                    m.depends_on))
    extra.append(Manifest(obj("v1", "ConfigMap", NPD_CONFIGMAP, namespace="kube-system") | {
        "data": {"fleetspec-health.json": json.dumps(npd_custom_plugin(fleet), indent=2) + "\n"}}, "30-health"))
    extra += [Manifest(body, "30-health") for body in npd_daemonset(fleet) + remediator(fleet, mig_namespace)]
    return releases, manifests + extra + amd


def dcgm_metrics_csv() -> str:
    lines = ["# Format: DCGM FIELD, Prometheus metric type, help message",
             "# dcgm-exporter's default counters, then the fields fleetspec's health alerts need"]
    lines += [f"{f}, {t}, {h}" for f, t, h in DCGM_DEFAULT_COUNTERS + DCGM_HEALTH_COUNTERS]
    return "\n".join(lines) + "\n"


def dcgm_exporter_values() -> dict[str, Any]:
    return {
        "enabled": True,
        "serviceMonitor": {"enabled": True},
        "config": {"name": DCGM_METRICS_CONFIGMAP, "create": True, "data": dcgm_metrics_csv()},
    }


def prometheus_rule_spec(fleet: Fleet) -> dict[str, Any]:
    assert fleet.health is not None
    action = dict(fleet.health.actions)
    rules: list[dict[str, Any]] = []
    by_class: dict[str, list[int]] = {}
    for xid, cls in sorted(XID_CLASSES.items()):
        by_class.setdefault(cls, []).append(xid)
    for cls in sorted(set(by_class) | set(DCGM_ALERTS)):
        exprs = [" or ".join(f"DCGM_FI_DEV_XID_ERRORS == {x}" for x in by_class.get(cls, []))]
        exprs = [e for e in exprs if e] + ([DCGM_ALERTS[cls]] if cls in DCGM_ALERTS else [])
        rules.append(_alert(cls, " or ".join(f"({e})" for e in exprs), action[cls]))
    known = " ".join(f"!= {x}" for x in sorted(XID_CLASSES))
    rules.append(_alert("xid-unknown", f"DCGM_FI_DEV_XID_ERRORS > 0 {known}", action["xid-unknown"]))
    return {"groups": [{"name": "fleetspec-gpu-health", "rules": rules}]}


def _alert(cls: str, expr: str, action: str) -> dict[str, Any]:
    fault = FAULTS[cls]
    return {
        "alert": "GPU" + "".join(part.capitalize() for part in cls.split("-")),
        "expr": expr,
        "labels": {"severity": SEVERITY[action], "fleetspec_fault_class": cls, "fleetspec_action": action},
        "annotations": {
            "summary": f"{cls} on {{{{ $labels.Hostname }}}} GPU {{{{ $labels.gpu }}}}: {action}",
            "description": fault.summary,
            "runbook_url": fault.source.split(" ; ")[0],
        },
    }


def npd_custom_plugin(fleet: Fleet) -> dict[str, Any]:
    """node-problem-detector custom-plugin-monitor config running the node check on the
    host (NPD's pod is privileged with hostPID; nsenter runs the check in the host's
    mount namespace, where the fleet_health role installed it)."""
    assert fleet.health is not None
    return {
        "plugin": "custom",
        # The message carries the drain reason and the devices to quarantine (node_check
        # npd_message); NPD updates a True condition's message only with the flag set (its
        # custom_plugin_monitor.go generateStatus, default false), so a second faulty GPU shows.
        "pluginConfig": {"invoke_interval": f"{fleet.health.interval}s", "timeout": "60s",
                         "max_output_length": NPD_MAX_OUTPUT, "concurrency": 1,
                         "enable_message_change_based_condition_update": True},
        "source": "fleetspec-health",
        "metricsReporting": True,
        "conditions": [{"type": NPD_CONDITION, "reason": "GPUHealthy",
                        "message": "the fleetspec node check found no fault that needs an action"}],
        "rules": [{
            "type": "permanent",
            "condition": NPD_CONDITION,
            "reason": "GPUFault",
            "path": "/usr/bin/nsenter",
            "args": ["--target", "1", "--mount", "--", "/usr/bin/env", f"PYTHONPATH={LIB_DIR}", "/usr/bin/python3",
                     "-s", "-m", "fleetspec.node_side.node_check", "--config", CONFIG_PATH, "--format", "npd"],
            "timeout": "60s",
        }],
    }


# The AMD GPU Operator starts a remediation workflow for a node whose NPD condition is named in
# the workflow ConfigMap (DeviceConfig spec.remediationWorkflow.config; ROCm/gpu-operator
# docs/autoremediation/auto-remediation.md, "Remediation Workflow ConfigMap"). Its default
# ConfigMap names only AMD's own conditions (AMDGPUXgmi, AMDGPUHBMError, ...), which the
# fleetspec node check never sets: enabled alone, the workflow never ran. This one maps the
# check's condition (GPUProblem: True exactly when a fault class's action is not ``none``).
AMD_REMEDIATION_CONFIGMAP = "fleetspec-amd-remediation"


def amd_workflow_mappings() -> list[dict[str, Any]]:
    """The workflow ConfigMap's ``workflow`` list (fields as the operator's own
    internal/controllers/remediation/configs/default-configmap.yaml has them). Validation runs
    RVS ``gst_single`` (the recipe the operator's test-runner docs use; the default tester image
    runs RVS only); at most 3 runs per node in 15 minutes, as every default mapping."""
    return [{
        "nodeCondition": NPD_CONDITION,
        "workflowTemplate": "default-template",
        "validationTestsProfile": {"framework": "RVS", "recipe": "gst_single", "iterations": 1,
                                   "stopOnFailure": True, "timeoutSeconds": 600},
        "physicalActionNeeded": False,
        "notifyRemediationMessage": "fleetspec's node check found a GPU fault that needs an action: the node's "
                                    "GPUProblem condition message names it (docs/health.md).",
        "notifyTestFailureMessage": "Check test run logs for next steps.",
        "recoveryPolicy": {"maxAllowedRunsPerWindow": 3, "windowSize": "15m"},
    }]


def amd_parallel_limit(fleet: Fleet, selector: dict[str, str]) -> int:
    """How many remediation workflows may run at once on the DeviceConfig's nodes: as many as
    spec.health.min_healthy lets go out of service in the pool both remediators count (every
    Kubernetes-owned node; a percentage rounded up over it), and no more than the DeviceConfig
    selects. 0: none may run."""
    value = next(iter(selector.values()), None)
    pool = [n for n in fleet.nodes if n.scheduler == "kubernetes"]
    selected = [n for n in pool if n.gpu.vendor == "amd" and value in (n.stack, label_value(n.stack or ""))]
    assert fleet.health is not None
    return min(len(selected), len(pool) - min_healthy.needed(str(fleet.health.min_healthy), len(pool)))


def amd_remediation(fleet: Fleet, selector: dict[str, str]) -> dict[str, Any]:
    """DeviceConfig fields: the metrics exporter and the remediation workflow, triggered by the
    node check's condition (AMD_REMEDIATION_CONFIGMAP), draining through the eviction API
    (DaemonSets ignored), at most ``amd_parallel_limit`` nodes at once (``maxParallelWorkflows``;
    the CRD's 0 means no limit, so a pool min_healthy leaves no room for gets the workflow off)."""
    parallel = amd_parallel_limit(fleet, selector)
    workflow: dict[str, Any] = {"enable": parallel > 0}
    if parallel > 0:
        workflow["config"] = {"name": AMD_REMEDIATION_CONFIGMAP}
        workflow["maxParallelWorkflows"] = parallel
    workflow["nodeDrainPolicy"] = {"force": False, "ignoreDaemonSets": True, "timeoutSeconds": 3600}
    return {"metricsExporter": {"enable": True}, "remediationWorkflow": workflow}


def gpu_node_selector(fleet: Fleet) -> tuple[str, list[str]]:
    """The Kubernetes-owned GPU nodes: the partition label every one of them carries."""
    return PARTITION_LABEL, sorted({label_value(p.name) for p in kubernetes_partitions(fleet)})


def npd_daemonset(fleet: Fleet) -> list[dict[str, Any]]:
    """node-problem-detector on the Kubernetes-owned GPU nodes, running only the fleetspec
    custom plugin. Modelled on NPD's deployment/node-problem-detector.yaml (privileged,
    tolerates every taint, NODE_NAME from the downward API, the system:node-problem-detector
    ClusterRole that lets it write Node conditions and events). hostPID, so the plugin's
    ``nsenter --target 1 --mount`` runs the node check in the host's mount namespace: there it
    reads /dev/kmsg, nvidia-smi (also /run/nvidia/driver/usr/bin/nvidia-smi under the GPU
    Operator's driver container), amd-smi, /sys/class/infiniband and its state file exactly as
    Slurm's HealthCheckProgram does, with the host's python3 and the modules fleet_health installed."""
    key, values = gpu_node_selector(fleet)
    labels = {"app.kubernetes.io/name": NPD_NAME}
    pod = {
        "serviceAccountName": NPD_NAME,
        "hostPID": True,
        "priorityClassName": "system-node-critical",
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": key, "operator": "In", "values": values}]}]}}},
        "tolerations": [{"effect": "NoSchedule", "operator": "Exists"}, {"effect": "NoExecute", "operator": "Exists"}],
        "containers": [{
            "name": "node-problem-detector",
            "image": NPD_IMAGE,
            "command": ["/node-problem-detector", "--logtostderr",
                        "--config.custom-plugin-monitor=/config/fleetspec-health.json"],
            "env": [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
            "securityContext": {"privileged": True},
            "resources": {"requests": {"cpu": "10m", "memory": "80Mi"}, "limits": {"memory": "200Mi"}},
            # Only the plugin config: the check itself runs in the host's mount namespace.
            "volumeMounts": [{"name": "config", "mountPath": "/config", "readOnly": True}],
        }],
        "volumes": [{"name": "config", "configMap": {"name": NPD_CONFIGMAP}}],
    }
    return [
        obj("v1", "ServiceAccount", NPD_NAME, namespace=NAMESPACE),
        obj("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", NPD_NAME) | {
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": "system:node-problem-detector"},
            "subjects": [{"kind": "ServiceAccount", "name": NPD_NAME, "namespace": NAMESPACE}]},
        obj("apps/v1", "DaemonSet", NPD_NAME, {
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": pod},
        }, namespace=NAMESPACE),
    ]


# The remediator's modules, as a package tree under /opt/fleetspec (ConfigMap keys cannot hold
# a "/": each key is the path with "." for "/", mapped back by the volume's items).
REMEDIATOR_MODULES = (
    "fleetspec/__init__.py",
    "fleetspec/node_side/__init__.py",
    "fleetspec/node_side/contract.py",
    "fleetspec/node_side/device_taints.py",
    "fleetspec/node_side/k8s_remediator.py",
    "fleetspec/node_side/min_healthy.py",
)


def mig_reapply_rbac(namespace: str) -> list[dict[str, Any]]:
    """What the remediator needs in the GPU Operator's namespace to have a MIG node's geometry
    re-applied before it releases the node (k8s_remediator.remake_mig): list and delete the
    mig-manager pods there, nothing elsewhere."""
    name = REMEDIATOR_NAME + "-mig"
    return [
        obj("rbac.authorization.k8s.io/v1", "Role", name, namespace=namespace) | {
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "delete"]}]},
        obj("rbac.authorization.k8s.io/v1", "RoleBinding", name, namespace=namespace) | {
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": REMEDIATOR_NAME, "namespace": NAMESPACE}]},
    ]


def remediator(fleet: Fleet, mig_namespace: str | None = None) -> list[dict[str, Any]]:
    """The continuous half of Kubernetes remediation: a CronJob, every health interval
    (rounded up to cron's minute), running ``fleetspec.node_side.k8s_remediator`` (stdlib
    modules, shipped in a ConfigMap) against the NPD condition. Its RBAC is what ``kubectl
    drain`` needs and no more: nodes get/list/patch, pods list, pods/eviction create; on a
    fleet with DRA-managed GPU pools (Kubernetes 1.33+) also what device taints need:
    resourceslices list, devicetaintrules list/create/delete (resource.k8s.io). With
    ``mig_namespace`` (Kubernetes-owned MIG nodes: the GPU Operator's namespace) the remediator
    has their MIG manager re-apply the geometry before it releases such a node (the Role is
    ``mig_reapply_rbac``)."""
    from pathlib import Path

    import fleetspec
    from fleetspec.node_side import device_taints
    from fleetspec.render.kubernetes.dra import dra_gpu_partitions

    assert fleet.health is not None
    key, values = gpu_node_selector(fleet)
    selector = f"{key} in ({','.join(values)})"
    minutes = max(1, -(-fleet.health.interval // 60))
    root = Path(fleetspec.__file__).resolve().parent.parent
    code = {m.replace("/", "."): (root / m).read_text() for m in REMEDIATOR_MODULES}
    command = ["python3", "-s", "-m", "fleetspec.node_side.k8s_remediator", "--selector", selector,
               "--min-healthy", fleet.health.min_healthy]
    rules = [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "patch"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
        {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]},
    ]
    dra = sorted({label_value(p.name) for p in dra_gpu_partitions(fleet)})
    taint_api = device_taints.api_version(fleet.kubernetes.version) if fleet.kubernetes else None
    if dra and taint_api:
        command += ["--dra-partitions", ",".join(dra), "--taint-api", taint_api]
        rules += [
            {"apiGroups": ["resource.k8s.io"], "resources": ["resourceslices"], "verbs": ["list"]},
            {"apiGroups": ["resource.k8s.io"], "resources": ["devicetaintrules"], "verbs": ["list", "create", "delete"]},
        ]
    if mig_namespace:
        command += ["--mig-manager-namespace", mig_namespace]
    labels = {"app.kubernetes.io/name": REMEDIATOR_NAME}
    pod = {
        "serviceAccountName": REMEDIATOR_NAME,
        "restartPolicy": "Never",
        "securityContext": {"runAsNonRoot": True, "runAsUser": 65534, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [{
            "name": "remediator",
            "image": REMEDIATOR_IMAGE,
            "command": command,
            "env": [{"name": "PYTHONPATH", "value": "/opt/fleetspec"}],
            "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                "capabilities": {"drop": ["ALL"]}},
            "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"memory": "128Mi"}},
            "volumeMounts": [{"name": "code", "mountPath": "/opt/fleetspec", "readOnly": True}],
        }],
        "volumes": [{"name": "code", "configMap": {"name": REMEDIATOR_NAME, "items": [
            {"key": name, "path": m} for name, m in zip(code, REMEDIATOR_MODULES)]}}],
    }
    return [
        obj("v1", "ServiceAccount", REMEDIATOR_NAME, namespace=NAMESPACE),
        obj("rbac.authorization.k8s.io/v1", "ClusterRole", REMEDIATOR_NAME) | {"rules": rules},
        obj("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", REMEDIATOR_NAME) | {
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": REMEDIATOR_NAME},
            "subjects": [{"kind": "ServiceAccount", "name": REMEDIATOR_NAME, "namespace": NAMESPACE}]},
        obj("v1", "ConfigMap", REMEDIATOR_NAME, namespace=NAMESPACE) | {"data": code},
        obj("batch/v1", "CronJob", REMEDIATOR_NAME, {
            "schedule": f"*/{minutes} * * * *",
            "concurrencyPolicy": "Forbid",
            "successfulJobsHistoryLimit": 1,
            "failedJobsHistoryLimit": 3,
            "jobTemplate": {"spec": {"backoffLimit": 0, "activeDeadlineSeconds": 600, "template": {
                "metadata": {"labels": labels}, "spec": pod}}},
        }, namespace=NAMESPACE),
    ]
