"""What `fleetspec apply` shows while it runs (text mode), drawn from the progress model
(`progress.py`).

On a terminal: the milestones of each wave (drain, playbooks, verify, resume) and each
failure as lines that stay, and under them a Rich live view: a line per wave (its hosts
done out of all, failures) and a line per host of the running wave (state, ok/changed/
failed task counts, the task it runs), bounded in height: failed and working hosts
first, the rest summed up in one line. Elsewhere (CI, pipelines, ``| tee``): the same
milestones and one plain line per host state change, ``WAVE: HOST: STATE``, no escape
codes. Both end with a summary table. Every event, each host's task results included,
goes to the event log file, whose path is printed first.

Nothing the user wrote (host, task and item names, messages) is read as Rich markup or an
emoji code: it goes into `rich.text.Text` or through `escape`, on the consoles of
`fleetspec/console.py`.
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from rich.markup import escape
from rich.table import Table
from rich.text import Text

from fleetspec.apply.progress import (
    ACTIVE,
    APPLYING,
    CONVERGE,
    DONE,
    DRAINING,
    FAILED,
    PENDING,
    STOPPED,
    VERIFYING,
    GroupProgress,
    HostProgress,
    Progress,
)
from fleetspec.safe_io import check_output_file

if TYPE_CHECKING:
    from rich.console import Console, RenderableType
    from rich.live import Live

    from fleetspec.apply.rollout import ApplyEvent, ApplyResult

_COLORS = {"error": "red", "wave-start": "bold", "wave-done": "green", "done": "bold green", "skipped": "yellow", "held": "yellow",
           "carried": "yellow"}
_STATE_STYLE = {FAILED: "red", DONE: "green", STOPPED: "yellow", APPLYING: "cyan", VERIFYING: "cyan"}
_RANK = {FAILED: 0, APPLYING: 1, VERIFYING: 2, DRAINING: 3, STOPPED: 4, PENDING: 5, DONE: 6}  # who shows first
MAX_HOST_LINES = 20  # the live view's host lines at most (fewer on a short terminal)
MAX_WAVE_LINES = 8  # more waves than this: done and pending ones are summed up


class TextReport:
    def __init__(self, console: Console, log_path: Path, waves: Iterable[tuple[str, Sequence[str]]] = ()) -> None:
        """``waves``: the plan's waves (name, hosts) in order, so the view counts what is to come."""
        self.console = console
        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        # 0600 like the state: the messages are redacted, but they name hosts and paths.
        # A link, device or FIFO planted at the log's name is refused, never written through.
        check_output_file(log_path)
        fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        self._log = os.fdopen(fd, "w", encoding="utf-8")  # closed in finish()
        self._log_broken = False  # a write failed (disk full, I/O error): the apply goes on unlogged
        self._progress = Progress(waves)
        self._lock = threading.Lock()  # the model, between the caller and the live view's refresh thread
        self._live: Live | None = None
        self._skipped: tuple[str, ...] = ()
        self._carried: tuple[str, ...] = ()  # nodes whose jobs outlived the drain timeout twice (issue #30)
        self._since: tuple[str, float] | None = None  # the group at work and when it started (monotonic)
        self.console.print(f"event log: {escape(str(log_path))}")

    def emit(self, event: ApplyEvent) -> None:
        task = event.task
        if (task is None or task.status != "started") and not self._log_broken:  # a task starting is progress
            stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            try:
                self._log.write(f"{stamp} {event.kind}{' [' + event.wave + ']' if event.wave else ''} "
                                f"{event.message}\n")
                self._log.flush()
            except OSError as exc:  # never stop an apply mid-wave (nodes drained) for its log
                self._log_broken = True
                self.console.print(f"[yellow]event log {escape(str(self.log_path))}: {escape(exc.strerror or str(exc))}"
                                   "; the apply goes on, its events are no longer logged[/]")
        if event.kind == "plan":
            return
        with self._lock:  # never held while printing: printing redraws the live view, which takes it
            moved = self._progress.update(event)
        if event.kind == "skipped":
            self._skipped = event.hosts
        if event.kind == "carried" and event.wave is None:
            self._carried = event.hosts
        current = self._progress.current
        if current is not None and (self._since is None or self._since[0] != current):
            self._since = (current, time.monotonic())
        terminal = self.console.is_terminal
        if event.kind != "host":
            color = _COLORS.get(event.kind, "")
            text = escape(event.message)
            self.console.print(f"[{color}]{text}[/]" if color else text)
        for host in moved:
            if not terminal or host.state == FAILED:  # a terminal shows the rest in the live view
                self.console.print(host_line(host))
        if terminal and self._live is None and self._progress.current is not None:
            self._start_live()
        elif self._live is not None and (event.kind != "host" or any(h.state == FAILED for h in moved)):
            self._live.refresh()  # a milestone or a failure shows at once; task progress at the next tick

    def finish(self, result: ApplyResult | None) -> None:
        """The summary. ``result`` None: the apply did not finish (Ctrl-C, an error it
        raised); a wave it left at work is ``interrupted``, never shown as running."""
        if self._live is not None:
            self._live.stop()
            self._live = None
        try:
            self._log.close()
        except OSError:  # the last buffered line could not be written: already said in emit, or lost
            pass
        groups = list(self._progress.groups.values())
        carried = self._carried
        if not groups and not self._skipped and not carried:
            return
        table = Table(title="apply summary", title_justify="left")
        for column in ("wave", "nodes", "hosts", "result"):
            table.add_column(column, overflow="fold")
        unfinished = unfinished_groups(self._progress) if result is None else []
        for group in groups:
            result_text = {DONE: "[green]done[/]", FAILED: "[red]failed[/]",
                           PENDING: "not started"}.get(group.state, "[yellow]running[/]")
            if group in unfinished:
                result_text = "[yellow]interrupted[/]"
            table.add_row(escape(group.name), str(len(group.hosts)) if group.is_wave else "",
                          escape(_hostlist(list(group.hosts))), result_text)
        if self._skipped:
            table.add_row("skipped", "", escape(_hostlist(self._skipped)), "[yellow]not applied, not recorded[/]")
        if carried:
            table.add_row("carried over", "", escape(_hostlist(list(carried))),
                          "[yellow]jobs outlived the drain timeout: not applied, back at work, not recorded[/]")
        self.console.print(table)
        for group in unfinished:
            self.console.print(f"[yellow]{escape(did_not_finish(group))}[/]")
        if result is not None and not result.ok:
            self.console.print(f"[red]{escape(result.message)}[/]; details in {escape(str(self.log_path))}")

    def _start_live(self) -> None:
        from rich.live import Live

        self._live = Live(console=self.console, get_renderable=self._view, transient=True, refresh_per_second=4)
        self._live.start()

    def _view(self) -> RenderableType:
        height = self.console.size.height
        elapsed = time.monotonic() - self._since[1] if self._since else None
        with self._lock:
            return live_view(self._progress, max(3, min(MAX_HOST_LINES, height // 2)), elapsed)


def unfinished_groups(progress: Progress) -> list[GroupProgress]:
    """The waves (or converge run) an apply that did not finish left at work."""
    return [g for g in progress.groups.values() if g.state in ACTIVE]


def did_not_finish(group: GroupProgress) -> str:
    """The line that says ``group`` was left at work, and what that means for its hosts."""
    what = f"wave {group.name}" if group.is_wave else "the converge run"
    left = " may be left drained" if group.is_wave else " were being converged"
    return (f"apply did not finish: {what} stopped while {group.state}; {_hostlist(list(group.hosts))}{left}. "
            "Run apply again to finish it")


def print_json_event(event: ApplyEvent) -> None:
    """One event as a JSON line on standard output; a task's progress (started, ok, skipped)
    is left to the text view."""
    import json

    if event.task is None or event.task.status in ("changed", "failed", "unreachable"):
        print(json.dumps(event.to_dict()), flush=True)


class JsonReport:
    """``apply --format json``: one JSON object per event on standard output (a task's progress,
    started or ok, is the text view's alone). An apply that does not finish (Ctrl-C, an error it
    raised) ends with one ``interrupted`` event, as the text summary says ``interrupted``: the
    wave left at work and its hosts (they may be left drained), ``ok`` false."""

    def __init__(self, waves: Iterable[tuple[str, Sequence[str]]] = ()) -> None:
        self._progress = Progress(waves)

    def emit(self, event: ApplyEvent) -> None:
        print_json_event(event)
        self._progress.update(event)

    def finish(self, result: ApplyResult | None) -> None:
        import json

        if result is not None:
            return
        groups = unfinished_groups(self._progress)
        message = "; ".join(did_not_finish(g) for g in groups) or \
            "apply did not finish: no wave was at work, none is left drained. Run apply again to finish it"
        wave = next((g.name for g in groups if g.is_wave), None)
        hosts = [h for g in groups for h in g.hosts]
        print(json.dumps({"event": "interrupted", "message": message, "wave": wave, "hosts": hosts, "ok": False}),
              flush=True)


def host_line(host: HostProgress) -> Text:
    """One host's state change as a plain line: ``WAVE: HOST: STATE`` and what it means."""
    if host.state == FAILED:
        detail = f"failed: {host.error}"
    elif host.state == DONE:
        detail = f"done ({_counts(host)})"
    elif host.state == STOPPED:
        detail = "stopped: the wave failed, the node stays drained" if host.group != CONVERGE else \
            "stopped: the converge run failed"
    else:
        detail = host.state
    return Text(f"{host.group}: {host.name}: {detail}", style=_STATE_STYLE.get(host.state, ""))


def live_view(progress: Progress, max_hosts: int, elapsed: float | None = None) -> RenderableType:
    """The live view: a headline, a line per wave (done and pending ones summed up when
    there are many; the running one with ``elapsed``, its seconds so far: a drain waits
    for jobs), and the hosts of the running wave (or the failed one), at most
    ``max_hosts`` lines of them, failed and working hosts first."""
    from rich.console import Group
    from rich.spinner import Spinner

    waves = progress.waves
    nodes = [h for w in waves for h in w.hosts.values()]
    done = sum(h.state == DONE for h in nodes)
    failed = sum(h.state == FAILED for h in nodes)
    headline = Text(f"apply: {sum(w.state == DONE for w in waves)}/{len(waves)} waves, {done}/{len(nodes)} nodes done")
    if failed:
        headline.append(f", {failed} failed", style="red")
    parts: list[RenderableType] = [Spinner("dots", headline)]
    groups = list(progress.groups.values())
    table = Table.grid(padding=(0, 2))
    table.add_column()
    table.add_column(no_wrap=True)
    table.add_column(no_wrap=True)
    collapse = len(groups) > MAX_WAVE_LINES
    for state in (DONE, PENDING) if collapse else ():
        alike = [g for g in groups if g.state == state and g.is_wave]
        if alike:
            hosts = sum(len(g.hosts) for g in alike)
            table.add_row(Text(f"{len(alike)} wave(s) {'done' if state == DONE else 'to come'}", style="dim"),
                          Text(""), Text(f"{hosts} node(s)", style="dim"))
    for group in groups:
        if collapse and group.is_wave and group.state in (DONE, PENDING):
            continue
        tally = _tally(group)
        if elapsed is not None and group.name == progress.current and group.state in ACTIVE:
            tally.append(f"  {_duration(elapsed)}", style="dim")
        table.add_row(Text(group.name, no_wrap=True, overflow="ellipsis"),
                      Text(group.state, style=_STATE_STYLE.get(group.state, "")), tally)
    parts.append(table)
    current = progress.groups.get(progress.current or "")
    if current is not None and (current.state in ACTIVE or current.state == FAILED):
        parts.append(_hosts(current, max_hosts))
    return Group(*parts)


def _tally(group: GroupProgress) -> Text:
    text = Text(f"{group.count(DONE)}/{len(group.hosts)} done")
    if group.count(FAILED):
        text.append(f", {group.count(FAILED)} failed", style="red")
    return text


def _hosts(group: GroupProgress, max_hosts: int) -> RenderableType:
    hosts = sorted(group.hosts.values(), key=lambda h: _RANK.get(h.state, 9))
    shown = hosts if len(hosts) <= max_hosts else hosts[:max_hosts - 1]
    table = Table.grid(padding=(0, 2))
    table.add_column(no_wrap=True)  # host
    table.add_column(no_wrap=True)  # state
    table.add_column(no_wrap=True)  # counts
    table.add_column()  # the task, or why it failed: what gives way on a narrow terminal, cut to one line
    for host in shown:
        table.add_row(Text(f"  {host.name}"), Text(host.state, style=_STATE_STYLE.get(host.state, "")),
                      Text(_counts(host, failed=True)),
                      Text(host.error if host.state == FAILED else host.task, style="red" if host.state == FAILED
                           else "dim", no_wrap=True, overflow="ellipsis"))
    rest = Counter(h.state for h in hosts[len(shown):])
    if rest:
        summary = ", ".join(f"{n} {state}" for state, n in sorted(rest.items(), key=lambda s: _RANK.get(s[0], 9)))
        table.add_row(Text(f"  ... {len(hosts) - len(shown)} more"), Text(""), Text(""),
                      Text(summary, style="dim", no_wrap=True, overflow="ellipsis"))
    return table


def _duration(seconds: float) -> str:
    whole = int(seconds)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"


def _counts(host: HostProgress, failed: bool = False) -> str:
    text = f"ok {host.ok}, changed {host.changed}"
    if failed or host.failed:
        text += f", failed {host.failed}"
    return text + (f", ignored {host.ignored}" if host.ignored else "")


def _hostlist(hosts: tuple[str, ...] | list[str]) -> str:
    from fleetspec.node_side.hostlist import compress

    return compress(hosts)
