"""Benchmark: `plan` with no changes on a 20,000-node fleet (target: under 1 s).

The fleet is ``fleetgen.fleet_yaml`` (1,250 racks of 16 nodes written with hostlists,
four NVIDIA and two AMD generations, Slurm and Kubernetes). Its state is written once
through the real store; then a no-change plan is timed step by step: reading and
decoding the state, diffing, printing. For scale, a second plan bumps the Hopper
driver (a third of the fleet changes); it renders both fleets, so the renderers'
cost shows there.

    python3 benchmarks/bench_plan.py [--nodes 20000]
    python3 benchmarks/bench_plan.py --record SPEC STATE_DIR   # what a complete apply records

``--record`` leaves what a complete apply of SPEC leaves (benchmarks/run.py plans
against it): the state with the fleet recorded as applied, and the build tree apply
rendered for the playbooks, marked as the applied fleet's.
"""

from __future__ import annotations

import argparse
import io
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fleetgen import fleet_yaml

from fleetspec.pipeline import compile_text
from fleetspec.plan import plan_against_state
from fleetspec.plan.render_text import print_plan
from fleetspec.state import StateStore

TARGET_S = 1.0
HOPPER = 'hopper-cu13: {driver: "580.95.05"'
HOPPER_BUMPED = 'hopper-cu13: {driver: "580.126.09"'


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def measure(nodes: int = 20000) -> list[tuple[str, float]]:
    """(step, seconds) rows; the no-change total is the row named 'plan, no changes'."""
    text = fleet_yaml(nodes)
    assert HOPPER in text, "fleetgen's hopper stack moved: update this benchmark"
    fleet = compile_text(text, "bench.yaml").fleet
    bumped = compile_text(text.replace(HOPPER, HOPPER_BUMPED), "bench.yaml").fleet
    assert fleet is not None and bumped is not None and len(fleet.nodes) == nodes
    with tempfile.TemporaryDirectory() as tmp:
        store = StateStore(Path(tmp), fleet.name)
        with store.lock("bench"):
            write_s, _ = timed(lambda: store.record_applied(fleet, "bench"))
        read_s, state = timed(store.read)
        diff_s, plan = timed(lambda: plan_against_state(fleet, state))
        assert plan.empty, "an unchanged fleet must plan no changes"
        text_s, _ = timed(lambda: print_plan(plan, Console(file=io.StringIO(), width=200)))
        bump_s, bump = timed(lambda: plan_against_state(bumped, state))
        bump_text_s, _ = timed(lambda: print_plan(bump, Console(file=io.StringIO(), width=200)))
    nodes_changed = sum(c.host is not None for c in bump.changes)
    return [
        ("write state (record_applied)", write_s),
        ("read + decode state", read_s),
        ("diff, no changes", diff_s),
        ("print plan", text_s),
        ("plan, no changes", read_s + diff_s + text_s),
        (f"plan, Hopper driver bump ({nodes_changed:,} nodes, {len(bump.waves)} waves; renders both fleets)", bump_s),
        ("print that plan", bump_text_s),
    ]


def main(nodes: int = 20000) -> list[dict[str, Any]]:
    """The rows ``benchmarks/run.py`` prints: the no-change plan against its target."""
    seconds = dict(measure(nodes))["plan, no changes"]
    return [{"name": "plan, no changes", "nodes": nodes, "seconds": seconds, "target_s": TARGET_S}]


def record(spec: Path, directory: Path) -> None:
    from fleetspec.pipeline import compile_file
    from fleetspec.render import render_all
    from fleetspec.render.writer import write_tree
    from fleetspec.state.build import build_dir, mark_applied

    fleet = compile_file(spec).fleet
    assert fleet is not None
    store = StateStore(directory, fleet.name)
    with store.lock("bench apply"):
        write_tree(render_all(fleet), build_dir(store))  # apply renders before it runs the playbooks
        mark_applied(store, store.record_applied(fleet, "bench").serial)


def _cli() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--record":
        record(Path(sys.argv[2]), Path(sys.argv[3]))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=20000)
    args = parser.parse_args()
    rows = measure(args.nodes)
    table = Table(title=f"plan on {args.nodes:,} nodes")
    table.add_column("step")
    table.add_column("seconds", justify="right")
    for step, seconds in rows:
        table.add_row(step, f"{seconds:.3f}")
    console = Console()
    console.print(table)
    total = dict(rows)["plan, no changes"]
    console.print(f"plan with no changes: {total:.3f} s, target < {TARGET_S:.0f} s: "
                  + ("[green]ok[/]" if total < TARGET_S else "[red]MISSED[/]"))


if __name__ == "__main__":
    _cli()
