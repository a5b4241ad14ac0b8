"""Run the plan's schedule: each wave once the waves it waits for (``after``) are done,
waves of independent lanes at the same time (issue #30 item 1).

A wave that fails stops the rollout: no wave starts after it, the waves already running
finish (their nodes are drained and mid-upgrade: stopping them half way would be worse),
and the first failure is the rollout's. One wave ready with nothing else running runs in
the calling thread, as a plan with one partition always did (ansible-runner then handles
SIGINT/SIGTERM itself, ``apply.ansible``); several run in threads, each its own Ansible
run, while the calling (main) thread catches SIGINT/SIGTERM and cancels every run, then
hands the signal on to the process's own handler once they stopped.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Protocol, TypeVar


class Step(Protocol):
    @property
    def id(self) -> str: ...
    @property
    def after(self) -> tuple[str, ...]: ...


S = TypeVar("S", bound=Step)
Cancel = Callable[[], bool]
# Runs one step; True when it succeeded. ``cancel`` says when a signal asked the run to stop.
RunStep = Callable[[S, Cancel], bool]


def run_steps(steps: Sequence[S], run: RunStep[S]) -> tuple[list[str], str | None]:
    """(ids of the steps that succeeded, in the order they finished; the id of the first
    that failed, or None)."""
    pending = list(steps)
    received: list[int] = []

    def cancel() -> bool:
        return bool(received)

    with ThreadPoolExecutor(max_workers=max(1, len(steps)), thread_name_prefix="wave") as pool:
        running: dict[Future[bool], str] = {}
        try:
            done, failed = _loop(pool, pending, running, run, cancel, received)
        except BaseException:  # a signal between two waits, a bug: the other runs are cancelled, not orphaned
            received.append(signal.SIGINT)
            raise
    if received:
        signal.raise_signal(received[0])  # to the process's own handler, now every run is cancelled
    return done, failed


def _loop(pool: ThreadPoolExecutor, pending: list[S], running: dict[Future[bool], str], run: RunStep[S],
          cancel: Cancel, received: list[int]) -> tuple[list[str], str | None]:
    from fleetspec.ansible_adhoc import catch_stop_signals, restore_stop_signals

    done: list[str] = []
    failed: str | None = None
    while pending or running:
        ready = [s for s in pending if all(a in done for a in s.after)] if failed is None and not received else []
        if not running and len(ready) == 1:
            step = ready[0]
            pending.remove(step)
            if run(step, cancel):
                done.append(step.id)
            else:
                failed = step.id
            continue
        for step in ready:
            pending.remove(step)
            running[pool.submit(run, step, cancel)] = step.id
        if not running:
            break  # nothing runs and nothing can start: a failure, a signal, or an unmet 'after'
        saved = catch_stop_signals(received)
        try:
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
        finally:
            restore_stop_signals(saved)
        for future in finished:
            step_id = running.pop(future)
            if future.result():
                done.append(step_id)
            elif failed is None:
                failed = step_id
    return done, failed
