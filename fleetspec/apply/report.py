"""What `fleetspec apply` shows while it runs (text mode): the milestones of each wave
(drain, playbooks, verify, resume), a live status line with the host and task at work
when stdout is a terminal, failures as they happen, and a summary table at the end.
Every event, per-host task results included, goes to the event log file, whose path
is printed first, instead of a screenful of ``host: task: changed`` lines.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.markup import escape
from rich.table import Table

from fleetspec.safe_io import check_output_file

if TYPE_CHECKING:
    from rich.console import Console
    from rich.status import Status

    from fleetspec.apply.rollout import ApplyEvent, ApplyResult

_COLORS = {"error": "red", "wave-start": "bold", "wave-done": "green", "done": "bold green", "skipped": "yellow"}


class TextReport:
    def __init__(self, console: Console, log_path: Path) -> None:
        self.console = console
        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        # 0600 like the state: the messages are redacted, but they name hosts and paths.
        # A link, device or FIFO planted at the log's name is refused, never written through.
        check_output_file(log_path)
        fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        self._log = os.fdopen(fd, "w", encoding="utf-8")  # closed in finish()
        self._status: Status | None = None
        self._waves: dict[str, dict[str, Any]] = {}
        self._other: list[tuple[str, str, str]] = []  # (what, hosts, result)
        self.console.print(f"event log: {escape(str(log_path))}")

    def emit(self, event: ApplyEvent) -> None:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        self._log.write(f"{stamp} {event.kind}{' [' + event.wave + ']' if event.wave else ''} {event.message}\n")
        self._log.flush()
        if event.kind == "plan":
            return
        self._track(event)
        if event.kind == "host":
            if not event.ok:  # a failed task matters now; a changed one is in the log
                self._print(f"[red]{escape(event.message)}[/]")
            elif self.console.is_terminal:
                self._live(f"{escape(event.wave or 'converge')}: {escape(event.message)}")
            return
        color = _COLORS.get(event.kind, "")
        text = escape(event.message)
        self._print(f"[{color}]{text}[/]" if color else text)
        if event.kind == "wave-start" and self.console.is_terminal:
            self._live(f"{escape(event.wave or '')}: draining")

    def finish(self, result: ApplyResult | None) -> None:
        self._stop_live()
        self._log.close()
        if not self._waves and not self._other:
            return
        table = Table(title="apply summary", title_justify="left")
        for column in ("wave", "nodes", "hosts", "result"):
            table.add_column(column, overflow="fold")
        for name, wave in self._waves.items():
            style = {"done": "green", "failed": "red"}.get(wave["result"], "yellow")
            table.add_row(escape(name), str(len(wave["hosts"])), escape(_hostlist(wave["hosts"])),
                          f"[{style}]{wave['result']}[/]")
        for what, hosts, outcome in self._other:
            table.add_row(escape(what), "", escape(hosts), outcome)
        self.console.print(table)
        if result is not None and not result.ok:
            self.console.print(f"[red]{escape(result.message)}[/]; details in {escape(str(self.log_path))}")

    def _track(self, event: ApplyEvent) -> None:
        if event.kind == "wave-start" and event.wave:
            self._waves[event.wave] = {"hosts": event.hosts, "result": "running"}
        elif event.kind == "wave-done" and event.wave in self._waves:
            self._waves[event.wave]["result"] = "done"
        elif event.kind == "error" and event.wave in self._waves:
            self._waves[event.wave]["result"] = "failed"
        elif event.kind == "converge" and event.hosts:
            self._other.append(("converge", _hostlist(event.hosts), "[green]done[/]"))
        elif event.kind == "error" and event.wave is None and self._other and self._other[-1][0] == "converge":
            self._other[-1] = ("converge", self._other[-1][1], "[red]failed[/]")
        elif event.kind == "skipped":
            self._other.append(("skipped", _hostlist(event.hosts), "[yellow]not applied, not recorded[/]"))

    def _print(self, text: str) -> None:
        if self._status is not None:
            self._status.console.print(text)
        else:
            self.console.print(text)

    def _live(self, text: str) -> None:
        if self._status is None:
            self._status = self.console.status(text)
            self._status.start()
        else:
            self._status.update(text)

    def _stop_live(self) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None


def _hostlist(hosts: tuple[str, ...] | list[str]) -> str:
    from fleetspec.spec.hostlist import compress

    return compress(hosts)
