"""fleetspec health --remediate on Kubernetes-owned nodes: cordon + drain through the
Eviction API (kubectl), uncordon what it cordoned, never touch an operator's cordon.
kubectl is a stand-in over a JSON file of Nodes (no API server can run here)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fleetspec.cli import app

from .nodes import make_node
from .test_node_check import check

HERE = Path(__file__).resolve().parent
SPEC = """\
apiVersion: fleetspec.io/v1alpha1
kind: Fleet
metadata: {name: pool}
spec:
  os: ubuntu-24.04
  stacks:
    hopper: {driver: "580.95.05", cuda: "13.0.2", nccl: "2.28.3"}
  fabric: {type: infiniband}
  racks:
    - name: r01
      nodes:
        - {hosts: "k-[1-4]", gpu: {model: h200, count: 1}, stack: hopper, scheduler: kubernetes}
  kubernetes: {version: "1.36", gpu_operator: {version: v26.7.0}}
  health: {interval: 60, min_healthy: 0}  # per-node behaviour: no blast-radius limit
"""


def test_remediate_kubernetes_nodes(tmp_path, monkeypatch, kubectl_state, capsys) -> None:
    from fleetspec.pipeline import compile_text
    from fleetspec.render.health import node_config

    fleet = compile_text(SPEC).fleet
    config = tmp_path / "health.json"
    config.write_text(json.dumps(node_config(fleet)))
    facts = tmp_path / "verdicts"
    facts.mkdir()
    for name, kmsg in (("k-1", "kmsg-xids.txt"), ("k-2", "kmsg-healthy.txt"), ("k-3", "kmsg-xids.txt"),
                       ("k-4", "kmsg-xids.txt")):
        _, verdict = check(config, make_node(tmp_path / name, kmsg=kmsg), name, monkeypatch, capsys)
        (facts / f"{name}.json").write_text(json.dumps(verdict))
    state = kubectl_state
    state.write_text(json.dumps({"nodes": {
        "k-1": {"pods": [{"name": "trainer-0"}]},
        "k-2": {"unschedulable": True, "annotations": {"fleetspec.io/drain-reason": "fleetspec-health: drain x"}},
        "k-3": {"unschedulable": True, "annotations": {"fleetspec.io/drain-reason": "ops: reseat NIC"}},
        "k-4": {"pods": [{"name": "db-0", "pdb_blocked": True}]},
    }}))
    spec = tmp_path / "fleet.yaml"
    spec.write_text(SPEC)
    result = CliRunner().invoke(app, ["health", str(spec), "--facts", str(facts), "--remediate"])
    assert result.exit_code == 1, result.output  # nodes are sick
    nodes = json.loads(state.read_text())["nodes"]
    assert nodes["k-1"]["unschedulable"] and nodes["k-1"]["pods"] == []
    assert nodes["k-1"]["annotations"]["fleetspec.io/drain-reason"].startswith("fleetspec-health: replace row-remap-failure")
    assert "unschedulable" in nodes["k-2"] and not nodes["k-2"]["unschedulable"]
    assert "fleetspec.io/drain-reason" not in nodes["k-2"]["annotations"]
    assert nodes["k-3"]["annotations"]["fleetspec.io/drain-reason"] == "ops: reseat NIC"  # the operator's
    assert nodes["k-4"]["unschedulable"] and nodes["k-4"]["pods"] == [{"name": "db-0", "pdb_blocked": True}]
    assert "k-1: cordoned and drained" in result.output
    assert "k-2: uncordoned" in result.output
    assert "k-3: left cordoned by someone else (ops: reseat NIC)" in result.output
    assert "k-4: cordoned, eviction blocked" in result.output
    drains = [c for c in json.loads(state.read_text())["calls"] if c[0] == "drain"]
    assert all("--ignore-daemonsets" in c for c in drains)  # the Eviction API path, DaemonSets stay


def test_a_node_the_api_refuses_does_not_stop_the_others(tmp_path, monkeypatch, kubectl_state, capsys) -> None:
    """The API server refuses to cordon k-1 (an admission webhook): k-1 is reported as not acted
    on, and k-3 and k-4 (after it) are still cordoned and drained."""
    from fleetspec.pipeline import compile_text
    from fleetspec.render.health import node_config

    fleet = compile_text(SPEC).fleet
    config = tmp_path / "health.json"
    config.write_text(json.dumps(node_config(fleet)))
    facts = tmp_path / "verdicts"
    facts.mkdir()
    for name in ("k-1", "k-3", "k-4"):
        _, verdict = check(config, make_node(tmp_path / name, kmsg="kmsg-xids.txt"), name, monkeypatch, capsys)
        (facts / f"{name}.json").write_text(json.dumps(verdict))
    kubectl_state.write_text(json.dumps({"nodes": {
        "k-1": {"forbid": ["cordon"], "pods": [{"name": "trainer-0"}]},
        "k-3": {"pods": [{"name": "trainer-3"}]},
        "k-4": {"pods": [{"name": "trainer-4"}]},
    }}))
    spec = tmp_path / "fleet.yaml"
    spec.write_text(SPEC)
    result = CliRunner().invoke(app, ["health", str(spec), "--facts", str(facts), "--remediate"])
    assert result.exit_code == 1, result.output
    nodes = json.loads(kubectl_state.read_text())["nodes"]
    assert not nodes["k-1"].get("unschedulable") and nodes["k-1"]["pods"] == [{"name": "trainer-0"}]
    assert "k-1: not acted on: kubectl cordon k-1 failed: Error from server (Forbidden)" in result.output
    for name in ("k-3", "k-4"):
        assert nodes[name]["unschedulable"] and nodes[name]["pods"] == [], name
        assert f"{name}: cordoned and drained" in result.output


def test_a_failed_uncordon_on_a_healthy_fleet_exits_1(tmp_path, monkeypatch, kubectl_state, capsys) -> None:
    """Every node passes, but the API refuses to uncordon k-2 (cordoned by the check before):
    the run says so and exits 1, so a script or CronJob sees the node is still out."""
    from fleetspec.pipeline import compile_text
    from fleetspec.render.health import node_config

    fleet = compile_text(SPEC).fleet
    config = tmp_path / "health.json"
    config.write_text(json.dumps(node_config(fleet)))
    facts = tmp_path / "verdicts"
    facts.mkdir()
    _, verdict = check(config, make_node(tmp_path / "k-2", kmsg="kmsg-healthy.txt"), "k-2", monkeypatch, capsys)
    (facts / "k-2.json").write_text(json.dumps(verdict))
    kubectl_state.write_text(json.dumps({"nodes": {"k-2": {
        "forbid": ["uncordon"], "unschedulable": True,
        "annotations": {"fleetspec.io/drain-reason": "fleetspec-health: drain x"}}}}))
    spec = tmp_path / "fleet.yaml"
    spec.write_text(SPEC)
    result = CliRunner().invoke(app, ["health", str(spec), "--facts", str(facts), "--remediate"])
    assert "k-2: not acted on: kubectl uncordon k-2 failed: Error from server (Forbidden)" in result.output
    assert result.exit_code == 1, result.output


def _verdicts(tmp_path, monkeypatch, capsys, kmsgs: dict[str, str]) -> Path:
    from fleetspec.pipeline import compile_text
    from fleetspec.render.health import node_config

    config = tmp_path / "health.json"
    config.write_text(json.dumps(node_config(compile_text(SPEC).fleet)))
    facts = tmp_path / "verdicts"
    facts.mkdir()
    for name, kmsg in kmsgs.items():
        _, verdict = check(config, make_node(tmp_path / name, kmsg=kmsg), name, monkeypatch, capsys)
        (facts / f"{name}.json").write_text(json.dumps(verdict))
    return facts


def test_a_pool_mostly_sick_is_held_back(tmp_path, monkeypatch, kubectl_state, capsys) -> None:
    """spec.health.min_healthy (default 51%, medik8s NHC's minHealthy), the in-cluster
    remediator's decision: 3 of 4 Kubernetes nodes sick at once: no cordon, no drain, the
    recovered k-2 is still uncordoned, one line says why, exit 1."""
    facts = _verdicts(tmp_path, monkeypatch, capsys, {"k-1": "kmsg-xids.txt", "k-2": "kmsg-healthy.txt",
                                                       "k-3": "kmsg-xids.txt", "k-4": "kmsg-xids.txt"})
    kubectl_state.write_text(json.dumps({"nodes": {
        "k-1": {"pods": [{"name": "trainer-0"}]},
        "k-2": {"unschedulable": True, "annotations": {"fleetspec.io/drain-reason": "fleetspec-health: drain x"}},
        "k-3": {"pods": [{"name": "trainer-3"}]}, "k-4": {"pods": [{"name": "trainer-4"}]}}}))
    spec = tmp_path / "fleet.yaml"
    spec.write_text(SPEC.replace("min_healthy: 0", "min_healthy: 51%"))
    result = CliRunner().invoke(app, ["health", str(spec), "--facts", str(facts), "--remediate"])
    assert result.exit_code == 1, result.output
    assert ("remediation held back: 3 of 4 GPU nodes look sick, 1 healthy, below min_healthy 51% (3 healthy "
            "needed): nothing new is cordoned, drained or tainted.") in result.output
    assert "k-2: uncordoned" in result.output
    state = json.loads(kubectl_state.read_text())
    assert [c for c in state["calls"] if c[0] != "get"] == [["uncordon", "k-2"], ["annotate", "node", "k-2", "fleetspec.io/drain-reason-"]]
    for name in ("k-1", "k-3", "k-4"):
        assert not state["nodes"][name].get("unschedulable") and state["nodes"][name]["pods"], name
    # the default is the same limit
    spec.write_text(SPEC.replace("  health: {interval: 60, min_healthy: 0}", "  health: {interval: 60}"))
    result = CliRunner().invoke(app, ["health", str(spec), "--facts", str(facts), "--remediate"])
    assert result.exit_code == 1 and "below min_healthy 51% (3 healthy needed)" in result.output, result.output
    # a site that accepts it: a count of 1 lets the three be drained
    spec.write_text(SPEC.replace("min_healthy: 0", "min_healthy: 1"))
    result = CliRunner().invoke(app, ["health", str(spec), "--facts", str(facts), "--remediate"])
    assert "held back" not in result.output and result.output.count("cordoned and drained") == 3, result.output


def test_min_healthy_is_checked_in_the_spec(tmp_path) -> None:
    """A located error, as for the other health settings; a count or a whole percentage."""
    from fleetspec.pipeline import compile_text

    spec = tmp_path / "fleet.yaml"
    for bad in ('"101%"', "-1", "2.5", "true", '"half"', '"05%"'):
        spec.write_text(SPEC.replace("min_healthy: 0", f"min_healthy: {bad}"))
        result = CliRunner().invoke(app, ["validate", str(spec)])
        assert result.exit_code == 1, bad
        assert ("fleet.yaml:14:39: error [schema] 'spec.health.min_healthy': give a count of nodes (3) or a "
                "percentage from 0% to 100% (51%), not ") in result.output, (bad, result.output)
    for good, kept in (("51%", "51%"), ("0", "0"), ("12", "12"), ('"100%"', "100%")):
        assert compile_text(SPEC.replace("min_healthy: 0", f"min_healthy: {good}")).fleet.health.min_healthy == kept
    assert compile_text(SPEC.replace(", min_healthy: 0", "")).fleet.health.min_healthy == "51%"


def test_editors_see_the_same_limit_in_the_json_schema() -> None:
    """`fleetspec schema` (for yaml-language-server) accepts what the spec accepts here."""
    import jsonschema

    from fleetspec.spec.model import Health

    schema = Health.model_json_schema()["properties"]["min_healthy"]
    for good in ("51%", "0%", "100%", 3, 0, "3"):
        jsonschema.validate(good, schema)
    for bad in ("101%", -1, "half", "05%"):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema)


def test_a_mig_node_is_released_after_its_mig_manager_reapplied_the_geometry(tmp_path, monkeypatch, kubectl_state,
                                                                               capsys) -> None:
    """The same steps as the in-cluster remediator (k8s_remediator.mig_step) through kubectl:
    a healthy MIG node the check cordoned has its mig-manager pod restarted with the state
    set to pending, stays cordoned until the MIG manager reports success, then is released;
    failed keeps it cordoned and the run exits 1."""
    from fleetspec.pipeline import compile_text
    from fleetspec.render.health import node_config

    mig_spec = SPEC.replace('hosts: "k-[1-4]", gpu: {model: h200, count: 1}',
                            'hosts: "k-1", gpu: {model: h200, count: 1, mig: {1g.18gb: 7}}')
    compiled = compile_text(mig_spec)
    assert compiled.valid, [f.message for f in compiled.findings]
    config = tmp_path / "health.json"
    config.write_text(json.dumps(node_config(compiled.fleet)))
    facts = tmp_path / "verdicts"
    facts.mkdir()
    _, verdict = check(config, make_node(tmp_path / "k-1", kmsg="kmsg-healthy.txt"), "k-1", monkeypatch, capsys)
    (facts / "k-1.json").write_text(json.dumps(verdict))
    kubectl_state.write_text(json.dumps({"nodes": {"k-1": {
        "unschedulable": True, "annotations": {"fleetspec.io/drain-reason": "fleetspec-health: quarantine-device x"},
        "labels": {"nvidia.com/mig.config": "fleetspec-7x1g.18gb", "nvidia.com/mig.config.state": "success"},
        "pods": [{"name": "nvidia-mig-manager-x7k2p", "namespace": "gpu-operator",
                  "labels": {"app": "nvidia-mig-manager"}},
                 {"name": "nvidia-device-plugin-q9", "namespace": "gpu-operator",
                  "labels": {"app": "nvidia-device-plugin-daemonset"}}]}}}))
    spec = tmp_path / "fleet.yaml"
    spec.write_text(mig_spec)

    def remediate() -> tuple[dict, str]:
        result = CliRunner().invoke(app, ["health", str(spec), "--facts", str(facts), "--remediate"])
        return json.loads(kubectl_state.read_text())["nodes"]["k-1"], result

    node, result = remediate()
    assert result.exit_code == 0, result.output
    assert node["unschedulable"] and node["labels"]["nvidia.com/mig.config.state"] == "pending"
    assert [p["name"] for p in node["pods"]] == ["nvidia-device-plugin-q9"]
    assert "k-1: left cordoned: MIG manager pod nvidia-mig-manager-x7k2p restarted" in result.output, result.output
    node, result = remediate()  # the new pod still works
    assert node["unschedulable"] and "waiting for the MIG manager" in result.output
    state = json.loads(kubectl_state.read_text())
    state["nodes"]["k-1"]["labels"]["nvidia.com/mig.config.state"] = "failed"
    kubectl_state.write_text(json.dumps(state))
    node, result = remediate()
    assert node["unschedulable"] and result.exit_code == 1
    assert "k-1: not acted on: the MIG manager failed to re-apply fleetspec-7x1g.18gb" in result.output
    state = json.loads(kubectl_state.read_text())
    state["nodes"]["k-1"]["labels"]["nvidia.com/mig.config.state"] = "success"
    kubectl_state.write_text(json.dumps(state))
    node, result = remediate()
    assert not node["unschedulable"] and node["annotations"] == {}, result.output
    assert "k-1: uncordoned" in result.output and result.exit_code == 0
