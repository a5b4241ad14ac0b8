"""The apply progress model (fleetspec/apply/progress.py), fed the event dicts of a real
ansible-runner run (tests/apply/data/runner_events.json, recorded by
``python -m tests.apply.runner_events``) through run_playbook's collector and the
rollout's host-event hook, with the rollout's own wave milestones around them."""

from __future__ import annotations

from fleetspec.apply.progress import Progress
from fleetspec.apply.rollout import ApplyEvent
from fleetspec.secrets import Redactor
from tests.apply.runner_events import FAILING, HOSTS, MARKUP_TASK, UNREACHABLE, apply_events, recorded

WAVE = "gpu#1 (canary)"
OK_HOST = "gpu-a01"


def _fold(progress: Progress, events: list[ApplyEvent]) -> dict[str, list[str]]:
    """Each host's states, in the order the events moved it."""
    seen: dict[str, list[str]] = {}
    for event in events:
        for host in progress.update(event):
            seen.setdefault(host.name, []).append(host.state)
    return seen


def _wave(kind: str, hosts=HOSTS, ok: bool = True) -> ApplyEvent:
    return ApplyEvent(kind, f"{kind} {WAVE}", WAVE, tuple(hosts), ok)


def test_real_events_give_each_host_its_state_task_and_counts() -> None:
    progress = Progress([(WAVE, HOSTS), ("gpu#2", ("gpu-b01",))])
    tasks: dict[str, list[str]] = {h: [] for h in HOSTS}
    seen = _fold(progress, [_wave("wave-start")])
    for event in apply_events(recorded(), WAVE):
        for host in progress.update(event):
            seen[host.name].append(host.state)
        host = progress.groups[WAVE].hosts[event.hosts[0]]
        if not tasks[host.name] or tasks[host.name][-1] != host.task:
            tasks[host.name].append(host.task)
    assert seen == {OK_HOST: ["draining", "applying"], FAILING: ["draining", "applying", "failed"],
                    UNREACHABLE: ["draining", "applying", "failed"]}
    hosts = progress.groups[WAVE].hosts
    ok = hosts[OK_HOST]
    # ok: read, the markup task, record; changed: the marker, the loop (one item changed);
    # the ignored probe apart; the skipped reboot and install not counted.
    assert (ok.ok, ok.changed, ok.failed, ok.ignored) == (3, 2, 0, 1)
    assert ok.state == "applying" and ok.task == "Record that this host was converged"
    assert tasks[OK_HOST][:4] == ["Read the driver version", "Write the NCCL marker", "Hold the pinned packages",
                                  "Hold the pinned packages (libnccl2)"]  # the loop shows its items
    assert "Hold the pinned packages (cuda-toolkit-13-0)" in tasks[OK_HOST] and MARKUP_TASK in tasks[OK_HOST]
    failed = hosts[FAILING]
    assert (failed.ok, failed.changed, failed.failed, failed.ignored) == (2, 2, 1, 1)
    assert failed.error == "Install NCCL: no candidate for libnccl2=2.28.9-1+cuda13.0"
    dark = hosts[UNREACHABLE]
    assert dark.failed == 1 and dark.ok == 0
    assert dark.error.startswith("Read the driver version: unreachable: Task failed: Failed to connect to the host "
                                 "via ssh")
    assert progress.groups[WAVE].state == "applying" and progress.groups["gpu#2"].state == "pending"


def test_a_wave_that_passes_goes_through_verify_to_done() -> None:
    progress = Progress([(WAVE, (OK_HOST,))])
    mine = [e for e in recorded() if (e.get("event_data") or {}).get("host") in (None, OK_HOST)]
    events = [_wave("wave-start", (OK_HOST,)), ApplyEvent("drain", "drained", WAVE, (OK_HOST,)),
              *apply_events(mine, WAVE), _wave("playbook", (OK_HOST,)), _wave("verify", (OK_HOST,)),
              _wave("wave-done", (OK_HOST,))]
    assert _fold(progress, events) == {OK_HOST: ["draining", "applying", "verifying", "done"]}
    wave = progress.groups[WAVE]
    assert wave.state == "done" and wave.count("done") == 1


def test_a_failed_wave_stops_its_other_hosts_and_the_next_wave_never_starts() -> None:
    progress = Progress([(WAVE, HOSTS), ("gpu#2", ("gpu-b01",))])
    events = [_wave("wave-start"), *apply_events(recorded(), WAVE), _wave("error", ok=False)]
    seen = _fold(progress, events)
    assert seen[OK_HOST][-1] == "stopped" and seen[FAILING][-1] == "failed"
    assert progress.groups[WAVE].state == "failed" and progress.groups[WAVE].error == f"error {WAVE}"
    assert progress.groups["gpu#2"].state == "pending"
    assert progress.update(ApplyEvent("done", "applied")) == []  # nothing after a stop moves a stopped host


def test_the_converge_run_is_its_own_group_done_when_verified_or_when_apply_is_done() -> None:
    progress = Progress()
    ctl = "ctl-01"
    mine = [e for e in recorded() if (e.get("event_data") or {}).get("host") in (None, OK_HOST)]
    events = [ApplyEvent("converge", "converging 2 other host(s)", None, (OK_HOST, ctl)),
              *apply_events(mine, None),
              ApplyEvent("verify", f"{OK_HOST} run the partition's tuple", None, (OK_HOST,)),
              ApplyEvent("converge", "scontrol reconfigure: Slurm read the new partitions"),
              ApplyEvent("done", "applied: 3 change(s), 0 wave(s)")]
    assert _fold(progress, events) == {OK_HOST: ["applying", "done"], ctl: ["done"]}
    assert list(progress.groups) == ["converge"] and progress.groups["converge"].state == "done"


def test_task_names_items_and_messages_are_redacted_before_the_model_sees_them() -> None:
    progress = Progress([(WAVE, HOSTS)])
    redact = Redactor(["2.28.9-1+cuda13.0", "libnccl-dev"])
    events = [_wave("wave-start"), *apply_events(recorded(), WAVE, redact)]
    tasks = []
    for event in events:
        progress.update(event)
        tasks.append(progress.groups[WAVE].hosts[event.hosts[0]].task)
        assert "libnccl-dev" not in event.message and (event.task is None or event.task.item != "libnccl-dev")
    assert f"Hold the pinned packages ({Redactor.MASK})" in tasks
    assert progress.groups[WAVE].hosts[FAILING].error == f"Install NCCL: no candidate for libnccl2={Redactor.MASK}"


def test_while_a_wave_drains_each_host_shows_whether_jobs_still_hold_it() -> None:
    progress = Progress([(WAVE, HOSTS)])
    events = [_wave("wave-start"), ApplyEvent("busy", "waiting", WAVE, (FAILING, UNREACHABLE)),
              ApplyEvent("busy", "waiting", WAVE, (UNREACHABLE,))]
    assert _fold(progress, events) == {h: ["draining"] for h in HOSTS}  # still draining: the task says why
    assert {h.name: h.task for h in progress.groups[WAVE].hosts.values()} == {
        OK_HOST: "drained", FAILING: "drained", UNREACHABLE: "waiting for its jobs to end"}
    progress.update(ApplyEvent("busy", "drained", WAVE, ()))
    assert all(h.task == "drained" for h in progress.groups[WAVE].hosts.values())


def test_nodes_held_at_the_start_leave_the_waves_not_yet_started() -> None:
    """apply's 'held' event (nodes drained by someone else): they leave the plan's waves, and
    a wave left empty goes, so the summary never shows them pending."""
    from fleetspec.apply.progress import Progress
    from fleetspec.apply.rollout import ApplyEvent

    progress = Progress([("p#1 (canary)", ["a"]), ("p#2", ["b", "c"])])
    progress.update(ApplyEvent("held", "drained by someone else: a (RMA); c (RMA)", None, ("a", "c"), False))
    assert {name: list(g.hosts) for name, g in progress.groups.items()} == {"p#2": ["b"]}
