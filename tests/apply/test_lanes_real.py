"""Issue #30 on a real slurmctld: independent partitions roll side by side, each within its
own max_unavailable, after the canaries; a job that outlives the drain timeout is not a
global stop (its node is carried to a round after the last wave).

Six real slurmd's (loopback): nvidia-hopper h200-[001-004] and hopper-b h200-[005-006]
(tests/apply/specs/multi-v*.yaml); the stand-in playbook runs for real through
ansible-runner over local connections, one run per wave (tests/apply/harness.py).

The lanes run at 22.05 and at 26.05 (#47: Debian sid's slurmctld, slurmd, and the scontrol
and sinfo apply drains, reads and resumes with, inside its root); the carried job at 22.05.
"""

from __future__ import annotations

import io
import os
import time

import pytest
from rich.console import Console

from fleetspec.apply.report import TextReport
from fleetspec.apply.rollout import wave_name
from fleetspec.lab.slurm_releases import slurm_cluster
from fleetspec.pipeline import compile_file
from fleetspec.plan import plan_against_state
from fleetspec.render.slurm import render_slurm
from tests.apply.harness import HERE, Rollout
from tests.slurm.conftest import slurm_release  # noqa: F401  (the release fixture)

pytestmark = pytest.mark.slurm

MULTI_V1, MULTI_V2 = HERE / "specs" / "multi-v1.yaml", HERE / "specs" / "multi-v2.yaml"
HOSTS = [f"h200-00{i}" for i in range(1, 7)]
PARTITION = {h: ("hopper-b" if h in ("h200-005", "h200-006") else "nvidia-hopper") for h in HOSTS}


@pytest.fixture(scope="module", params=["22.05", "26.05"])
def cluster(request: pytest.FixtureRequest, slurm_installed, slurm_release, tmp_path_factory):
    slurm_release(request.param)
    files = render_slurm(compile_file(MULTI_V1).fleet)
    with slurm_cluster(tmp_path_factory.mktemp(f"slurm-{request.param}"), files, release=request.param) as c:
        yield c


@pytest.fixture
def rollout(cluster, tmp_path):
    r = Rollout(cluster, tmp_path, hosts=HOSTS, base=MULTI_V1)
    yield r
    cluster.run("scancel", "--user", str(os.getuid()), check=False)
    cluster.run("scontrol", "update", "nodename=h200-[001-006]", "state=resume", check=False)


def out_at_once(events) -> tuple[dict[str, int], bool]:
    """From the event stream (serialised across lanes): per partition, the most nodes out
    at once (drained, not yet resumed), and whether two waves were ever at work together."""
    out: dict[str, set[str]] = {}
    peak: dict[str, int] = {}
    at_work: set[str] = set()
    overlapped = False
    for e in events:
        if e.kind == "drain":
            for h in e.hosts:
                out.setdefault(PARTITION[h], set()).add(h)
            at_work.add(e.wave)
            overlapped |= len(at_work) > 1
        elif e.kind in ("wave-done", "carried", "error"):
            for h in e.hosts:
                out.get(PARTITION[h], set()).discard(h)
            at_work.discard(e.wave)
        for p, hosts in out.items():
            peak[p] = max(peak.get(p, 0), len(hosts))
    return peak, overlapped


def test_independent_partitions_roll_side_by_side_within_their_budgets(rollout, request):
    plan, result, events = rollout.apply(MULTI_V2, max_unavailable=1)
    assert result.ok, [e.message for e in events if not e.ok]
    assert rollout.touched() == set(HOSTS)
    steps = plan.schedule.by_id()
    assert steps["hopper-b#2"].after == ("hopper-b#1", "nvidia-hopper#1")
    starts = [e.wave for e in events if e.kind == "wave-start"]
    assert set(starts[:2]) == {"nvidia-hopper#1 (canary)", "hopper-b#1 (canary)"}  # the canaries first
    peak, overlapped = out_at_once(events)
    assert overlapped  # the two lanes were at work at the same time
    assert peak == {"nvidia-hopper": 1, "hopper-b": 1}
    assert {h: s for h, (s, _) in rollout.settled().items()} == dict.fromkeys(HOSTS, "idle")
    version = rollout.cluster.run("sinfo", "--version").stdout.split()[-1]
    assert version.startswith(request.node.callspec.params["cluster"] + "."), version  # the release that drained
    state = rollout.store.read()
    assert state.nodes == {} and state.applied == compile_file(MULTI_V2).fleet  # recorded as applied


@pytest.mark.parametrize("cluster", ["22.05"], indirect=True)  # the controller's carry logic: release-free
def test_a_job_that_outlives_the_drain_timeout_is_carried_and_the_rollout_goes_on(rollout, tmp_path):
    """h200-003's job ends once its node was carried over: the carry round upgrades it.
    h200-006's job never ends: that node goes back to work unchanged, the apply says so,
    the state leaves it pending, and the next apply (once it is idle) takes it."""
    jobs = {}
    for host, part in (("h200-003", "nvidia-hopper"), ("h200-006", "hopper-b")):
        job = rollout.cluster.sbatch("-p", part, "-w", host, "-N", "1", script="#!/bin/sh\nsleep 300\n")
        jobs[host] = job.stdout.split()[-1]
        rollout.cluster.wait_job(jobs[host], {"RUNNING"})

    stream = io.StringIO()
    made = []

    def report(plan):
        text = TextReport(Console(file=stream, width=250, emoji=False, highlight=False), tmp_path / "apply.log",
                          [(wave_name(w), w.hosts) for w in plan.waves])
        made.append(text)

        def sink(event):
            text.emit(event)
            if event.kind == "carried" and event.hosts == ("h200-003",):
                rollout.cluster.run("scancel", jobs["h200-003"])
        return sink

    started = time.monotonic()
    plan, result, events = rollout.apply(MULTI_V2, max_unavailable=1, drain_timeout_s=3, report=report)
    assert result.ok, [e.message for e in events if not e.ok]
    assert result.carried == ("h200-006",)
    made[0].finish(result)
    summary = stream.getvalue().split("apply summary")[-1]
    assert "carried over" in summary and "h200-006" in summary and "back at work" in summary, summary
    carried = [(e.wave, e.hosts) for e in events if e.kind == "carried"]
    assert ("nvidia-hopper#3", ("h200-003",)) in carried and ("hopper-b#2", ("h200-006",)) in carried
    assert carried[-1] == (None, ("h200-006",))  # the summary names the node left over
    waves = [e.wave for e in events if e.kind == "wave-done"]
    assert "nvidia-hopper#4" in waves and "nvidia-hopper#3 (carried)" in waves  # went on, then came back
    assert rollout.touched() == set(HOSTS) - {"h200-006"}
    peak, _ = out_at_once(events)
    assert peak == {"nvidia-hopper": 1, "hopper-b": 1}
    settled = rollout.settled()
    assert settled["h200-006"][0] in ("allocated", "mixed")  # back at work, its job still running
    done = [e for e in events if e.kind == "done"]
    assert done and "1 node(s) carried over" in done[0].message
    # The state records everything but h200-006: the next plan has only its change left.
    state = rollout.store.read()
    left = plan_against_state(compile_file(MULTI_V2).fleet, state)
    assert sorted({c.host for c in left.changes if c.host}) == ["h200-006"]
    rollout.cluster.run("scancel", jobs["h200-006"])
    rollout.cluster.wait_job(jobs["h200-006"], {"CANCELLED", "COMPLETED"})
    _, again, events = rollout.apply(MULTI_V2, max_unavailable=1, drain_timeout_s=20)
    assert again.ok and again.carried == (), [e.message for e in events if not e.ok]
    assert rollout.touched() == set(HOSTS)
    assert time.monotonic() - started < 150
