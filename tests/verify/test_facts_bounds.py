"""A node's facts are the node's word (#41 item 15): bounded where they are read, and a
document outside the bounds is that node's located problem, never a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fleetspec.verify.facts_bounds import MAX_DEPTH, MAX_STRING, facts_problem
from tests.verify.h200_facts import h200_facts, variant

SPEC = Path(__file__).parent / "specs" / "h200.yaml"


def _facts_dir(directory: Path, bad: dict) -> Path:
    directory.mkdir()
    (directory / "h200-001.json").write_text(json.dumps(h200_facts("h200-001")))
    (directory / "h200-002.json").write_text(json.dumps(bad))
    return directory


def test_a_4400_digit_driver_version_is_that_nodes_located_problem(tmp_path: Path) -> None:
    """Before: versions.py int() of the part raised ValueError (Python's 4,300-digit limit)
    out of `verify --facts`, a traceback."""
    from fleetspec.cli import app

    bad = variant(h200_facts("h200-002"), **{"nvidia.driver_version": "580." + "3" * 4400})
    facts = _facts_dir(tmp_path / "facts", bad)
    result = CliRunner().invoke(app, ["verify", str(SPEC), "--facts", str(facts), "--format", "json"])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code == 1, result.output
    doc = json.loads(result.stdout)
    nodes = {n["hostname"]: n for n in doc["nodes"]}
    (check,) = nodes["h200-002"]["checks"]
    assert check["component"] == "facts" and check["status"] == "drift"
    assert f"{facts / 'h200-002.json'}: nvidia.driver_version: a version with a number part of 4,400 digits" \
        in check["message"]
    assert len(check["message"]) < 400  # the value is clipped, not echoed
    assert {c["component"] for c in nodes["h200-001"]["checks"]} > {"facts", "driver"}  # the other node is checked


def test_import_names_the_node_whose_facts_are_out_of_bounds(tmp_path: Path) -> None:
    from fleetspec.cli import app

    bad = variant(h200_facts("h200-002"), **{"nccl.libraries": [{"version": "2." + "9" * 30}]})
    facts = _facts_dir(tmp_path / "facts", bad)
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=c\nSlurmctldHost=ctl\nNodeName=h200-[001-002] Gres=gpu:h200:8 CPUs=8\n"
                    "PartitionName=p Nodes=ALL\n")
    out = tmp_path / "fleet.yaml"
    result = CliRunner().invoke(app, ["import", "slurm", "--conf", str(conf), "--facts", str(facts),
                                      "--out", str(out)])
    assert result.exit_code == 1 and not out.exists()
    assert f"{facts / 'h200-002.json'}: nccl.libraries[0].version: a version with a number part of 30 digits" \
        in result.stderr


@pytest.mark.parametrize(("document", "problem"), [
    ({"os": {"pretty_name": "x" * (MAX_STRING + 1)}}, "os.pretty_name: a string of 4,097 characters"),
    ({"amd": {"rccl_versions": ["2.22.3", "1" * 19]}}, "amd.rccl_versions[1]: a version with a number part of 19"),
    ({"k" * 300: 1}, "(top level): a key of 300 characters"),
    ({"errors": list(range(70_000))}, "errors: a list of 70,000 items"),
    ([], "not a JSON object"),
])
def test_each_bound(document: object, problem: str) -> None:
    assert (facts_problem(document) or "").startswith(problem)


def test_depth_and_the_real_node_within_bounds() -> None:
    deep: dict = {}
    cursor = deep
    for _ in range(MAX_DEPTH + 1):
        cursor["a"] = {}
        cursor = cursor["a"]
    assert "nested deeper than 32 levels" in (facts_problem(deep) or "")
    assert facts_problem(h200_facts("h200-001")) is None  # the real node's document passes
    assert facts_problem({"nvidia": {"driver_version": "580.95.05"}, "amd": {"driver_version":
                                                                           "1:6.16.13.30300300-2327507"}}) is None


def _nested(levels: int, leaf: object) -> dict:
    document: dict = {}
    cursor = document
    for _ in range(levels - 1):
        cursor["a"] = {}
        cursor = cursor["a"]
    cursor["a"] = leaf
    return document


@pytest.mark.parametrize("document", [
    _nested(MAX_DEPTH, 1), _nested(MAX_DEPTH + 1, 1), _nested(MAX_DEPTH, []), _nested(MAX_DEPTH + 1, []),
    _nested(MAX_DEPTH, [1]), {"a": ["1" * 19]}, {"version": [{"x": "1" * 19}]}, {"VERSIONS": {"x": ["1" * 19]}},
    {"os": ["x" * MAX_STRING, {"k" * 256: "y"}]}, {"os": ["x" * MAX_STRING, {"k" * 257: "y"}]},
])
def test_the_quick_walk_accepts_exactly_what_the_full_walk_accepts(document: dict) -> None:
    # facts_problem walks once without paths (_within) and again for the message only when
    # that finds a value outside the bounds: both walks must draw the same line.
    from fleetspec.verify.facts_bounds import _first_problem, _within

    assert _within(document) == (_first_problem(document) is None)


@pytest.mark.parametrize("values", [99, 100, 101])
def test_both_walks_count_values_alike(values: int, monkeypatch: pytest.MonkeyPatch) -> None:
    from fleetspec.verify import facts_bounds

    monkeypatch.setattr(facts_bounds, "MAX_VALUES", 100)  # a million values would cost the suite seconds
    k, rest = divmod(values - 3, 11)  # the document, "a", "b", k lists of 10 and `rest` more
    document = {"a": [[0] * 10 for _ in range(k)], "b": [0] * rest}
    assert facts_bounds._within(document) == (facts_bounds._first_problem(document) is None) == (values <= 100)
