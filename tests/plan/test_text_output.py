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


def test_diff_prints_what_the_json_carries_folded_bounded_and_escaped() -> None:
    from typer.testing import CliRunner

    from fleetspec.cli import app
    from tests.plan.conftest import QUICKSTART, SPECS

    result = CliRunner().invoke(app, ["plan", str(SPECS / "nodes-added.yaml"), "--base", str(QUICKSTART), "--diff"])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "--- node:h100-[009-010] (create, 2 nodes)" in out and "rack: (absent) -> r02" in out
    assert "-NodeName=h100-[005-008]" in out and "+NodeName=h100-[005-010]" in out  # slurm.conf: unified
    plain = CliRunner().invoke(app, ["plan", str(SPECS / "nodes-added.yaml"), "--base", str(QUICKSTART)])
    assert "--- node:" not in plain.output  # only when asked


def test_diff_escapes_control_characters_and_stays_bounded() -> None:
    from fleetspec.plan.render_diff import MAX_LINES, MAX_LINES_PER_CHANGE, diff_lines

    evil = Change("fleet:name", Action.UPDATE, Disruption.NONE, "a\x1b]52;c;aGk=\x07", "b\u202e", "renamed")
    lines = diff_lines((evil,))
    assert "\x1b" not in "".join(lines) and "\\x1b]52" in lines[1] and "\\u202e" in lines[1]
    long = Change("slurm:slurm.conf", Action.UPDATE, Disruption.RECONFIGURE, [f"A{i}=1" for i in range(500)],
                  [f"A{i}=2" for i in range(500)], "many")
    lines = diff_lines((long,))
    assert len(lines) == 1 + MAX_LINES_PER_CHANGE + 1 and lines[-1].startswith("  ... ")
    many = tuple(_node(f"n{i:04d}", "p", f"reason {i}") for i in range(1000))
    many = tuple(Change(c.target, c.action, c.disruption, {"k": i}, {"k": i + 1}, c.reason, "p")
                 for i, c in enumerate(many))
    lines = diff_lines(many)
    assert len(lines) <= MAX_LINES + 1 and "change(s) not shown" in lines[-1]
