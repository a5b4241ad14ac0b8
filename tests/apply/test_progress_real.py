"""The progress model on a live ansible-runner run (not the recording): the playbook of
tests/apply/runner_events.py runs again for real, and each host ends in the state, counts
and failure the recording gives. This keeps the recording honest for the installed
ansible-core and ansible-runner (re-record with ``python -m tests.apply.runner_events``)."""

from __future__ import annotations

import re

from fleetspec.apply.progress import Progress
from fleetspec.apply.rollout import ApplyEvent
from tests.apply.runner_events import HOSTS, apply_events, recorded, run

WAVE = "gpu#1 (canary)"


def _outcome(raw: list[dict]) -> dict[str, tuple]:
    progress = Progress([(WAVE, HOSTS)])
    for event in [ApplyEvent("wave-start", "", WAVE, HOSTS), *apply_events(raw, WAVE)]:
        progress.update(event)
    return {h.name: (h.state, h.ok, h.changed, h.failed, h.ignored, h.task, re.sub(r"port \d+", "port N", h.error))
            for h in progress.groups[WAVE].hosts.values()}


def test_a_live_run_gives_the_progress_of_the_recording(tmp_path):
    live = _outcome(run(tmp_path))
    assert live == _outcome(recorded())
    assert live["gpu-a02"][0] == "failed" and live["gpu-a01"][:3] == ("applying", 3, 2)
