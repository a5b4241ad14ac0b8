"""A node group's ``slurm_state``: State and a quoted Reason on its NodeName line (native
Slurm), instead of State=UNKNOWN; a reason that could break the line, and Slinky's dynamic
nodes, are refused at the field."""

from __future__ import annotations

from pathlib import PurePosixPath

from fleetspec.pipeline import compile_text
from fleetspec.render.slurm import render_slurm

from .specs import spec

STATE = '          slurm_state: {state: DRAIN, reason: "RMA 4711: fan"}'


def _errors(text: str) -> list:
    return [f for f in compile_text(text, "fleet.yaml").located() if f.severity.name == "ERROR"]


def test_the_state_and_reason_replace_state_unknown_on_the_line() -> None:
    result = compile_text(spec(node_settings=STATE), "fleet.yaml")
    assert result.valid, [f.message for f in result.located()]
    conf = render_slurm(result.fleet)[PurePosixPath("slurm/slurm.conf")]
    (line,) = [line for line in conf.splitlines() if line.startswith("NodeName=h100")]
    assert line.endswith(' State=DRAIN Reason="RMA 4711: fan"') and "UNKNOWN" not in line
    plain = compile_text(spec(), "fleet.yaml")
    assert "State=UNKNOWN" in render_slurm(plain.fleet)[PurePosixPath("slurm/slurm.conf")]


def test_a_reason_that_could_break_the_line_is_refused_at_the_field() -> None:
    for reason in ('a \\" b', "a # b", "x" * 257):
        (error,) = _errors(spec(node_settings=f'          slurm_state: {{state: DOWN, reason: "{reason}"}}'))
        assert (error.line, error.path) == (17, "spec.racks[0].nodes[0].slurm_state.reason"), error
    (error,) = _errors(spec(node_settings="          slurm_state: {state: RESUME}"))
    assert error.path == "spec.racks[0].nodes[0].slurm_state.state"


def test_slinky_nodes_take_no_slurm_state() -> None:
    (error,) = _errors(spec("    mode: slinky\n", node_settings=STATE) + "  kubernetes: {version: \"1.34\"}\n")
    assert (error.path, error.line) == ("spec.racks[0].nodes[0].slurm_state", 17) and "Slinky" in error.message
