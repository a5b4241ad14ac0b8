"""A VerifyReport as people and machines read it: Rich tables, JSON, JUnit XML, and
Markdown (an incident or a job summary: which nodes drifted from which pin).

Pure formatting of the typed report from ``compare``; the JSON and JUnit shapes are
a documented contract (docs/verify.md), so keys and ordering here are stable:
partitions in spec order, nodes in spec order, checks in the order compare makes them.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any

from rich.console import RenderableType
from rich.markup import escape
from rich.table import Table

from fleetspec.node_side.hostlist import compress
from fleetspec.text import xml_safe_tree
from fleetspec.verify.compare import Check, NodeReport, PartitionReport, Status, VerifyReport

REPORT_SCHEMA = "fleetspec.io/verify-report/v1"
_STYLE = {Status.OK: "green", Status.NOT_APPLICABLE: "cyan", Status.WARNING: "yellow", Status.DRIFT: "red"}


# --- JSON -----------------------------------------------------------------------------


def check_dict(check: Check) -> dict[str, Any]:
    return {
        "component": check.component,
        "status": check.status.value,
        "expected": check.expected,
        "found": check.found,
        "message": check.message,
        "paths": list(check.paths),
        **({"disruption": check.disruption} if check.disruption else {}),
    }


def node_dict(node: NodeReport) -> dict[str, Any]:
    return {
        "hostname": node.hostname,
        "partition": node.partition,
        "stack": node.stack,
        "scheduler": node.scheduler,
        "status": node.status.value,
        "conforms": node.conforms,
        "fingerprint": node.fingerprint,
        "checks": [check_dict(c) for c in node.checks],
    }


def partition_dict(partition: PartitionReport) -> dict[str, Any]:
    return {
        "name": partition.name,
        "scheduler": partition.scheduler,
        "stack": partition.stack,
        "expected": partition.expected,
        "status": partition.status.value,
        "conforms": partition.conforms,
        "nodes": [n.hostname for n in partition.nodes],
        "checks": [check_dict(c) for c in partition.checks],
    }


def to_json(report: VerifyReport) -> dict[str, Any]:
    """The ``--format json`` document (schema ``fleetspec.io/verify-report/v1``)."""
    counts = {s.value: sum(n.status is s for n in report.nodes) for s in Status}
    return {
        "schema": REPORT_SCHEMA,
        "fleet": report.fleet,
        "conforms": report.conforms,
        "status": report.status.value,
        "summary": {
            "nodes": len(report.nodes),
            "conforming": sum(n.conforms for n in report.nodes),
            "by_status": counts,
            "unknown_hosts": list(report.unknown_hosts),
        },
        "partitions": [partition_dict(p) for p in report.partitions],
        "nodes": [node_dict(n) for n in report.nodes],
    }


# --- Rich tables ------------------------------------------------------------------------


def tables(report: VerifyReport) -> list[RenderableType]:
    """Per partition: a heading with its one verdict (conforms or DRIFT), then one row per
    node whose primary partition it is (a node in an extra partition is listed once, under
    its own) with the node's verdict, and a row per check that is not plain ok."""
    out: list[RenderableType] = []
    for partition in report.partitions:
        verdict = "[green]conforms[/]" if partition.conforms else "[red]DRIFT[/]"
        drifting = sum(not n.conforms for n in partition.nodes)
        elsewhere = [n.hostname for n in partition.nodes if n.partition != partition.name]
        title = (f"{escape(partition.name)} ({partition.scheduler}, stack {escape(partition.stack or 'MIXED')}: "
                 f"{escape(partition.expected or '-')}): {verdict}, {len(partition.nodes)} node(s), {drifting} drift")
        if elsewhere:
            title += f"; {escape(compress(elsewhere))} listed under their own partition"
        table = Table(title=title, title_justify="left")
        for column in ("node", "verdict", "status", "component", "expected", "found", "detail"):
            table.add_column(column, overflow="fold")
        for check in partition.checks:
            if check.status is not Status.OK:
                _add_row(table, "(partition)", "", check)
        for node in partition.nodes:
            if node.partition != partition.name:
                continue
            node_verdict = "[green]conforms[/]" if node.conforms else "[red]DRIFT[/]"
            notable = [c for c in node.checks if c.status is not Status.OK]
            if not notable:
                table.add_row(escape(node.hostname), node_verdict, "[green]ok[/]", "", "",
                              escape(node.fingerprint or ""), f"{len(node.checks)} checks ok")
            for i, check in enumerate(notable):
                _add_row(table, node.hostname if i == 0 else "", node_verdict if i == 0 else "", check)
        out.append(table if table.row_count else title)
    return out


def _add_row(table: Table, name: str, verdict: str, check: Check) -> None:
    detail = check.message + ("".join(f"\n  {p}" for p in check.paths) if check.paths and check.status is not Status.OK
                              and not all(p in check.message for p in check.paths) else "")
    table.add_row(escape(name), verdict, f"[{_STYLE[check.status]}]{check.status.value}[/]", escape(check.component),
                  escape(check.expected or ""), escape(check.found or ""), escape(detail))


def summary_line(report: VerifyReport) -> str:
    drift = sum(not n.conforms for n in report.nodes)
    split = sum(any(c.status is Status.DRIFT for c in p.checks) for p in report.partitions)
    warnings = sum(n.status is Status.WARNING for n in report.nodes)
    conforming = sum(p.conforms for p in report.partitions)
    text = (f"{'conforms' if report.conforms else 'DRIFT'}: {len(report.nodes)} node(s): "
            f"{len(report.nodes) - drift} conform, {drift} drift, {warnings} with warnings; "
            f"{conforming} of {len(report.partitions)} partition(s) conform, {split} split")
    if report.unknown_hosts:
        text += f"; facts for hosts not in the spec: {', '.join(report.unknown_hosts)}"
    return text


# --- JUnit XML --------------------------------------------------------------------------


def _failure_text(check: Check) -> str:
    return f"{check.component}: expected {check.expected or '-'}, found {check.found or '-'}: {check.message}"


def _testcase(suite: ET.Element, classname: str, name: str, checks: tuple[Check, ...]) -> bool:
    case = ET.SubElement(suite, "testcase", classname=classname, name=name, time="0")
    drift = [c for c in checks if c.status is Status.DRIFT]
    if drift:
        failure = ET.SubElement(case, "failure", type="drift",
                                message="; ".join(f"{c.component}: expected {c.expected or '-'}, found {c.found or '-'}"
                                                  for c in drift))
        failure.text = "\n".join(_failure_text(c) for c in drift)
    others = [c for c in checks if c.status in (Status.WARNING, Status.NOT_APPLICABLE)]
    if others:
        ET.SubElement(case, "system-out").text = "\n".join(f"{c.status.value}: {_failure_text(c)}" for c in others)
    return bool(drift)


def to_junit(report: VerifyReport) -> str:
    """``--junit FILE``: a testsuite per partition, a testcase per node (plus one for the
    partition's consistency), a failure naming component, expected and found."""
    root = ET.Element("testsuites", name=f"fleetspec verify {report.fleet}")
    total = failed = 0
    for partition in report.partitions:
        suite = ET.SubElement(root, "testsuite", name=partition.name, errors="0", skipped="0", time="0")
        props = ET.SubElement(suite, "properties")
        for key, value in (("scheduler", partition.scheduler), ("stack", partition.stack or "MIXED"),
                           ("expected", partition.expected or "")):
            ET.SubElement(props, "property", name=key, value=value)
        classname = f"fleetspec.verify.{partition.name}"
        cases = fails = 0
        for node in partition.nodes:
            cases += 1
            fails += _testcase(suite, classname, node.hostname, node.checks)
        for check in partition.checks:
            cases += 1
            fails += _testcase(suite, classname, f"{partition.name}:{check.component}", (check,))
        suite.set("tests", str(cases))
        suite.set("failures", str(fails))
        total += cases
        failed += fails
    root.set("tests", str(total))
    root.set("failures", str(failed))
    root.set("errors", "0")
    ET.indent(root)
    xml_safe_tree(root)  # a control character in a node's facts would make the report unreadable XML
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


# --- Markdown ---------------------------------------------------------------------------

MARKDOWN_MARKER = "<!-- fleetspec-verify -->"




def to_markdown(report: VerifyReport) -> str:
    """``--format markdown``: a headline, then one row per drift shared by a set of nodes
    (partition, the stack that pins it, component, pinned value, found value, the nodes as a
    hostlist), then warnings folded. Made to open an incident or a job summary with."""
    from fleetspec.markdown import cell, code
    from fleetspec.node_side.hostlist import compress

    drift = sum(not n.conforms for n in report.nodes)
    lines = [MARKDOWN_MARKER, f"### fleetspec verify: fleet {code(report.fleet)}", "",
             f"**{summary_line(report)}**", ""]
    rows: dict[tuple[str, str, str, str, str, str], list[str]] = {}
    notes: dict[tuple[str, str, str, str], list[str]] = {}
    for partition in report.partitions:
        stack = partition.stack or "MIXED"
        for check in partition.checks:
            if check.status is Status.DRIFT:
                key = (partition.name, stack, check.component, check.expected or "-", check.found or "-", check.message)
                rows.setdefault(key, []).append("(partition)")
        for node in partition.nodes:
            for check in node.checks:
                if check.status is Status.DRIFT:
                    key = (partition.name, stack, check.component, check.expected or "-", check.found or "-",
                           check.message)
                    rows.setdefault(key, []).append(node.hostname)
                elif check.status is Status.WARNING:
                    notes.setdefault((partition.name, check.component, check.message, ""), []).append(node.hostname)
    if rows:
        lines += [f"#### Drift: {drift} node(s) off their pinned tuple", "",
                  "| partition | stack (pin) | component | pinned | found | nodes | detail |",
                  "|---|---|---|---|---|---|---|"]
        for (partition_name, stack, component, expected, found, message), hosts in rows.items():
            names = [h for h in hosts if h != "(partition)"]
            who = f"`{compress(names)}` ({len(names)})" if names else "(whole partition)"
            lines.append(f"| {cell(partition_name)} | {code(stack)} | {cell(component)} | {code(expected)} | "
                         f"{code(found)} | {who} | {cell(message)} |")
        lines.append("")
    else:
        lines += ["Every node runs its partition's pinned tuple.", ""]
    if report.unknown_hosts:
        lines += [f"Facts came back for hosts the spec does not name: {code(', '.join(report.unknown_hosts))}.", ""]
    if notes:
        lines += [f"<details><summary>{sum(len(h) for h in notes.values())} warning(s)</summary>", "",
                  "| partition | component | nodes | detail |", "|---|---|---|---|"]
        for (partition_name, component, message, _), hosts in notes.items():
            lines.append(f"| {cell(partition_name)} | {cell(component)} | `{compress(hosts)}` | {cell(message)} |")
        lines += ["", "</details>", ""]
    return "\n".join(lines) + "\n"
