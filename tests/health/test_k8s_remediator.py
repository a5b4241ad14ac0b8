"""The in-cluster remediator against a stand-in API server: NPD's GPUProblem condition to
cordon + eviction, back to uncordon; an operator's cordon and PodDisruptionBudgets hold."""

from __future__ import annotations

from fleetspec.node_side import k8s_remediator

from .apiserver_standin import ApiServer

SELECTOR = "fleetspec.io/partition in (k8s-hopper)"
REASON = "drain-reboot gpu-lost: 0000:18:00.0 Xid 79: GPU has fallen off the bus."
# Most tests here look at what is done to each node, on pools mostly sick: the blast-radius
# limit (its own tests below) is off for them
NO_LIMIT = ["--min-healthy", "0"]


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


def pod(name: str, node_name: str, owner: str | None = "StatefulSet", ns: str = "team-a", **meta: object) -> dict:
    """A Pod as the API server shows it; one a controller made has that controller's
    ownerReference with ``controller: true`` (metav1.GetControllerOf), a bare one none."""
    owners = [{"apiVersion": "apps/v1", "kind": owner, "name": "x", "controller": True}] if owner else []
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "ownerReferences": owners, **meta},
            "spec": {"nodeName": node_name}, "status": {"phase": "Running"}}


def test_reconcile(capsys) -> None:
    nodes = [node("k-1", "True"), node("k-2", "False", cordoned=True, annotation="fleetspec-health: drain x"),
             node("k-3", "True", cordoned=True, annotation="ops: reseat NIC"), node("k-4", "True"),
             node("k-5", "Unknown", cordoned=True, annotation="fleetspec-health: drain y"),
             node("s-1", "True", partition="slurm-hopper")]
    pods = [pod("trainer-0", "k-1"), pod("dcgm-exporter-abc", "k-1", owner="DaemonSet", ns="gpu-operator"),
            pod("db-0", "k-4"), pod("trainer-1", "k-3"), pod("job-2", "s-1")]
    with ApiServer(nodes, pods, pdb_protected={"db-0"}) as api:
        assert k8s_remediator.main(["--selector", SELECTOR, "--server", api.url] + NO_LIMIT) == 0
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
        assert k8s_remediator.main(["--selector", SELECTOR, "--server", api.url] + NO_LIMIT) == 0
        assert ("PATCH", "/api/v1/nodes/k-1") not in api.calls
        assert [p["metadata"]["name"] for p in api.pods] == ["dcgm-exporter-abc", "trainer-1", "job-2"]


def test_a_node_the_api_refuses_does_not_stop_the_others(capsys) -> None:
    """k-1 is deleted between the list and the patch (a scale-down): its line says so, k-2
    after it is still cordoned and drained, and the run exits 1 so the CronJob shows a failure."""
    nodes = [node("k-1", "True"), node("k-2", "True")]
    with ApiServer(nodes, [pod("trainer-2", "k-2")], gone={"k-1"}) as api:
        assert k8s_remediator.main(["--selector", SELECTOR, "--server", api.url] + NO_LIMIT) == 1
        out = capsys.readouterr().out
        assert 'k-1: not acted on: PATCH /api/v1/nodes/k-1: 404 nodes "k-1" not found' in out
        assert api.nodes["k-2"]["spec"]["unschedulable"] is True and api.pods == []
        assert "k-2: cordoned (fleetspec-health: drain-reboot gpu-lost" in out


def test_a_connection_lost_on_one_node_does_not_stop_the_others_or_hide_what_was_done(capsys) -> None:
    """The API server's connection ends with no answer on k-2's patch (a restart, a load
    balancer reset): k-1, cordoned and drained before it, is still reported; k-2 is 'not acted
    on', the pass stops there (an API server that does not answer would make each later node
    wait out its timeout past the Job's deadline) and names k-3 as not reached; exit 1.
    Before, the OSError ended the run with one stderr line: k-1's cordon and evictions went
    unreported."""
    nodes = [node("k-1", "True"), node("k-2", "True"), node("k-3", "True")]
    pods = [pod("trainer-1", "k-1"), pod("trainer-3", "k-3")]
    with ApiServer(nodes, pods, dropped={"k-2"}) as api:
        assert k8s_remediator.main(["--selector", SELECTOR, "--server", api.url] + NO_LIMIT) == 1
        out = capsys.readouterr().out
        assert "k-1: cordoned (fleetspec-health: drain-reboot gpu-lost" in out and "1 pod(s) evicted" in out
        assert "k-2: not acted on: " in out
        assert "k-3: not acted on: not reached, the pass stopped at k-2; the next run goes on" in out
        assert api.nodes["k-1"]["spec"]["unschedulable"] is True and not api.nodes["k-3"]["spec"].get("unschedulable")
        assert [p["metadata"]["name"] for p in api.pods] == ["trainer-3"]


def test_a_pod_no_controller_manages_is_not_evicted(capsys) -> None:
    """kubectl drain refuses a pod that declares no controller without --force (nothing would
    recreate it: kubectl/pkg/drain/filters.go, "Pods declare no controller (use --force to
    override)"), and `fleetspec health --remediate` drains with kubectl: the in-cluster
    remediator leaves such a pod too, and says so, instead of deleting it for good."""
    with ApiServer([node("k-1", "True")], [pod("trainer-0", "k-1"), pod("notebook", "k-1", owner=None)]) as api:
        assert k8s_remediator.main(["--selector", SELECTOR, "--server", api.url] + NO_LIMIT) == 0
        out = capsys.readouterr().out
        assert [p["metadata"]["name"] for p in api.pods] == ["notebook"]
        assert api.nodes["k-1"]["spec"]["unschedulable"] is True
        assert ("1 pod(s) evicted; held until the next run: team-a/notebook: declares no controller, nothing "
                "would recreate it (kubectl drain refuses it without --force): move or delete it") in out
        assert ("POST", "/api/v1/namespaces/team-a/pods/notebook/eviction") not in api.calls


def test_api_errors_are_reported_not_raised(capsys) -> None:
    assert k8s_remediator.main(["--selector", SELECTOR, "--server", "http://127.0.0.1:1"]) == 1
    assert capsys.readouterr().err.startswith("fleetspec-health-remediator: ")


def test_on_a_dra_pool_a_device_fault_taints_only_that_device(tmp_path, monkeypatch, capsys) -> None:
    """The node check's NPD line names the GPUs of its quarantine-device faults; the remediator
    taints each with the DeviceTaintRule `fleetspec health --remediate` writes, leaves the node
    schedulable, cordons only for a node-level fault or a GPU no ResourceSlice shows, keeps the
    node path on a device-plugin pool, and deletes the rule when the condition clears."""
    import json
    import os

    from fleetspec.node_side import device_taints, node_check
    from fleetspec.pipeline import compile_text
    from fleetspec.render.health import node_config
    from tests.conftest import require_shared
    from tests.k8s_schema import CrdIndex, validate_object

    from .nodes import make_node
    from .test_device_taints import DEVICE_FAULT, NODE_FAULT, SPEC, resource_slice

    compiled = compile_text(SPEC)
    config = tmp_path / "health.json"
    config.write_text(json.dumps(node_config(compiled.fleet)))

    def npd_line(name: str, kmsg: str) -> str:  # what NPD puts in the condition's message
        root = make_node(tmp_path / name, ib=None)
        (root / "dev" / "kmsg").write_text(kmsg)
        monkeypatch.setenv("PATH", f"{root / 'bin'}{os.pathsep}{os.environ['PATH']}")
        assert node_check.main(["--config", str(config), "--root", str(root), "--node", name, "--format", "npd"]) == 1
        line = capsys.readouterr().out
        assert len(line) <= node_check.NPD_MAX_OUTPUT and line.count("\n") == 1
        return line.strip()

    device_only = npd_line("d-1", DEVICE_FAULT)
    assert device_only.startswith("quarantine-device ") and device_only.endswith(
        " [devices: 0000:5d:00=ecc-uncorrectable 0000:5d:00=row-remap-pending]")
    both = npd_line("d-2", DEVICE_FAULT + NODE_FAULT)
    assert both.startswith("drain-reboot gpu-lost") and both.endswith(
        " [devices: 0000:5d:00=ecc-uncorrectable 0000:5d:00=row-remap-pending]")

    def sick(name: str, message: str, partition: str = "k8s-hopper") -> dict:
        obj = node(name, "True", partition=partition)
        obj["status"]["conditions"][-1]["message"] = message
        return obj

    elsewhere = resource_slice("d-3")  # d-3's slice shows a GPU at another address
    for attr in ("pcieBusID", "resource.kubernetes.io/pciBusID"):
        elsewhere["spec"]["devices"][0]["attributes"][attr] = {"string": "0000:18:00.0"}
    nodes = [sick("d-1", device_only), sick("d-2", both), sick("d-3", device_only),
             sick("p-1", device_only, partition="k8s-plugin")]
    pods = [pod("trainer-1", "d-1"), pod("trainer-2", "d-2"), pod("trainer-3", "d-3"), pod("trainer-4", "p-1")]
    slices = [resource_slice("d-1"), resource_slice("d-2"), elsewhere, resource_slice("p-1")]
    args = ["--selector", "fleetspec.io/partition in (k8s-hopper,k8s-plugin)", "--dra-partitions", "k8s-hopper",
            "--taint-api", "resource.k8s.io/v1beta2"]
    crds = CrdIndex.load(require_shared("crds"))
    with ApiServer(nodes, pods, resource_slices=slices) as api:
        assert k8s_remediator.main(args + ["--server", api.url] + NO_LIMIT) == 0
        out = capsys.readouterr().out
        assert sorted(api.taint_rules) == ["fleetspec-d-1-gpu-0", "fleetspec-d-2-gpu-0"], out
        rule = api.taint_rules["fleetspec-d-1-gpu-0"]
        # the very rule `fleetspec health --remediate` writes, valid for the spec's Kubernetes
        assert rule == device_taints.device_taint_rule("resource.k8s.io/v1beta2", "d-1", "d-1", "gpu-0",
                                                       "ecc-uncorrectable")
        for written in api.taint_rules.values():
            assert validate_object(written, crds, "1.36") == []
        k = api.nodes
        assert "unschedulable" not in k["d-1"]["spec"]  # the node stays schedulable for its other GPUs
        assert k["d-2"]["spec"]["unschedulable"] is True  # Xid 79 needs the node
        assert k["d-3"]["spec"]["unschedulable"] is True  # the faulty GPU is not in its slices
        assert k["p-1"]["spec"]["unschedulable"] is True  # device-plugin pool: the node
        assert [p["metadata"]["name"] for p in api.pods] == ["trainer-1"]
        assert "d-1: device d-1/gpu-0 tainted fleetspec.io/gpu-fault=ecc-uncorrectable:NoSchedule" in out
        assert not [c for c in api.calls if "p-1" in c[1] and "resource.k8s.io" in c[1]]

        # d-1's GPU is repaired: NPD sets the condition False; its rule goes, d-2's stays
        k["d-1"]["status"]["conditions"][-1].update(status="False", reason="GPUHealthy", message="healthy")
        api.calls.clear()
        assert k8s_remediator.main(args + ["--server", api.url] + NO_LIMIT) == 0
        out = capsys.readouterr().out
        assert sorted(api.taint_rules) == ["fleetspec-d-2-gpu-0"], out
        assert "d-1: DeviceTaintRule fleetspec-d-1-gpu-0 deleted" in out
        assert "unschedulable" not in k["d-1"]["spec"]
        assert not [c for c in api.calls if c[0] == "POST" and "devicetaintrules" in c[1]]  # d-2's exists


def test_a_condition_without_a_device_list_takes_the_node_path(capsys) -> None:
    """A message with no `[devices: ...]` (an older node check) cannot name a GPU: cordon."""
    nodes = [node("d-1", "True")]
    nodes[0]["status"]["conditions"][-1]["message"] = "quarantine-device ecc-uncorrectable: 0000:5d:00 Xid 48"
    with ApiServer(nodes, []) as api:
        assert k8s_remediator.main(["--selector", SELECTOR, "--server", api.url, "--dra-partitions", "k8s-hopper",
                                    "--taint-api", "resource.k8s.io/v1beta2"] + NO_LIMIT) == 0
        assert api.nodes["d-1"]["spec"]["unschedulable"] is True and api.taint_rules == {}


def test_a_pool_mostly_sick_is_held_back(capsys) -> None:
    """The blast-radius limit (spec.health.min_healthy, default 51% as medik8s NHC's minHealthy):
    3 of 4 nodes show GPUProblem at once (a policy push, a driver update): nothing new is
    cordoned or evicted, the cordon already in place stays, the recovered node is still
    released, one line says why, and the run exits 1 so the CronJob shows a failure."""
    nodes = [node("k-1", "True"), node("k-2", "True"),
             node("k-3", "True", cordoned=True, annotation=f"fleetspec-health: {REASON}"),
             node("k-4", "False", cordoned=True, annotation="fleetspec-health: drain x")]
    pods = [pod("trainer-1", "k-1"), pod("trainer-2", "k-2"), pod("trainer-3", "k-3")]
    with ApiServer(nodes, pods) as api:
        assert k8s_remediator.main(["--selector", SELECTOR, "--server", api.url]) == 1
        lines = capsys.readouterr().out.splitlines()
        assert lines[0].startswith("remediation held back: 3 of 4 GPU nodes look sick, 1 healthy, below "
                                   "min_healthy 51% (3 healthy needed): nothing new is cordoned, drained or "
                                   "tainted.") and "a human must look" in lines[0]
        assert lines[1:] == ["k-4: uncordoned (was: fleetspec-health: drain x)"]
        k = api.nodes
        assert "unschedulable" not in k["k-1"]["spec"] and "unschedulable" not in k["k-2"]["spec"]
        assert k["k-3"]["spec"]["unschedulable"] is True  # in place: stays
        assert k["k-4"]["spec"]["unschedulable"] is False
        assert len(api.pods) == 3 and not [c for c in api.calls if c[0] == "POST"]
        assert [c for c in api.calls if c[0] == "PATCH"] == [("PATCH", "/api/v1/nodes/k-4")]


def test_the_limit_lets_a_healthy_enough_pool_be_remediated(capsys) -> None:
    """At the limit remediation goes on: 1 of 4 sick leaves 3 healthy, 51% of 4 rounded up
    (NHC rounds up) is 3; a count works the same (2 of 4 sick, min_healthy 2)."""
    with ApiServer([node("k-1", "True")] + [node(f"k-{i}", "False") for i in (2, 3, 4)], []) as api:
        assert k8s_remediator.main(["--selector", SELECTOR, "--server", api.url]) == 0
        assert api.nodes["k-1"]["spec"]["unschedulable"] is True
    capsys.readouterr()
    def half() -> list[dict]:  # the stand-in changes the objects it is given
        return [node("k-1", "True"), node("k-2", "True"), node("k-3", "False"), node("k-4", "False")]

    with ApiServer(half(), []) as api:
        assert k8s_remediator.main(["--selector", SELECTOR, "--server", api.url, "--min-healthy", "2"]) == 0
        assert api.nodes["k-1"]["spec"]["unschedulable"] is True and api.nodes["k-2"]["spec"]["unschedulable"]
    with ApiServer(half(), []) as api:
        assert k8s_remediator.main(["--selector", SELECTOR, "--server", api.url, "--min-healthy", "3"]) == 1
        assert "unschedulable" not in api.nodes["k-1"]["spec"]


def test_a_node_without_a_verdict_is_not_counted_healthy(capsys) -> None:
    """Unknown (the check could not run) and no condition at all (NPD not running there) are
    not healthy: 1 sick, 1 healthy, 2 without a verdict is below 51% of 4."""
    nodes = [node("k-1", "True"), node("k-2", "False"), node("k-3", "Unknown"), node("k-4", None)]
    with ApiServer(nodes, [pod("trainer-1", "k-1")]) as api:
        assert k8s_remediator.main(["--selector", SELECTOR, "--server", api.url]) == 1
        out = capsys.readouterr().out
        assert "1 of 4 GPU nodes look sick (2 more gave no verdict), 1 healthy, below min_healthy 51%" in out
        assert "unschedulable" not in api.nodes["k-1"]["spec"] and len(api.pods) == 1


def test_under_the_limit_no_device_is_tainted_and_a_repaired_one_is_released(tmp_path, capsys) -> None:
    """On a DRA pool: held back, a new device fault makes no DeviceTaintRule; a rule already
    there stays while its node is sick, and goes once its node is healthy again."""
    from .test_device_taints import resource_slice

    message = ("quarantine-device ecc-uncorrectable: 0000:5d:00 Xid 48 "
               "[devices: 0000:5d:00=ecc-uncorrectable]")
    nodes = [node(f"k-{i}", "True") for i in (1, 2, 3)] + [node("k-4", "False")]
    for n in nodes[:3]:
        n["status"]["conditions"][-1]["message"] = message
    args = ["--selector", SELECTOR, "--dra-partitions", "k8s-hopper", "--taint-api", "resource.k8s.io/v1beta2"]
    slices = [resource_slice(f"k-{i}") for i in (1, 2, 3, 4)]
    with ApiServer(nodes, [], resource_slices=slices) as api:
        for name in ("k-3", "k-4"):  # tainted by an earlier run
            rule = k8s_remediator.device_taints.device_taint_rule("resource.k8s.io/v1beta2", name, name, "gpu-0",
                                                                  "ecc-uncorrectable")
            api.taint_rules[rule["metadata"]["name"]] = rule
        assert k8s_remediator.main(args + ["--server", api.url]) == 1
        out = capsys.readouterr().out
        assert sorted(api.taint_rules) == ["fleetspec-k-3-gpu-0"], out
        assert "k-4: DeviceTaintRule fleetspec-k-4-gpu-0 deleted" in out
        assert not [c for c in api.calls if c[0] in ("POST", "PATCH")]


def test_a_bad_min_healthy_is_refused_before_anything_is_read(capsys) -> None:
    assert k8s_remediator.main(["--selector", SELECTOR, "--server", "http://127.0.0.1:1", "--min-healthy", "150%"]) == 1
    assert capsys.readouterr().err == ("fleetspec-health-remediator: min_healthy '150%': give a count of nodes (3) "
                                       "or a percentage (51%)\n")


GPU_OPERATOR = ["--mig-manager-namespace", "gpu-operator"]


def mig_manager(name: str, node_name: str) -> dict:
    """The GPU Operator's mig-manager pod as its DaemonSet makes it (label app=nvidia-mig-manager,
    NVIDIA/mig-parted deployments/gpu-operator/nvidia-mig-manager-example.yaml)."""
    return pod(name, node_name, owner="DaemonSet", ns="gpu-operator", labels={"app": "nvidia-mig-manager"})


def test_a_mig_node_is_released_only_after_the_mig_manager_reapplied_its_geometry(capsys) -> None:
    """The fault on a MIG node ended (a GPU reset, which destroys the MIG instances): the
    node stays cordoned, its mig-manager pod is restarted (the only thing that makes it apply
    the same nvidia.com/mig.config again) with the state set to pending, and it is uncordoned
    once the MIG manager reports success; failed keeps it cordoned and fails the run."""
    def mig_node(name: str) -> dict:
        n = node(name, "False", cordoned=True, annotation="fleetspec-health: quarantine-device ecc-uncorrectable: x")
        n["metadata"]["labels"] |= {"nvidia.com/mig.config": "all-1g.18gb", "nvidia.com/mig.config.state": "success"}
        return n

    nodes = [mig_node("k-1"), mig_node("k-2"), node("k-3", "False", cordoned=True, annotation="fleetspec-health: drain x")]
    pods = [mig_manager("nvidia-mig-manager-a1", "k-1"), mig_manager("nvidia-mig-manager-b2", "k-2"),
            pod("nvidia-device-plugin-c3", "k-1", owner="DaemonSet", ns="gpu-operator")]
    with ApiServer(nodes, pods) as api:
        args = ["--selector", SELECTOR, "--server", api.url] + NO_LIMIT + GPU_OPERATOR
        assert k8s_remediator.main(args) == 0
        out = capsys.readouterr().out
        k = api.nodes
        for name, pod_name in (("k-1", "nvidia-mig-manager-a1"), ("k-2", "nvidia-mig-manager-b2")):
            assert k[name]["spec"]["unschedulable"] is True
            assert k[name]["metadata"]["labels"]["nvidia.com/mig.config.state"] == "pending"
            assert f"{name}: left cordoned: MIG manager pod {pod_name} restarted to re-apply all-1g.18gb" in out
        assert [p["metadata"]["name"] for p in api.pods] == ["nvidia-device-plugin-c3"]
        assert k["k-3"]["spec"]["unschedulable"] is False  # no MIG: released at once, as before

        # the next pass while the new pods work: nothing restarted again, still cordoned
        api.calls.clear()
        assert k8s_remediator.main(args) == 0
        assert "k-1: left cordoned: waiting for the MIG manager to re-apply all-1g.18gb" in capsys.readouterr().out
        assert [c for c in api.calls if c[0] != "GET"] == []

        # the new pods' reconfigure-mig ends: success on k-1, failed on k-2
        k["k-1"]["metadata"]["labels"]["nvidia.com/mig.config.state"] = "success"
        k["k-2"]["metadata"]["labels"]["nvidia.com/mig.config.state"] = "failed"
        assert k8s_remediator.main(args) == 1
        out = capsys.readouterr().out
        assert k["k-1"]["spec"]["unschedulable"] is False
        assert "fleetspec.io/mig-reapply" not in k["k-1"]["metadata"]["annotations"]
        assert "k-1: MIG geometry all-1g.18gb re-applied by the MIG manager" in out and "k-1: uncordoned" in out
        assert k["k-2"]["spec"]["unschedulable"] is True
        assert "k-2: not acted on: the MIG manager failed to re-apply all-1g.18gb" in out


def test_a_mig_node_without_a_mig_manager_stays_cordoned(capsys) -> None:
    n = node("k-1", "False", cordoned=True, annotation="fleetspec-health: drain x")
    n["metadata"]["labels"]["nvidia.com/mig.config"] = "all-balanced"
    with ApiServer([n], []) as api:
        assert k8s_remediator.main(["--selector", SELECTOR, "--server", api.url] + NO_LIMIT + GPU_OPERATOR) == 1
        assert "no nvidia-mig-manager pod (app=nvidia-mig-manager) in namespace gpu-operator" in capsys.readouterr().out
        assert api.nodes["k-1"]["spec"]["unschedulable"] is True
