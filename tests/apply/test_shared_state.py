"""A real rollout on a shared PostgreSQL state, seen from another working copy.

One process applies the NCCL bump through the rollout harness (real slurmctld/slurmd,
real ansible-runner, a slow playbook run on h200-002) with its state in PostgreSQL.
Meanwhile, from a second working copy of the fleet repository, ``fleetspec plan`` is
refused naming that apply, ``plan --lock-timeout`` waits for it and then sees the
applied fleet, and a plan saved before the apply is refused by ``fleetspec apply``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from fleetspec.lab.slurm import Cluster
from fleetspec.pipeline import compile_file
from fleetspec.render.slurm import render_slurm
from fleetspec.state import STATE_DIR_ENV, STATE_ENV, open_state, parse_location
from tests.apply.harness import ROOT_DIR, V1, V2, Rollout

pytestmark = pytest.mark.slurm


@pytest.fixture
def cluster(slurm_installed, tmp_path):
    c = Cluster(tmp_path / "slurm", render_slurm(compile_file(V1).fleet))
    c.start()
    yield c
    c.stop()


def fleetspec(*args: str, cwd) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k not in (STATE_ENV, STATE_DIR_ENV)}
    env["PYTHONPATH"] = str(ROOT_DIR)
    return subprocess.Popen([sys.executable, "-m", "fleetspec.cli", *args], cwd=cwd, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def test_an_apply_on_a_shared_state_blocks_another_copys_plan_and_outdates_its_saved_plan(
        cluster, tmp_path, postgres_url):
    Rollout(cluster, tmp_path, state=postgres_url)  # the fleet as applied before: V1, serial 1
    copy = tmp_path / "other-copy"
    copy.mkdir()
    spec = shutil.copy(V2, copy / "fleet.yaml")
    saved = copy / "plan.json"
    assert fleetspec("plan", spec, "--state", postgres_url, "--out", saved, cwd=copy).wait(120) == 0

    apply = subprocess.Popen([sys.executable, "-m", "tests.apply.harness", str(cluster.root), str(tmp_path), str(V2),
                              "h200-002", postgres_url], cwd=ROOT_DIR, stdout=subprocess.PIPE,
                             start_new_session=True)
    shared = open_state(parse_location(postgres_url), "rollout")
    try:
        deadline = time.monotonic() + 120
        while shared.holder() is None or shared.holder().pid != apply.pid:
            assert time.monotonic() < deadline, "the apply never took the lock"
            assert apply.poll() is None, "the apply ended before the test could see it"
            time.sleep(0.2)
        refused = fleetspec("plan", spec, "--state", postgres_url, cwd=copy)
        assert refused.wait(120) == 1
        message = refused.stderr.read()
        assert f"pid {apply.pid}" in message and "running 'apply'" in message, message

        waiting = fleetspec("plan", spec, "--state", postgres_url, "--lock-timeout", "300", "--format", "json",
                            "--detailed-exitcode", cwd=copy)
        assert waiting.wait(300) == 0, waiting.stderr.read()  # after the apply: nothing left to do
        after = json.loads(waiting.stdout.read())
        assert apply.wait(120) == 0
    finally:
        if apply.poll() is None:
            os.killpg(apply.pid, 9)
            apply.wait()
    state = shared.read()
    assert after["state_serial"] == state.serial == 1 + 3 + 1  # initial, three waves, the final apply
    assert state.applied == compile_file(V2).fleet

    stale = fleetspec("apply", saved, "--state", postgres_url, "--yes", cwd=copy)
    assert stale.wait(120) == 1
    assert "the state moved since this plan was made (serial 1 -> 5 by " in stale.stderr.read()
    assert shared.read().serial == 5
