"""The report formats: the JSON contract, JUnit XML as CI tools read it, the Rich tables."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from rich.console import Console

from fleetspec.pipeline import compile_file
from fleetspec.verify.compare import VerifyReport, compare
from fleetspec.verify.report import REPORT_SCHEMA, tables, to_json, to_junit
from tests.verify.h200_facts import h200_facts, variant

SPEC = Path(__file__).parent / "specs" / "h200.yaml"


@pytest.fixture(scope="module")
def drifted() -> VerifyReport:
    """h200-001 conforms (shadow warning); h200-002 runs another driver and NCCL."""
    fleet = compile_file(SPEC).fleet
    facts = h200_facts()
    libs = facts["nccl"]["libraries"]
    other = variant(facts, hostname="h200-002", **{
        "nvidia.driver_version": "580.95.05", "nvidia.smi_driver_version": "580.95.05",
        "nccl.libraries": [dict(libs[0], version="2.27.3")]})
    return compare(fleet, {"h200-001": facts, "h200-002": other, "stray-01": facts})


def test_json_document_shape(drifted: VerifyReport) -> None:
    doc = to_json(drifted)
    assert list(doc) == ["schema", "fleet", "conforms", "status", "summary", "partitions", "nodes"]
    assert (doc["schema"], doc["fleet"], doc["conforms"], doc["status"]) == (REPORT_SCHEMA, "h200-verify", False,
                                                                             "drift")
    assert doc["summary"] == {"nodes": 2, "conforming": 1, "unknown_hosts": ["stray-01"],
                              "by_status": {"ok": 0, "not-applicable": 0, "warning": 1, "drift": 1}}
    (partition,) = doc["partitions"]
    assert partition["nodes"] == ["h200-001", "h200-002"]
    assert partition["checks"][0]["component"] == "consistency" and partition["checks"][0]["status"] == "drift"
    node = doc["nodes"][1]
    assert list(node) == ["hostname", "partition", "stack", "scheduler", "status", "conforms", "fingerprint", "checks"]
    driver = next(c for c in node["checks"] if c["component"] == "driver")
    assert driver == {"component": "driver", "status": "drift", "expected": "580.159.04", "found": "580.95.05",
                      "message": driver["message"], "paths": []}
    shadow = next(c for c in doc["nodes"][0]["checks"] if c["component"] == "nccl-shadow")
    assert shadow["status"] == "warning" and shadow["paths"][0].startswith("/opt/torch/.venv/")


def test_json_is_stable(drifted: VerifyReport) -> None:
    text = json.dumps(to_json(drifted), indent=2)
    assert json.dumps(json.loads(text), indent=2) == text
    assert json.dumps(to_json(drifted), indent=2) == text


def test_junit_has_a_suite_per_partition_and_a_case_per_node(drifted: VerifyReport) -> None:
    root = ET.fromstring(to_junit(drifted))
    assert root.tag == "testsuites"
    assert (root.get("tests"), root.get("failures")) == ("3", "2")
    (suite,) = root.findall("testsuite")
    assert suite.get("name") == "nvidia-hopper"
    props = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert props["expected"] == "driver=580.159.04,cuda=13.0,cudnn=9.19.0,nccl=2.28.3"
    cases = {c.get("name"): c for c in suite.findall("testcase")}
    assert list(cases) == ["h200-001", "h200-002", "nvidia-hopper:consistency"]
    assert cases["h200-001"].find("failure") is None
    assert "nccl-shadow" in cases["h200-001"].find("system-out").text
    failure = cases["h200-002"].find("failure")
    assert "driver: expected 580.159.04, found 580.95.05" in failure.get("message")
    assert "nccl: expected 2.28.3, found 2.27.3" in failure.get("message")
    assert "nccl: expected 2.28.3, found 2.27.3: the system libnccl is" in failure.text
    assert cases["nvidia-hopper:consistency"].find("failure") is not None


def test_tables_show_each_partition_and_the_problems(drifted: VerifyReport) -> None:
    console = Console(record=True, width=250)
    for table in tables(drifted):
        console.print(table)
    text = console.export_text()
    assert "nvidia-hopper (slurm, stack hopper-h200" in text
    assert "the partition is split" in text
    lines = [line for line in text.splitlines() if "h200-002" in line and "│ driver " in line]
    assert lines and "drift" in lines[0] and "580.95.05" in lines[0]
    assert any("h200-001" in line and "warning" in line for line in text.splitlines())
    assert any("nccl-shadow" in line and "warning" in line for line in text.splitlines())


def test_one_verdict_per_node_and_partition_and_no_node_twice(tmp_path: Path) -> None:
    """An extra partition over two nodes: each node is listed once (under its primary
    partition), every partition and node has one verdict, and a conforming partition
    whose checks are only not-applicable is headed "conforms", not "not-applicable"."""
    spec = tmp_path / "fleet.yaml"
    spec.write_text(SPEC.read_text() + '    partitions:\n      debug: {nodes: "h200-001", max_time: "00:30:00"}\n')
    fleet = compile_file(spec).fleet
    assert fleet is not None and len(fleet.partitions) == 2, [p.name for p in fleet.partitions]
    facts = h200_facts()
    report = compare(fleet, {"h200-001": facts, "h200-002": variant(facts, hostname="h200-002")})
    console = Console(record=True, width=250)
    for table in tables(report):
        console.print(table)
    text = console.export_text()
    assert [line for line in text.splitlines() if line.startswith("nvidia-hopper")][0].count("conforms") == 1
    debug = [line for line in text.splitlines() if line.startswith("debug")]
    assert debug and "conforms" in debug[0] and "h200-001 listed under their own partition" in debug[0]
    rows = [line for line in text.splitlines() if line.startswith("│ h200-001")]
    assert len(rows) == 1 and "conforms" in rows[0]  # once, with its verdict
    assert "not-applicable" not in " ".join(line for line in text.splitlines() if not line.startswith("│"))
