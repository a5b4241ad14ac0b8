"""The rollout's schedule (issue #30 items 1 and 6): canaries first, independent
partitions side by side within their own budgets, and a modelled duration that says
what it assumed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fleetspec.cli import app
from fleetspec.compile.ir import Fleet
from fleetspec.plan import make_plan
from fleetspec.plan.schedule import parse_batch_minutes, parse_forks, schedule, with_rollout_figures
from fleetspec.plan.waves import budget
from tests.plan.conftest import ROOT, compiled_text, shared_lane_plan, shared_lane_spec, variant


@pytest.fixture(scope="module")
def bump_20k(fleets_20k):
    old, new = fleets_20k
    return new, make_plan(new, old)


def assert_budgets_hold(plan, fleet: Fleet) -> None:
    """At every modelled instant, no partition has more nodes out than its max_unavailable."""
    sched = plan.schedule
    for partition, out in sched.peak_out(fleet).items():
        size = len(fleet.partition(partition).nodes)
        assert out <= budget(plan.settings["max_unavailable"], size), (partition, out, size)


@pytest.mark.parametrize("forks", [None, 500])
def test_a_20000_node_driver_bump_fits_one_maintenance_night(bump_20k, forks) -> None:
    new, plan = bump_20k
    plan = with_rollout_figures(plan, 12.75, forks)
    assert len(new.nodes) == 20000
    assert sum(len(w.hosts) for w in plan.waves) == 16000  # every NVIDIA node; the AMD fifth is untouched
    sched = plan.schedule
    assert sched.lanes == 2  # nvidia-hopper and nvidia-ampere roll side by side
    assert sched.minutes <= 8 * 60, sched.to_dict()
    assert_budgets_hold(plan, new)
    # One after another, as apply ran before this schedule, the same waves took far longer.
    serial = sum(s.batches for s in sched.steps) * 12.75
    assert serial > sched.minutes * 1.5
    if forks is not None:
        assert all(s.parallel <= forks for s in sched.steps)


def test_canaries_go_first_and_each_lane_waits_for_all_of_them(bump_20k) -> None:
    _, plan = bump_20k
    steps = plan.schedule.by_id()
    canaries = [s for s in steps.values() if s.wave.canary]
    assert {s.id for s in canaries} == {"nvidia-hopper#1", "nvidia-ampere#1"}
    assert all(s.after == () and s.start_min == 0 for s in canaries)
    assert set(steps["nvidia-hopper#2"].after) == {"nvidia-hopper#1", "nvidia-ampere#1"}
    assert steps["nvidia-hopper#3"].after == ("nvidia-hopper#2",)
    for s in steps.values():
        if not s.wave.canary:
            assert s.start_min >= max(c.end_min for c in canaries)


def test_plan_json_gives_each_wave_its_id_parallel_and_after(bump_20k) -> None:
    _, plan = bump_20k
    data = json.loads(json.dumps(with_rollout_figures(plan, 10, 400).to_dict()))
    wave = next(w for w in data["waves"] if w["id"] == "nvidia-ampere#2")
    assert wave["parallel"] == 400 and wave["after"] == ["nvidia-ampere#1", "nvidia-hopper#1"]
    assert data["settings"]["batch_minutes"] == 10 and data["settings"]["forks"] == 400
    assert data["schedule"]["lanes"] == 2 and data["schedule"]["modelled_minutes"] <= 8 * 60


def test_partitions_sharing_an_extra_partition_share_a_lane() -> None:
    """A debug partition over nodes of two generated partitions: their waves never run at
    once, so debug's own budget (1 node) holds."""
    two = shared_lane_spec()
    new, plan = shared_lane_plan()
    assert {w.partition for w in plan.waves} == {"nvidia-hopper", "nvidia-ampere"}
    assert plan.schedule.lanes == 1
    assert_budgets_hold(plan, new)
    apart = compiled_text(two.replace('\n    partitions:\n      debug: {nodes: "h200-001,a100-003", allow_mixed_generations: true}', ""))
    bumped = compiled_text(two.replace('\n    partitions:\n      debug: {nodes: "h200-001,a100-003", allow_mixed_generations: true}', "")
                           .replace('driver: "580.159.04"', 'driver: "580.173.02"'))
    assert make_plan(bumped, apart, max_unavailable=1).schedule.lanes == 2


def test_text_plan_prints_the_modelled_duration_with_its_figures(quickstart, tmp_path: Path) -> None:
    from io import StringIO

    from rich.console import Console

    from fleetspec.plan.render_text import print_plan

    plan = with_rollout_figures(make_plan(variant("driver-bump"), quickstart), 12.75, None)
    stream = StringIO()
    print_plan(plan, Console(file=stream, width=400))
    text = stream.getvalue()
    assert "Modelled rollout: 1 h 04 min (5 batch(es)" in text and "12.75 min per install+reboot batch" in text, text


def test_cli_takes_batch_minutes_and_forks_and_refuses_nonsense(tmp_path: Path) -> None:
    spec = ROOT / "examples" / "quickstart.yaml"
    bad = CliRunner().invoke(app, ["plan", str(spec), "--state", str(tmp_path), "--batch-minutes", "0"])
    assert bad.exit_code == 64 and "batch minutes" in bad.output
    bad = CliRunner().invoke(app, ["plan", str(spec), "--state", str(tmp_path), "--forks", "0"])
    assert bad.exit_code == 64 and "forks" in bad.output
    ok = CliRunner().invoke(app, ["plan", str(spec), "--state", str(tmp_path), "--format", "json",
                                  "--batch-minutes", "20", "--forks", "8"])
    assert ok.exit_code == 0, ok.output
    data = json.loads(ok.output)
    assert data["settings"]["batch_minutes"] == 20 and data["schedule"]["forks"] == 8
    assert all(w["parallel"] <= 8 and w["id"] == f"{w['partition']}#{w['index']}" for w in data["waves"])


def test_parsers_refuse_what_would_mean_nothing() -> None:
    for value in ("nan", "inf", "-1", "0", True, "x", 2000):
        with pytest.raises(ValueError):
            parse_batch_minutes(value)
    for value in ("0", "-3", "1.5", "٣", True):
        with pytest.raises(ValueError):
            parse_forks(value)
    assert parse_forks(None) is None and parse_forks("12") == 12


def test_no_waves_no_schedule(quickstart) -> None:
    assert schedule((), quickstart).minutes == 0


def test_a_saved_plan_with_nonsense_figures_is_refused_as_damaged(quickstart, tmp_path: Path) -> None:
    from fleetspec.plan.saved import SavedPlanError, load_saved_plan, save_plan

    path = tmp_path / "plan.json"
    save_plan(with_rollout_figures(make_plan(variant("driver-bump"), quickstart), 12.75, 4), path)
    assert load_saved_plan(path).schedule.forks == 4
    data = json.loads(path.read_text())
    data["settings"]["forks"] = "lots"
    path.write_text(json.dumps(data))
    with pytest.raises(SavedPlanError, match="damaged: forks must be a host count"):
        load_saved_plan(path)


def test_the_pull_request_comment_states_the_modelled_duration_too(quickstart) -> None:
    from fleetspec.plan.render_markdown import plan_markdown

    text = plan_markdown(with_rollout_figures(make_plan(variant("driver-bump"), quickstart), 20, None), None)
    assert "Modelled rollout: 1 h 40 min (5 batch(es)" in text and "20 min per install+reboot batch" in text


def test_the_gantt_docs_plan_md_shows_is_what_plan_draws_for_the_20000_node_bump(bump_20k) -> None:
    from fleetspec.plan.render_gantt import gantt_markdown

    _, plan = bump_20k
    docs = (ROOT / "docs" / "plan.md").read_text()
    fence = "\n".join(gantt_markdown(plan)).strip()
    assert fence in docs, fence
