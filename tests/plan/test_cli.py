"""`fleetspec plan` through Typer's CliRunner: exit codes, --base, state, saved plans."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fleetspec.cli import app
from fleetspec.compile.ir import Fleet
from fleetspec.plan.saved import SavedPlanError, check_plan_current, load_saved_plan
from fleetspec.state import STATE_DIR_ENV, STATE_ENV, StateStore
from tests.plan.conftest import QUICKSTART, SPECS, compiled, variant


def run(*args: str, env: dict[str, str] | None = None, detailed: bool = True):
    """``fleetspec plan`` with ``--detailed-exitcode`` (0 no changes, 2 changes) unless told otherwise."""
    extra = ["--detailed-exitcode"] if detailed else []
    return CliRunner().invoke(app, ["plan", *map(str, args), *extra], env=env)


def test_plan_exits_0_with_changes_unless_asked_for_the_detailed_code() -> None:
    changed = run(SPECS / "driver-bump.yaml", "--base", QUICKSTART, detailed=False)
    assert changed.exit_code == 0 and "drain-reboot" in changed.output  # like terraform plan
    assert run(SPECS / "driver-bump.yaml", "--base", QUICKSTART).exit_code == 2
    assert run(QUICKSTART, "--base", QUICKSTART).exit_code == 0
    broken = run(SPECS / "driver-bump.yaml", "--base", QUICKSTART, "--max-unavailable", "0", detailed=False)
    assert broken.exit_code == 64  # a usage error, never a result's code


def test_state_that_is_a_file_is_a_clear_error(spec: Path, quickstart: Fleet) -> None:
    store = applied(spec, quickstart)
    result = run(spec, "--state", store.path)
    assert result.exit_code == 1
    assert "is a file: --state takes the state directory" in result.output
    assert "Not a directory" not in result.output


def test_limited_plan_says_what_it_leaves_out(spec: Path) -> None:
    result = run(spec, "--limit", "h100-[001-002]")
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())
    assert "Restricted to --limit h100-[001-002]: 6 node(s) with changes are skipped: h100-[003-008]" in text
    data = json.loads(run(spec, "--limit", "h100-[001-002]", "--format", "json").stdout)
    assert data["restriction"] == "--limit h100-[001-002]"
    assert data["skipped"] == [f"h100-00{i}" for i in range(3, 9)]
    assert run(spec, "--limit", "h100-[002-001]").exit_code == 64  # a bad hostlist option: a usage error


@pytest.fixture
def spec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """quickstart.yaml in its own directory, so .fleetspec/ lands beside it."""
    monkeypatch.delenv(STATE_DIR_ENV, raising=False)
    monkeypatch.delenv(STATE_ENV, raising=False)
    target = tmp_path / "fleet.yaml"
    shutil.copy(QUICKSTART, target)
    return target


def applied(spec: Path, fleet: Fleet, directory: Path | None = None) -> StateStore:
    store = StateStore(directory or spec.parent / ".fleetspec", fleet.name)
    with store.lock("test apply"):
        store.record_applied(fleet, "applied by the test")
    return store


def test_base_plan_explains_a_tuple_bump() -> None:
    result = run(SPECS / "driver-bump.yaml", "--base", QUICKSTART)
    assert result.exit_code == 2, result.output
    assert "driver 580.95.05 -> 580.126.09: kernel module change, node must drain and reboot" in result.output
    assert "node:h100-[001-008]" in result.output and "(canary)" in result.output


def test_base_plan_without_changes_exits_0() -> None:
    result = run(QUICKSTART, "--base", QUICKSTART)
    assert result.exit_code == 0, result.output
    assert "No changes" in result.output


def test_base_plan_json() -> None:
    result = run(SPECS / "maxtime.yaml", "--base", QUICKSTART, "--format", "json")
    assert result.exit_code == 2
    data = json.loads(result.stdout)
    assert data["state_serial"] is None and data["base"] == f"spec {QUICKSTART}"
    assert {c["target"]: c["disruption"] for c in data["changes"]} == {
        "partition:nvidia-hopper": "reconfigure", "slurm:slurm.conf": "reconfigure"}
    assert data["summary"]["max_disruption"] == "reconfigure" and data["waves"] == []


def test_invalid_spec_exits_1(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text(QUICKSTART.read_text().replace("model: h100-sxm", "model: no-such-gpu"))
    result = run(broken, "--base", QUICKSTART)
    assert result.exit_code == 1
    assert "has errors" in result.output


def test_bad_max_unavailable_is_a_usage_error() -> None:
    result = run(QUICKSTART, "--base", QUICKSTART, "--max-unavailable", "0%")
    assert result.exit_code == 64 and "--max-unavailable" in result.output


def test_plan_against_state_beside_the_spec(spec: Path, quickstart: Fleet) -> None:
    first = run(spec, "--format", "json")
    assert first.exit_code == 2
    assert json.loads(first.stdout)["base"] == "no state yet (first apply)"
    applied(spec, quickstart)
    assert run(spec).exit_code == 0  # idempotence: applied, nothing left to plan
    spec.write_text((SPECS / "nccl-bump.yaml").read_text())
    result = run(spec, "--format", "json")
    assert result.exit_code == 2
    data = json.loads(result.stdout)
    assert data["state_serial"] == 1 and data["lineage"] == StateStore(spec.parent / ".fleetspec", "quickstart"
                                                                       ).read().lineage
    assert data["summary"]["nodes"] == {"drain": 8}


def test_state_from_the_environment_and_the_option(spec: Path, quickstart: Fleet, tmp_path: Path) -> None:
    applied(spec, quickstart, tmp_path / "elsewhere")
    assert run(spec, env={STATE_DIR_ENV: str(tmp_path / "elsewhere")}).exit_code == 0
    assert run(spec, env={STATE_ENV: (tmp_path / "elsewhere").as_uri()}).exit_code == 0  # file:// URL
    assert run(spec, "--state", tmp_path / "elsewhere").exit_code == 0
    assert run(spec, "--state", f"file://{tmp_path / 'elsewhere'}").exit_code == 0
    assert run(spec).exit_code == 2  # .fleetspec/ beside the spec is still empty


def test_corrupt_state_exits_1_and_is_left_alone(spec: Path, quickstart: Fleet) -> None:
    store = applied(spec, quickstart)
    store.path.write_text('{"format_version": 1, "fle')
    result = run(spec)
    assert result.exit_code == 1 and "corrupted or truncated" in result.output
    assert store.path.read_text() == '{"format_version": 1, "fle'


def test_partial_apply_plans_what_is_left(spec: Path, quickstart: Fleet) -> None:
    store = applied(spec, quickstart)
    bumped = variant("driver-bump")
    with store.lock("apply"):
        store.record_wave(bumped, ["h100-001", "h100-002", "h100-003"], "wave 1")
    spec.write_text((SPECS / "driver-bump.yaml").read_text())
    data = json.loads(run(spec, "--format", "json").stdout)
    left = sorted(c["target"] for c in data["changes"] if c["target"].startswith("node:"))
    assert left == [f"node:h100-00{i}" for i in range(4, 9)]
    with store.lock("apply"):
        store.record_wave(bumped, [f"h100-00{i}" for i in range(4, 9)], "wave 2")
    assert run(spec).exit_code == 2  # nodes done; the stack's group_vars are not recorded as applied yet
    with store.lock("apply"):
        store.record_applied(bumped, "done")
    assert run(spec).exit_code == 0


def test_saved_plan_round_trip_and_staleness(spec: Path, quickstart: Fleet, tmp_path: Path) -> None:
    store = applied(spec, quickstart)
    spec.write_text((SPECS / "driver-bump.yaml").read_text())
    out = tmp_path / "plan.json"
    result = run(spec, "--out", out)
    assert result.exit_code == 2 and "serial 1" in result.output
    saved = load_saved_plan(out)
    assert saved.fleet == compiled(SPECS / "driver-bump.yaml") and saved.state_serial == 1
    assert len(saved.changes) == 9 and saved.waves
    assert saved.to_dict() == json.loads(run(spec, "--format", "json").stdout)
    check_plan_current(saved, store)  # current: no error
    with store.lock("someone else's apply"):
        store.record_wave(quickstart, ["h100-001"], "another apply")
    with pytest.raises(SavedPlanError, match="serial 1 -> 2"):
        check_plan_current(saved, store)


def test_saved_plan_refused_after_the_state_was_replaced(spec: Path, quickstart: Fleet, tmp_path: Path) -> None:
    store = applied(spec, quickstart)
    out = tmp_path / "plan.json"
    run(spec, "--out", out)
    store.path.unlink()
    store.backup_path.unlink(missing_ok=True)
    applied(spec, quickstart)  # a fresh state: serial 1 again, new lineage
    with pytest.raises(SavedPlanError, match="lineage"):
        check_plan_current(load_saved_plan(out), store)


def test_base_plans_and_tampered_plans_are_refused(spec: Path, quickstart: Fleet, tmp_path: Path) -> None:
    store = applied(spec, quickstart)
    out = tmp_path / "base-plan.json"
    run(SPECS / "driver-bump.yaml", "--base", QUICKSTART, "--out", out)
    with pytest.raises(SavedPlanError, match="--base"):
        check_plan_current(load_saved_plan(out), store)
    data = json.loads(out.read_text())
    data["ir"]["stacks"][0]["driver"] = "999.1.1"
    out.write_text(json.dumps(data))
    with pytest.raises(SavedPlanError, match="spec_digest"):
        load_saved_plan(out)
    out.write_text("{}")
    with pytest.raises(SavedPlanError, match="not a saved plan"):
        load_saved_plan(out)
