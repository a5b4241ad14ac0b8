"""The progress of an apply, folded from its events: per wave (its hosts done out of all,
failures) and per host (its state, the task it runs, its ok/changed/failed task counts).

Pure: `Progress.update` takes one `ApplyEvent` and returns the hosts whose state it
changed; nothing here prints. `report.py` draws it: a Rich live view on a terminal, one
plain line per host state change elsewhere.

A host of a wave goes pending -> draining (the wave starts) -> applying (its first task
starts) -> verifying (the wave's playbooks ran) -> done (verified and resumed). It is
``failed`` from its first failed or unreachable task on (a failure that ansible ignores
is counted, not fatal), and ``stopped`` when its wave stops for another reason (another
host failed, verify found drift, resume failed): it stays drained. The hosts of the
converge run (controllers, new nodes) form one more group, ``converge``: applying ->
done, or failed/stopped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fleetspec.apply.ansible import HostEvent
    from fleetspec.apply.rollout import ApplyEvent

CONVERGE = "converge"
PENDING, DRAINING, APPLYING, VERIFYING, DONE, FAILED, STOPPED = (
    "pending", "draining", "applying", "verifying", "done", "failed", "stopped")
ACTIVE = (DRAINING, APPLYING, VERIFYING)  # the states of a host at work
FINAL = (DONE, FAILED, STOPPED)


@dataclass
class HostProgress:
    name: str
    group: str  # the wave's name, or CONVERGE
    state: str = PENDING
    task: str = ""  # the task it runs now (the last one once it stopped), a loop's item in brackets;
    # while draining: "waiting for its jobs to end" or "drained"
    ok: int = 0  # tasks finished unchanged (a loop counts once; skipped tasks do not count)
    changed: int = 0
    failed: int = 0  # failed or unreachable tasks; an ignored failure counts in ``ignored``
    ignored: int = 0
    error: str = ""  # "task: message" of the failure that stopped it


@dataclass
class GroupProgress:
    """A wave, or the converge run."""

    name: str
    hosts: dict[str, HostProgress] = field(default_factory=dict)
    state: str = PENDING
    error: str = ""  # why it stopped

    def count(self, *states: str) -> int:
        return sum(h.state in states for h in self.hosts.values())

    @property
    def is_wave(self) -> bool:
        return self.name != CONVERGE


class Progress:
    """The apply's waves (in the plan's order when given) and the converge run."""

    def __init__(self, waves: Iterable[tuple[str, Sequence[str]]] = ()) -> None:
        self.groups: dict[str, GroupProgress] = {}
        self.current: str | None = None  # the group at work (or the last one)
        for name, hosts in waves:
            self._group(name, hosts)

    @property
    def waves(self) -> list[GroupProgress]:
        return [g for g in self.groups.values() if g.is_wave]

    def update(self, event: ApplyEvent) -> list[HostProgress]:
        """Fold ``event`` in; the hosts whose state it changed, in the order they changed."""
        changed: list[HostProgress] = []
        group = self.groups.get(event.wave or CONVERGE)
        kind = event.kind

        def move(host: HostProgress, state: str) -> None:
            if host.state != state:
                host.state = state
                changed.append(host)

        if kind == "held" and event.wave is None:  # drained by someone else: out of every wave not started
            for name in list(self.groups):
                if self.groups[name].state == PENDING:
                    for host in event.hosts:
                        self.groups[name].hosts.pop(host, None)
                    if not self.groups[name].hosts:
                        del self.groups[name]
            return changed
        if kind == "wave-start" and event.wave:
            group = self._group(event.wave, event.hosts)
            group.state = DRAINING
            self.current = group.name
            for host in group.hosts.values():
                move(host, DRAINING)
        elif kind == "converge" and event.hosts:
            group = self._group(CONVERGE, event.hosts)
            group.state = APPLYING
            self.current = group.name
        elif kind == "host" and event.task is not None and event.hosts:
            group = group or self._group(event.wave or CONVERGE, ())
            host = group.hosts.get(event.hosts[0]) or self._host(group, event.hosts[0])
            self._task(group, host, event.task, move)
        elif group is None:
            return changed
        elif kind == "carried":  # jobs outlived the drain timeout: out of this wave, back at work (issue #30)
            for name in event.hosts:
                group.hosts.pop(name, None)
        elif kind == "busy":  # the drain waits for these hosts' jobs (or pods); the others are drained
            for host in group.hosts.values():
                if host.state == DRAINING:
                    host.task = "waiting for its jobs to end" if host.name in event.hosts else "drained"
        elif kind == "playbook":  # the wave's playbooks ran on every host of it
            group.state = VERIFYING
            for host in group.hosts.values():
                if host.state not in (FAILED, DONE):
                    move(host, VERIFYING)
        elif kind == "verify" and not group.is_wave:  # the converged nodes are verified
            for name in event.hosts:
                if name in group.hosts and group.hosts[name].state != FAILED:
                    move(group.hosts[name], DONE)
        elif kind in ("wave-done", "done") and group.state not in (FAILED, DONE):
            group.state = DONE
            for host in group.hosts.values():
                if host.state != FAILED:
                    move(host, DONE)
        elif kind == "error" and group.state in ACTIVE:
            group.state = FAILED
            group.error = event.message
            for host in group.hosts.values():
                if host.state not in FINAL:
                    move(host, STOPPED)
        return changed

    @staticmethod
    def _task(group: GroupProgress, host: HostProgress, task: HostEvent,
              move: Callable[[HostProgress, str], None]) -> None:
        label = f"{task.task} ({task.item})" if task.item else task.task
        if task.status == "started":
            host.task = label
            if host.state in (PENDING, DRAINING):
                move(host, APPLYING)
                if group.state in (PENDING, DRAINING):
                    group.state = APPLYING
            return
        if task.per_item:  # one item of a loop: shows where the loop is; the task-level event counts
            host.task = label
        elif task.status == "ok":
            host.ok += 1
        elif task.status == "changed":
            host.changed += 1
        elif task.status == "ignored":
            host.ignored += 1
        elif task.status in ("failed", "unreachable"):
            host.failed += 1
        if task.status in ("failed", "unreachable") and host.state != FAILED:
            host.task = label
            why = f"unreachable: {task.message}" if task.status == "unreachable" else task.message
            host.error = f"{label}: {why}" if why else label
            move(host, FAILED)

    def _group(self, name: str, hosts: Sequence[str]) -> GroupProgress:
        group = self.groups.setdefault(name, GroupProgress(name))
        for host in hosts:
            if host not in group.hosts:
                self._host(group, host)
        return group

    @staticmethod
    def _host(group: GroupProgress, name: str) -> HostProgress:
        host = group.hosts[name] = HostProgress(name, group.name)
        return host
