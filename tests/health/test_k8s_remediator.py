"""The in-cluster remediator against a stand-in API server: NPD's GPUProblem condition to
cordon + eviction, back to uncordon; an operator's cordon and PodDisruptionBudgets hold."""

from __future__ import annotations

from fleetspec.health import k8s_remediator

from .apiserver_standin import ApiServer

SELECTOR = "fleetspec.io/partition in (k8s-hopper)"
REASON = "drain-reboot gpu-lost: 0000:18:00.0 Xid 79: GPU has fallen off the bus."


def node(name: str, problem: str | None, *, cordoned: bool = False, annotation: str | None = None,
         partition: str = "k8s-hopper") -> dict:
    conditions = [{"type": "Ready", "status": "True"}]
    if problem is not None:  # as NPD writes a custom plugin's condition
        conditions.append({"type": "GPUProblem", "status": problem,
                           "reason": "GPUFault" if problem == "True" else "GPUHealthy",
                           "message": REASON if problem == "True" else "healthy"})
    obj = {"apiVersion": "v1", "kind": "Node",
           "metadata": {"name": name, "labels": {"fleetspec.io/partition": partition}},
           "spec": {}, "status": {"conditions": conditions}}
    if cordoned:
        obj["spec"]["unschedulable"] = True
    if annotation:
        obj["metadata"]["annotations"] = {"fleetspec.io/drain-reason": annotation}
    return obj


def pod(name: str, node_name: str, owner: str = "StatefulSet", ns: str = "team-a", **meta: object) -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "ownerReferences": [{"kind": owner, "name": "x"}], **meta},
            "spec": {"nodeName": node_name}, "status": {"phase": "Running"}}


def test_reconcile(capsys) -> None:
    nodes = [node("k-1", "True"), node("k-2", "False", cordoned=True, annotation="fleetspec-health: drain x"),
             node("k-3", "True", cordoned=True, annotation="ops: reseat NIC"), node("k-4", "True"),
             node("k-5", "Unknown", cordoned=True, annotation="fleetspec-health: drain y"),
             node("s-1", "True", partition="slurm-hopper")]
    pods = [pod("trainer-0", "k-1"), pod("dcgm-exporter-abc", "k-1", owner="DaemonSet", ns="gpu-operator"),
            pod("db-0", "k-4"), pod("trainer-1", "k-3"), pod("job-2", "s-1")]
    with ApiServer(nodes, pods, pdb_protected={"db-0"}) as api:
        assert k8s_remediator.main(["--selector", SELECTOR, "--server", api.url]) == 0
        out = capsys.readouterr().out
        k = api.nodes
        assert k["k-1"]["spec"]["unschedulable"] is True
        assert k["k-1"]["metadata"]["annotations"]["fleetspec.io/drain-reason"] == f"fleetspec-health: {REASON}"
        assert [p["metadata"]["name"] for p in api.pods] == ["dcgm-exporter-abc", "db-0", "trainer-1", "job-2"]
        assert k["k-2"]["spec"]["unschedulable"] is False and "fleetspec.io/drain-reason" not in k["k-2"]["metadata"]["annotations"]
        assert k["k-3"]["metadata"]["annotations"]["fleetspec.io/drain-reason"] == "ops: reseat NIC"
        assert k["k-4"]["spec"]["unschedulable"] is True  # cordoned; its PDB-held pod stays
        assert k["k-5"]["spec"]["unschedulable"] is True  # Unknown (the check could not run): no change
        assert "unschedulable" not in k["s-1"]["spec"]  # not a Kubernetes-owned GPU node: not selected
        assert "k-1: cordoned (fleetspec-health: drain-reboot gpu-lost" in out and "1 pod(s) evicted" in out
        assert "k-3: left cordoned by someone else (ops: reseat NIC)" in out
        assert "k-4: cordoned" in out and "team-a/db-0: 429 Cannot evict pod" in out
        assert "k-2: uncordoned (was: fleetspec-health: drain x)" in out
        # the next run: k-4's PDB now allows it; nothing is re-patched on k-1
        api.pdb_protected.clear()
        api.calls.clear()
        assert k8s_remediator.main(["--selector", SELECTOR, "--server", api.url]) == 0
        assert ("PATCH", "/api/v1/nodes/k-1") not in api.calls
        assert [p["metadata"]["name"] for p in api.pods] == ["dcgm-exporter-abc", "trainer-1", "job-2"]


def test_api_errors_are_reported_not_raised(capsys) -> None:
    assert k8s_remediator.main(["--selector", SELECTOR, "--server", "http://127.0.0.1:1"]) == 1
    assert capsys.readouterr().err.startswith("fleetspec-health-remediator: ")
