"""What `fleetspec apply` prints in text mode: off a terminal, milestones and one plain line
per host state change, no escape codes; on a terminal, milestones and failures as lines and
a live view of the waves and of the running wave's hosts, bounded in height; both end with
a summary table, and every event is in the event log file. Host events are made the way
apply makes them (run_playbook's collector and the rollout's host-event hook), most from
a real ansible-runner run (tests/apply/data/runner_events.json)."""

from __future__ import annotations

import io
import json
import os
import pty
import re
import subprocess
import sys
from pathlib import Path

from rich.console import Console

from fleetspec.apply.ansible import HostEvent
from fleetspec.apply.progress import Progress
from fleetspec.apply.report import TextReport, live_view
from fleetspec.apply.rollout import ApplyEvent, ApplyResult, _host_event
from fleetspec.secrets import Redactor
from tests.apply.runner_events import FAILING, HOSTS, MARKUP_TASK, UNREACHABLE, apply_events, recorded

ROOT = Path(__file__).resolve().parents[2]
W1, W2 = "nvidia-hopper#1 (canary)", "nvidia-hopper#2"
NODES = ("h100-001", "h100-002", "h100-003")
WAVE = "gpu#1 (canary)"
MARKUP_HOST = "[bold]gpu-x[/]:fire:"


def _host(wave: str, host: str, task: str, status: str, item: str | None = None, message: str = "",
          per_item: bool = False) -> ApplyEvent:
    made: list[ApplyEvent] = []
    _host_event(lambda *a, **k: made.append(ApplyEvent(*a, **k)), Redactor(), wave,
                HostEvent(host, task, status, message, item, per_item))
    return made[0]


def _events() -> list[ApplyEvent]:
    events = [ApplyEvent("wave-start", f"wave {W1}: 1 node(s), drain", W1, NODES[:1]),
              _host(W1, NODES[0], "Hold the pinned packages", "started")]
    events += [_host(W1, NODES[0], "Hold the pinned packages", "changed", pkg, per_item=True)
               for pkg in ("libnccl2", "libnccl-dev", "cuda-toolkit-13-0")] * 6
    events += [_host(W1, NODES[0], "Hold the pinned packages", "changed"),
               ApplyEvent("playbook", f"playbooks ran on {NODES[0]} (1 changed)", W1, NODES[:1]),
               ApplyEvent("wave-done", f"wave {W1} done; nodes resumed", W1, NODES[:1]),
               ApplyEvent("wave-start", f"wave {W2}: 2 node(s), drain", W2, NODES[1:]),
               _host(W2, NODES[2], "Install NCCL", "started", "libnccl2"),
               _host(W2, NODES[2], "Install NCCL", "failed", "libnccl2", "no candidate"),
               ApplyEvent("error", f"wave {W2} stopped: playbook failed", W2, NODES[1:], ok=False)]
    return events


def _plain(tmp_path: Path, events: list[ApplyEvent], waves=(), result=None) -> str:
    stream = io.StringIO()
    report = TextReport(Console(file=stream, width=200, emoji=False, highlight=False), tmp_path / "fleet.apply.log",
                        waves)
    for event in events:
        report.emit(event)
    report.finish(result)
    return stream.getvalue()


def test_off_a_terminal_one_plain_line_per_host_state_change_a_summary_and_the_log_has_everything(tmp_path):
    shown = _plain(tmp_path, _events(), [(W1, NODES[:1]), (W2, NODES[1:]), ("nvidia-hopper#3", ("h100-004",))],
                   ApplyResult(False, f"wave {W2} failed: playbook failed"))
    assert "\x1b" not in shown  # no escape codes in a CI log
    lines = shown.splitlines()
    assert lines[0] == f"event log: {tmp_path / 'fleet.apply.log'}"
    assert "Hold the pinned packages" not in shown  # 19 task results: in the log, not on the screen
    host_lines = [line for line in lines if line.startswith("nvidia-hopper#")]
    assert host_lines == [
        f"{W1}: h100-001: draining", f"{W1}: h100-001: applying", f"{W1}: h100-001: verifying",
        f"{W1}: h100-001: done (ok 0, changed 1)",
        f"{W2}: h100-002: draining", f"{W2}: h100-003: draining", f"{W2}: h100-003: applying",
        f"{W2}: h100-003: failed: Install NCCL (libnccl2): no candidate",
        f"{W2}: h100-002: stopped: the wave failed, the node stays drained",
    ]
    summary = shown[shown.index("apply summary"):]
    rows = {line.split("│")[1].strip(): line for line in summary.splitlines() if line.startswith("│")}
    assert "done" in rows[W1] and "failed" in rows[W2] and "not started" in rows["nvidia-hopper#3"]
    assert "h100-[002-003]" in rows[W2]
    assert (tmp_path / "fleet.apply.log").stat().st_mode & 0o077 == 0  # like the state: the owner's only
    log = (tmp_path / "fleet.apply.log").read_text().splitlines()
    assert len(log) == len(_events()) - 2  # every event but a task starting
    assert sum("Hold the pinned packages (libnccl-dev): changed" in line for line in log) == 6  # item names kept


def test_the_plain_lines_of_a_real_run_name_each_host_and_show_names_as_written(tmp_path):
    events = [ApplyEvent("wave-start", f"wave {WAVE}: 4 node(s), drain", WAVE, (*HOSTS, MARKUP_HOST)),
              *apply_events(recorded(), WAVE),
              _host(WAVE, MARKUP_HOST, "Pin [red]it[/] :fire:", "started"),
              _host(WAVE, MARKUP_HOST, "Pin [red]it[/] :fire:", "failed", message="[blink]no[/] :boom:"),
              ApplyEvent("error", f"wave {WAVE} stopped: playbook failed", WAVE, (*HOSTS, MARKUP_HOST), ok=False)]
    shown = _plain(tmp_path, events)
    assert "\x1b" not in shown
    host_lines = [line for line in shown.splitlines() if line.startswith(f"{WAVE}: ")]
    assert all(re.fullmatch(rf"{re.escape(WAVE)}: (gpu-a0\d|{re.escape(MARKUP_HOST)}): "
                            r"(draining|applying|failed: .+|stopped: .+)", line) for line in host_lines), host_lines
    per_host = {h: [line.split(": ", 2)[2] for line in host_lines if line.split(": ")[1] == h]
                for h in (*HOSTS, MARKUP_HOST)}
    assert per_host["gpu-a01"] == ["draining", "applying", "stopped: the wave failed, the node stays drained"]
    assert per_host[FAILING] == ["draining", "applying",
                                 "failed: Install NCCL: no candidate for libnccl2=2.28.9-1+cuda13.0"]
    assert per_host[UNREACHABLE][2].startswith("failed: Read the driver version: unreachable: Task failed: "
                                               "Failed to connect to the host via ssh")
    # Markup and emoji codes in a host name, a task name and a message print as written.
    assert per_host[MARKUP_HOST] == ["draining", "applying", "failed: Pin [red]it[/] :fire:: [blink]no[/] :boom:"]
    assert "🔥" not in shown and "💥" not in shown


def _terminal(width: int = 120) -> tuple[Console, io.StringIO]:
    stream = io.StringIO()
    return Console(file=stream, width=width, height=40, force_terminal=True, color_system=None, emoji=False,
                   highlight=False), stream


def test_the_live_view_has_a_line_per_wave_and_per_host_and_shows_names_as_written():
    progress = Progress([(WAVE, (*HOSTS, MARKUP_HOST)), ("gpu#2", ("gpu-b01", "gpu-b02"))])
    progress.update(ApplyEvent("wave-start", "wave", WAVE, (*HOSTS, MARKUP_HOST)))
    events = apply_events(recorded(), WAVE)
    last = max(i for i, e in enumerate(events) if e.task and e.task.task == MARKUP_TASK and e.task.status == "started")
    for event in [*events[:last + 1], _host(WAVE, MARKUP_HOST, "Pin [red]it[/] :fire:", "started")]:
        progress.update(event)
    console, stream = _terminal()
    console.print(live_view(progress, 10, elapsed=192.5))
    lines = [line.rstrip() for line in stream.getvalue().splitlines()]
    assert lines[0].endswith("apply: 0/2 waves, 0/6 nodes done, 1 failed")
    assert re.fullmatch(r"gpu#1 \(canary\)\s+applying\s+0/4 done, 1 failed  3m12s", lines[1]), lines
    assert re.fullmatch(r"gpu#2\s+pending\s+0/2 done", lines[2]), lines
    rows = {line.split()[0]: line for line in lines[3:]}
    assert set(rows) == {*HOSTS, MARKUP_HOST}  # one line per host of the running wave
    for host in ("gpu-a01", FAILING):  # at the markup task, through the loop and the ignored probe
        assert re.fullmatch(rf"\s+{host}\s+applying\s+ok 1, changed 2, failed 0, ignored 1\s+{re.escape(MARKUP_TASK)}",
                            rows[host]), rows[host]
    assert re.search(r"gpu-a03\s+failed\s+ok 0, changed 0, failed 1\s+Read the driver version: unreachable",
                     rows[UNREACHABLE])
    assert re.search(rf"{re.escape(MARKUP_HOST)}\s+applying\s+ok 0, changed 0, failed 0\s+"
                     r"Pin \[red\]it\[/\] :fire:$", rows[MARKUP_HOST]), rows[MARKUP_HOST]
    assert lines.index(rows[UNREACHABLE]) == 3  # failed hosts first
    assert "🔥" not in stream.getvalue()


def test_the_live_view_stays_short_for_a_big_wave_and_many_waves():
    names = [f"gpu#{i}" for i in range(1, 13)]
    hosts = {name: [f"{name[4:]}-n{j:03d}" for j in range(300 if name == "gpu#6" else 10)] for name in names}
    progress = Progress([(name, hosts[name]) for name in names])
    for name in names[:5]:
        progress.update(ApplyEvent("wave-start", "", name, tuple(hosts[name])))
        progress.update(ApplyEvent("wave-done", "", name, tuple(hosts[name])))
    big = hosts["gpu#6"]
    progress.update(ApplyEvent("wave-start", "", "gpu#6", tuple(big)))
    for i, host in enumerate(big[:250]):
        progress.update(_host("gpu#6", host, "Install the driver", "started"))
        if i in (17, 101, 249):
            progress.update(_host("gpu#6", host, "Install the driver", "failed", message="dpkg lock"))
    console, stream = _terminal()
    console.print(live_view(progress, 10, elapsed=3725))
    lines = stream.getvalue().splitlines()
    assert len(lines) == 1 + 3 + 10, lines  # headline, done/pending/running waves, 10 host lines
    assert "5 wave(s) done" in lines[1] and "50 node(s)" in lines[1]
    assert "6 wave(s) to come" in lines[2] and "60 node(s)" in lines[2]
    assert re.search(r"gpu#6\s+applying\s+0/300 done, 3 failed  1h02m", lines[3])  # a drain waits: how long
    assert [line.split()[0] for line in lines[4:7]] == ["6-n017", "6-n101", "6-n249"]  # every failed host shows
    assert re.search(r"6-n017 +failed {4}ok 0, changed 0, failed 1  Install the driver: dpkg lock", lines[4])  # narrow
    assert all(" applying " in line for line in lines[7:13])
    assert re.search(r"\.\.\. 291 more\s+241 applying, 50 draining", lines[13]), lines[13]


PTY_SCRIPT = """
import sys, tempfile
from pathlib import Path
from fleetspec.apply.report import TextReport
from fleetspec.apply.rollout import ApplyEvent, ApplyResult
from fleetspec.console import lazy_consoles
from tests.apply.runner_events import HOSTS, MARKUP_TASK, apply_events, recorded
out, _ = lazy_consoles()
wave = "gpu#1 (canary)"
report = TextReport(out, Path(tempfile.mkdtemp()) / "fleet.apply.log", [(wave, HOSTS)])
report.emit(ApplyEvent("wave-start", "wave gpu#1 (canary): 3 node(s), drain", wave, HOSTS))
for event in apply_events(recorded(), wave):
    report.emit(event)
    if event.task.task == MARKUP_TASK and event.task.status == "started":
        report.emit(ApplyEvent("hook", "a milestone: the live view shows where each host is", wave))
report.emit(ApplyEvent("error", "wave gpu#1 (canary) stopped: playbook failed", wave, HOSTS, ok=False))
report.finish(ApplyResult(False, "wave gpu#1 (canary) failed"))
"""


def test_on_a_real_terminal_the_live_view_shows_each_host_and_the_plain_lines_do_not(tmp_path):
    """A real pseudo-terminal, the console apply uses (fleetspec.console), and real events."""
    parent, child = pty.openpty()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "120", "LINES": "40", "TERM": "xterm-256color"}
    env.pop("NO_COLOR", None)
    proc = subprocess.Popen([sys.executable, "-c", PTY_SCRIPT], stdin=child, stdout=child, stderr=child, env=env,
                            cwd=ROOT)
    os.close(child)
    chunks = []
    while True:
        try:
            data = os.read(parent, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(parent)
    assert proc.wait(timeout=60) == 0, b"".join(chunks).decode(errors="replace")
    raw = b"".join(chunks).decode()
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", raw)
    assert "\x1b[" in raw  # a terminal: the live view moves the cursor
    assert re.search(rf"gpu-a01\s+applying\s+ok \d+, changed \d+, failed 0, ignored 1\s+{re.escape(MARKUP_TASK)}",
                     text), text  # a host line of the live view, the task's markup as written
    assert re.search(r"gpu-a02\s+failed\s+ok 2, changed 2, failed 1", text)
    assert "gpu#1 (canary): gpu-a02: failed: Install NCCL: no candidate" in text  # a failure stays as a line
    assert "gpu#1 (canary): gpu-a01: applying" not in text  # the plain lines are for logs, not terminals
    assert "apply summary" in text and "🔥" not in text


def test_json_events_carry_task_results_but_not_task_progress(capsys):
    from fleetspec.apply.cli import ApplyFormat, _emitter

    emit = _emitter(ApplyFormat.json)
    for status in ("started", "ok", "skipped", "changed", "failed"):
        emit(_host(W1, NODES[0], "Install NCCL", status, "libnccl2"))
    printed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(e["status"], e["task"], e["item"], e["ok"]) for e in printed] == [
        ("changed", "Install NCCL", "libnccl2", True), ("failed", "Install NCCL", "libnccl2", False)]


def test_an_apply_that_did_not_finish_never_shows_a_wave_running(tmp_path):
    """Ctrl-C (or an error apply raised) during a wave: the CLI calls finish(None). The
    summary must not say the wave is still running, and names the nodes it may leave drained."""
    events = [ApplyEvent("wave-start", f"wave {W1}: 1 node(s), drain", W1, NODES[:1]),
              ApplyEvent("wave-done", f"wave {W1} done; nodes resumed", W1, NODES[:1]),
              ApplyEvent("wave-start", f"wave {W2}: 2 node(s), drain", W2, NODES[1:]),
              _host(W2, NODES[2], "Install NCCL", "started", "libnccl2")]
    shown = _plain(tmp_path, events, [(W1, NODES[:1]), (W2, NODES[1:]), ("nvidia-hopper#3", ("h100-004",))], None)
    summary = shown[shown.index("apply summary"):]
    rows = {line.split("│")[1].strip(): line for line in summary.splitlines() if line.startswith("│")}
    assert "running" not in summary
    assert "done" in rows[W1] and "interrupted" in rows[W2] and "not started" in rows["nvidia-hopper#3"]
    assert (f"apply did not finish: wave {W2} stopped while applying; h100-[002-003] may be left drained. "
            "Run apply again to finish it") in " ".join(shown.split())


def test_json_mode_ends_an_apply_that_did_not_finish_with_an_interrupted_event(capsys):
    """`apply --format json`: Ctrl-C during a wave (the CLI calls finish(None)) ends the stream
    with one `interrupted` event naming the wave left at work and its hosts, as the text
    summary does; a finished apply adds nothing after its own last event."""
    from fleetspec.apply.report import JsonReport

    events = [ApplyEvent("wave-start", f"wave {W1}: 1 node(s), drain", W1, NODES[:1]),
              ApplyEvent("wave-done", f"wave {W1} done; nodes resumed", W1, NODES[:1]),
              ApplyEvent("wave-start", f"wave {W2}: 2 node(s), drain", W2, NODES[1:]),
              _host(W2, NODES[2], "Install NCCL", "started", "libnccl2")]
    report = JsonReport([(W1, NODES[:1]), (W2, NODES[1:])])
    for event in events:
        report.emit(event)
    report.finish(None)
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [e["event"] for e in lines] == ["wave-start", "wave-done", "wave-start", "interrupted"]  # no "started"
    assert lines[-1] == {"event": "interrupted", "wave": W2, "hosts": list(NODES[1:]), "ok": False, "message":
                         f"apply did not finish: wave {W2} stopped while applying; h100-[002-003] may be left "
                         "drained. Run apply again to finish it"}
    report = JsonReport([(W1, NODES[:1])])
    report.emit(ApplyEvent("done", "applied: 1 change(s), 1 wave(s)"))
    report.finish(ApplyResult(True, "applied"))
    assert [json.loads(line)["event"] for line in capsys.readouterr().out.splitlines()] == ["done"]


def test_json_mode_says_when_an_apply_stopped_before_a_wave(tmp_path):
    """The CLI's error path (here: a secret the spec names does not exist, found after the
    plan was shown) ends the JSON stream with an `interrupted` event too, nothing drained."""
    import shutil

    from typer.testing import CliRunner

    from fleetspec.cli import app
    from tests.conftest import EXAMPLES

    spec = tmp_path / "fleet.yaml"
    shutil.copy(EXAMPLES / "quickstart.yaml", spec)
    result = CliRunner().invoke(app, ["apply", str(spec), "--yes", "--state", str(tmp_path / "state"),
                                      "--format", "json"])
    assert result.exit_code == 1
    last = json.loads(result.stdout.splitlines()[-1])
    assert last == {"event": "interrupted", "wave": None, "hosts": [], "ok": False,
                    "message": "apply did not finish: no wave was at work, none is left drained. Run apply again "
                               "to finish it"}
    assert "error: secret 'munge_key'" in result.stderr
