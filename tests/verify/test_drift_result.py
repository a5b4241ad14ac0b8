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
    assert "<details><summary>6 warning(s)</summary>" in text and "nccl-shadow" in text
    assert "| nvidia-hopper | cuda-components | `h200-[001-002]` |" in text  # CUDA 13.0: components not held


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


def test_markdown_renders_a_hostile_value_as_text_only(app, tmp_path: Path) -> None:
    """Rendered by a real CommonMark parser with GFM tables (markdown-it-py, which Rich
    brings): a value with double backticks, HTML, an image, a link, a mention and a pipe
    after a backslash stays text inside its code span and cell."""
    from markdown_it import MarkdownIt

    odd = "580.95.05``|<img src=x onerror=alert(1)>``![i](https://t.example/p.png)[l](https://e.example) @org/team\\|x"
    off = variant(h200_facts("h200-002"), **{"nvidia.driver_version": odd, "nvidia.smi_driver_version": odd})
    facts = write_facts(tmp_path / "facts", {"h200-001": h200_facts(), "h200-002": off})
    text = invoke(app, str(SPEC), "--facts", str(facts), "--format", "markdown").stdout
    html = MarkdownIt("commonmark").enable("table").render(text)
    assert "<img" not in html and "<a " not in html, html
    row = next(r for r in html.split("<tr>") if "<td>driver</td>" in r)
    assert row.count("<td>") == 7, row  # the value's pipes split no cell
    found = re.findall(r"<code>(.*?)</code>", row)
    import html as html_lib
    assert any(html_lib.unescape(c).replace("\u200b", "") == odd for c in found), found


def test_a_nodes_escape_sequences_are_shown_escaped_and_junit_stays_valid(app, tmp_path: Path) -> None:
    import xml.etree.ElementTree as ET

    odd = "580.95.05\x1b]52;c;aGk=\x07\x1b[2J\x0b"
    off = variant(h200_facts("h200-002"), **{"nvidia.driver_version": odd, "nvidia.smi_driver_version": odd})
    facts = write_facts(tmp_path / "facts", {"h200-001": h200_facts(), "h200-002": off})
    junit = tmp_path / "verify.xml"
    result = invoke(app, str(SPEC), "--facts", str(facts), "--junit", str(junit))
    assert "\x1b" not in result.output and "\x07" not in result.output, result.output
    assert "\\x1b]52;c;aGk=\\x07" in result.output
    ET.parse(junit)  # a control character would make this raise
    assert "\\x1b[2J" in junit.read_text()
