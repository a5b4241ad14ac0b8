"""Which nodes new to the state already run (#28 item 4): the Kubernetes answer read from
kubectl's JSON (tests/apply/data/kubectl, shapes from the Kubernetes API reference: no API
server runs here), planned as adoption with cordon and drain; nodes adopted because they
answer SSH drain through no scheduler; a saved offline plan never provisions a running
node as new; an offline plan says it did not ask."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from fleetspec.apply.control import OwnedOnly
from fleetspec.apply.membership import (
    Membership,
    MembershipError,
    kubernetes_known,
    live_membership,
    stale_news,
    with_membership,
)
from fleetspec.apply.rollout import ApplyError, Engines, _control_for
from fleetspec.pipeline import compile_file
from fleetspec.plan import make_plan
from fleetspec.plan.model import Action, Disruption

HERE = Path(__file__).resolve().parent
KUBECTL = HERE / "data" / "kubectl"
SPEC = HERE / "specs" / "k8s-adopt.yaml"
NODES, PODS = (KUBECTL / "nodes.json").read_text(), (KUBECTL / "pods.json").read_text()


@pytest.fixture(scope="module")
def fleet():
    return compile_file(SPEC).fleet


def kubectl(argv):
    """kubectl as it answers the two reads, from the fixture files."""
    assert argv[:2] == ["kubectl", "get"], argv
    return subprocess.CompletedProcess(argv, 0, NODES if argv[2] == "nodes" else PODS, "")


def test_the_cluster_s_nodes_are_known_with_their_workload_pods_named():
    found = kubernetes_known(NODES, PODS, ["b200-01", "b200-02", "b200-03"])
    assert found == {
        "b200-01": "Kubernetes has it (2 pod(s) outside DaemonSets: default/debug-shell, research/train-llm-0-7xk2p)",
        "b200-02": "Kubernetes has it (cordoned, no pods outside DaemonSets)",
    }  # DaemonSet, mirror and finished pods do not keep a node busy; cpu-07 is not asked about


@pytest.mark.parametrize("text", ["not json", "[]", '{"kind": "List"}'])
def test_an_answer_that_is_not_a_kubectl_list_is_an_error(text):
    with pytest.raises(MembershipError, match="kubectl get nodes -o json"):
        kubernetes_known(text, PODS, ["b200-01"])


def test_kubernetes_nodes_with_pods_are_adopted_with_cordon_and_drain(fleet, tmp_path):
    overlay = tmp_path / "overlay.yml"  # b200-03 does not answer: connection refused on loopback
    overlay.write_text(yaml.safe_dump({"all": {"hosts": {"b200-03": {
        "ansible_host": "127.0.0.1", "ansible_port": 1, "ansible_user": "nobody"}}}}))
    naive = make_plan(fleet, None, base="no state yet (first apply)")
    assert not naive.waves  # before #28: every node new, nothing cordoned
    found = live_membership(naive, inventory=[overlay], kubectl=kubectl)
    assert found.known.keys() == {"b200-01", "b200-02"} and found.unowned == {}
    plan = with_membership(naive, found)
    nodes = {c.host: c for c in plan.changes if c.host}
    assert nodes["b200-01"].action is Action.UPDATE and nodes["b200-01"].disruption is Disruption.DRAIN
    assert "research/train-llm-0-7xk2p" in nodes["b200-01"].reason
    assert nodes["b200-03"].action is Action.CREATE  # nothing answers for it: new, provisioned first
    assert plan.waves[0].canary and plan.waves[0].hosts == ("b200-01",)
    assert sorted(h for w in plan.waves for h in w.hosts) == ["b200-01", "b200-02"]
    assert "Kubernetes (kubectl get nodes/pods): 2 of 3" in plan.membership
    assert "SSH (the fact collector): 0 of 1" in plan.membership
    assert plan.to_dict()["membership"]["live"] is True


def test_nodes_that_answer_only_ssh_drain_through_no_scheduler(fleet):
    plan = with_membership(make_plan(fleet, None), Membership({}, {"b200-01": "it answers SSH", "b200-02":
                                                                   "it answers SSH"}, ("SSH: 2 of 3",)))
    assert plan.unowned == ("b200-01", "b200-02") and plan.waves[0].canary
    engines = Engines(run_playbook=None, verify=None, slurm=None, kubernetes=None, all_hosts=list)
    control = _control_for(fleet, plan.waves[0], engines, plan.unowned)
    assert isinstance(control, OwnedOnly)  # no kubectl here, and none needed: nothing of Kubernetes runs there
    control.drain(list(plan.waves[0].hosts), "fleetspec: adoption")
    assert control.states(list(plan.waves[0].hosts)) == {}
    assert control.wait_drained(list(plan.waves[0].hosts), 1) == []
    mixed = plan.waves[0].__class__(**{**plan.waves[0].__dict__, "hosts": ("b200-01", "b200-03")})
    with pytest.raises(ApplyError, match="no kubernetes control"):
        _control_for(fleet, mixed, engines, plan.unowned)


def test_a_saved_offline_plan_never_provisions_a_running_node_as_new(fleet):
    offline = make_plan(fleet, None)
    assert stale_news(offline, Membership({}, {}, ())) is None
    why = stale_news(offline, Membership({"b200-02": "Kubernetes has it (cordoned)"}, {}, ()))
    assert why is not None and "provisions b200-[01-03] as new" not in why and "b200-02" in why
    assert "plan --live" in why


def test_an_offline_plan_says_it_did_not_ask(tmp_path):
    from fleetspec.cli import app

    spec = tmp_path / "fleet.yaml"
    spec.write_text(SPEC.read_text())
    text = CliRunner().invoke(app, ["plan", str(spec), "--state", str(tmp_path / "state")])
    assert text.exit_code == 0 and "Live membership not consulted (an offline plan)" in text.output
    data = CliRunner().invoke(app, ["plan", str(spec), "--state", str(tmp_path / "state"), "--format", "json"])
    assert json.loads(data.output)["membership"] == {"live": False}
    markdown = CliRunner().invoke(app, ["plan", str(spec), "--state", str(tmp_path / "state"), "--format",
                                        "markdown"])
    assert "Live membership not consulted" in markdown.output
    clash = CliRunner().invoke(app, ["plan", str(spec), "--live", "--base", str(spec)])
    assert clash.exit_code == 1 and "--live asks which nodes" in clash.output


def test_a_saved_live_plan_keeps_its_adoption_and_membership(fleet, tmp_path):
    from fleetspec.plan.saved import load_saved_plan, save_plan

    plan = with_membership(make_plan(fleet, None), Membership({"b200-01": "Kubernetes has it"},
                                                              {"b200-02": "it answers SSH"}, ("asked",)))
    save_plan(plan, tmp_path / "plan.json")
    again = load_saved_plan(tmp_path / "plan.json")
    assert (again.membership, again.unowned, again.waves) == ("asked", ("b200-02",), plan.waves)
    assert stale_news(again, Membership({}, {"b200-03": "it answers SSH"}, ())) is not None
