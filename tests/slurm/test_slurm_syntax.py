"""Slurm value syntax checks the rules rely on."""

from __future__ import annotations

import pytest

from fleetspec.slurm_syntax import (
    feature_problem,
    hostname_problem,
    partition_name_problem,
    slurm_time_minutes,
    slurm_time_problem,
    switch_name_problem,
)


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


@pytest.mark.parametrize("name", ["h100-001", "gb200-r07-01", "node.example.org", "n_1", "A100"])
def test_hostnames_slurm_can_name(name):
    assert hostname_problem(name) is None


@pytest.mark.parametrize("name", ["gpu[1]", "a,b", "a b", "x=y", "#h", "-lead", "", "DEFAULT", "all", "h" * 65])
def test_hostnames_slurm_cannot_name(name):
    assert hostname_problem(name) is not None


def test_partition_and_switch_names():
    assert partition_name_problem("nvidia-hopper") is None
    assert "keyword" in (partition_name_problem("default") or "")
    assert partition_name_problem("my partition") is not None
    assert switch_name_problem("leaf-01") is None
    assert switch_name_problem("leaf 01") is not None


def test_features():
    assert feature_problem("hopper-cu13") is None
    assert feature_problem("cuda:13") is not None  # ':' is a constraint operator
    assert feature_problem("a|b") is not None
