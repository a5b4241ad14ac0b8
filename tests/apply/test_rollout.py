"""Rolling waves against a real Slurm controller and real ansible-runner runs.

The fleet's four H200 nodes are real slurmd's (one machine, loopback); drain, resume and
the drain reasons are read back with sinfo. The playbook is a small stand-in for
site.yml run for real by ansible-runner over local connections (it records which
hosts it touched and fails where a test says). Verify uses the real comparison on the
real H200 node's facts (tests/data/fixtures), upgraded where the playbook ran.
"""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
from rich.console import Console

from fleetspec.apply.report import TextReport
from fleetspec.apply.rollout import wave_name
from fleetspec.lab.slurm import Cluster
from fleetspec.pipeline import compile_file
from fleetspec.plan import plan_against_state
from fleetspec.render.slurm import render_slurm
from fleetspec.secrets import Redactor
from tests.apply.harness import HOSTS, ROOT_DIR, V1, V2, Rollout

pytestmark = pytest.mark.slurm


@pytest.fixture
def cluster(slurm_installed, tmp_path):
    fleet = compile_file(V1).fleet
    c = Cluster(tmp_path / "slurm", render_slurm(fleet))
    c.start()
    yield c
    c.stop()


@pytest.fixture
def rollout(cluster, tmp_path):
    return Rollout(cluster, tmp_path)


class Reports:
    """apply's ``report`` hook for ``rollout.apply``: the TextReport apply makes for the plan's
    waves, on ``console``, with its log in ``log``; ``made`` is it, once apply asked."""

    def __init__(self, console: Console, log) -> None:
        self.console, self.log, self.made = console, log, None

    def __call__(self, plan):
        self.made = TextReport(self.console, self.log, [(wave_name(w), w.hosts) for w in plan.waves])
        return self.made.emit


def test_nccl_bump_rolls_through_waves_and_resumes_every_node(rollout):
    plan, result, events = rollout.apply(V2)
    assert [w.hosts for w in plan.waves] == [("h200-001",), ("h200-002",), ("h200-003", "h200-004")]
    assert result.ok, [e.message for e in events]
    assert rollout.touched() == set(HOSTS)
    # Each wave's run is told its nodes are drained: the driver role may reload modules there (#24 item 10).
    assert {(rollout.markers / h).read_text() for h in HOSTS} == {"allow_reboot=False drained=True\n"}
    assert all(state == "idle" for state, _ in rollout.settled().values()), rollout.sinfo()
    kinds = [e.kind for e in events]
    assert kinds.count("wave-done") == 3 and kinds[-1] == "done"
    drains = [e for e in events if e.kind == "drain"]
    assert "fleetspec: NCCL 2.28.3 -> 2.28.9" in drains[0].message
    state = rollout.store.read()
    assert state.serial == 1 + 3 + 1  # initial, one per wave, the final apply
    assert not state.in_progress and state.applied == compile_file(V2).fleet
    again = plan_against_state(compile_file(V2).fleet, state)
    assert again.empty  # idempotence: applying twice, the second plan is empty


def test_a_limited_apply_records_only_the_nodes_it_applied(rollout):
    plan, result, events = rollout.apply(V2, limit=["h200-001", "h200-002"])
    assert result.ok, [e.message for e in events]
    assert plan.restriction and plan.skipped == ("h200-003", "h200-004")
    assert rollout.touched() == {"h200-001", "h200-002"}
    skipped = [e for e in events if e.kind == "skipped"]
    assert len(skipped) == 1 and "h200-[003-004]" in skipped[0].message and skipped[0].hosts == plan.skipped
    state = rollout.store.read()
    assert set(state.nodes) == {"h200-001", "h200-002"}  # recorded: applied and verified
    assert not state.in_progress and state.limited.unapplied == ("h200-003", "h200-004")  # finished (#28 item 3)
    assert state.applied == compile_file(V1).fleet  # never claims the whole fleet
    left = plan_against_state(compile_file(V2).fleet, state)
    assert sorted(c.host for c in left.changes if c.host) == ["h200-003", "h200-004"]
    # The rest, applied without a restriction, completes the fleet.
    _, result, _ = rollout.apply(V2)
    assert result.ok and rollout.touched() == set(HOSTS)
    assert plan_against_state(compile_file(V2).fleet, rollout.store.read()).empty


def test_a_failing_wave_stops_the_rollout_and_stays_drained(rollout):
    plan, result, events = rollout.apply(V2, fail_hosts=["h200-002"])
    assert not result.ok and result.failed_wave.startswith("nvidia-hopper#2")
    assert result.waves_done == ("nvidia-hopper#1 (canary)",)
    states = rollout.settled()
    assert states["h200-001"][0] == "idle"  # the canary finished and was resumed
    assert states["h200-002"][0] == "drained"
    assert "fleetspec: playbook failed" in states["h200-002"][1] and "libnccl2" in states["h200-002"][1]
    assert states["h200-003"][0] == "idle" and states["h200-004"][0] == "idle"  # never touched
    assert rollout.touched() == {"h200-001"}
    # The state kept the completed wave; the next plan shows exactly what is left.
    state = rollout.store.read()
    assert state.in_progress and set(state.nodes) == {"h200-001"}
    left = plan_against_state(compile_file(V2).fleet, state)
    assert sorted(c.host for c in left.changes if c.host) == ["h200-002", "h200-003", "h200-004"]
    # Fixed: the next apply finishes the job and resumes the failed wave's node.
    _, result, _ = rollout.apply(V2)
    assert result.ok and all(s == "idle" for s, _ in rollout.settled().values())


def test_off_a_terminal_a_real_apply_prints_one_line_per_host_state_change(rollout, tmp_path):
    """What 'apply' prints in a CI log for a real rollout whose second wave fails."""
    stream = io.StringIO()
    report = Reports(Console(file=stream, width=200, emoji=False, highlight=False), tmp_path / "rollout.apply.log")
    _, result, _ = rollout.apply(V2, fail_hosts=["h200-002"], report=report)
    report.made.finish(result)
    shown = stream.getvalue()
    assert "\x1b" not in shown
    canary, second = "nvidia-hopper#1 (canary)", "nvidia-hopper#2"
    lines = [line for line in shown.splitlines() if line.startswith("nvidia-hopper#")]
    assert lines == [f"{canary}: h200-001: draining", f"{canary}: h200-001: applying",
                     f"{canary}: h200-001: verifying", f"{canary}: h200-001: done (ok 0, changed 1)",
                     f"{second}: h200-002: draining", f"{second}: h200-002: applying",
                     f"{second}: h200-002: failed: Fail where the test says the package is missing: "
                     "no candidate for libnccl2=2.28.9-1+cuda13.0"], shown
    summary = shown[shown.index("apply summary"):]
    rows = {line.split("│")[1].strip(): line for line in summary.splitlines() if line.startswith("│")}
    assert "done" in rows[canary] and "failed" in rows[second] and "not started" in rows["nvidia-hopper#3"]
    log = (tmp_path / "rollout.apply.log").read_text()
    assert "h200-001: Record that this host was converged: changed" in log  # each task result is in the log
    assert "h200-001: Take a while where the test says (so it can kill apply mid-wave): skipped" in log


def test_on_a_terminal_a_real_apply_shows_the_live_view_of_each_host(rollout, tmp_path):
    """The same rollout on a terminal console: Rich's live view refreshes in its own thread
    while ansible-runner runs in this one; its host rows show, the plain lines do not."""
    stream = io.StringIO()
    report = Reports(Console(file=stream, width=160, height=40, force_terminal=True, color_system=None,
                             emoji=False, highlight=False), tmp_path / "rollout.apply.log")
    _, result, _ = rollout.apply(V2, fail_hosts=["h200-002"], report=report)
    report.made.finish(result)
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", stream.getvalue())
    assert re.search(r"nvidia-hopper#1 \(canary\)\s+verifying\s+0/1 done", text), text  # the wave's line
    assert re.search(r"h200-001\s+verifying\s+ok 0, changed 1, failed 0\s+Record that this host was converged",
                     text), text  # the host's line, at the milestone "playbooks ran"
    assert re.search(r"h200-002\s+failed\s+ok 0, changed 0, failed 1\s+Fail where the test says", text), text
    assert "nvidia-hopper#2: h200-002: failed: Fail where the test says the package is missing" in text
    assert "nvidia-hopper#1 (canary): h200-001: applying" not in text
    assert "apply summary" in text


def test_a_wave_that_fails_verification_is_left_drained_with_the_reason(rollout):
    rollout.broken_after_upgrade = {"h200-001"}
    _, result, events = rollout.apply(V2)
    assert not result.ok and result.drained == ("h200-001",)
    state, reason = rollout.settled()["h200-001"]
    assert state == "drained" and "verify failed" in reason and "nccl" in reason
    assert {h: s for h, (s, _) in rollout.settled().items() if h != "h200-001"} == {
        "h200-002": "idle", "h200-003": "idle", "h200-004": "idle"}
    assert rollout.store.read().serial == 1  # nothing recorded: the canary did not pass


def test_never_more_than_max_unavailable_out_at_once(rollout):
    plan, result, events = rollout.apply(V2, max_unavailable=1)
    assert result.ok
    assert all(len(w.hosts) <= 1 for w in plan.waves) and len(plan.waves) == 4


def test_jobs_block_the_drain_until_the_deadline(rollout):
    job = rollout.cluster.sbatch("-p", "nvidia-hopper", "-w", "h200-001", "-N", "1", script="#!/bin/sh\nsleep 60\n")
    job_id = job.stdout.split()[-1]
    rollout.cluster.wait_job(job_id, {"RUNNING"})
    control = rollout.engines().slurm
    control.drain(["h200-001"], "fleetspec: test")
    told: list[list[str]] = []
    assert control.wait_drained(["h200-001"], deadline_s=1.0, on_busy=told.append) == ["h200-001"]
    assert told == [["h200-001"]]  # once, not at every poll
    rollout.cluster.run("scancel", job_id)
    assert control.wait_drained(["h200-001"], deadline_s=15.0) == []
    control.resume(["h200-001"])


def test_a_wave_waiting_for_jobs_says_which_nodes_hold_it(rollout, tmp_path):
    """A job on the canary node: apply says it waits for that node's jobs, then that the
    wave drained, and rolls on once the job ends."""
    job = rollout.cluster.sbatch("-p", "nvidia-hopper", "-w", "h200-001", "-N", "1", script="#!/bin/sh\nsleep 4\n")
    rollout.cluster.wait_job(job.stdout.split()[-1], {"RUNNING"})
    stream = io.StringIO()
    report = Reports(Console(file=stream, width=200, emoji=False, highlight=False), tmp_path / "rollout.apply.log")
    _, result, events = rollout.apply(V2, report=report)
    report.made.finish(result)
    assert result.ok, [e.message for e in events]
    busy = [(e.wave, e.hosts) for e in events if e.kind == "busy"]
    assert busy == [("nvidia-hopper#1 (canary)", ("h200-001",)), ("nvidia-hopper#1 (canary)", ())]
    shown = stream.getvalue()
    assert "wave nvidia-hopper#1 (canary): waiting for the jobs (pods) on h200-001 to end (--drain-timeout 20s)" in shown
    assert "wave nvidia-hopper#1 (canary): drained, nothing left running" in shown


def test_secrets_in_failure_output_are_masked_everywhere(rollout):
    secret = "db-pass-5f1c9e7a"
    _, result, events = rollout.apply(V2, fail_hosts=["h200-001"], fail_message=f"could not log in with {secret}",
                                      redact=Redactor([secret.encode()]))
    assert not result.ok
    texts = [e.message for e in events] + [reason for _, reason in rollout.sinfo().values()]
    assert any("********" in t for t in texts)
    assert not any(secret in t for t in texts)
    assert secret not in rollout.store.path.read_text()


def test_sigkill_in_the_middle_of_a_wave_then_a_clean_resume(rollout, cluster, tmp_path):
    """apply is killed (SIGKILL) while wave 2's playbook runs: the canary wave is recorded,
    wave 2's node stays drained, and the next apply takes over the dead lock and finishes."""
    child = subprocess.Popen([sys.executable, "-m", "tests.apply.harness", str(cluster.root), str(tmp_path),
                              str(V2), "h200-002"], cwd=ROOT_DIR, stdout=subprocess.PIPE,
                             start_new_session=True)  # its own group: the kill takes ansible with it
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            state = rollout.sinfo().get("h200-002", ("", ""))
            if rollout.store.read().serial >= 2 and state[0].startswith("drain"):
                break  # the canary wave is recorded and wave 2 is under way
            time.sleep(0.2)
        else:
            pytest.fail("the child apply never reached wave 2")
        time.sleep(1.0)  # inside wave 2's (slow) playbook run
    finally:
        os.killpg(child.pid, signal.SIGKILL)  # like a crashed control machine: apply and its ansible
        child.wait()
    state = rollout.store.read()
    assert state.serial == 2 and set(state.nodes) == {"h200-001"}  # the canary wave, nothing half-done
    assert rollout.settled()["h200-002"][0].startswith("drain")  # taken out, never put back by the dead apply
    left = plan_against_state(compile_file(V2).fleet, state)
    assert sorted(c.host for c in left.changes if c.host) == ["h200-002", "h200-003", "h200-004"]
    _, result, events = rollout.apply(V2)  # takes over the stale lock of the killed apply
    assert result.ok, [e.message for e in events]
    assert all(s == "idle" for s, _ in rollout.settled().values())
    assert plan_against_state(compile_file(V2).fleet, rollout.store.read()).empty


RMA = "RMA case 4711: do not resume"
HEALTH = "fleetspec-health: drain-reboot gpu-lost: 0000:00:06 Xid 79: GPU has fallen off the bus."


def test_apply_leaves_every_drain_it_did_not_make_exactly_as_found(rollout):
    """An operator's drain and the health check's drain on a real slurmctld: apply names
    both nodes, never drains, changes or resumes them, and their reasons stay word for word;
    the other nodes roll through waves (with a canary) and the next plan shows the two."""
    rollout.cluster.run("scontrol", "update", "nodename=h200-001", "state=drain", f"reason={RMA}")
    rollout.cluster.run("scontrol", "update", "nodename=h200-003", "state=drain", f"reason={HEALTH}")
    _, result, events = rollout.apply(V2)
    assert result.ok, [e.message for e in events]
    held = [e for e in events if e.kind == "held"]
    assert len(held) == 1 and held[0].hosts == ("h200-001", "h200-003")
    assert RMA in held[0].message and HEALTH in held[0].message
    states = rollout.settled()
    assert states["h200-001"] == ("drained", RMA)
    assert states["h200-003"] == ("drained", HEALTH)
    assert states["h200-002"][0] == "idle" and states["h200-004"][0] == "idle"
    assert rollout.touched() == {"h200-002", "h200-004"}
    starts = [e for e in events if e.kind == "wave-start"]
    assert starts[0].wave.endswith("(canary)") and starts[0].hosts == ("h200-002",)
    assert not any(set(e.hosts) & {"h200-001", "h200-003"} for e in events if e.kind in ("drain", "resume"))
    left = plan_against_state(compile_file(V2).fleet, rollout.store.read())
    assert sorted(c.host for c in left.changes if c.host) == ["h200-001", "h200-003"]


def test_a_drain_made_during_the_wave_is_not_resumed(rollout):
    """The health check drains the canary node while its wave runs (after apply drained it):
    apply does not resume it, and its reason stays the health check's."""
    verify = rollout.verify

    def verify_while_the_check_drains(fleet, hosts):
        rollout.cluster.run("scontrol", "update", "nodename=h200-001", "state=drain", f"reason={HEALTH}")
        return verify(fleet, hosts)

    rollout.verify = verify_while_the_check_drains
    _, result, events = rollout.apply(V2)
    assert [e.hosts for e in events if e.kind == "held"][0] == ("h200-001",)
    assert rollout.settled()["h200-001"] == ("drained", HEALTH)


XID_79 = ("4,2001,6000000001,-;NVRM: Xid (PCI:0000:00:06): 79, pid='<unknown>', name=<unknown>, "
          "GPU has fallen off the bus.\n")


def test_a_wave_whose_node_comes_back_unhealthy_stops_the_rollout(rollout, tmp_path):
    """The canary's GPU falls off the bus during its wave (Xid 79 in its kernel log): the
    versions match, but the node check's verdict is sick, so the wave stops like a version
    drift does, its node stays drained with the reason, and no other node is touched."""
    roots = rollout.node_health(tmp_path)
    with open(roots / "h200-001" / "dev" / "kmsg", "a") as log:
        log.write(XID_79)
    _, result, events = rollout.apply(V2)
    assert not result.ok and result.failed_wave == "nvidia-hopper#1 (canary)" and result.drained == ("h200-001",)
    state, reason = rollout.settled()["h200-001"]
    assert state == "drained" and reason.startswith("fleetspec: unhealthy after the wave: h200-001: sick: "
                                                    "drain-reboot gpu-lost: 0000:00:06 Xid 79"), reason
    assert rollout.touched() == {"h200-001"}
    assert rollout.store.read().serial == 1  # the canary did not pass: nothing recorded


def test_healthy_waves_pass_the_health_gate(rollout, tmp_path):
    rollout.node_health(tmp_path)
    _, result, events = rollout.apply(V2)
    assert result.ok, [e.message for e in events]
    assert sum("passed the node health check" in e.message for e in events) == 3


# A user's job faulted on each GPU once (an application Xid: the job's fault, not the GPU's;
# NVIDIA's catalog says restart the application): every node is healthy under the default policy.
XID_13 = ("4,2002,6000000002,-;NVRM: Xid (PCI:0000:00:06): 13, pid=24521, name=python3, Graphics SM Warp "
          "Exception on (GPC 1, TPC 3, SM 0): Out Of Range Address\n")
OLD_POLICY = "  health: {interval: 60, checks: [kernel-log, gpu-memory]}\n"


def _policy_change(rollout_tmp, new_policy: str):
    """The spec before (v1 with a policy) and after (v1 with ``new_policy``): no package moves."""
    old, new = rollout_tmp / "policy-v1.yaml", rollout_tmp / "policy-v2.yaml"
    old.write_text(V1.read_text() + OLD_POLICY)
    new.write_text(V1.read_text() + new_policy)
    return old, new


def _policy_rollout(cluster, tmp_path, new_policy: str):
    from fleetspec.plan.health_policy import policy_digest
    from fleetspec.verify.compare import compare
    from tests.apply.harness import Rollout
    from tests.verify.h200_facts import h200_facts

    old, new = _policy_change(tmp_path, new_policy)
    rollout = Rollout(cluster, tmp_path, base=old)
    rollout.verify = lambda fleet, hosts: compare(fleet, {h: h200_facts(h) for h in hosts}, hosts=hosts)  # no package moved
    roots = rollout.node_health(tmp_path)
    before = policy_digest(compile_file(old).fleet)
    for host in HOSTS:
        with open(roots / host / "dev" / "kmsg", "a") as log:
            log.write(XID_13)
        (roots / host / "etc" / "fleetspec").mkdir(parents=True)
        (roots / host / "etc" / "fleetspec" / "health.json").write_text(f"{before}\n")
    return rollout, new, before


def test_a_health_policy_whose_canary_would_drain_a_healthy_node_stops_before_the_rest(cluster, tmp_path):
    """A stricter policy (application Xids drain) reads every healthy node as sick. It is
    planned in waves with a canary, not at once; the canary is checked under it before it
    gets it, so the rollout stops there and says why: no node is drained, none gets the new
    policy (each keeps the old one), nothing is recorded."""
    rollout, new, before = _policy_rollout(cluster, tmp_path, OLD_POLICY.replace(
        "}", ", actions: {xid-application: drain}}"))
    plan, result, events = rollout.apply(new)
    assert [c.disruption.value for c in plan.changes if c.host] == ["rolling"] * 4
    assert plan.waves[0].canary and plan.waves[0].hosts == ("h200-001",) and len(plan.waves) == 3
    assert not result.ok and result.failed_wave == "nvidia-hopper#1 (canary)" and result.drained == ()
    assert "the new health policy would drain h200-001 (sick: drain xid-application" in result.message
    assert "which the current policy leaves in service: the policy is wrong for them" in result.message
    assert all(state == "idle" for state, _ in rollout.settled().values()), rollout.settled()
    assert not any(e.kind == "drain" for e in events) and rollout.touched() == set()
    assert {rollout.installed_policy(h) for h in HOSTS} == {before}
    assert rollout.store.read().serial == 1


def test_a_health_policy_change_rolls_out_in_waves_without_a_drain(cluster, tmp_path):
    """A policy the healthy nodes pass (a longer interval): canary, then the other waves;
    no node is drained, every node ends with the new policy, the fleet is recorded."""
    from fleetspec.plan.health_policy import policy_digest

    rollout, new, before = _policy_rollout(cluster, tmp_path, OLD_POLICY.replace("60", "120"))
    plan, result, events = rollout.apply(new)
    assert result.ok, [e.message for e in events]
    starts = [e for e in events if e.kind == "wave-start"]
    assert [e.wave for e in starts] == ["nvidia-hopper#1 (canary)", "nvidia-hopper#2", "nvidia-hopper#3"]
    assert sum("pass the node check under the new health policy" in e.message for e in events) == 3
    assert not any(e.kind in ("drain", "resume") for e in events)
    assert all(state == "idle" for state, _ in rollout.settled().values())
    after = policy_digest(compile_file(new).fleet)
    assert after != before and {rollout.installed_policy(h) for h in HOSTS} == {after}
    assert plan_against_state(compile_file(new).fleet, rollout.store.read()).empty


def test_the_plan_apply_shows_before_it_asks_already_holds_the_drained_nodes(rollout, monkeypatch):
    """The plan shown for confirmation reads the nodes' drain state first: a node drained by
    someone else is named as held and is never the canary there, so the plan confirmed is
    the plan run (before, apply found it only after the confirmation and planned again)."""
    from typer.testing import CliRunner

    from fleetspec.cli import app

    rollout.cluster.run("scontrol", "update", "nodename=h200-001", "state=drain", f"reason={RMA}")
    monkeypatch.setenv("SLURM_CONF", str(rollout.cluster.conf))
    result = CliRunner().invoke(app, ["apply", str(V2), "--state", str(rollout.store.directory), "--slurm-control",
                                      "local", "--format", "json"])
    assert result.exit_code == 1 and "refusing to apply without confirmation" in result.output
    events = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    plan = json.loads(next(e["message"] for e in events if e["event"] == "plan"))
    assert plan["held"] == [{"node": "h200-001", "reason": RMA}]
    assert next(w for w in plan["waves"] if w["canary"])["hosts"] == ["h200-002"]
    assert all("h200-001" not in w["hosts"] for w in plan["waves"])
    assert rollout.sinfo()["h200-001"] == ("drained", RMA) and rollout.touched() == set()


def test_a_canary_sick_under_the_old_policy_too_is_named_as_the_nodes_fault(cluster, tmp_path):
    """The canary's GPU fell off the bus (Xid 79) and a harmless policy change comes: the
    rollout stops at the canary, says the node is sick under the current policy too (not
    the policy's fault), drains nothing and gives no node the new policy."""
    rollout, new, before = _policy_rollout(cluster, tmp_path, OLD_POLICY.replace("60", "120"))
    with open(rollout.node_roots / "h200-001" / "dev" / "kmsg", "a") as log:
        log.write(XID_79)
    _, result, events = rollout.apply(new)
    assert not result.ok and result.failed_wave == "nvidia-hopper#1 (canary)" and result.drained == ()
    assert "sick under the current policy too: h200-001 (sick: drain-reboot gpu-lost" in result.message
    assert "would drain" not in result.message
    assert rollout.sinfo()["h200-001"][0] == "idle" and rollout.touched() == set()
    assert {rollout.installed_policy(h) for h in HOSTS} == {before}


def test_a_switch_type_change_is_refused_while_jobs_exist(rollout, tmp_path):
    """#25 item 9: the plan said a SwitchType change needs an empty queue (slurm.conf(5): restarted
    with jobs, slurmctld may lose the records of all jobs), but apply drained and restarted anyway.
    Now apply reads the queue (squeue -h) first and, with a job running, refuses: nothing drained,
    no playbook run (no daemon restarted), nothing recorded."""
    from fleetspec.apply.rollout import _queue_not_empty

    spec = tmp_path / "switch.yaml"
    spec.write_text(V1.read_text().replace("    controllers: ctl-01\n",
                                           "    controllers: ctl-01\n    settings: {SwitchType: switch/none}\n"))
    job = rollout.cluster.sbatch("-p", "nvidia-hopper", "-w", "h200-001", "-N", "1", script="#!/bin/sh\nsleep 60\n")
    job_id = job.stdout.split()[-1]
    rollout.cluster.wait_job(job_id, {"RUNNING"})
    before = rollout.store.read().applied
    plan, result, events = rollout.apply(spec)
    assert [c.disruption.value for c in plan.changes if c.target == "slurm:slurm.conf"] == ["drain"]
    assert not result.ok
    assert "changes SwitchType" in result.message and f"{job_id} RUNNING" in result.message
    assert "Drain every partition" in result.message and "squeue -h" in result.message
    assert rollout.touched() == set()  # no playbook ran: no daemon restarted
    assert all(state in ("idle", "mixed", "allocated") for state, _ in rollout.sinfo().values()), rollout.sinfo()
    assert rollout.store.read().applied == before
    assert rollout.cluster.job(job_id)["JobState"] == "RUNNING"
    rollout.cluster.run("scancel", job_id)
    end = time.monotonic() + 20
    while rollout.cluster.run("squeue", "-h").stdout.strip() and time.monotonic() < end:
        time.sleep(0.3)
    assert _queue_not_empty(plan, rollout.engines()) is None  # an empty queue: apply goes ahead
