"""#30 item 2: the plan says which engine rolls each wave, and why a wave falls back to SSH;
apply follows the same rule (plan/engines.py), a saved plan keeps the engine it was
reviewed with."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from typer.testing import CliRunner

from fleetspec.cli import app
from fleetspec.exit_codes import USAGE
from fleetspec.pipeline import compile_file
from fleetspec.plan import make_plan
from fleetspec.plan.engines import wave_engines
from fleetspec.plan.model import Wave
from fleetspec.plan.schedule import with_rollout_figures
from tests.conftest import EXAMPLES

SPECS = Path(__file__).resolve().parents[1] / "apply" / "specs"
V1, NCCL, DRIVER = SPECS / "multi-v1.yaml", SPECS / "multi-v2.yaml", SPECS / "multi-v3.yaml"


def _plan_json(*args: str) -> dict:
    result = CliRunner().invoke(app, ["plan", *args, "--format", "json", "--max-unavailable", "2"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_plan_json_and_text_show_each_waves_engine() -> None:
    nccl = _plan_json(str(NCCL), "--base", str(V1), "--engine", "slurm-native")
    assert nccl["settings"]["engine"] == "slurm-native"
    assert {(w["engine"], w["method"]) for w in nccl["waves"]} == {("slurm-native", "in-place")}
    assert all("no reboot needed" in w["why"] for w in nccl["waves"])
    driver = _plan_json(str(DRIVER), "--base", str(V1), "--engine", "slurm-native")
    assert {(w["engine"], w["method"]) for w in driver["waves"]} == {("slurm-native", "reboot")}
    assert all("scontrol reboot ASAP nextstate=RESUME" in w["why"] for w in driver["waves"])
    default = _plan_json(str(NCCL), "--base", str(V1))
    assert default["settings"]["engine"] == "ssh"
    assert {(w["engine"], w["method"]) for w in default["waves"]} == {("ssh", None)}
    text = CliRunner().invoke(app, ["plan", str(NCCL), "--base", str(V1), "--engine", "slurm-native",
                                    "--max-unavailable", "2"], env={"COLUMNS": "200"})
    assert text.exit_code == 0, text.output
    assert "slurm-native (in-place)" in text.output and "Engine (apply --engine slurm-native):" in text.output
    bad = CliRunner().invoke(app, ["plan", str(NCCL), "--base", str(V1), "--engine", "ansible"])
    assert bad.exit_code == USAGE


def test_a_rolling_health_policy_wave_falls_back_to_ssh(tmp_path) -> None:
    from tests.health.test_plan import POLICY, _policy_specs

    old, new = _policy_specs(tmp_path, POLICY.replace("}", ", actions: {xid-application: drain}}"))
    data = _plan_json(str(new), "--base", str(old), "--engine", "slurm-native")
    assert data["waves"] and all(w["engine"] == "ssh" for w in data["waves"])
    assert all(w["why"].startswith("falls back to SSH: a rolling health-policy change") for w in data["waves"])


def test_adopted_cpu_only_and_replaced_nodes_fall_back_to_ssh() -> None:
    plan = make_plan(compile_file(NCCL).fleet, compile_file(V1).fleet, max_unavailable=2)
    canary = plan.waves[0]
    adopted = wave_engines(dataclasses.replace(plan, unowned=(canary.hosts[0],)), "slurm-native")
    assert adopted[(canary.partition, canary.index)].engine == "ssh"
    assert "Slurm does not have them" in adopted[(canary.partition, canary.index)].why
    others = [w for w in plan.waves if w is not canary]
    assert all(adopted[(w.partition, w.index)].native for w in others)  # only that wave falls back
    # A wave holding a host that is no GPU node of the new fleet (a CPU-only node).
    cpu = Wave(canary.partition, 99, False, ("login-01",), (), canary.disruption)
    with_cpu = dataclasses.replace(plan, waves=(*plan.waves, cpu))
    why = wave_engines(with_cpu, "slurm-native")[(cpu.partition, 99)]
    assert why.engine == "ssh" and "CPU-only" in why.why
    swapped = compile_file(NCCL).fleet
    gpu_swap = make_plan(dataclasses.replace(swapped, nodes=tuple(
        dataclasses.replace(n, gpu=dataclasses.replace(n.gpu, count=2)) for n in swapped.nodes)),
        compile_file(V1).fleet, max_unavailable=2)
    assert {r.engine for r in wave_engines(gpu_swap, "slurm-native").values()} == {"ssh"}


def test_kubernetes_pools_with_an_operator_driver_show_the_gpu_operator(tmp_path) -> None:
    old = EXAMPLES / "museum.yaml"
    new = tmp_path / "museum.yaml"
    new.write_text(old.read_text().replace('driver: "580.173.02"', 'driver: "595.91.07"'))
    plan = make_plan(compile_file(new).fleet, compile_file(old).fleet)
    routes = wave_engines(with_rollout_figures(plan, engine="slurm-native"))
    k8s = [w for w in plan.waves if plan.fleet.partition(w.partition).scheduler == "kubernetes"]
    assert k8s and all(routes[(w.partition, w.index)].engine == "gpu-operator" for w in k8s)
    assert "upgrade controller rolls the driver" in routes[(k8s[0].partition, k8s[0].index)].why


def test_a_saved_plan_keeps_its_engine(tmp_path) -> None:
    saved = tmp_path / "plan.json"
    runner = CliRunner()
    made = runner.invoke(app, ["plan", str(NCCL), "--base", str(V1), "--engine", "slurm-native", "--out", str(saved)])
    assert made.exit_code == 0, made.output
    assert json.loads(saved.read_text())["settings"]["engine"] == "slurm-native"
    other = runner.invoke(app, ["apply", str(saved), "--engine", "ssh", "--yes"])
    assert other.exit_code == USAGE and "made for --engine slurm-native" in other.output, other.output
    missing = runner.invoke(app, ["apply", str(saved), "--yes"])
    assert missing.exit_code == USAGE and "needs --bundle-key" in missing.output, missing.output
