"""The lock between real processes, on every backend: the second holder is told who holds
it; a dead holder's lock is taken over; ``force_unlock`` removes a live holder's lock."""

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

from fleetspec.state import LockHeld, StateLock, StateStore, open_state, parse_location
from fleetspec.state.backend import locked
from fleetspec.state.lock import current_holder, read_holder
from tests.state.conftest import ROOT

HOLDER = """
import sys
from fleetspec.pipeline import compile_file
from fleetspec.state import StateError, open_state, parse_location
fleet = compile_file(sys.argv[2]).fleet
store = open_state(parse_location(sys.argv[1]), "quickstart")
with store.lock("fleetspec apply quickstart.yaml"):
    print("held", flush=True)
    for line in sys.stdin:
        if line.strip() == "write":
            try:
                print("wrote", store.record_wave(fleet, ["h100-001"], "wave").serial, flush=True)
            except StateError as exc:
                print("refused", exc, flush=True)
"""


@pytest.fixture
def holder(location: str):
    child = subprocess.Popen([sys.executable, "-c", HOLDER, location, str(ROOT / "examples" / "quickstart.yaml")],
                             stdout=subprocess.PIPE, stdin=subprocess.PIPE, cwd=ROOT)
    assert child.stdout is not None and child.stdout.readline().strip() == b"held"
    yield child
    if child.poll() is None:
        child.kill()
        child.wait()


def test_second_process_is_refused_with_the_holders_name(store, holder: subprocess.Popen) -> None:
    with pytest.raises(LockHeld) as exc, store.lock("fleetspec apply"):
        pass
    message = str(exc.value)
    assert f"pid {holder.pid}" in message and socket.gethostname() in message
    assert "fleetspec apply quickstart.yaml" in message and "since 20" in message
    assert exc.value.holder.pid == holder.pid
    assert store.holder().pid == holder.pid  # the holder's lock is untouched


def test_lock_of_a_killed_holder_is_taken_over(store, holder: subprocess.Popen) -> None:
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    # PostgreSQL ends the dead client's session (and its advisory lock) when its backend sees
    # the closed socket: a moment later on a busy machine. Wait as `--lock-timeout` does.
    with locked(store, "fleetspec apply", timeout=30, poll=0.2) as lock:
        assert lock.took_over is not None and lock.took_over.pid == holder.pid
        assert store.holder() == lock.holder
    assert store.holder() is None  # released on exit


def test_force_unlock_names_the_holder_and_frees_the_lock(store, holder: subprocess.Popen) -> None:
    removed = store.force_unlock()
    assert removed is not None and removed.pid == holder.pid and removed.command == "fleetspec apply quickstart.yaml"
    with store.lock("fleetspec apply") as lock:
        assert lock.holder.pid != holder.pid
        if not isinstance(store, StateStore):
            # PostgreSQL ended the holder's session: the apply it belonged to can no longer write
            holder.stdin.write(b"write\n")
            holder.stdin.flush()
            line = holder.stdout.readline().decode()
            assert line.startswith("refused") and "was not made" in line, line


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


def _contend(location: str, barrier, results) -> None:
    barrier.wait()
    try:
        with open_state(parse_location(location), "quickstart").lock("racer") as lock:
            results.put(("won", lock.took_over is not None))
            barrier.wait()  # hold until every racer has tried
    except LockHeld:
        results.put(("refused", False))
        barrier.wait()


def test_racing_processes_take_a_stale_lock_exactly_once(location: str, holder: subprocess.Popen) -> None:
    holder.send_signal(signal.SIGKILL)  # a crashed apply left its lock behind
    holder.wait()
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(4), ctx.Queue()
    racers = [ctx.Process(target=_contend, args=(location, barrier, results)) for _ in range(4)]
    for p in racers:
        p.start()
    for p in racers:
        p.join(60)
    outcomes = sorted(results.get(timeout=5) for _ in racers)
    assert outcomes == [("refused", False)] * 3 + [("won", True)]
