"""One state shared by several processes and working copies, through the real CLI: an
apply holds the lock while another copy's plan is refused (the holder named) or waits;
a plan saved before that apply is refused; applies racing from several processes take
turns and lose no write. Runs against both backends; PostgreSQL is the one a team shares."""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fleetspec.cli import app
from fleetspec.state import STATE_DIR_ENV, STATE_ENV, locked, open_state, parse_location
from tests.state.conftest import ROOT

QUICKSTART = ROOT / "examples" / "quickstart.yaml"

# The state traffic of `fleetspec apply` (apply/cli.py: lock, waves recorded as they
# finish, the whole fleet recorded at the end), paused between waves on stdin so the
# test can act while it holds the lock.
APPLY = """
import sys
from fleetspec.pipeline import compile_file
from fleetspec.state import open_state, parse_location
fleet = compile_file(sys.argv[2]).fleet
store = open_state(parse_location(sys.argv[1]), fleet.name)
with store.lock("apply"):
    store.record_wave(fleet, ["h100-001"], "wave 1/2 nvidia-hopper (canary)")
    print("wave 1 done", flush=True)
    sys.stdin.readline()
    store.record_applied(fleet, "8 nodes")
print("applied", flush=True)
"""


def child_env() -> dict[str, str]:
    """This checkout's fleetspec, and no state location from the environment."""
    env = {k: v for k, v in os.environ.items() if k not in (STATE_ENV, STATE_DIR_ENV)}
    env["PYTHONPATH"] = str(ROOT)
    return env


def cli(*args: str, cwd: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "fleetspec.cli", *args], cwd=cwd, env=child_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def start_apply(location: str, spec: Path) -> subprocess.Popen:
    apply = subprocess.Popen([sys.executable, "-c", APPLY, location, str(spec)], cwd=spec.parent, env=child_env(),
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert apply.stdout.readline().strip() == "wave 1 done"
    return apply


@pytest.fixture
def copies(tmp_path: Path) -> tuple[Path, Path]:
    """Two working copies of one fleet repository (two engineers, or an engineer and CI)."""
    out = []
    for name in ("alice", "ci"):
        (tmp_path / name).mkdir()
        out.append(shutil.copy(QUICKSTART, tmp_path / name / "quickstart.yaml"))
    return Path(out[0]), Path(out[1])


def test_a_plan_from_another_copy_is_refused_or_waits_and_a_stale_saved_plan_is_refused(
        location: str, copies: tuple[Path, Path], tmp_path: Path) -> None:
    from fleetspec.pipeline import compile_file

    alice, ci = copies
    shared = open_state(parse_location(location), "quickstart")
    with shared.lock("first apply"):
        shared.record_applied(compile_file(QUICKSTART).fleet, "the fleet as it was")  # serial 1
    saved = tmp_path / "ci" / "plan.json"
    before = cli("plan", str(ci), "--state", location, "--out", str(saved), cwd=ci.parent)
    assert before.wait(120) == 0, before.stderr.read()

    apply = start_apply(location, alice)
    try:
        refused = cli("plan", str(ci), "--state", location, cwd=ci.parent)
        assert refused.wait(120) == 1
        message = refused.stderr.read()
        assert f"pid {apply.pid}" in message and "'apply'" in message and "locked by" in message, message

        waiting = cli("plan", str(ci), "--state", location, "--lock-timeout", "120", "--format", "json",
                      cwd=ci.parent)
        time.sleep(3)
        assert waiting.poll() is None, waiting.stderr.read()  # still waiting for the apply
        apply.stdin.write("go on\n")
        apply.stdin.flush()
        assert apply.stdout.readline().strip() == "applied"
        assert waiting.wait(120) == 0, waiting.stderr.read()  # the apply made the state match the spec
        assert json.loads(waiting.stdout.read())["state_serial"] == 3
    finally:
        if apply.poll() is None:
            apply.kill()
        apply.wait()

    stale = cli("apply", str(saved), "--state", location, "--yes", cwd=ci.parent)
    assert stale.wait(120) == 1
    message = stale.stderr.read()
    assert "the state moved since this plan was made (serial 1 -> 3 by " in message, message
    assert shared.read().serial == 3  # nothing was written


def _apply_turn(location: str, spec: str, results) -> None:
    from fleetspec.pipeline import compile_file

    fleet = compile_file(spec).fleet
    store = open_state(parse_location(location), fleet.name)
    with locked(store, "apply", timeout=120, poll=0.2):
        before = store.read().serial
        store.record_wave(fleet, ["h100-001"], "wave")
        time.sleep(0.3)  # hold the lock while the others try
        after = store.record_applied(fleet, "done").serial
    results.put((os.getpid(), before, after))


def test_applies_racing_from_several_processes_take_turns_and_lose_nothing(location: str) -> None:
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    racers = [ctx.Process(target=_apply_turn, args=(location, str(QUICKSTART), results)) for _ in range(4)]
    for p in racers:
        p.start()
    for p in racers:
        p.join(180)
    assert [p.exitcode for p in racers] == [0] * 4
    turns = sorted(results.get(timeout=5) for _ in racers)
    assert sorted((b, a) for _, b, a in turns) == [(0, 2), (2, 4), (4, 6), (6, 8)]  # one at a time, no lost write
    journal = open_state(parse_location(location), "quickstart").read().journal
    assert [e["serial"] for e in journal] == list(range(1, 9))
    assert all(journal[i]["pid"] == journal[i + 1]["pid"] for i in range(0, 8, 2))  # a wave and its apply together


def test_state_commands_list_show_and_unlock(location: str, tmp_path: Path) -> None:
    runner = CliRunner()
    env = {STATE_ENV: location, STATE_DIR_ENV: ""}
    assert "no fleet has a state" in runner.invoke(app, ["state", "list"], env=env).output
    apply = start_apply(location, QUICKSTART)
    try:
        listed = runner.invoke(app, ["state", "list", "--format", "json"], env=env)
        assert listed.exit_code == 0, listed.output
        (row,) = json.loads(listed.output)["fleets"]
        assert row["fleet"] == "quickstart" and row["serial"] == 1 and row["in_progress"]
        assert f"pid {apply.pid}" in row["locked_by"]

        shown = runner.invoke(app, ["state", "show", "quickstart", "--format", "json"], env=env)
        data = json.loads(shown.output)
        assert data["in_progress_nodes"] == ["h100-001"] and data["locked_by"]["pid"] == apply.pid
        assert [h["summary"] for h in data["history"]] == ["wave 1/2 nvidia-hopper (canary)"]

        asked = runner.invoke(app, ["state", "unlock", "quickstart"], env=env)
        assert asked.exit_code == 1 and f"pid {apply.pid}" in asked.output and "--force" in asked.output
        forced = runner.invoke(app, ["state", "unlock", "quickstart", "--force"], env=env)
        assert forced.exit_code == 0 and "removed the lock" in forced.output and f"pid {apply.pid}" in forced.output
        assert runner.invoke(app, ["state", "unlock", "quickstart"], env=env).exit_code == 0  # free now
    finally:
        apply.kill()
        apply.wait()
    bad = runner.invoke(app, ["state", "list", "--state", "s3://bucket/x"])
    assert bad.exit_code == 1 and "unknown scheme 's3'" in bad.output


def test_state_copy_moves_a_directory_state_into_postgresql_and_keeps_saved_plans_valid(
        postgres_url: str, tmp_path: Path) -> None:
    from fleetspec.pipeline import compile_file
    from fleetspec.plan import plan_against_state
    from fleetspec.plan.saved import check_plan_current
    from fleetspec.state import StateStore

    fleet = compile_file(QUICKSTART).fleet
    local = StateStore(tmp_path / ".fleetspec", fleet.name)
    with local.lock("apply"):
        local.record_applied(fleet, "applied from a laptop")
        local.record_wave(fleet, ["h100-001"], "an unfinished apply")
    plan = plan_against_state(fleet, local.read())
    runner = CliRunner()
    moved = runner.invoke(app, ["state", "copy", "quickstart", "--from", str(local.directory), "--to", postgres_url])
    assert moved.exit_code == 0, moved.output
    assert "at serial 2" in moved.output
    shared = open_state(parse_location(postgres_url), "quickstart")
    assert shared.read() == local.read()  # lineage, serial, nodes, journal: all of it
    check_plan_current(plan, shared)  # a plan made against the directory applies against the database
    again = runner.invoke(app, ["state", "copy", "quickstart", "--from", str(local.directory), "--to", postgres_url])
    assert again.exit_code == 1 and "already holds a state" in again.output
    back = tmp_path / "back"
    assert runner.invoke(app, ["state", "copy", "quickstart", "--from", postgres_url, "--to", str(back)]).exit_code == 0
    assert StateStore(back, "quickstart").read() == local.read()
    empty = runner.invoke(app, ["state", "copy", "other", "--from", str(local.directory), "--to", str(back)])
    assert empty.exit_code == 1 and "has no state of fleet 'other'" in empty.output
