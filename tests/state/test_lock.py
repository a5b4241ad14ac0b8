"""The lock between real processes: the second holder is told who holds it; a dead holder's lock is taken over."""

from __future__ import annotations

import json
import multiprocessing
import signal
import socket
import subprocess
import sys
from dataclasses import asdict, replace
from pathlib import Path

import pytest

from fleetspec.state import LockHeld, StateLock, StateStore
from fleetspec.state.lock import current_holder, read_holder
from tests.state.conftest import ROOT

HOLDER = """
import sys, time
from pathlib import Path
from fleetspec.state import StateStore
store = StateStore(Path(sys.argv[1]), "quickstart")
with store.lock("fleetspec apply quickstart.yaml"):
    print("held", flush=True)
    time.sleep(60)
"""


@pytest.fixture
def holder(tmp_path: Path):
    child = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path)], stdout=subprocess.PIPE, cwd=ROOT)
    assert child.stdout is not None and child.stdout.readline().strip() == b"held"
    yield child
    if child.poll() is None:
        child.kill()
        child.wait()


def test_second_process_is_refused_with_the_holders_name(tmp_path: Path, holder: subprocess.Popen) -> None:
    store = StateStore(tmp_path, "quickstart")
    with pytest.raises(LockHeld) as exc, store.lock("fleetspec apply"):
        pass
    message = str(exc.value)
    assert f"pid {holder.pid}" in message and socket.gethostname() in message
    assert "fleetspec apply quickstart.yaml" in message and "still running" in message
    assert exc.value.holder.pid == holder.pid
    assert read_holder(store.lock_path).pid == holder.pid  # the holder's lock is untouched


def test_lock_of_a_killed_holder_is_taken_over(tmp_path: Path, holder: subprocess.Popen) -> None:
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    store = StateStore(tmp_path, "quickstart")
    with store.lock("fleetspec apply") as lock:
        assert lock.took_over is not None and lock.took_over.pid == holder.pid
        assert read_holder(store.lock_path) == lock.holder
    assert not store.lock_path.exists()  # released on exit


def test_a_reused_pid_does_not_keep_a_lock_alive(tmp_path: Path) -> None:
    path = tmp_path / "f.lock"
    me = current_holder("old apply")
    path.write_text(json.dumps(asdict(replace(me, pid_started="1"))))  # our pid, but a different process start
    with StateLock(path, "new apply") as lock:
        assert lock.took_over is not None and lock.took_over.command == "old apply"


def test_a_lock_held_on_another_host_is_never_taken_over(tmp_path: Path) -> None:
    path = tmp_path / "f.lock"
    path.write_text(json.dumps(asdict(replace(current_holder("apply"), host="elsewhere.example", pid=1))))
    with pytest.raises(LockHeld, match="another host"):
        StateLock(path, "apply").acquire()
    assert read_holder(path).host == "elsewhere.example"


def test_an_unreadable_lock_is_reported_not_removed(tmp_path: Path) -> None:
    path = tmp_path / "f.lock"
    path.write_text("")
    with pytest.raises(LockHeld, match="unreadable"):
        StateLock(path, "apply").acquire()
    assert path.exists()


def test_release_removes_only_its_own_lock(tmp_path: Path) -> None:
    path = tmp_path / "f.lock"
    lock = StateLock(path, "apply").acquire()
    other = replace(current_holder("someone else"), pid=lock.holder.pid + 1)
    path.write_text(json.dumps(asdict(other)))
    lock.release()
    assert read_holder(path) == other


def _contend(directory: str, barrier, results) -> None:
    barrier.wait()
    try:
        with StateStore(Path(directory), "quickstart").lock("racer") as lock:
            results.put(("won", lock.took_over is not None))
            barrier.wait()  # hold until every racer has tried
    except LockHeld:
        results.put(("refused", False))
        barrier.wait()


def test_racing_processes_take_a_stale_lock_exactly_once(tmp_path: Path) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    store = StateStore(tmp_path, "quickstart")
    store.lock_path.write_text(json.dumps(asdict(replace(current_holder("crashed"), pid=dead.pid))))
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(4), ctx.Queue()
    racers = [ctx.Process(target=_contend, args=(str(tmp_path), barrier, results)) for _ in range(4)]
    for p in racers:
        p.start()
    for p in racers:
        p.join(60)
    outcomes = sorted(results.get(timeout=5) for _ in racers)
    assert outcomes == [("refused", False)] * 3 + [("won", True)]
