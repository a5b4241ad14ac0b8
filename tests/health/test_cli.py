"""``fleetspec health --facts``: verdicts the node check printed, as a table, JSON, JUnit."""

from __future__ import annotations

import json
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest
from typer.testing import CliRunner

from fleetspec.cli import app

from .nodes import FIXTURES, make_node
from .test_node_check import SPEC, check, config  # noqa: F401 (a fixture)


def verdicts(tmp_path: Path, config: Path, monkeypatch, capsys) -> Path:
    out = tmp_path / "verdicts"
    out.mkdir()
    for node, kwargs in (("h200-01", {"kmsg": "kmsg-xids.txt"}), ("h200-02", {}),
                         ("mi300x-01", {"nvidia_xml": None, "amd_json": FIXTURES / "amd-smi-metric-ecc-healthy.json"})):
        root = make_node(tmp_path / node, **kwargs)
        _, result = check(config, root, node, monkeypatch, capsys)
        (out / f"{node}.json").write_text(json.dumps(result))
    return out


def test_health_from_verdict_files(tmp_path, config, monkeypatch, capsys) -> None:
    facts = verdicts(tmp_path, config, monkeypatch, capsys)
    spec = tmp_path / "fleet.yaml"
    spec.write_text(SPEC)
    runner = CliRunner()
    table = runner.invoke(app, ["health", str(spec), "--facts", str(facts)])
    assert table.exit_code == 1, table.output
    lines = table.output.splitlines()
    assert lines[1].split()[:3] == ["h200-01", "sick", "replace"]  # the sick node first
    assert "1 quarantined (h200-01)" in table.output
    junit = tmp_path / "health.xml"
    as_json = runner.invoke(app, ["health", str(spec), "--facts", str(facts), "--format", "json", "--junit", str(junit)])
    data = json.loads(as_json.output)
    assert data["quarantined"] == ["h200-01"] and not data["healthy"]
    assert {n["node"]: n["status"] for n in data["nodes"]} == {"h200-01": "sick", "h200-02": "healthy",
                                                              "mi300x-01": "healthy"}
    suite = ET.parse(junit).getroot()
    assert (suite.get("tests"), suite.get("failures")) == ("3", "1")
    failed = [c.get("name") for c in suite if c.find("failure") is not None]
    assert failed == ["h200-01"]


def test_a_node_without_a_verdict_is_unknown_not_healthy(tmp_path, config, monkeypatch, capsys) -> None:
    facts = verdicts(tmp_path, config, monkeypatch, capsys)
    (facts / "h200-01.json").unlink()
    (facts / "h200-02.json").write_text("[]")
    spec = tmp_path / "fleet.yaml"
    spec.write_text(SPEC)
    result = CliRunner().invoke(app, ["health", str(spec), "--facts", str(facts), "--format", "json"])
    assert result.exit_code == 1
    data = json.loads(result.output)
    # h200-01 has no file: a finding, never dropped (#26 item 8)
    assert {n["node"]: n["status"] for n in data["nodes"]} == {"h200-01": "unknown", "h200-02": "unknown",
                                                              "mi300x-01": "healthy"}
    missing = next(n for n in data["nodes"] if n["node"] == "h200-01")
    assert missing["errors"][0].startswith("no verdict: ") and "h200-01" not in missing["errors"][0]


def test_a_fleet_whose_only_sick_node_printed_nothing_is_not_healthy(tmp_path, config, monkeypatch, capsys) -> None:
    """The sick node's verdict never arrived; the others are healthy: exit 1, the node unknown (#26 item 8)."""
    facts = verdicts(tmp_path, config, monkeypatch, capsys)
    (facts / "h200-01.json").unlink()
    spec = tmp_path / "fleet.yaml"
    spec.write_text(SPEC)
    result = CliRunner().invoke(app, ["health", str(spec), "--facts", str(facts)])
    assert result.exit_code == 1, result.output
    assert result.output.splitlines()[1].split()[:2] == ["h200-01", "unknown"]
    assert "3 nodes: 0 quarantined, 1 without a verdict" in result.output


def test_exactly_one_source(tmp_path) -> None:
    spec = tmp_path / "fleet.yaml"
    spec.write_text(SPEC)
    result = CliRunner().invoke(app, ["health", str(spec)])
    assert result.exit_code == 64 and "give exactly one of" in result.output  # a usage error (EX_USAGE)


def test_the_shipped_node_check_is_one_zip_python_runs(tmp_path) -> None:
    """What --inventory/--lab copy to every node: the node check's modules and the spec's
    policy in one deterministic zip; run with a bare python3 (no fleetspec installed), it
    prints the verdict and leaves no state behind."""
    import os
    import subprocess
    import sys

    from fleetspec.health.fleet import NODE_ARGS, HealthError, node_check_program
    from fleetspec.pipeline import compile_text

    fleet = compile_text(SPEC).fleet
    program = tmp_path / "fleetspec-health-check.pyz"
    program.write_bytes(node_check_program(fleet))
    assert node_check_program(fleet) == program.read_bytes()
    root = make_node(tmp_path / "h200-02", kmsg="kmsg-xids.txt")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PATH"] = f"{root / 'bin'}{os.pathsep}{env['PATH']}"
    args = NODE_ARGS.replace("{{ inventory_hostname }}", "h200-02").split()
    done = subprocess.run([sys.executable, "-s", "-I", str(program), *args, "--root", str(root)], cwd=tmp_path,
                          capture_output=True, text=True, env=env, timeout=60)  # fmt: skip
    assert done.returncode == 1, done.stderr
    result = json.loads(done.stdout)
    assert (result["node"], result["status"], result["action"]) == ("h200-02", "sick", "replace")
    assert not (root / "var").exists()  # --read-only
    no_policy = compile_text(SPEC.replace("  health: {interval: 60}\n", "")).fleet
    try:
        node_check_program(no_policy)
    except HealthError as exc:
        assert "has no spec.health" in str(exc)
    else:
        raise AssertionError("a fleet without spec.health has no policy to ship")


OSC52 = "\x1b]52;c;Y3VybCBldmlsLmV4YW1wbGUgfCBzaA==\x07"  # a clipboard write
CLEAR = "\x1b[2J\x1b[H"


def test_a_nodes_control_characters_reach_neither_the_terminal_nor_the_junit(tmp_path, config, monkeypatch,
                                                                              capsys) -> None:
    """A verdict's text comes from the node: an OSC 52 or an ESC sequence in a fault's detail
    is shown escaped in the table and kept out of the JUnit XML, which stays valid."""
    facts = verdicts(tmp_path, config, monkeypatch, capsys)
    verdict = json.loads((facts / "h200-01.json").read_text())
    verdict["faults"][0]["detail"] = f"GPU lost{OSC52}{CLEAR}\x00\x0c end"
    (facts / "h200-01.json").write_text(json.dumps(verdict))
    spec = tmp_path / "fleet.yaml"
    spec.write_text(SPEC)
    junit = tmp_path / "health.xml"
    result = CliRunner().invoke(app, ["health", str(spec), "--facts", str(facts), "--junit", str(junit)])
    assert result.exit_code == 1, result.output
    assert "\x1b" not in result.output and "\x07" not in result.output and "\x00" not in result.output
    assert "GPU lost\\x1b]52;c;" in result.output
    suite = ET.parse(junit).getroot()  # a control character would make this raise
    failure = next(c for c in suite if c.get("name") == "h200-01").find("failure")
    assert failure is not None and "\\x1b[2J" in (failure.text or "")


@pytest.mark.parametrize("verdict", [
    {"status": "sick", "action": "replace", "faults": "gpu gone"},
    {"status": "sick", "action": "replace", "faults": [{"class": 5, "device": None, "detail": []}]},
    {"status": "sick", "action": ["replace"], "faults": []},
    {"status": ["healthy"]},
    {"status": "healthy", "errors": [1, 2]},
])
def test_a_malformed_verdict_is_unknown_not_a_traceback(tmp_path, config, monkeypatch, capsys, verdict) -> None:
    """A verdict comes from the node: a wrong shape makes that node unknown, with why, in
    the table and in JUnit (issue 27, item 10)."""
    facts = verdicts(tmp_path, config, monkeypatch, capsys)
    (facts / "h200-02.json").write_text(json.dumps(verdict))
    spec = tmp_path / "fleet.yaml"
    spec.write_text(SPEC)
    junit = tmp_path / "health.xml"
    result = CliRunner().invoke(app, ["health", str(spec), "--facts", str(facts), "--junit", str(junit)])
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.exception
    row = next(line for line in result.output.splitlines() if line.startswith("h200-02"))
    assert row.split()[1] == "unknown" and "h200-02.json:" in row, row
    case = next(c for c in ET.parse(junit).getroot() if c.get("name") == "h200-02")
    assert case.find("error") is not None


def test_superseded_log_lines_show_in_the_table_the_json_and_the_junit(tmp_path, config, monkeypatch,
                                                                       capsys) -> None:
    """h200-02 logged Xid 63 (a row remap pending) earlier in this boot; nvidia-smi now says the
    GPU was reset and the remap is active: healthy, and the line is kept as evidence with the
    reading that overrules it. The fleet report shows that evidence; a malformed one is unknown."""
    facts = verdicts(tmp_path, config, monkeypatch, capsys)
    root = make_node(tmp_path / "h200-02-remapped", kmsg="kmsg-row-remap-reset.txt",
                     nvidia_xml=FIXTURES / "nvidia-smi-q-remap-after-reset.xml")
    _, result = check(config, root, "h200-02", monkeypatch, capsys)
    [evidence] = result["superseded"]
    (facts / "h200-02.json").write_text(json.dumps(result))
    spec = tmp_path / "fleet.yaml"
    spec.write_text(SPEC)
    runner = CliRunner()
    table = runner.invoke(app, ["health", str(spec), "--facts", str(facts)]).output.splitlines()
    at = next(i for i, line in enumerate(table) if line.startswith("h200-02 "))
    assert table[at].split()[1:3] == ["healthy", "none"]
    assert table[at + 1].split()[:2] == ["superseded", "row-remap-pending"]
    assert evidence["detail"][:30] in table[at + 1] and f"[{evidence['by']}]" in table[at + 1]
    junit = tmp_path / "health.xml"
    data = json.loads(runner.invoke(app, ["health", str(spec), "--facts", str(facts), "--format", "json",
                                          "--junit", str(junit)]).output)
    assert next(n for n in data["nodes"] if n["node"] == "h200-02")["superseded"] == [evidence]
    case = next(c for c in ET.parse(junit).getroot() if c.get("name") == "h200-02")
    assert case.find("system-out").text.startswith("superseded row-remap-pending ")
    result["superseded"] = [{"class": "row-remap-pending", "device": 3}]
    (facts / "h200-02.json").write_text(json.dumps(result))
    row = next(line for line in runner.invoke(app, ["health", str(spec), "--facts", str(facts)]).output.splitlines()
               if line.startswith("h200-02"))
    assert row.split()[1] == "unknown" and "superseded must be a list" in row
