"""The first apply on a running cluster (issue #28 item 4): with an empty state, a node
that Slurm already has (here one with a running job) is not "new, provisioned before it
takes jobs": apply plans it as an adoption, drained through Slurm first, in waves with a
canary, so the converge run never installs drivers and NCCL under a job. Against a real
slurmctld and slurmd's (tests/apply/harness.py) and the stand-in playbook."""

from __future__ import annotations

import re

import pytest

from fleetspec.apply.cli import SlurmMode, _adopted
from fleetspec.apply.rollout import ApplyOptions, apply_plan
from fleetspec.lab.slurm import Cluster
from fleetspec.pipeline import compile_file
from fleetspec.plan import plan_against_state
from fleetspec.plan.model import Action, Disruption
from fleetspec.render.slurm import render_slurm
from tests.apply.harness import HOSTS, V1, Rollout

pytestmark = pytest.mark.slurm


@pytest.fixture
def cluster(slurm_installed, tmp_path):
    c = Cluster(tmp_path / "slurm", render_slurm(compile_file(V1).fleet))
    c.start()
    yield c
    c.stop()


def test_first_apply_on_a_running_cluster_drains_what_slurm_knows(cluster, tmp_path, monkeypatch):
    rollout = Rollout(cluster, tmp_path, initial=False)  # no state: fleetspec never applied here
    job = cluster.sbatch("-p", "nvidia-hopper", "-w", "h200-001", "-N", "1", script="#!/bin/sh\nsleep 60\n")
    job_id = job.stdout.split()[-1]
    cluster.wait_job(job_id, {"RUNNING"})
    fleet = compile_file(V1).fleet
    try:
        with rollout.store.lock("apply"):
            naive = plan_against_state(fleet, rollout.store.read())
            assert not naive.waves  # before #28: every node "new", no drain at all
            monkeypatch.setenv("SLURM_CONF", str(cluster.conf))  # --slurm-control local, as apply builds it
            plan = _adopted(naive, None, None, SlurmMode.local)
            nodes = {c.host: c for c in plan.changes if c.host in HOSTS}
            assert all(c.action is Action.UPDATE and c.disruption is Disruption.DRAIN for c in nodes.values())
            assert re.search(r"Slurm already has it \(state (allocated|mixed)\)", nodes["h200-001"].reason)
            assert plan.waves[0].canary and plan.waves[0].hosts == ("h200-001",)
            assert sorted(h for w in plan.waves for h in w.hosts) == HOSTS
            events = []
            result = apply_plan(plan, rollout.store, rollout.engines(), ApplyOptions(drain_timeout_s=3),
                                events.append)
        # The canary holds a job: it is drained and waited for, never changed under it.
        assert not result.ok and "jobs still running on h200-001" in result.message
        assert rollout.touched() == set()  # no playbook ran on any node
        state, reason = rollout.sinfo()["h200-001"]
        assert "drain" in state and reason.startswith("fleetspec: ")
    finally:
        cluster.run("scancel", job_id, check=False)


def test_plan_live_shows_the_adoption_apply_will_run(cluster, tmp_path, monkeypatch):
    """``plan --live`` asks Slurm as apply does: the plan the operator reviews has the same
    adoption, waves and canary as apply's own plan; without --live it says it did not ask."""
    import json

    from typer.testing import CliRunner

    from fleetspec.cli import app
    from fleetspec.state import StateStore

    job = cluster.sbatch("-p", "nvidia-hopper", "-w", "h200-002", "-N", "1", script="#!/bin/sh\nsleep 60\n")
    job_id = job.stdout.split()[-1]
    try:
        cluster.wait_job(job_id, {"RUNNING"})
        monkeypatch.setenv("SLURM_CONF", str(cluster.conf))
        state = tmp_path / "state"
        args = ["plan", str(V1), "--state", str(state), "--slurm-control", "local", "--format", "json"]
        live = CliRunner().invoke(app, [*args, "--live"])
        assert live.exit_code == 0, live.output
        planned = json.loads(live.output)
        fleet = compile_file(V1).fleet
        applied = _adopted(plan_against_state(fleet, StateStore(state, fleet.name).read()), None, None,
                           SlurmMode.local).to_dict()
        assert planned["changes"] == applied["changes"] and planned["waves"] == applied["waves"]
        assert planned["membership"]["live"] is True and "Slurm (sinfo): 4 of 4" in planned["membership"]["asked"]
        reason = {c["target"]: c["reason"] for c in planned["changes"]}["node:h200-002"]
        assert re.search(r"Slurm already has it \(state (allocated|mixed)\)", reason)
        offline = json.loads(CliRunner().invoke(app, args).output)
        assert offline["membership"] == {"live": False} and not offline["waves"]
    finally:
        cluster.run("scancel", job_id, check=False)
