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
