"""Slurm time syntax, as the spec model and the renderer read it."""

from __future__ import annotations

import pytest

from fleetspec.pipeline import compile_text
from fleetspec.slurm_syntax import slurm_time_minutes, slurm_time_problem
from tests.conftest import EXAMPLES


@pytest.mark.parametrize(
    ("text", "minutes"),
    [("30", 30), ("00:30:00", 30), ("90:30", 91), ("2-00:00:00", 2880), ("1-12", 2160),
     ("1-12:30", 2190), ("INFINITE", -1), ("unlimited", -1), ("0", 0)],
)
def test_slurm_times(text, minutes):
    assert slurm_time_minutes(text) == minutes
    assert slurm_time_problem(text) is None


@pytest.mark.parametrize("text", ["2d", "48h", "1:2:3:4", "1-25:00:00", "00:61:00", "", "forever", "-1", "1.5"])
def test_not_slurm_times(text):
    assert slurm_time_minutes(text) is None
    problem = slurm_time_problem(text)
    assert problem is not None and "days-hours:minutes:seconds" in problem


def test_the_spec_refuses_a_max_time_slurm_would_misread():
    text = (EXAMPLES / "quickstart.yaml").read_text().replace('max_time: "00:30:00"', 'max_time: "00:61:00"')
    [finding] = compile_text(text, "f.yaml").located()
    assert finding.rule == "schema" and "not a Slurm time" in finding.message
