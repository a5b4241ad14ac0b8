"""A node that answers SSH is not new (#28 item 4): with an empty state, a node of the
spec that neither Slurm nor Kubernetes has but that answers over the inventory's connection
(a standalone node, one not yet joined) is planned as an adoption, in waves with a canary,
drained through no scheduler; a node that does not answer stays "new, provisioned before it
takes jobs". Against real lab hosts over real SSH, with verify's fact collector."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from fleetspec.lab import Lab
from fleetspec.pipeline import compile_file
from fleetspec.plan import make_plan
from fleetspec.plan.model import Action, Disruption

pytestmark = pytest.mark.lab

SPEC = Path(__file__).resolve().parents[1] / "apply" / "specs" / "k8s-adopt.yaml"
EMPTY_LIST = '{"apiVersion": "v1", "items": [], "kind": "List", "metadata": {"resourceVersion": ""}}'


@pytest.fixture
def overlay(lab: Lab, tmp_path: Path) -> Path:
    """b200-01 and b200-02 are the lab's two hosts; b200-03 refuses (loopback, port 1)."""
    hosts = dict(zip(["b200-01", "b200-02"], sorted(lab.ansible_vars().values(), key=str), strict=True))
    hosts["b200-03"] = {"ansible_host": "127.0.0.1", "ansible_port": 1, "ansible_user": "nobody"}
    path = tmp_path / "overlay.yml"
    path.write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    return path


def no_nodes(argv):
    """A cluster that does not have these nodes (kubectl's empty list)."""
    return subprocess.CompletedProcess(argv, 0, EMPTY_LIST, "")


def test_nodes_that_answer_ssh_are_adopted_and_the_silent_one_stays_new(overlay: Path) -> None:
    from fleetspec.apply.membership import live_membership, with_membership

    naive = make_plan(compile_file(SPEC).fleet, None, base="no state yet (first apply)")
    assert not naive.waves  # before #28: all new, no canary
    found = live_membership(naive, inventory=[overlay], kubectl=no_nodes)
    assert sorted(found.unowned) == ["b200-01", "b200-02"] and found.known == {}
    assert all(why.startswith("it answers SSH (the fact collector ran there") for why in found.unowned.values())
    plan = with_membership(naive, found)
    nodes = {c.host: c for c in plan.changes if c.host}
    assert [nodes[h].action for h in ("b200-01", "b200-02", "b200-03")] == [Action.UPDATE, Action.UPDATE,
                                                                          Action.CREATE]
    assert nodes["b200-01"].disruption is Disruption.DRAIN and "adoption" in nodes["b200-01"].reason
    assert plan.waves[0].canary and plan.waves[0].hosts == ("b200-01",)
    assert plan.unowned == ("b200-01", "b200-02")
    assert "SSH (the fact collector): 2 of 3" in plan.membership


def test_plan_live_over_ssh_says_what_it_asked(overlay: Path, tmp_path: Path, monkeypatch) -> None:
    from fleetspec.cli import app

    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-cluster"))  # kubectl, where installed, reaches none
    result = CliRunner().invoke(app, ["plan", str(SPEC), "--state", str(tmp_path / "state"), "--live",
                                      "-i", str(overlay)])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert ("Live membership consulted: Kubernetes: not asked (kubectl is not on PATH here)" in text
            or "Live membership consulted: Kubernetes: could not be asked" in text)
    assert "b200-[01-02] answer SSH but no scheduler has them" in text
