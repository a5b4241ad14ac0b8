"""``--limit`` follows Ansible's host patterns (issue #28 item 6): a limit that leaves no
host is an error (exit 64, nothing done), partition, rack and inventory group names select
their nodes, wildcards and ~regex match host and group names, ``&`` intersects and ``!``
excludes."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from fleetspec.cli import app
from fleetspec.compile.ir import Fleet
from fleetspec.pipeline import compile_file
from fleetspec.plan.select import SelectError, select
from tests.plan.conftest import QUICKSTART, SPECS

NODES = [f"h100-00{i}" for i in range(1, 9)]


@pytest.fixture(scope="module")
def museum() -> Fleet:
    return compile_file(SPECS.parents[2] / "examples" / "museum.yaml").fleet


@pytest.fixture(scope="module")
def quick() -> Fleet:
    return compile_file(QUICKSTART).fleet


@pytest.mark.parametrize(("pattern", "hosts"), [
    ("h100-[001-002]", NODES[:2]),
    ("h100-001,h100-003", ["h100-001", "h100-003"]),
    ("h100-00*", NODES),
    ("h100-00[12]*", None),  # a bracket with a wildcard is fnmatch's set: h100-001, h100-002
    ("nvidia-hopper", NODES),  # a partition by its name
    ("partition_nvidia_hopper", NODES),  # ... and by its inventory group
    ("slurm_controller", ["ctl-01"]),
    ("all:!slurm_node", ["ctl-01", "db-01"]),
    ("nvidia-hopper:&h100-00[1-4]", NODES[:4]),
    ("!h100-00[3-8]", ["ctl-01", "db-01", "h100-001", "h100-002"]),
    ("~h100-00[5-6]$", ["h100-005", "h100-006"]),
])
def test_patterns_select_as_ansible_does(quick: Fleet, pattern: str, hosts: list[str] | None) -> None:
    expected = hosts if hosts is not None else ["h100-001", "h100-002"]
    assert sorted(select(quick, pattern).hosts) == expected


def test_a_rack_selects_its_nodes(museum: Fleet) -> None:
    rack = museum.racks[0].name
    assert sorted(select(museum, rack).hosts) == sorted(n.hostname for n in museum.nodes if n.rack == rack)


def test_nothing_matched_is_an_error(quick: Fleet) -> None:
    with pytest.raises(SelectError, match="leaves no host of fleet quickstart"):
        select(quick, "gpu-[001-004]")
    partly = select(quick, "h100-001,nosuch")
    assert partly.hosts == {"h100-001"} and partly.unmatched == ("nosuch",)


def test_plan_limit_matching_nothing_exits_64_and_plans_nothing() -> None:
    result = CliRunner().invoke(app, ["plan", str(QUICKSTART), "--limit", "gpu-*", "--format", "json"])
    assert result.exit_code == 64, result.output
    assert "leaves no host of fleet quickstart" in result.output and "{" not in result.output


def test_plan_limit_by_partition_and_glob() -> None:
    for pattern in ("nvidia-hopper", "h100-*"):
        result = CliRunner().invoke(app, ["plan", str(QUICKSTART), "--limit", pattern, "--format", "json"])
        assert result.exit_code == 0, result.output
        data = json.loads(result.stdout)
        assert data["restriction"] == f"--limit {pattern}" and data["skipped"] == []


def test_apply_limit_matching_nothing_exits_64_before_anything(tmp_path) -> None:
    result = CliRunner().invoke(app, ["apply", str(QUICKSTART), "--limit", "r99", "--yes", "--state",
                                      str(tmp_path / "state")])
    assert result.exit_code == 64, result.output
    assert not (tmp_path / "state").exists()


def test_a_malformed_regex_is_a_usage_error() -> None:
    result = CliRunner().invoke(app, ["plan", str(QUICKSTART), "--limit", "~h100-(["])
    assert result.exit_code == 64 and "not a regular expression" in result.output
