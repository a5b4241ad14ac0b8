"""Drift as a first-class result: ``--detailed-exitcode`` (0 conform, 1 error, 2 drift)
and ``--format markdown`` naming which nodes drifted from which pin, over the real H200
node's facts."""

from __future__ import annotations

import re
from pathlib import Path

from tests.verify.h200_facts import h200_facts, variant
from tests.verify.test_modes import SPEC, app, invoke, write_facts  # noqa: F401 - app is a fixture


def drifted_facts(tmp_path: Path) -> Path:
    off = variant(h200_facts("h200-002"), **{"nvidia.driver_version": "580.95.05",
                                             "nvidia.smi_driver_version": "580.95.05"})
    return write_facts(tmp_path / "facts", {"h200-001": h200_facts(), "h200-002": off})


def test_detailed_exitcode_tells_drift_from_error(app, tmp_path: Path) -> None:
    facts = drifted_facts(tmp_path)
    assert invoke(app, str(SPEC), "--facts", str(facts)).exit_code == 1  # unchanged without the flag
    assert invoke(app, str(SPEC), "--facts", str(facts), "--detailed-exitcode").exit_code == 2
    clean = write_facts(tmp_path / "clean", {h: h200_facts(h) for h in ("h200-001", "h200-002")})
    assert invoke(app, str(SPEC), "--facts", str(clean), "--detailed-exitcode").exit_code == 0
    broken = invoke(app, str(SPEC), "--facts", str(tmp_path / "nowhere"), "--detailed-exitcode")
    assert broken.exit_code == 1  # verify could not run: an error, not drift
    missing_spec = invoke(app, str(tmp_path / "none.yaml"), "--facts", str(clean), "--detailed-exitcode")
    assert missing_spec.exit_code == 1


def test_markdown_names_the_nodes_and_the_pin_they_left(app, tmp_path: Path) -> None:
    result = invoke(app, str(SPEC), "--facts", str(drifted_facts(tmp_path)), "--format", "markdown",
                    "--detailed-exitcode")
    assert result.exit_code == 2
    text = result.stdout
    assert text.startswith("<!-- fleetspec-verify -->\n### fleetspec verify: fleet `h200-verify`")
    assert "#### Drift: 1 node(s) off their pinned tuple" in text
    row = re.search(r"^\| nvidia-hopper \| `([^`]+)` \| driver \| `580.159.04` \| `580.95.05` \| `h200-002` \(1\) \|",
                    text, re.M)
    assert row is not None, text
    assert "(whole partition)" in text  # the partition no longer runs one tuple
    assert "<details><summary>2 warning(s)</summary>" in text and "nccl-shadow" in text


def test_markdown_of_a_conforming_fleet(app, tmp_path: Path) -> None:
    clean = write_facts(tmp_path / "clean", {h: h200_facts(h) for h in ("h200-001", "h200-002")})
    text = invoke(app, str(SPEC), "--facts", str(clean), "--format", "markdown").stdout
    assert "Every node runs its partition's pinned tuple." in text and "Drift" not in text


def test_markdown_keeps_a_nodes_hostile_value_inside_its_code_span(app, tmp_path: Path) -> None:
    """A found value comes from the node: a backtick, a pipe or a tag in it stays inside its
    cell and code span (a wider fence), shown as written."""
    odd = "580.95.05`|<b>x</b>"
    off = variant(h200_facts("h200-002"), **{"nvidia.driver_version": odd, "nvidia.smi_driver_version": odd})
    facts = write_facts(tmp_path / "facts", {"h200-001": h200_facts(), "h200-002": off})
    text = invoke(app, str(SPEC), "--facts", str(facts), "--format", "markdown").stdout
    row = next(line for line in text.splitlines() if line.startswith("| nvidia-hopper |") and "| driver |" in line)
    assert "| ``580.95.05`\\|<b>x</b>`` |" in row, row
    assert len(re.findall(r"(?<!\\)\|", row)) == 8, row  # seven cells: the value's pipe is escaped
