"""The state store: serial, lineage, journal, backups, and refusal to touch a state it cannot trust."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from fleetspec.compile.ir import Fleet
from fleetspec.state import FORMAT_VERSION, STATE_DIR_ENV, StateError, StateStore, open_state, parse_location, state_dir
from fleetspec.state.codec import fleet_from_dict
from tests.state.conftest import ROOT, latest_document, tamper


def test_empty_store_reads_as_no_state(store: StateStore) -> None:
    state = store.read()
    assert not state.exists and state.serial == 0 and state.applied is None and state.lineage is None


def test_writes_advance_the_serial_keep_the_lineage_and_journal(store: StateStore, fleet: Fleet) -> None:
    with store.lock("fleetspec apply"):
        first = store.record_applied(fleet, "first apply")
        second = store.record_wave(fleet, ["h100-001", "h100-002"], "wave 1")
    assert (first.serial, second.serial) == (1, 2)
    assert str(uuid.UUID(first.lineage)) == first.lineage == second.lineage
    assert second.applied == fleet and set(second.nodes) == {"h100-001", "h100-002"}
    assert second.nodes["h100-001"].node == fleet.node("h100-001")
    assert second.nodes["h100-001"].stack == fleet.stack("hopper-cu13")
    entries = store.read().journal
    assert [e["serial"] for e in entries] == [1, 2] and entries[1]["hosts"] == "h100-[001-002]"
    assert entries[1]["kind"] == "wave" and entries[1]["summary"] == "wave 1" and entries[1]["pid"] == os.getpid()
    assert {"time", "user", "host", "command"} <= set(entries[0])
    if isinstance(store, StateStore):  # the wave is a journal line beside the snapshot, not a new document
        assert json.loads(store.path.read_text())["serial"] == 1
        assert [json.loads(line)["serial"] for line in store.journal_path.read_text().splitlines()] == [2]
    else:
        assert [h["serial"] for h in store.history()] == [1, 2]  # every serial is kept
        assert store.read_serial(1).nodes == {} and store.read_serial(1).applied == fleet


def test_record_applied_clears_the_per_node_records(store: StateStore, fleet: Fleet) -> None:
    with store.lock("apply"):
        store.record_wave(fleet, ["h100-003"], "wave")
        state = store.record_applied(fleet, "done")
    assert state.nodes == {} and not state.in_progress and state.applied == fleet


def test_writes_need_the_lock(store: StateStore, fleet: Fleet) -> None:
    with pytest.raises(StateError, match="need the lock"):
        store.record_applied(fleet, "unlocked")
    assert not store.read().exists


@pytest.mark.parametrize("damage", [b"", b'{"format_version": 1, "fleet": "quickst', b"\x00\xff garbage"])
def test_corrupted_state_is_refused_and_left_untouched(file_store: StateStore, fleet: Fleet, damage: bytes) -> None:
    store = file_store  # a database keeps whole rows: there is no half-written document to find there
    with store.lock("apply"):
        store.record_applied(fleet, "one")
        store.record_applied(fleet, "two")
    store.path.write_bytes(damage)
    with pytest.raises(StateError, match="corrupted or truncated") as exc:
        store.read()
    assert "serial 1" in str(exc.value) and str(store.backup_path) in str(exc.value)
    with store.lock("apply"), pytest.raises(StateError):
        store.record_applied(fleet, "three")
    assert store.path.read_bytes() == damage


def test_state_from_a_newer_fleetspec_is_refused(store: StateStore, fleet: Fleet) -> None:
    with store.lock("apply"):
        store.record_applied(fleet, "one")
    tamper(store, lambda document: document.update(format_version=FORMAT_VERSION + 1))
    before = latest_document(store)
    with pytest.raises(StateError, match="newer fleetspec"):
        store.read()
    with store.lock("apply"), pytest.raises(StateError, match="newer fleetspec"):
        store.record_applied(fleet, "two")
    assert latest_document(store) == before


def test_a_state_file_of_another_fleet_is_refused(store: StateStore, fleet: Fleet) -> None:
    with store.lock("apply"):
        store.record_applied(fleet, "one")
    tamper(store, lambda document: document.update(fleet="museum"))
    with pytest.raises(StateError, match="fleet 'museum', not 'quickstart'"):
        store.read()


def test_two_fleets_share_a_location_without_clobbering(store: StateStore, location: str, fleet: Fleet,
                                                         tmp_path: Path) -> None:
    import dataclasses

    other_fleet = dataclasses.replace(fleet, name="other")
    other = open_state(parse_location(location), "other", work_dir=tmp_path / "work")
    with store.lock("apply"), other.lock("apply"):
        store.record_applied(fleet, "q")
        other.record_applied(other_fleet, "o")
        other.record_applied(other_fleet, "o2")
    assert store.read().serial == 1 and other.read().serial == 2
    assert store.read().lineage != other.read().lineage
    with other.lock("apply"), pytest.raises(StateError, match="cannot be recorded"):
        other.record_applied(fleet, "wrong fleet")


def test_missing_state_with_a_backup_is_an_error(file_store: StateStore, fleet: Fleet) -> None:
    store = file_store
    with store.lock("apply"):
        store.record_applied(fleet, "one")
        store.record_applied(fleet, "two")
    store.path.unlink()
    with pytest.raises(StateError, match="missing but its backup"):
        store.read()


def test_state_dir_resolution(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = tmp_path / "fleet.yaml"
    monkeypatch.delenv(STATE_DIR_ENV, raising=False)
    assert state_dir(spec) == tmp_path / ".fleetspec"
    monkeypatch.setenv(STATE_DIR_ENV, str(tmp_path / "env"))
    assert state_dir(spec) == tmp_path / "env"
    assert state_dir(spec, tmp_path / "opt") == tmp_path / "opt"


def test_the_ir_round_trips_through_json(fleet: Fleet) -> None:
    from fleetspec.pipeline import compile_file

    museum = compile_file(ROOT / "examples" / "museum.yaml").fleet
    for f in (fleet, museum):
        again = fleet_from_dict(json.loads(f.to_json()))
        assert again == f and again.to_json() == f.to_json()


WRITER = """
import sys, time
from pathlib import Path
from fleetspec.pipeline import compile_file
from fleetspec.state import open_state, parse_location
fleet = compile_file(sys.argv[2]).fleet
store = open_state(parse_location(sys.argv[1]), fleet.name)
with store.lock("write loop"):
    store.record_applied(fleet, "first")
    print("ready", flush=True)
    while True:
        store.record_wave(fleet, [n.hostname for n in fleet.nodes], "again")
"""


def test_sigkill_during_writes_leaves_a_valid_state(store: StateStore, location: str, fleet: Fleet) -> None:
    spec = ROOT / "examples" / "quickstart.yaml"
    child = subprocess.Popen([sys.executable, "-c", WRITER, location, str(spec)], stdout=subprocess.PIPE, cwd=ROOT)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == b"ready"
        deadline = time.monotonic() + 20  # a loaded CI machine writes slowly: wait for real progress
        while time.monotonic() < deadline:
            try:
                if store.read().serial >= 3:
                    break
            except StateError:
                pass
            time.sleep(0.05)
        time.sleep(0.2)  # more writes in flight when the kill lands
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    state = store.read()  # a whole document: the old one or the new one
    assert state.serial > 1 and state.applied == fleet
    assert [e["serial"] for e in state.journal] == list(range(1, state.serial + 1))
    with store.lock("next apply") as lock:  # the dead writer's lock is recognised as stale
        assert lock.took_over is not None and lock.took_over.pid == child.pid
        after = store.record_applied(fleet, "resumed")
    assert after.serial == state.serial + 1 and after.lineage == state.lineage
    if isinstance(store, StateStore):
        assert json.loads(store.path.read_text())["serial"] == after.serial
        assert not list(store.directory.glob(".*.tmp")), (child.pid, os.getpid())  # a killed writer's temp file is cleaned up
