"""``fleetspec verify --local`` is also the node check: one program, one exit code.

With ``spec.health`` the local report gains a ``health`` check computed by the node check
itself (the same code Slurm and node-problem-detector run), read from a stand-in node root
(``--root``, with stand-in nvidia-smi on PATH) and without consuming the check's state.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fleetspec.node_side import node_check
from fleetspec.pipeline import compile_text
from fleetspec.render.health import node_config
from fleetspec.verify.compare import compare
from fleetspec.verify.health import health_check, with_check
from tests.verify.h200_facts import h200_facts

from .nodes import make_node

SPEC = (Path(__file__).parents[1] / "verify" / "specs" / "h200.yaml").read_text()
HEALTHY_SPEC = SPEC + "  health: {interval: 60}\n"


@pytest.fixture
def spec(tmp_path: Path) -> Path:
    path = tmp_path / "fleet.yaml"
    path.write_text(HEALTHY_SPEC)
    return path


def local(spec: Path, root: Path, monkeypatch, *extra: str):
    from fleetspec.cli import app

    monkeypatch.setenv("PATH", f"{root / 'bin'}{os.pathsep}{os.environ['PATH']}")
    result = CliRunner().invoke(app, ["verify", str(spec), "--local", "--as", "h200-001", "--root", str(root),
                                      "--format", "json", *extra])
    doc = json.loads(result.stdout) if result.stdout.startswith("{") else None
    return result, doc


def health_of(doc: dict) -> dict:
    (node,) = doc["nodes"]
    checks = {c["component"]: c for c in node["checks"]}
    assert list(checks)[-1] == "health"  # the tuple's checks first, the verdict last
    return checks["health"]


def test_a_sick_node_is_drift_with_the_drain_reason(spec, tmp_path, monkeypatch) -> None:
    root = make_node(tmp_path / "node", kmsg="kmsg-xids.txt")
    result, doc = local(spec, root, monkeypatch)
    assert result.exit_code == 1, result.stderr
    health = health_of(doc)
    assert (health["status"], health["expected"], health["found"]) == ("drift", "healthy", "sick")
    assert health["message"].startswith("sick: replace row-remap-failure: 0000:5d:00 Xid 64: ")
    result, _ = local(spec, root, monkeypatch, "--detailed-exitcode")
    assert result.exit_code == 2  # sick is drift: 2 under --detailed-exitcode, as for a drifted tuple


def test_a_healthy_node_is_ok(spec, tmp_path, monkeypatch) -> None:
    root = make_node(tmp_path / "node")
    _, doc = local(spec, root, monkeypatch)
    health = health_of(doc)
    assert (health["status"], health["found"], health["message"]) == ("ok", "healthy", "no fault found")


def test_no_health_policy_no_health_check(tmp_path, monkeypatch) -> None:
    spec = tmp_path / "fleet.yaml"
    spec.write_text(SPEC)
    root = make_node(tmp_path / "node", kmsg="kmsg-xids.txt")
    _, doc = local(spec, root, monkeypatch)
    assert "health" not in {c["component"] for c in doc["nodes"][0]["checks"]}


def test_root_goes_with_local(spec, tmp_path) -> None:
    from fleetspec.cli import app

    result = CliRunner().invoke(app, ["verify", str(spec), "--facts", str(tmp_path), "--root", str(tmp_path)])
    assert result.exit_code == 64 and "--root goes with --local" in result.stderr


def test_the_verdict_decides_the_exit_code_of_a_conforming_tuple() -> None:
    """On the fixture H200's facts the tuple conforms (warnings only): health alone decides."""
    fleet = compile_text(HEALTHY_SPEC).fleet
    report = compare(fleet, {"h200-001": h200_facts()}, hosts=["h200-001"])
    assert report.conforms
    fault = {"class": "gpu-lost", "scope": "node", "device": "0000:18:00.0", "detail": "Xid 79", "source": "kmsg",
             "action": "drain-reboot"}
    sick = {"node": "h200-001", "status": "sick", "action": "drain-reboot", "faults": [fault], "errors": []}
    degraded = dict(sick, status="degraded", action="none", faults=[dict(fault, **{"class": "application-xid",
                                                                                  "action": "none"})])
    assert not with_check(report, "h200-001", health_check(sick)).conforms
    grown = with_check(report, "h200-001", health_check(degraded))
    assert grown.conforms and grown.nodes[0].checks[-1].status.value == "warning"
    assert grown.partitions[0].nodes[0].checks[-1].component == "health"


def test_verify_local_does_not_consume_the_checks_state(spec, tmp_path, monkeypatch, capsys) -> None:
    """An IB counter jump seen by verify --local is still seen by the scheduled check after it."""
    root = make_node(tmp_path / "node")
    config = tmp_path / "health.json"
    config.write_text(json.dumps(node_config(compile_text(HEALTHY_SPEC).fleet)))
    monkeypatch.setenv("PATH", f"{root / 'bin'}{os.pathsep}{os.environ['PATH']}")
    args = ["--config", str(config), "--root", str(root), "--node", "h200-001", "--format", "json"]
    assert node_check.main(args) == 0  # the scheduled check records the counters
    capsys.readouterr()
    make_node(root, link_downed=3)
    _, doc = local(spec, root, monkeypatch)
    assert health_of(doc)["status"] == "drift" and "link" in health_of(doc)["message"]
    assert node_check.main(args) == 1  # ... and the check still sees the jump
    assert json.loads(capsys.readouterr().out)["faults"][0]["device"] == "mlx5_0/1"


def test_a_check_that_fails_itself_is_one_line_and_fails_the_node(spec, tmp_path, monkeypatch) -> None:
    """A bug in the node check (or tool output no parser expected) under `verify --local`: no
    traceback, the health check is drift with found `unknown` and one line naming the exception
    and the line it came from; the exit fails, so a Slurm health check still sees it."""
    from fleetspec.cli import app

    def broken(*args, **kwargs):
        return {}["links"]  # a parser's KeyError

    monkeypatch.setattr(node_check, "gpu_faults", broken)
    root = make_node(tmp_path / "node", kmsg="kmsg-healthy.txt")
    result, doc = local(spec, root, monkeypatch)
    assert result.exit_code == 1 and isinstance(result.exception, (SystemExit, type(None))), result.exception
    health = health_of(doc)
    line = broken.__code__.co_firstlineno + 1
    assert (health["status"], health["found"]) == ("drift", "unknown")
    assert health["message"] == f"unknown: the check failed: KeyError: 'links' (test_verify_local.py:{line})"
    assert local(spec, root, monkeypatch, "--detailed-exitcode")[0].exit_code == 2
    monkeypatch.setenv("PATH", f"{root / 'bin'}{os.pathsep}{os.environ['PATH']}")
    text = CliRunner().invoke(app, ["verify", str(spec), "--local", "--as", "h200-001", "--root", str(root)])
    assert text.exit_code == 1 and "Traceback" not in text.output, text.output
    assert "unknown: the check failed: KeyError:" in " ".join(text.output.split()), text.output
