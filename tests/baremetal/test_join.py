"""The join step's parts that need no Slurm: which states count as registered, and the CLI's
refusal of nodes the spec does not schedule with Slurm (tests/baremetal/test_join_real.py
runs the whole step on a real slurmctld and lab hosts)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from fleetspec.baremetal.join import registered
from fleetspec.cli import app

from .fleets import spec


@pytest.mark.parametrize("state, answers", [
    ("idle", True), ("drained", True), ("mixed", True), ("allocated", True),
    ("drained*", False), ("down*", False), ("down", False), ("unknown*", False), ("future", False),
])
def test_a_node_counts_as_registered_once_its_slurmd_answers(state, answers) -> None:
    assert registered(state) is answers


def test_join_refuses_a_node_the_spec_does_not_schedule_with_slurm(tmp_path) -> None:
    path = tmp_path / "fleet.yaml"
    path.write_text(spec("http://127.0.0.1:8000"))
    inventory = tmp_path / "inventory.yml"
    inventory.write_text("all: {hosts: {}}\n")
    done = CliRunner().invoke(app, ["baremetal", "join", str(path), "--hosts", "gpu-01,ctl-09", "-i", str(inventory)])
    assert done.exit_code == 1
    assert done.stderr.strip() == "error: not Slurm nodes of this spec: ctl-09"
