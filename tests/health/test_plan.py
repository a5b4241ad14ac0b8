"""plan --health: quarantined nodes are shown and never picked as canaries."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fleetspec.cli import app
from fleetspec.pipeline import compile_file
from fleetspec.plan import make_plan
from tests.conftest import EXAMPLES


def _fleets(tmp_path: Path):
    old = EXAMPLES / "quickstart.yaml"
    new = tmp_path / "new.yaml"
    new.write_text(old.read_text().replace('nccl: "2.28.3"', 'nccl: "2.28.9"'))
    return old, new


def test_quarantined_node_is_never_the_canary(tmp_path) -> None:
    old, new = _fleets(tmp_path)
    new_fleet, old_fleet = compile_file(new).fleet, compile_file(old).fleet
    plain = make_plan(new_fleet, old_fleet)
    canary = next(w for w in plain.waves if w.canary).hosts[0]
    plan = make_plan(new_fleet, old_fleet, quarantined={canary: "drain-reboot gpu-lost"})
    waves = [w for w in plan.waves if w.partition == next(w for w in plain.waves if w.canary).partition]
    assert waves[0].canary and canary not in waves[0].hosts
    assert canary in waves[-1].hosts  # its wave comes last
    assert plan.to_dict()["quarantined"] == [{"node": canary, "why": "drain-reboot gpu-lost"}]
    assert sorted(h for w in plan.waves for h in w.hosts) == sorted(h for w in plain.waves for h in w.hosts)


def test_plan_cli_reads_a_health_report(tmp_path) -> None:
    old, new = _fleets(tmp_path)
    report = tmp_path / "health.json"
    report.write_text(json.dumps({"fleet": "quickstart", "healthy": False, "quarantined": ["h100-001"], "nodes": [
        {"node": "h100-001", "status": "sick", "action": "drain-reboot", "errors": [],
         "faults": [{"class": "gpu-lost", "action": "drain-reboot", "device": "0000:18:00", "detail": "Xid 79"}]},
        {"node": "h100-002", "status": "healthy", "action": "none", "faults": [], "errors": []}]}))
    runner = CliRunner()
    text = runner.invoke(app, ["plan", str(new), "--base", str(old), "--health", str(report)])
    assert text.exit_code == 0, text.output
    assert "Quarantined by the health check" in text.output and "h100-001 (drain-reboot gpu-lost)" in text.output
    data = json.loads(runner.invoke(app, ["plan", str(new), "--base", str(old), "--health", str(report),
                                          "--format", "json"]).output)
    canaries = [w for w in data["waves"] if w["canary"]]
    assert canaries and all("h100-001" not in w["hosts"] for w in canaries)
    bad = tmp_path / "bad.json"
    bad.write_text("[]")
    broken = runner.invoke(app, ["plan", str(new), "--base", str(old), "--health", str(bad)])
    assert broken.exit_code == 1 and "not a 'fleetspec health --format json' report" in broken.output


@pytest.mark.parametrize("nodes", [
    [1],
    [{"node": ["h100-001"], "action": "drain"}],
    [{"node": "h100-001", "action": "drain", "faults": "x"}],
    [{"node": "h100-001", "action": "drain", "faults": [1]}],
    [{"node": "h100-001", "action": {"a": 1}}],
])
def test_a_health_report_of_the_wrong_shape_is_an_error_not_a_traceback(tmp_path, nodes) -> None:
    old, new = _fleets(tmp_path)
    report = tmp_path / "health.json"
    report.write_text(json.dumps({"nodes": nodes}))
    result = CliRunner().invoke(app, ["plan", str(new), "--base", str(old), "--health", str(report)])
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.exception
    assert "not a 'fleetspec health --format json' report (nodes[0] is not a node row" in result.output
    report.write_text("[" * 200_000)
    deep = CliRunner().invoke(app, ["plan", str(new), "--base", str(old), "--health", str(report)])
    assert deep.exit_code == 1 and "nested too deeply" in deep.output, deep.output


POLICY = "  health: {interval: 60, checks: [kernel-log, gpu-memory]}\n"


def _policy_specs(tmp_path: Path, new_policy: str, nccl: str = "2.28.3") -> tuple[Path, Path]:
    from tests.apply.harness import V1

    old, new = tmp_path / "old.yaml", tmp_path / "new.yaml"
    old.write_text(V1.read_text() + POLICY)
    new.write_text(V1.read_text().replace('nccl: "2.28.3"', f'nccl: "{nccl}"') + new_policy)
    return old, new


def test_a_health_policy_change_is_planned_in_waves_with_a_canary_and_no_drain(tmp_path) -> None:
    """#26 item 4: a new policy reaches Slurm nodes in waves, canary first, class 'rolling'
    (no drain), with the waves' parallel and after in JSON and the reason in the text."""
    old, new = _policy_specs(tmp_path, POLICY.replace("}", ", actions: {xid-application: drain}}"))
    runner = CliRunner()
    data = json.loads(runner.invoke(app, ["plan", str(new), "--base", str(old), "--format", "json",
                                          "--max-unavailable", "2"]).output)
    nodes = [c for c in data["changes"] if c["target"].startswith("node:")]
    assert [c["disruption"] for c in nodes] == ["rolling"] * 4
    assert "health policy change: actions xid-application none -> drain" in nodes[0]["reason"]
    assert [(w["id"], w["canary"], w["disruption"], w["hosts"], w["parallel"], w["after"]) for w in data["waves"]] == [
        ("nvidia-hopper#1", True, "rolling", ["h200-001"], 1, []),
        ("nvidia-hopper#2", False, "rolling", ["h200-002"], 1, ["nvidia-hopper#1"]),
        ("nvidia-hopper#3", False, "rolling", ["h200-003", "h200-004"], 2, ["nvidia-hopper#2"])]
    text = runner.invoke(app, ["plan", str(new), "--base", str(old), "--max-unavailable", "2"])
    assert text.exit_code == 0 and "most disruptive: rolling" in text.output, text.output
    same = runner.invoke(app, ["plan", str(old), "--base", str(old)])
    assert "No changes" in same.output


def test_a_policy_change_beside_a_package_change_keeps_the_drain(tmp_path) -> None:
    """A node with an NCCL bump and a new policy is drained (the worse class); turning the
    policy on for the first time is a rolling change too; removing it is none."""
    from fleetspec.plan.model import Disruption
    from tests.apply.harness import V1

    old, new = _policy_specs(tmp_path, POLICY.replace("60", "120"), nccl="2.28.9")
    plan = make_plan(compile_file(new).fleet, compile_file(old).fleet)
    assert {c.disruption for c in plan.changes if c.host} == {Disruption.DRAIN}
    assert all("health policy change: interval 60 -> 120" in c.reason for c in plan.changes if c.host)
    first = make_plan(compile_file(old).fleet, compile_file(V1).fleet)
    assert {c.disruption for c in first.changes if c.host} == {Disruption.ROLLING}
    assert "health policy installed" in next(c.reason for c in first.changes if c.host)
    gone = make_plan(compile_file(V1).fleet, compile_file(old).fleet)
    assert not [c for c in gone.changes if c.host] and not gone.waves
