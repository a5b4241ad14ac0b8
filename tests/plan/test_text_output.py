"""The text plan as a person reads it: folded rows with a count (#28 item 8), ``--diff``."""

from __future__ import annotations

import io

from rich.console import Console

from fleetspec.plan.model import Action, Change, Disruption
from fleetspec.plan.render_text import _changes_table, grouped

BUMP = "driver 580.95.05 -> 580.126.09: kernel module change, node must drain and reboot"


def _node(host: str, partition: str, reason: str = BUMP) -> Change:
    return Change(f"node:{host}", Action.UPDATE, Disruption.DRAIN_REBOOT, {"driver": "580.95.05"},
                  {"driver": "580.126.09"}, reason, partition, "r01")


def test_alike_nodes_of_one_partition_fold_into_one_row_with_a_count() -> None:
    changes = tuple(_node(f"gpu-{i:03d}", "train") for i in range(1, 17)) + (
        _node("gpu-017", "infer"), _node("gpu-018", "train", "driver 580.95.05 -> 580.95.06: other"))
    rows = [(target, count) for _, target, count in grouped(changes)]
    assert ("node:gpu-[001-016]", 16) in rows
    assert ("node:gpu-017", 1) in rows  # another partition: its own row
    assert ("node:gpu-018", 1) in rows  # another change: its own row
    assert len(rows) == 3
    out = io.StringIO()
    Console(file=out, width=200, color_system=None).print(_changes_table(changes))
    line = next(x for x in out.getvalue().splitlines() if "gpu-[001-016]" in x)
    assert " 16 " in line and BUMP in line
