"""Rolling waves against a real Slurm controller and real ansible-runner runs.

The fleet's four H200 nodes are real slurmd's (one machine, loopback); drain, resume and
the drain reasons are read back with sinfo. The playbook is a small stand-in for
site.yml run for real by ansible-runner over local connections (it records which
hosts it touched and fails where a test says). Verify uses the real comparison on the
real H200 node's facts (../shared/fixtures), upgraded where the playbook ran.
"""

from __future__ import annotations

import copy
import time
from pathlib import Path

import pytest
import yaml

from fleetspec.apply.ansible import run_playbook
from fleetspec.apply.control import SlurmControl, local_runner
from fleetspec.apply.rollout import ApplyOptions, Engines, apply_plan
from fleetspec.compile import compile_file
from fleetspec.lab.slurm import Cluster
from fleetspec.plan import plan_against_state
from fleetspec.render.slurm import render_slurm
from fleetspec.secrets import Redactor
from fleetspec.state import StateStore
from fleetspec.verify.compare import compare
from tests.verify.h200_facts import h200_facts

HERE = Path(__file__).resolve().parent
V1, V2 = HERE / "specs" / "v1.yaml", HERE / "specs" / "v2.yaml"
HOSTS = ["h200-001", "h200-002", "h200-003", "h200-004"]

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


def upgraded(facts: dict, nccl: str) -> dict:
    """The node after the playbook moved its system NCCL (the venv copy stays a shadow)."""
    out = copy.deepcopy(facts)
    for lib in out["nccl"]["libraries"]:
        if lib["origin"] == "system":
            lib["version"] = nccl
    out["nccl"]["versions"] = sorted({lib["version"] for lib in out["nccl"]["libraries"]})
    return out


class Rollout:
    def __init__(self, cluster: Cluster, tmp: Path) -> None:
        self.cluster = cluster
        self.markers = tmp / "markers"
        self.markers.mkdir()
        self.inventory = tmp / "inventory.yml"
        self.inventory.write_text(yaml.safe_dump({"all": {
            "hosts": {h: {"ansible_connection": "local", "ansible_python_interpreter": "python3"} for h in HOSTS},
            "vars": {"marker_dir": str(self.markers)},
        }}))
        self.store = StateStore(tmp / "state", "rollout")
        self.broken_after_upgrade: set[str] = set()
        with self.store.lock("test"):
            self.store.record_applied(compile_file(V1).fleet, "initial fleet")

    def verify(self, fleet, hosts):
        facts = {}
        for host in hosts:
            ran = (self.markers / host).exists() and host not in self.broken_after_upgrade
            facts[host] = upgraded(h200_facts(host), "2.28.9") if ran else h200_facts(host)
        return compare(fleet, facts, hosts=hosts)

    def engines(self, fail_hosts=(), fail_message=None) -> Engines:
        def playbook(**kwargs):
            extra = {"fail_hosts": list(fail_hosts), **({"fail_message": fail_message} if fail_message else {})}
            kwargs["extravars"] = {**kwargs.get("extravars", {}), **extra}
            return run_playbook(self.inventory, project_dir=HERE / "playbook", **kwargs)

        return Engines(run_playbook=playbook, verify=self.verify,
                       slurm=SlurmControl(local_runner({"SLURM_CONF": str(self.cluster.conf)}), poll_s=0.2),
                       kubernetes=None, all_hosts=lambda: list(HOSTS))

    def apply(self, spec: Path, fail_hosts=(), max_unavailable=2, fail_message=None, redact=None):
        events = []
        fleet = compile_file(spec).fleet
        with self.store.lock("apply"):
            plan = plan_against_state(fleet, self.store.read(), canary=1, max_unavailable=max_unavailable)
            result = apply_plan(plan, self.store, self.engines(fail_hosts, fail_message),
                                ApplyOptions(drain_timeout_s=20), events.append, redact)
        return plan, result, events

    def sinfo(self) -> dict[str, tuple[str, str]]:
        out = self.cluster.run("sinfo", "-h", "-N", "-o", "%N|%T|%E").stdout
        rows = [line.split("|") for line in out.splitlines()]
        return {r[0]: (r[1], r[2]) for r in rows}

    def settled(self, timeout: float = 60.0) -> dict[str, tuple[str, str]]:
        """sinfo once no node is still marked not-responding ("idle*": slurmctld pings a
        resumed node before it shows plain idle)."""
        end = time.monotonic() + timeout
        while True:
            states = self.sinfo()
            if not any(state.endswith("*") for state, _ in states.values()) or time.monotonic() > end:
                return states
            time.sleep(0.5)

    def touched(self) -> set[str]:
        return {p.name for p in self.markers.iterdir()}


def test_nccl_bump_rolls_through_waves_and_resumes_every_node(rollout):
    plan, result, events = rollout.apply(V2)
    assert [w.hosts for w in plan.waves] == [("h200-001",), ("h200-002",), ("h200-003", "h200-004")]
    assert result.ok, [e.message for e in events]
    assert rollout.touched() == set(HOSTS)
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
    assert control.wait_drained(["h200-001"], deadline_s=1.0) == ["h200-001"]
    rollout.cluster.run("scancel", job_id)
    assert control.wait_drained(["h200-001"], deadline_s=15.0) == []
    control.resume(["h200-001"])


def test_secrets_in_failure_output_are_masked_everywhere(rollout):
    secret = "db-pass-5f1c9e7a"
    _, result, events = rollout.apply(V2, fail_hosts=["h200-001"], fail_message=f"could not log in with {secret}",
                                      redact=Redactor([secret.encode()]))
    assert not result.ok
    texts = [e.message for e in events] + [reason for _, reason in rollout.sinfo().values()]
    assert any("********" in t for t in texts)
    assert not any(secret in t for t in texts)
    assert secret not in rollout.store.path.read_text()
