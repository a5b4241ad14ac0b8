"""The plan speaks for the Kubernetes layer: prerequisites fleetspec cannot apply, and
Pulumi's preview (or one line saying why it cannot run here)."""

import json
import shutil

from typer.testing import CliRunner

from fleetspec.cli import app
from fleetspec.pipeline import compile_file, compile_text
from fleetspec.plan import make_plan
from fleetspec.plan.kubernetes_layer import kubernetes_notes
from tests.conftest import EXAMPLES

MUSEUM = (EXAMPLES / "museum.yaml").read_text()


def workload_api_fleet():
    text = (MUSEUM.replace('version: "1.36"', 'version: "1.37"').replace("gang: kueue", "gang: workload-api")
            .replace("    gpu_operator: {version: v26.7.0, driver: operator}\n", ""))
    result = compile_text(text, "wl.yaml")
    assert result.valid, [(f.rule, f.message) for f in result.located()]
    return result.fleet


def test_feature_gate_prerequisite_and_preview_are_in_the_plan(tmp_path):
    plan = make_plan(workload_api_fleet(), None)
    calls = []
    notes = kubernetes_notes(plan, tmp_path, preview=lambda d: calls.append(d) or {"available": True, "summary": "+ 12"})
    gate = next(p for p in notes["prerequisites"] if p["id"] == "feature-gate-GenericWorkload")
    assert gate["feature_gates"] == ["GenericWorkload=true"]
    assert gate["components"] == ["kube-apiserver", "kube-controller-manager", "kube-scheduler"]
    assert calls == [tmp_path] and notes["preview"]["summary"] == "+ 12"


def test_no_kubernetes_layer_no_notes():
    plan = make_plan(compile_file(EXAMPLES / "quickstart.yaml").fleet, None)
    assert kubernetes_notes(plan, None) is None


def test_without_the_pulumi_cli_the_plan_says_so_in_one_line(tmp_path):
    assert shutil.which("pulumi") is None  # the test machines have no pulumi CLI
    spec = tmp_path / "museum.yaml"
    spec.write_text(MUSEUM)
    result = CliRunner().invoke(app, ["plan", str(spec), "--format", "json", "--detailed-exitcode"])
    assert result.exit_code == 2
    preview = json.loads(result.stdout)["kubernetes"]["preview"]
    assert preview["available"] is False and "pulumi CLI not found on PATH" in preview["summary"]
    text = CliRunner().invoke(app, ["plan", str(spec)])
    lines = [line for line in text.stdout.splitlines() if "Pulumi preview" in line]
    assert len(lines) == 1 and "not found on PATH" in lines[0]
