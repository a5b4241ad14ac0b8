"""spec.health on Kubernetes pools: DCGM exporter values, alert rules, NPD plugin, AMD
remediation; every object validated against the upstream schemas in tests/data/crds."""

from __future__ import annotations

import copy
import dataclasses
import json

import pytest
import yaml

from fleetspec.compile.ir import HealthPolicy
from fleetspec.node_side.faults import FAULTS, default_actions
from fleetspec.render.kubernetes import kubernetes_resources, render_kubernetes
from tests.conftest import require_shared
from tests.k8s_schema import CrdIndex, validate_object
from tests.kubernetes import fleets


@pytest.fixture(scope="module")
def crd_index() -> CrdIndex:
    return CrdIndex.load(require_shared("crds"))


@pytest.fixture(scope="module")
def museum():
    fleet = fleets.museum()
    actions = {**default_actions(), "xid-unknown": "drain"}
    policy = HealthPolicy(120, ("kernel-log", "gpu-memory"), tuple(sorted(actions.items())))
    return dataclasses.replace(fleet, health=policy)


def objects(fleet) -> list[dict]:
    out = []
    for path, text in render_kubernetes(fleet).items():
        if path.parts[1] == "manifests":
            out.extend(d for d in yaml.safe_load_all(text) if d is not None)
    return out


def test_every_object_validates(museum, crd_index) -> None:
    objs = objects(museum)
    kinds = {o["kind"] for o in objs}
    assert {"PrometheusRule", "DeviceConfig", "ConfigMap", "DaemonSet", "CronJob", "ClusterRole",
            "ClusterRoleBinding", "ServiceAccount"} <= kinds
    for obj in objs:
        assert validate_object(obj, crd_index, museum.kubernetes.version) == [], obj["kind"]


def test_a_broken_rule_fails_validation(museum, crd_index) -> None:
    rule = next(o for o in objects(museum) if o["kind"] == "PrometheusRule")
    broken = copy.deepcopy(rule)
    broken["spec"]["groups"][0]["rules"][0]["for"] = 5  # a duration string, not a number
    assert validate_object(broken, crd_index, museum.kubernetes.version)


def test_alerts_carry_class_and_policy_action(museum) -> None:
    rule = next(o for o in objects(museum) if o["kind"] == "PrometheusRule")
    alerts = {r["labels"]["fleetspec_fault_class"]: r for r in rule["spec"]["groups"][0]["rules"]}
    assert alerts["gpu-lost"]["expr"] == "(DCGM_FI_DEV_XID_ERRORS == 79)"
    assert alerts["gpu-lost"]["labels"]["severity"] == "critical"
    assert alerts["row-remap-pending"]["expr"] == "(DCGM_FI_DEV_XID_ERRORS == 63) or (DCGM_FI_DEV_ROW_REMAP_PENDING > 0)"
    assert alerts["xid-unknown"]["labels"]["fleetspec_action"] == "drain"  # the policy, not the default
    assert "!= 79" in alerts["xid-unknown"]["expr"] and "!= 13" in alerts["xid-unknown"]["expr"]
    assert set(alerts) <= set(FAULTS)


def test_dcgm_exporter_on_with_the_health_fields(museum) -> None:
    layer = kubernetes_resources(museum)
    values = next(r for r in layer.releases if r.name == "gpu-operator").values["dcgmExporter"]
    assert values["enabled"] and values["serviceMonitor"]["enabled"] and values["config"]["create"]
    fields = [line.split(",")[0] for line in values["config"]["data"].splitlines() if not line.startswith("#")]
    assert {"DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_ROW_REMAP_PENDING", "DCGM_FI_DEV_ROW_REMAP_FAILURE"} <= set(fields)


def test_npd_plugin_runs_the_node_check(museum) -> None:
    cm = next(o for o in objects(museum) if o["kind"] == "ConfigMap")
    plugin = json.loads(cm["data"]["fleetspec-health.json"])
    assert plugin["plugin"] == "custom" and plugin["pluginConfig"]["invoke_interval"] == "120s"
    rule = plugin["rules"][0]
    assert rule["condition"] == plugin["conditions"][0]["type"] == "GPUProblem"
    assert "fleetspec.node_side.node_check" in rule["args"]
    assert rule["args"][-2:] == ["--format", "npd"]  # one line: the condition's message is the drain reason


def test_npd_daemonset_runs_the_plugin_on_kubernetes_gpu_nodes_only(museum) -> None:
    from fleetspec.layout.kubernetes import kubernetes_partitions

    ds = next(o for o in objects(museum) if o["kind"] == "DaemonSet" and o["metadata"]["name"].startswith("fleetspec"))
    pod = ds["spec"]["template"]["spec"]
    (term,) = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    (expr,) = term["matchExpressions"]
    assert expr["key"] == "fleetspec.io/partition" and expr["operator"] == "In"
    assert set(expr["values"]) == {p.name for p in kubernetes_partitions(museum)} and expr["values"]
    assert pod["hostPID"] is True  # nsenter --target 1: the check runs in the host's mount namespace
    (container,) = pod["containers"]
    assert container["securityContext"]["privileged"] is True
    assert "--config.custom-plugin-monitor=/config/fleetspec-health.json" in container["command"]
    assert pod["volumes"][0]["configMap"]["name"] == "fleetspec-node-problem-detector"
    binding = next(o for o in objects(museum) if o["kind"] == "ClusterRoleBinding"
                   and o["metadata"]["name"] == "fleetspec-node-problem-detector")
    assert binding["roleRef"]["name"] == "system:node-problem-detector"  # the built-in role NPD's manifests bind


def _remediator(fleet) -> tuple[dict, dict, dict]:
    objs = objects(fleet)
    cron = next(o for o in objs if o["kind"] == "CronJob")
    code = next(o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "fleetspec-health-remediator")
    role = next(o for o in objs if o["kind"] == "ClusterRole" and o["metadata"]["name"] == "fleetspec-health-remediator")
    return cron, code, role


def _lay_out(cron: dict, code: dict, root) -> list[str]:
    """The ConfigMap's files where the pod's volume puts them; the container's command."""
    pod = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    (mount,) = container["volumeMounts"]
    (volume,) = pod["volumes"]
    assert volume["name"] == mount["name"] and volume["configMap"]["name"] == code["metadata"]["name"]
    for item in volume["configMap"]["items"]:
        target = root / mount["mountPath"].lstrip("/") / item["path"]
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(code["data"][item["key"]])
    assert container["env"] == [{"name": "PYTHONPATH", "value": mount["mountPath"]}]
    return container["command"]


def test_remediator_cronjob_runs_the_shipped_module(museum, tmp_path) -> None:
    import subprocess
    import sys

    cron, code, role = _remediator(museum)
    assert cron["spec"]["schedule"] == "*/2 * * * *" and cron["spec"]["concurrencyPolicy"] == "Forbid"
    command = _lay_out(cron, code, tmp_path)
    assert command[:4] == ["python3", "-s", "-m", "fleetspec.node_side.k8s_remediator"]
    selector = command[command.index("--selector") + 1]
    assert selector.startswith("fleetspec.io/partition in (")
    assert "--taint-api" not in command  # no DRA pool: the node path only
    # the shipped tree alone runs the module (-S: no site-packages, so not this checkout's fleetspec)
    ran = subprocess.run([sys.executable, "-S", "-s", "-m", "fleetspec.node_side.k8s_remediator", "--help"],
                         env={"PYTHONPATH": str(tmp_path / "opt/fleetspec")}, cwd=tmp_path, capture_output=True,
                         text=True)
    assert ran.returncode == 0 and "--dra-partitions" in ran.stdout, ran.stderr
    assert {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]} in role["rules"]
    assert not any("delete" in r["verbs"] for r in role["rules"])  # evictions only, never a pod delete
    assert not any("resource.k8s.io" in r["apiGroups"] for r in role["rules"])


@pytest.fixture(scope="module")
def dra_fleet():
    from fleetspec.pipeline import compile_text

    from .test_device_taints import SPEC

    compiled = compile_text(SPEC)
    assert compiled.valid, [f.message for f in compiled.findings]
    return compiled.fleet


def test_on_a_dra_pool_the_remediator_may_taint_devices(dra_fleet, crd_index) -> None:
    """The CronJob is told the DRA pools and the DeviceTaintRule version, its ServiceAccount
    may read ResourceSlices and write DeviceTaintRules (still no pod delete), and every
    object passes the schemas of the fleet's Kubernetes version."""
    from fleetspec.node_side.k8s_remediator import PARTITION_LABEL
    from fleetspec.render.kubernetes.common import PARTITION_LABEL as RENDERED

    cron, code, role = _remediator(dra_fleet)
    (container,) = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    command = container["command"]
    assert command[command.index("--taint-api") + 1] == "resource.k8s.io/v1beta2"  # Kubernetes 1.36
    assert command[command.index("--dra-partitions") + 1] == "nvidia-hopper"
    assert command[command.index("--selector") + 1] == "fleetspec.io/partition in (nvidia-hopper)"
    assert PARTITION_LABEL == RENDERED
    assert {"apiGroups": ["resource.k8s.io"], "resources": ["devicetaintrules"],
            "verbs": ["list", "create", "delete"]} in role["rules"]
    assert {"apiGroups": ["resource.k8s.io"], "resources": ["resourceslices"], "verbs": ["list"]} in role["rules"]
    assert not any("pods" in r["resources"] and "delete" in r["verbs"] for r in role["rules"])
    for obj in objects(dra_fleet):
        assert validate_object(obj, crd_index, dra_fleet.kubernetes.version) == [], obj["kind"]
    broken = copy.deepcopy(role)
    broken["rules"][-1]["verbs"] = "delete"
    assert validate_object(broken, crd_index, dra_fleet.kubernetes.version)


def test_a_broken_daemonset_fails_validation(museum, crd_index) -> None:
    ds = next(o for o in objects(museum) if o["kind"] == "DaemonSet" and o["metadata"]["name"].startswith("fleetspec"))
    broken = copy.deepcopy(ds)
    broken["spec"]["template"]["spec"]["hostPID"] = "yes"
    assert validate_object(broken, crd_index, museum.kubernetes.version)


def test_amd_device_configs_remediate(museum, crd_index) -> None:
    """#26 item 8: the workflow was enabled but its ConfigMap (the operator's default) names only
    AMD's own NPD conditions, which nothing here sets, and it had no parallelism limit. Now it is
    triggered by the node check's condition and bounded by min_healthy."""
    from fleetspec.node_side import min_healthy
    from fleetspec.render.kubernetes.health import AMD_REMEDIATION_CONFIGMAP, NPD_CONDITION

    objs = objects(museum)
    configs = [o for o in objs if o["kind"] == "DeviceConfig"]
    assert configs, "museum's Kubernetes-owned MI355X nodes get a DeviceConfig"
    mapping = next(o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"] == AMD_REMEDIATION_CONFIGMAP)
    workflows = yaml.safe_load(mapping["data"]["workflow"])
    plugin = next(o for o in objs if o["kind"] == "ConfigMap" and "fleetspec-health.json" in o.get("data", {}))
    condition = json.loads(plugin["data"]["fleetspec-health.json"])["rules"][0]["condition"]
    assert [w["nodeCondition"] for w in workflows] == [condition] == [NPD_CONDITION]
    assert workflows[0]["workflowTemplate"] == "default-template"
    assert set(workflows[0]["validationTestsProfile"]) == {"framework", "recipe", "iterations", "stopOnFailure",
                                                           "timeoutSeconds"}
    for dc in configs:
        workflow = dc["spec"]["remediationWorkflow"]
        assert dc["spec"]["metricsExporter"]["enable"] is True
        assert mapping["metadata"]["namespace"] == dc["metadata"]["namespace"]
        pool = [n for n in museum.nodes if n.scheduler == "kubernetes"]  # the remediators' pool
        selected = [n for n in pool if n.gpu.vendor == "amd" and n.stack == next(iter(dc["spec"]["selector"].values()))]
        limit = min(len(selected), len(pool) - min_healthy.needed("51%", len(pool)))
        assert selected and limit >= 1
        assert workflow == {"enable": True, "config": {"name": AMD_REMEDIATION_CONFIGMAP},
                            "maxParallelWorkflows": limit,
                            "nodeDrainPolicy": {"force": False, "ignoreDaemonSets": True, "timeoutSeconds": 3600}}
        assert validate_object(dc, crd_index, museum.kubernetes.version) == []
        broken = copy.deepcopy(dc)
        broken["spec"]["remediationWorkflow"]["maxParallelWorkflows"] = -1  # the CRD's minimum is 0
        assert validate_object(broken, crd_index, museum.kubernetes.version)
    # min_healthy 100%: no node may be remediated, and the CRD's 0 would mean "no limit": off.
    strict = dataclasses.replace(museum, health=dataclasses.replace(museum.health, min_healthy="100%"))
    for dc in (o for o in objects(strict) if o["kind"] == "DeviceConfig"):
        assert dc["spec"]["remediationWorkflow"]["enable"] is False
        assert "maxParallelWorkflows" not in dc["spec"]["remediationWorkflow"]


def test_without_health_nothing_changes() -> None:
    fleet = fleets.museum()
    assert fleet.health is None
    assert not any(o["kind"] == "PrometheusRule" for o in objects(fleet))
    assert "dcgmExporter" not in next(r for r in kubernetes_resources(fleet).releases if r.name == "gpu-operator").values


def test_the_cronjob_runs_with_the_specs_blast_radius_limit(tmp_path) -> None:
    """spec.health.min_healthy reaches the CronJob's command, and the shipped modules alone (the
    ConfigMap's tree) hold remediation back on a mostly sick pool: exit 1, nothing cordoned."""
    import subprocess
    import sys

    from fleetspec.pipeline import compile_text

    from .apiserver_standin import ApiServer
    from .test_k8s_remediator import node
    from .test_remediate import SPEC

    for limit, want in ((None, "51%"), ("75%", "75%"), ("2", "2")):
        text = SPEC.replace(", min_healthy: 0", "" if limit is None else f", min_healthy: {limit!r}")
        fleet = compile_text(text).fleet
        cron, code, _ = _remediator(fleet)
        command = _lay_out(cron, code, tmp_path / want.rstrip("%"))
        assert command[command.index("--min-healthy") + 1] == want
    command = _lay_out(*_remediator(compile_text(SPEC.replace(", min_healthy: 0", "")).fleet)[:2], tmp_path / "d")
    label = command[command.index("--selector") + 1].split("(")[1].rstrip(")")
    nodes = [node(f"k-{i}", "True", partition=label) for i in (1, 2, 3)] + [node("k-4", "False", partition=label)]
    with ApiServer(nodes, []) as api:
        ran = subprocess.run([sys.executable, "-S", *command[1:], "--server", api.url],
                             env={"PYTHONPATH": str(tmp_path / "d/opt/fleetspec")}, cwd=tmp_path, capture_output=True,
                             text=True)
        assert ran.returncode == 1, ran.stderr
        assert ran.stdout.startswith("remediation held back: 3 of 4 GPU nodes look sick, 1 healthy, below "
                                     "min_healthy 51% (3 healthy needed)"), ran.stdout
        assert not any(n["spec"].get("unschedulable") for n in api.nodes.values())


def test_with_kubernetes_mig_nodes_the_remediator_may_restart_the_mig_manager(crd_index) -> None:
    """Kubernetes-owned MIG nodes: the CronJob is told the GPU Operator's namespace (a MIG node
    is released only after its MIG manager re-applied the geometry) and may list and delete
    pods there only (a Role, not its ClusterRole); every object passes the schemas."""
    from fleetspec.pipeline import compile_text
    from tests.kubernetes.test_mig import SPEC

    compiled = compile_text(SPEC.replace("  kubernetes:\n", "  health: {interval: 60}\n  kubernetes:\n"))
    assert compiled.valid, [f.message for f in compiled.findings]
    fleet = compiled.fleet
    cron, code, role = _remediator(fleet)
    (container,) = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    command = container["command"]
    assert command[command.index("--mig-manager-namespace") + 1] == "gpu-operator"
    assert not any("delete" in r["verbs"] and "pods" in r["resources"] for r in role["rules"])
    objs = objects(fleet)
    mig_role = next(o for o in objs if o["kind"] == "Role" and o["metadata"]["name"] == "fleetspec-health-remediator-mig")
    assert mig_role["metadata"]["namespace"] == "gpu-operator"
    assert mig_role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "delete"]}]
    binding = next(o for o in objs if o["kind"] == "RoleBinding" and o["metadata"]["name"] == mig_role["metadata"]["name"])
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "fleetspec-health-remediator",
                                    "namespace": cron["metadata"]["namespace"]}]
    for obj in objs:
        assert validate_object(obj, crd_index, fleet.kubernetes.version) == [], obj["kind"]


def test_without_kubernetes_mig_nodes_no_mig_manager_restarts(museum) -> None:
    cron, _, _ = _remediator(museum)
    assert "--mig-manager-namespace" not in cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["command"]
    assert not any(o["kind"] == "Role" for o in objects(museum))
