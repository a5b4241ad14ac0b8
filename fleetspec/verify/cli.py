"""``fleetspec verify``: one Typer command function; fleetspec/cli.py registers it.

Thin, like the other commands: compile the spec, run one mode from ``run``, print the
report, pick the exit code (0: every node conforms, warnings allowed; 1: drift, an
unreachable node, or verification could not run). With ``--detailed-exitcode`` drift
(an unreachable node included) exits 2 and 1 is left to errors, so a scheduled pipeline
tells "the fleet drifted" from "verify could not run".
"""

from __future__ import annotations

import json
import socket
import sys
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from fleetspec import exit_codes
from fleetspec.cli_usage import UsageError, require_ansible
from fleetspec.console import consoles, write_report
from fleetspec.exit_codes import ERROR

if TYPE_CHECKING:
    from rich.console import Console

    from fleetspec.compile.ir import Fleet
    from fleetspec.verify.compare import VerifyReport


class ReportFormat(str, Enum):
    table = "table"
    json = "json"
    markdown = "markdown"


def _consoles() -> tuple[Console, Console]:
    """Made per call: CliRunner swaps sys.stdout, and pipes want wide tables."""
    out, err = consoles()
    return out, err


def verify(
    spec: Annotated[Path, typer.Argument(help="the fleet spec (YAML)", metavar="SPEC", show_default=False)],
    facts: Annotated[Path | None, typer.Option("--facts", help="offline: a directory of <hostname>.json facts files",
                                               file_okay=False)] = None,
    local: Annotated[bool, typer.Option("--local", help="collect facts on this machine and check it")] = False,
    as_host: Annotated[str | None, typer.Option("--as", help="with --local: the spec hostname this machine is "
                                                             "(default: this machine's hostname)")] = None,
    inventory: Annotated[Path | None, typer.Option("--inventory", "-i", help="an Ansible inventory whose hostnames "
                                                   "are the spec's (e.g. build/ansible/inventory.yml)")] = None,
    lab: Annotated[Path | None, typer.Option("--lab", help="the lab made by 'fleetspec lab up' (its directory): "
                                             "check its hosts", file_okay=False)] = None,
    root: Annotated[Path, typer.Option("--root", help="with --local: read this machine's files under this "
                                        "directory (a mounted image, a fixture tree)", file_okay=False,
                                        exists=True)] = Path("/"),
    forks: Annotated[int, typer.Option("--forks", help="with --inventory: nodes collected in parallel", min=1)] = 20,
    format: Annotated[ReportFormat, typer.Option("--format", help="table, json, or markdown (which nodes "
                                                 "drifted from which pin)")] = ReportFormat.table,
    junit: Annotated[Path | None, typer.Option("--junit", help="also write a JUnit XML report to this file "
                                               "('-': standard output)",
                                               dir_okay=False)] = None,
    detailed_exitcode: Annotated[bool, typer.Option("--detailed-exitcode", help="exit 2 on drift, 1 only on "
                                                    "errors")] = False,
    bmc: Annotated[bool, typer.Option("--bmc", help="also read each node's BMC over Redfish and attest the "
                                      "firmware it reports (BMC, BIOS, NVSwitch) against the stack's pins")] = False,
) -> None:
    """Check that every node runs its partition's stack tuple: exit 0 when all conform, 1 otherwise
    (with --detailed-exitcode: 0 conform, 1 error, 2 drift)."""
    from fleetspec.verify.report import to_junit
    from fleetspec.verify.run import (
        VerifyError,
        attest_bmcs,
        verify_facts_dir,
        verify_inventory,
        verify_lab,
        verify_local,
    )

    out, err = _consoles()
    chosen = [name for name, on in (("--facts", facts is not None), ("--local", local),
                                    ("--inventory", inventory is not None), ("--lab", lab is not None)) if on]
    if len(chosen) != 1:
        raise UsageError("give exactly one of --facts DIR, --local [--as HOSTNAME], --inventory FILE or --lab DIR"
                         + (f" (got {' and '.join(chosen)})" if chosen else ""))
    if as_host is not None and not local:
        raise UsageError("--as goes with --local")
    if root != Path("/") and not local:
        raise UsageError("--root goes with --local")
    if lab is not None or inventory is not None:
        require_ansible(err)
    fleet = _compile(spec, err)
    try:
        if facts is not None:
            report = verify_facts_dir(fleet, facts)
        elif local:
            report = verify_local(fleet, as_host or _this_host(fleet), str(root))
        elif lab is not None:
            report = verify_lab(fleet, lab, forks)
        else:
            assert inventory is not None
            report = verify_inventory(fleet, inventory, forks)
        if bmc:
            report = attest_bmcs(fleet, report, spec.resolve().parent)
    except VerifyError as exc:
        err.print(f"error: {exc}", markup=False)
        raise typer.Exit(ERROR) from None
    _print(report, format, out, err)
    if junit is not None:
        write_report(junit, to_junit(report).encode(), err)
    if report.conforms:
        raise typer.Exit(exit_codes.OK)
    raise typer.Exit(exit_codes.CHANGES if detailed_exitcode else exit_codes.ERROR)


def _compile(spec: Path, err: Console) -> Fleet:
    from fleetspec.findings import Severity
    from fleetspec.pipeline import compile_file

    compiled = compile_file(spec)
    if compiled.fleet is None or not compiled.valid:
        for f in compiled.located():
            if f.severity >= Severity.ERROR:
                err.print(f"{f.file}:{f.line}:{f.column}: error [{f.rule}] {f.message}", markup=False)
        err.print(f"{spec}: the spec has errors; fix them (fleetspec validate) before verifying", markup=False)
        raise typer.Exit(ERROR)
    return compiled.fleet


def _this_host(fleet: Fleet) -> str:
    """The spec's name for this machine: its hostname, or the short form of it."""
    name = socket.gethostname()
    return name if fleet.node(name) is not None else name.split(".")[0]


def _print(report: VerifyReport, fmt: ReportFormat, out: Console, err: Console) -> None:
    from rich.markup import escape

    from fleetspec.verify.report import summary_line, tables, to_json, to_markdown

    if fmt is ReportFormat.json:
        sys.stdout.write(json.dumps(to_json(report), indent=2) + "\n")
        return
    if fmt is ReportFormat.markdown:
        sys.stdout.write(to_markdown(report))
        return
    for table in tables(report):
        out.print(table)
    line = summary_line(report)
    out.print(f"[{'green' if report.conforms else 'red'}]{escape(line)}[/]")  # the verdict, with the tables

