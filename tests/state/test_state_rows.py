"""State per node (issue 30 item 4): a wave writes the nodes it moved, not the whole state.

The file store appends a journal line per wave beside its snapshot (cut-off lines and
crashed compactions lose nothing); PostgreSQL updates the rows of the nodes that changed
and keeps a change log from which any serial is rebuilt. States written by the previous
format (a whole document per write: the fixtures were written by that release) load and
are migrated by their first write, on both backends."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path
from typing import Any

import psycopg
import pytest

from fleetspec.compile.ir import Fleet
from fleetspec.state import FORMAT_VERSION, State, StateError, StateStore
from fleetspec.state.postgres import PostgresStore

FIXTURES = Path(__file__).parent / "fixtures"
FORMAT1_FILE = FIXTURES / "quickstart-format1.state.json"  # serial 3: applied + two waves' node records
FORMAT1_ROWS = FIXTURES / "quickstart-format1.rows.json"  # the same three serials, as fleetspec_state kept them
# The table as releases before format 2 created it (fleetspec/state/postgres.py at 05da5b6).
FORMAT1_SCHEMA = """
CREATE TABLE fleetspec_state (
    fleet      text        NOT NULL,
    serial     integer     NOT NULL CHECK (serial > 0),
    lineage    text        NOT NULL,
    document   jsonb       NOT NULL,
    written_at timestamptz NOT NULL DEFAULT now(),
    written_by text        NOT NULL,
    PRIMARY KEY (fleet, serial)
);
"""


def bumped(fleet: Fleet) -> Fleet:
    """A driver bump (a fleet-level change), one node changed (a field set, an optional one
    that fleet.json leaves out when unset) and moved to the front (positions change)."""
    stacks = tuple(dataclasses.replace(s, driver="580.126.09") if s.name == "hopper-cu13" else s for s in fleet.stacks)
    last = dataclasses.replace(fleet.nodes[-1], features=("bumped",), real_memory_mb=1000)
    return dataclasses.replace(fleet, stacks=stacks, nodes=(last, *fleet.nodes[:-1]))


def same(a: State, b: State) -> bool:
    return (a.serial, a.lineage, a.applied, dict(a.nodes), a.limited) == (b.serial, b.lineage, b.applied,
                                                                         dict(b.nodes), b.limited)


# -- the file store ------------------------------------------------------------------

def test_a_wave_appends_to_the_journal_and_leaves_the_snapshot(file_store: StateStore, fleet: Fleet) -> None:
    store = file_store
    with store.lock("apply"):
        store.record_applied(fleet, "first")
        snapshot = store.path.read_bytes()
        inode = store.path.stat().st_ino
        store.record_wave(fleet, ["h100-001"], "wave 1")
        store.record_wave(fleet, ["h100-002", "h100-003"], "wave 2")
    assert store.path.read_bytes() == snapshot and store.path.stat().st_ino == inode
    lines = [json.loads(line) for line in store.journal_path.read_text().splitlines()]
    assert [line["serial"] for line in lines] == [2, 3]
    assert sorted(lines[1]["change"]["progress"]) == ["h100-002", "h100-003"]  # only the wave's nodes
    assert "applied" not in lines[1]["change"] and len(store.journal_path.read_bytes()) < len(snapshot)
    state = store.read()
    assert state.serial == 3 and set(state.nodes) == {"h100-001", "h100-002", "h100-003"}
    with store.lock("apply"):
        done = store.record_applied(fleet, "done")  # the whole fleet: a new snapshot, the journal folded in
    assert not store.journal_path.exists() and json.loads(store.path.read_text())["serial"] == done.serial == 4
    assert json.loads(store.backup_path.read_text())["serial"] == 1


def test_a_cut_off_journal_line_is_a_write_that_never_happened(file_store: StateStore, fleet: Fleet) -> None:
    store = file_store
    with store.lock("apply"):
        store.record_applied(fleet, "first")
        store.record_wave(fleet, ["h100-001"], "wave 1")
        before = store.read()
        store.record_wave(fleet, ["h100-002"], "wave 2")
    whole = store.journal_path.read_bytes()
    first_line = whole.index(b"\n") + 1
    for cut in range(first_line, len(whole), max(1, (len(whole) - first_line) // 40)):  # a crash at any byte
        store.journal_path.write_bytes(whole[:cut])
        assert same(store.read(), before), cut
    store.journal_path.write_bytes(whole[: len(whole) - 7])
    with store.lock("apply"):  # the next write cuts the torn tail away and takes its serial
        again = store.record_wave(fleet, ["h100-005"], "wave 2 again")
    assert again.serial == 3 and set(again.nodes) == {"h100-001", "h100-005"}
    assert [json.loads(line)["serial"] for line in store.journal_path.read_text().splitlines()] == [2, 3]
    assert same(store.read(), again)


def test_a_compaction_cut_short_loses_nothing(file_store: StateStore, fleet: Fleet) -> None:
    """Killed after the new snapshot's rename, before the journal's removal: its lines are skipped."""
    store = file_store
    with store.lock("apply"):
        store.record_applied(fleet, "first")
        store.record_wave(fleet, ["h100-001"], "wave 1")
        journal = store.journal_path.read_bytes()
        done = store.record_applied(fleet, "done")
    store.journal_path.write_bytes(journal)
    assert same(store.read(), done)
    with store.lock("apply"):
        after = store.record_wave(fleet, ["h100-002"], "next")
    assert after.serial == done.serial + 1 and set(after.nodes) == {"h100-002"} and same(store.read(), after)


@pytest.mark.parametrize(("damage", "message"), [
    (lambda lines: [lines[0][:20] + b"\n", *lines[1:]], "line 1 is damaged"),
    (lambda lines: [lines[0].replace(b'"lineage":"', b'"lineage":"x'), *lines[1:]], "belongs to another state"),
    (lambda lines: lines[1:], "holds serial 3, but the state is at serial 1"),
])
def test_a_damaged_journal_is_refused_and_left_as_it_is(file_store: StateStore, fleet: Fleet, damage: Any,
                                                        message: str) -> None:
    store = file_store
    with store.lock("apply"):
        store.record_applied(fleet, "first")
        store.record_wave(fleet, ["h100-001"], "wave 1")
        store.record_wave(fleet, ["h100-002"], "wave 2")
    lines = store.journal_path.read_bytes().splitlines(keepends=True)
    store.journal_path.write_bytes(b"".join(damage(lines)))
    kept = store.journal_path.read_bytes()
    with pytest.raises(StateError, match=message):
        store.read()
    with store.lock("apply"), pytest.raises(StateError, match=message):
        store.record_wave(fleet, ["h100-003"], "wave 3")
    assert store.journal_path.read_bytes() == kept


def test_a_format_1_state_file_loads_and_its_first_write_migrates_it(tmp_path: Path, fleet: Fleet) -> None:
    directory = tmp_path / "state"
    directory.mkdir()
    shutil.copy(FORMAT1_FILE, directory / "quickstart.state.json")
    original = json.loads(FORMAT1_FILE.read_text())
    store = StateStore(directory, "quickstart")
    state = store.read()
    assert (state.serial, state.lineage) == (3, original["lineage"]) and state.applied == fleet
    assert set(state.nodes) == {"h100-001", "h100-002", "h100-003", "h100-004"} and len(store.history()) == 3
    with store.lock("apply"):
        moved = store.record_wave(fleet, ["h100-005"], "wave 3")
    snapshot = json.loads(store.path.read_text())
    assert snapshot["format_version"] == FORMAT_VERSION == 2 and snapshot["serial"] == 4  # older releases refuse it
    assert json.loads(store.backup_path.read_text()) == original  # the format 1 document is kept once
    assert moved.lineage == original["lineage"] and set(moved.nodes) == {*state.nodes, "h100-005"}
    with store.lock("apply"):
        store.record_wave(fleet, ["h100-006"], "wave 4")
    assert store.journal_path.exists() and same(store.read(), StateStore(directory, "quickstart").read())


# -- PostgreSQL -----------------------------------------------------------------------

def pg(store: PostgresStore) -> psycopg.Connection[Any]:
    return psycopg.connect(store.url, autocommit=True)


def test_a_wave_writes_only_its_nodes_records(postgres_url: str, fleet: Fleet, tmp_path: Path) -> None:
    store = PostgresStore(postgres_url, fleet.name, tmp_path)
    with store.lock("apply"):
        store.record_applied(fleet, "first")
        with pg(store) as conn:
            versions = conn.execute("SELECT host, xmin::text FROM fleetspec_node ORDER BY host").fetchall()
            head = conn.execute("SELECT applied, xmin::text FROM fleetspec_head").fetchone()
        store.record_wave(fleet, ["h100-001", "h100-002"], "wave 1")
        store.record_wave(fleet, ["h100-002", "h100-003"], "wave 2")  # h100-002 again, unchanged: no new row
    with pg(store) as conn:
        assert conn.execute("SELECT host, xmin::text FROM fleetspec_node ORDER BY host").fetchall() == versions
        new_head = conn.execute("SELECT applied, xmin::text FROM fleetspec_head").fetchone()
        records = conn.execute("SELECT serial, jsonb_object_keys(records) FROM fleetspec_progress "
                               "ORDER BY 1, 2").fetchall()
        log = conn.execute("SELECT count(*) FROM fleetspec_change WHERE serial > 1").fetchone()
    assert new_head[0] == head[0] and new_head[1] != head[1]  # the head row moved on, its fleet part as it was
    assert records == [(2, "h100-001"), (2, "h100-002"), (3, "h100-003")] and log == (0,)
    assert set(store.read().nodes) == {"h100-001", "h100-002", "h100-003"}


def test_every_serial_is_rebuilt_from_the_change_log(postgres_url: str, fleet: Fleet, tmp_path: Path) -> None:
    from fleetspec.state import LimitedApply

    store = PostgresStore(postgres_url, fleet.name, tmp_path)
    new = bumped(fleet)
    smaller = dataclasses.replace(new, nodes=new.nodes[:-1])  # a node removed
    seen: list[State] = []
    with store.lock("apply"):
        seen.append(store.record_applied(fleet, "first"))
        seen.append(store.record_wave(new, ["h100-001"], "canary"))
        seen.append(store.record_wave(smaller, [new.nodes[-1].hostname, new.nodes[0].hostname], "remove"))
        seen.append(store.record_limited(LimitedApply("--limit h100-001", ("h100-002",), {"x": "0" * 64}), "lim"))
        seen.append(store.record_applied(smaller, "done"))
        seen.append(store.record_wave(fleet, ["h100-002"], "back"))
        seen.append(store.record_applied(fleet, "back"))  # the optional field unset, the node back in its place
    assert seen[4].applied == smaller and seen[4].applied.nodes[0].features == ("bumped",)
    for state in seen:
        again = store.read_serial(state.serial)
        assert same(again, state) and again.journal == state.journal, state.serial
    assert same(store.read(), seen[-1]) and [h["serial"] for h in store.history()] == [1, 2, 3, 4, 5, 6, 7]
    with pytest.raises(StateError, match="no serial 8"):
        store.read_serial(8)


def test_a_write_that_fails_leaves_nothing_half_written(postgres_url: str, fleet: Fleet, tmp_path: Path) -> None:
    """Another writer's serial already there (a lost lock, a second fleetspec): the whole write is refused."""
    store = PostgresStore(postgres_url, fleet.name, tmp_path)
    with store.lock("apply"):
        store.record_applied(fleet, "first")
        with pg(store) as conn:
            conn.execute("INSERT INTO fleetspec_serial (fleet, serial, lineage, written_by, entry) "
                         "VALUES ('quickstart', 2, 'x', 'someone else', '{\"serial\": 2}')")
            rows = conn.execute("SELECT host, xmin::text FROM fleetspec_node ORDER BY host").fetchall()
        with pytest.raises(StateError, match="failed and was not made"):
            store.record_wave(fleet, ["h100-001"], "wave 1")
    with pg(store) as conn:
        assert conn.execute("SELECT host, xmin::text FROM fleetspec_node ORDER BY host").fetchall() == rows
        assert conn.execute("SELECT count(*) FROM fleetspec_progress").fetchone() == (0,)
        conn.execute("DELETE FROM fleetspec_serial WHERE written_by = 'someone else'")
    assert store.read().serial == 1 and not store.read().nodes


def test_format_1_rows_load_and_their_first_write_migrates_them(postgres_url: str, fleet: Fleet,
                                                                tmp_path: Path) -> None:
    documents = json.loads(FORMAT1_ROWS.read_text())
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(FORMAT1_SCHEMA)
        for document in documents:
            conn.execute("INSERT INTO fleetspec_state (fleet, serial, lineage, document, written_by) "
                         "VALUES ('quickstart', %s, %s, %s, 'alice@ci pid 1')",
                         (document["serial"], document["lineage"], json.dumps(document)))
    store = PostgresStore(postgres_url, fleet.name, tmp_path)
    before = store.read()  # before any format 2 table exists
    assert before.serial == 3 and before.applied == fleet and set(before.nodes) == {f"h100-00{i}" for i in range(1, 5)}
    assert [h["written_by"] for h in store.history()] == ["alice@ci pid 1"] * 3
    with store.lock("apply"):
        assert same(store.read(), before)  # tables created, nothing moved yet
        moved = store.record_wave(fleet, ["h100-005"], "wave 3")
    assert moved.serial == 4 and moved.lineage == before.lineage and set(moved.nodes) == {*before.nodes, "h100-005"}
    assert same(store.read(), moved)
    history = store.history()
    assert [h["serial"] for h in history] == [1, 2, 3, 4] and history[0]["written_by"] == "alice@ci pid 1"
    for document in documents:  # the old serials: their documents, where they were
        old = store.read_serial(document["serial"])
        assert old.serial == document["serial"] and set(old.nodes) == set(document["nodes"])
    assert same(store.read_serial(4), moved) and same(store.read_serial(3), before)
    with psycopg.connect(postgres_url) as conn:  # what an older release reads next: a newer format, refused
        (latest,) = conn.execute("SELECT document FROM fleetspec_state ORDER BY serial DESC LIMIT 1").fetchone()
    assert latest["format_version"] == 2 and latest["serial"] == 4


def test_a_copy_between_backends_keeps_serial_lineage_and_history(postgres_url: str, fleet: Fleet,
                                                                  tmp_path: Path) -> None:
    from fleetspec.state.backend import copy_state

    source = StateStore(tmp_path / "state", fleet.name)
    with source.lock("apply"):
        source.record_applied(fleet, "first")
        source.record_wave(fleet, ["h100-001"], "wave 1")
    target = PostgresStore(postgres_url, fleet.name, tmp_path)
    copied = copy_state(source, target)
    assert same(copied, source.read()) and same(target.read(), source.read())
    with target.lock("apply"):
        later = target.record_wave(fleet, ["h100-002"], "wave 2")
    assert same(target.read_serial(2), source.read()) and same(target.read_serial(3), later)
    with pytest.raises(StateError, match="no serial 1"):
        target.read_serial(1)  # before the copy: not here
    back = StateStore(tmp_path / "back", fleet.name)
    assert same(copy_state(target, back), later) and same(back.read(), later)
