"""``fleetspec health``: one Typer command function; fleetspec/cli.py registers it.

Thin: compile the spec, gather the verdicts one way (``fleet``), print, pick the exit
code (0: no node needs an action; 1: a node is quarantined, gave no verdict, the verdicts
could not be gathered, or ``--remediate`` could not act on a node or was held back by
``spec.health.min_healthy``).
"""

from __future__ import annotations

import json
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from fleetspec.cli_usage import UsageError, require_ansible
from fleetspec.console import consoles, write_report
from fleetspec.exit_codes import ERROR, OK


class HealthFormat(str, Enum):
    table = "table"
    json = "json"


def health(
    spec: Annotated[Path, typer.Argument(help="the fleet spec (YAML)", show_default=False)],
    facts: Annotated[Path | None, typer.Option("--facts", help="offline: a directory of <hostname>.json verdicts "
                                               "(the node check's --format json)", file_okay=False)] = None,
    inventory: Annotated[Path | None, typer.Option("--inventory", "-i", help="run the node check on the "
                                                   "inventory's nodes through Ansible")] = None,
    lab: Annotated[Path | None, typer.Option("--lab", help="the lab made by 'fleetspec lab up'",
                                             file_okay=False)] = None,
    forks: Annotated[int, typer.Option("--forks", help="nodes checked in parallel", min=1)] = 20,
    format: Annotated[HealthFormat, typer.Option("--format", help="table or json")] = HealthFormat.table,
    junit: Annotated[Path | None, typer.Option("--junit", help="also write a JUnit XML report to this file "
                                               "('-': standard output)",
                                               dir_okay=False)] = None,
    remediate: Annotated[bool, typer.Option("--remediate", help="cordon and drain (kubectl, the Eviction API) "
                                            "Kubernetes-owned nodes that need an action; uncordon the ones this "
                                            "cordoned once they pass")] = False,
) -> None:
    """Every node's health verdict and the action it calls for: exit 0 when none needs one, 1 otherwise."""
    from fleetspec.health.fleet import HealthError, from_dir, from_inventory, from_lab, to_json, to_junit, to_text
    from fleetspec.verify.cli import _compile

    out, err = consoles()
    chosen = [n for n, on in (("--facts", facts), ("--inventory", inventory), ("--lab", lab)) if on is not None]
    if len(chosen) != 1:
        raise UsageError("give exactly one of --facts DIR, --inventory FILE or --lab DIR"
                         + (f" (got {' and '.join(chosen)})" if chosen else ""))
    if facts is None:
        require_ansible(err)
    fleet = _compile(spec, err)
    try:
        if facts is not None:
            result = from_dir(fleet, facts)
        elif lab is not None:
            result = from_lab(fleet, lab, forks)
        else:
            assert inventory is not None
            result = from_inventory(fleet, inventory, forks=forks)
    except HealthError as exc:
        err.print(f"error: {exc}", markup=False)
        raise typer.Exit(ERROR) from None
    if format is HealthFormat.json:
        sys.stdout.write(json.dumps(to_json(result), indent=2) + "\n")
    else:
        sys.stdout.write(to_text(result))
    if remediate:
        from fleetspec.apply.control import local_runner
        from fleetspec.health.remediate import remediate_kubernetes

        # a node kubectl fails on is one of the lines ("not acted on: ..."), never the end of
        # the run; it makes the exit 1 even when every node is healthy (an uncordon failed)
        # the run, and exit 1, when the blast-radius limit (spec.health.min_healthy) held it back
        remediation = remediate_kubernetes(fleet, result, local_runner(timeout=3600))
        if remediation.held:
            err.print(remediation.held, markup=False)
        for remedy in remediation.remedies:
            err.print(f"{remedy.node}: {remedy.done}", markup=False)
        remediated = remediation.ok
    else:
        remediated = True
    if junit is not None:
        write_report(junit, to_junit(result).encode(), err)
    raise typer.Exit(OK if result.healthy and remediated else ERROR)
