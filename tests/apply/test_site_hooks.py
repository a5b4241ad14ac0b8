"""ansible.hooks run for real (ansible-runner, the harness's Slurm nodes) inside each wave:
after the drain, around fleetspec's playbooks, before verify; a failing hook stops the
wave and leaves it drained."""

from __future__ import annotations

import pytest

from fleetspec.lab.slurm import Cluster
from fleetspec.pipeline import compile_file
from fleetspec.render.slurm import render_slurm
from tests.apply.harness import HERE, HOSTS, V1, Rollout

pytestmark = pytest.mark.slurm
V2_HOOKS = HERE / "specs" / "v2-hooks.yaml"


@pytest.fixture
def rollout(slurm_installed, tmp_path):
    c = Cluster(tmp_path / "slurm", render_slurm(compile_file(V1).fleet))
    c.start()
    yield Rollout(c, tmp_path)
    c.stop()


def test_hooks_run_inside_each_wave_after_the_drain(rollout):
    plan, result, events = rollout.apply(V2_HOOKS)
    assert result.ok, [e.message for e in events if not e.ok]
    assert {h for w in plan.waves for h in w.hosts} == set(HOSTS)
    markers = rollout.markers
    for host in HOSTS:
        # The before hook saw its node drained (by fleetspec, for this wave).
        assert "drain" in (markers / f"before-{host}").read_text(), host
        assert (markers / f"after-{host}").exists(), host  # after site.yml had run there
    for wave in {e.wave for e in events if e.wave}:
        kinds = [e.kind for e in events if e.wave == wave and e.kind in ("drain", "hook", "playbook", "verify",
                                                                       "resume", "wave-done")]
        assert kinds == ["drain", "hook", "hook", "playbook", "verify", "wave-done"], (wave, kinds)
    assert all(state == "idle" for state, _ in rollout.settled().values()), rollout.sinfo()


def test_a_failing_hook_stops_its_wave_drained(rollout):
    _, result, events = rollout.apply(V2_HOOKS, hook_fail_hosts=["h200-001"])
    assert not result.ok and result.drained == ("h200-001",)
    error = next(e for e in events if e.kind == "error")
    assert "hooks/site-mounts.yml" in error.message and "site mount failed" in error.message
    state, reason = rollout.settled()["h200-001"]
    assert state.startswith("drain") and "site-mounts" in reason
