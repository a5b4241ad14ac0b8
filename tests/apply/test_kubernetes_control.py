"""apply's Kubernetes node control (cordon + annotate, kubectl drain through the Eviction
API, uncordon), run by ``local_runner`` against the kubectl stand-in of the health tests
(tests/health/kubectl_standin.py: kubectl 1.3x's verbs over a JSON file of Nodes)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from fleetspec.apply.control import DRAIN_REASON, KubernetesControl, local_runner
from fleetspec.node_side import k8s_remediator

STANDIN = Path(__file__).resolve().parents[1] / "health" / "kubectl_standin.py"


def control(tmp_path: Path, nodes: dict) -> tuple[KubernetesControl, Path]:
    bin_dir = tmp_path / "kbin"
    bin_dir.mkdir()
    (bin_dir / "kubectl").symlink_to(STANDIN)
    state = tmp_path / "kube.json"
    state.write_text(json.dumps({"nodes": nodes}))
    env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "KUBE_STANDIN_STATE": str(state)}
    return KubernetesControl(local_runner(env)), state


def test_drain_annotates_the_reason_and_resume_takes_it_away(tmp_path: Path) -> None:
    k8s, state = control(tmp_path, {"k-1": {"pods": [{"name": "trainer-0"}]}, "k-2": {}})
    k8s.drain(["k-1", "k-2"], "fleetspec apply: nvidia-hopper#1")
    nodes = json.loads(state.read_text())["nodes"]
    assert all(nodes[n]["unschedulable"] for n in ("k-1", "k-2"))
    assert nodes["k-1"]["annotations"] == {"fleetspec.io/drain-reason": "fleetspec apply: nvidia-hopper#1"}
    k8s.drain(["k-1"], "fleetspec apply: nvidia-hopper#2")  # --overwrite: a second wave's reason replaces it
    assert json.loads(state.read_text())["nodes"]["k-1"]["annotations"] == {
        "fleetspec.io/drain-reason": "fleetspec apply: nvidia-hopper#2"}
    k8s.resume(["k-1", "k-2"])
    nodes = json.loads(state.read_text())["nodes"]
    assert [(nodes[n]["unschedulable"], nodes[n]["annotations"]) for n in ("k-1", "k-2")] == [(False, {})] * 2


def test_a_pod_budget_keeps_its_node_busy_until_the_deadline(tmp_path: Path) -> None:
    k8s, state = control(tmp_path, {"k-1": {"pods": [{"name": "trainer-0"}]},
                                    "k-2": {"pods": [{"name": "db-0", "pdb_blocked": True}]}})
    told: list[list[str]] = []
    assert k8s.wait_drained(["k-1", "k-2"], deadline_s=90.5, on_busy=told.append) == ["k-2"]
    assert told == [["k-1"], ["k-2"], ["k-2"]]  # the node being drained, then the one left busy
    saved = json.loads(state.read_text())
    assert saved["nodes"]["k-1"]["pods"] == [] and saved["nodes"]["k-2"]["pods"] == [{"name": "db-0", "pdb_blocked": True}]
    drains = [c for c in saved["calls"] if c[0] == "drain"]
    assert drains == [["drain", n, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=90s"] for n in ("k-1", "k-2")]


def test_apply_and_both_remediators_read_one_annotation() -> None:
    """health --remediate drains through KubernetesControl and reads the annotation back to
    tell its own cordons from an operator's; the in-cluster remediator ships apart (stdlib modules in a
    ConfigMap), so it keeps its own copy, which must name the key apply and remediate use."""
    assert DRAIN_REASON == k8s_remediator.ANNOTATION == "fleetspec.io/drain-reason"  # remediate uses DRAIN_REASON itself


def test_a_cordon_apply_did_not_make_is_held_with_its_reason(tmp_path: Path) -> None:
    """The remediator's cordon (annotated fleetspec-health: ...) and an operator's bare cordon
    are someone else's; apply's own ('fleetspec: ...') and a schedulable node are not."""
    from fleetspec.apply.control import foreign_drains

    k8s, _ = control(tmp_path, {
        "k-1": {"unschedulable": True, "annotations": {DRAIN_REASON: "fleetspec-health: drain gpu-lost: node"}},
        "k-2": {"unschedulable": True},
        "k-3": {"unschedulable": True, "annotations": {DRAIN_REASON: "fleetspec: NCCL 2.28.3 -> 2.28.9"}},
        "k-4": {}})
    assert foreign_drains(k8s.states(["k-1", "k-2", "k-3", "k-4"])) == {
        "k-1": "fleetspec-health: drain gpu-lost: node", "k-2": f"cordoned, no {DRAIN_REASON}"}
