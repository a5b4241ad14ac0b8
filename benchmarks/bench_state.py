"""State writes per wave at fleet scale (issue 30 item 4): `python3 benchmarks/bench_state.py`.

A 20,000-node fleet (fleetgen) is recorded as applied, then WAVES waves of HOSTS nodes
each are recorded, the way apply records them, through:

- the file store as it is (format 2: a journal line per wave beside the snapshot), and
  the same store writing the whole document per wave (format 1's write: read, change,
  rewrite the document atomically with its backup);
- PostgreSQL as it is (the rows of the wave's nodes, a change log) and format 1's write
  (one whole document per serial in ``fleetspec_state``), each in its own database on a
  server of tests/postgres_server.py (Debian's postgresql package; fsync off, as the tests
  run it: the figures compare the bytes, not a disk).

Per wave: bytes written (the file store: this process's write(2) bytes from
/proc/self/io; PostgreSQL: WAL bytes, pg_wal_lsn_diff), wall and CPU seconds of the
write; after the waves, the size of the history PostgreSQL keeps (its tables). One line
per store, ``key=value`` pairs, for run.py.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from fleetgen import fleet_yaml  # noqa: E402

from fleetspec.compile.ir import Fleet  # noqa: E402
from fleetspec.pipeline import compile_file  # noqa: E402
from fleetspec.state.store import (  # noqa: E402
    Delta,
    State,
    StateError,
    StateStore,
    _new_document,
    _state_from_document,
    journal_entry,
    next_document,
)


class WholeDocumentStore(StateStore):
    """The file store writing as format 1 did: every write rewrites the whole document."""

    def _write(self, delta: Delta, kind: str, hosts: list[str], summary: str) -> State:
        assert self._lock is not None
        loaded = self._load()
        document = loaded.document if loaded is not None else _new_document(self.fleet_name)
        next_document(document, delta, journal_entry(document["serial"] + 1, kind, hosts, summary,
                                                     self._lock.command))
        self._compact(document)
        return _state_from_document(document, self.path)


class WholeDocumentPostgres:
    """PostgreSQL writing as format 1 did: the latest document read, changed, inserted whole."""

    SCHEMA = ("CREATE TABLE fleetspec_state (fleet text NOT NULL, serial integer NOT NULL, lineage text NOT NULL, "
              "document jsonb NOT NULL, written_at timestamptz NOT NULL DEFAULT now(), written_by text NOT NULL, "
              "PRIMARY KEY (fleet, serial))")

    def __init__(self, url: str, fleet_name: str) -> None:
        import psycopg

        self.conn = psycopg.connect(url, autocommit=True)
        self.conn.execute(self.SCHEMA)
        self.fleet_name = fleet_name

    def write(self, delta: Delta, kind: str, hosts: list[str]) -> State:
        with self.conn.transaction():
            row = self.conn.execute("SELECT document FROM fleetspec_state WHERE fleet = %s ORDER BY serial DESC "
                                    "LIMIT 1", (self.fleet_name,)).fetchone()
            document = row[0] if row else _new_document(self.fleet_name)
            next_document(document, delta, journal_entry(document["serial"] + 1, kind, hosts, "", "bench"))
            self.conn.execute("INSERT INTO fleetspec_state (fleet, serial, lineage, document, written_by) "
                              "VALUES (%s, %s, %s, %s, 'bench')",
                              (self.fleet_name, document["serial"], document["lineage"], json.dumps(document)))
        return _state_from_document(document, "bench")


def written_bytes() -> int:
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("wchar:"):
            return int(line.split()[1])
    raise StateError("no wchar in /proc/self/io")


def waves_of(fleet: Fleet, waves: int, hosts: int) -> list[list[str]]:
    names = [n.hostname for n in fleet.nodes]
    return [names[i * hosts:(i + 1) * hosts] for i in range(waves)]


def measure(write: Any, fleet: Fleet, waves: list[list[str]], counter: Any) -> dict[str, float]:
    """Mean bytes, wall and CPU seconds per wave write."""
    total_bytes, wall, cpu = 0, 0.0, 0.0
    for i, hosts in enumerate(waves):
        before, t0, c0 = counter(), time.perf_counter(), time.process_time()
        write(hosts, f"wave {i + 1}")
        wall += time.perf_counter() - t0
        cpu += time.process_time() - c0
        total_bytes += counter() - before
    n = len(waves)
    return {"bytes": total_bytes / n, "wall": wall / n, "cpu": cpu / n}


def file_rows(fleet: Fleet, waves: list[list[str]], work: Path) -> None:
    for name, cls in (("file", StateStore), ("file-format1", WholeDocumentStore)):
        store = cls(work / name, fleet.name)
        with store.lock("bench"):
            store.record_applied(fleet, "applied")
            got = measure(lambda hosts, summary: store.record_wave(fleet, hosts, summary), fleet, waves,  # noqa: B023
                          written_bytes)
        print(f"{name} bytes={got['bytes']:.0f} wall={got['wall']:.3f} cpu={got['cpu']:.3f}", flush=True)


def postgres_new(url: str, fleet: Fleet, waves: list[list[str]], wal: Any, size: Any) -> dict[str, float]:
    from fleetspec.state.postgres import PostgresStore

    store = PostgresStore(url, fleet.name, Path(tempfile.gettempdir()))
    with store.lock("bench"):
        store.record_applied(fleet, "applied")
        base = size()
        return {**measure(lambda hosts, summary: store.record_wave(fleet, hosts, summary), fleet, waves, wal),
                "base": base}


def postgres_old(url: str, fleet: Fleet, waves: list[list[str]], wal: Any, size: Any) -> dict[str, float]:
    from fleetspec.state.store import NodeRecord, _record_to_dict

    old = WholeDocumentPostgres(url, fleet.name)
    old.write(Delta(applied=fleet.to_dict(), set_limited=True), "apply", [])
    base = size()
    stacks = {s.name: s for s in fleet.stacks}

    def record(hosts: list[str], summary: str) -> None:
        progress = {h: _record_to_dict(NodeRecord(fleet.node(h), stacks.get(fleet.node(h).stack))) for h in hosts}
        old.write(Delta(progress, set_limited=True), "wave", hosts)

    try:
        return {**measure(record, fleet, waves, wal), "base": base}
    finally:
        old.conn.close()


def wal_bytes(conn: Any) -> int:
    return int(conn.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn").fetchone()[0])


def table_bytes(conn: Any) -> int:
    """What the state's tables hold, indexes and TOAST included."""
    return int(conn.execute("SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c "
                            "WHERE c.relname LIKE 'fleetspec\\_%%' AND c.relkind = 'r'").fetchone()[0])


def postgres_rows(fleet: Fleet, waves: list[list[str]]) -> None:
    import psycopg

    from tests.postgres_server import server_bin, start_server

    bin_dir = server_bin()
    if bin_dir is None:
        print("postgresql skipped=no-server", flush=True)
        return
    server = start_server(bin_dir)
    try:
        for name, how in (("postgresql", postgres_new), ("postgresql-format1", postgres_old)):
            url = server.new_database()
            with psycopg.connect(url, autocommit=True) as probe:
                got = how(url, fleet, waves, functools.partial(wal_bytes, probe), functools.partial(table_bytes, probe))
                history = table_bytes(probe)
            print(f"{name} bytes={got['bytes']:.0f} wall={got['wall']:.3f} cpu={got['cpu']:.3f} "
                  f"history={history} history_applied={got['base']:.0f}", flush=True)
    finally:
        server.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=20000)
    parser.add_argument("--waves", type=int, default=10)
    parser.add_argument("--hosts", type=int, default=500, help="nodes per wave")
    parser.add_argument("--no-postgres", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="fleetspec-bench-state-") as tmp:
        work = Path(tmp)
        (work / "fleet.yaml").write_text(fleet_yaml(args.nodes))
        result = compile_file(work / "fleet.yaml")
        assert result.fleet is not None
        waves = waves_of(result.fleet, args.waves, args.hosts)
        file_rows(result.fleet, waves, work)
        if not args.no_postgres:
            postgres_rows(result.fleet, waves)
    return 0


if __name__ == "__main__":
    sys.exit(main())
