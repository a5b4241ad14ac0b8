"""What `fleetspec apply` prints in text mode: milestones, failures and a summary table
on the console; every event, per-host task results included, in the event log file."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from fleetspec.apply.report import TextReport
from fleetspec.apply.rollout import ApplyEvent, ApplyResult

HOSTS = ("h100-001", "h100-002", "h100-003")


def _events() -> list[ApplyEvent]:
    events = [ApplyEvent("wave-start", "wave nvidia-hopper#1 (canary): 1 node(s), drain", "nvidia-hopper#1 (canary)",
                         HOSTS[:1])]
    events += [ApplyEvent("host", f"h100-001: Hold the pinned packages ({pkg}): changed", "nvidia-hopper#1 (canary)",
                          HOSTS[:1]) for pkg in ("libnccl2", "libnccl-dev", "cuda-toolkit-13-0")] * 6
    events += [ApplyEvent("wave-done", "wave nvidia-hopper#1 (canary) done; nodes resumed", "nvidia-hopper#1 (canary)",
                          HOSTS[:1]),
               ApplyEvent("wave-start", "wave nvidia-hopper#2: 2 node(s), drain", "nvidia-hopper#2", HOSTS[1:]),
               ApplyEvent("host", "h100-003: Install NCCL (libnccl2): failed: no candidate", "nvidia-hopper#2",
                          HOSTS[2:], ok=False),
               ApplyEvent("error", "wave nvidia-hopper#2 stopped: playbook failed", "nvidia-hopper#2", HOSTS[1:],
                          ok=False)]
    return events


def test_console_shows_milestones_failures_and_a_summary_and_the_log_has_everything(tmp_path: Path) -> None:
    stream = io.StringIO()
    report = TextReport(Console(file=stream, width=200), tmp_path / "fleet.apply.log")
    for event in _events():
        report.emit(event)
    report.finish(ApplyResult(False, "wave nvidia-hopper#2 failed: playbook failed"))
    shown = stream.getvalue()
    assert f"event log: {tmp_path / 'fleet.apply.log'}" in shown
    assert "Hold the pinned packages" not in shown  # 18 task lines: in the log, not on the screen
    assert "h100-003: Install NCCL (libnccl2): failed: no candidate" in shown  # a failure shows at once
    summary = shown[shown.index("apply summary"):]
    rows = {line.split("│")[1].strip(): line for line in summary.splitlines() if line.startswith("│")}
    assert "done" in rows["nvidia-hopper#1 (canary)"] and "failed" in rows["nvidia-hopper#2"]
    assert "h100-[002-003]" in rows["nvidia-hopper#2"]
    assert len(shown.splitlines()) < 20
    assert (tmp_path / "fleet.apply.log").stat().st_mode & 0o077 == 0  # like the state: the owner's only
    log = (tmp_path / "fleet.apply.log").read_text().splitlines()
    assert len(log) == len(_events())
    assert sum("Hold the pinned packages (libnccl-dev): changed" in line for line in log) == 6  # item names kept
