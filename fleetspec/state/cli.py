"""``fleetspec state list|show|unlock``: look at a state store and free a stuck lock.

The location is ``--state`` (a directory, ``file://`` or ``postgresql://`` URL), else
$FLEETSPEC_STATE, else $FLEETSPEC_STATE_DIR. Exit 0 on success, 1 on any error;
``unlock`` without ``--force`` only says who holds the lock and exits 1 when someone does.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from enum import Enum
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from fleetspec.console import consoles
from fleetspec.exit_codes import ERROR
from fleetspec.node_side.hostlist import compress

if TYPE_CHECKING:
    from fleetspec.state.backend import StateBackend

state_app = typer.Typer(help="Look at the state store (a directory or PostgreSQL) and free a stuck lock.",
                        no_args_is_help=True)

StateOption = Annotated[str | None, typer.Option("--state", help="state directory, file:// or postgresql:// URL "
                                                 "(default: $FLEETSPEC_STATE, then $FLEETSPEC_STATE_DIR)")]


class StateFormat(str, Enum):
    table = "table"
    json = "json"


FormatOption = Annotated[StateFormat, typer.Option("--format", help="table or json")]
# The old spelling: hidden, still works, says so on standard error (one spelling everywhere: --format).
JsonOption = Annotated[bool, typer.Option("--json", hidden=True, help="deprecated: --format json")]


def _wants_json(format: StateFormat, json_out: bool) -> bool:
    if json_out:
        _, err = consoles()
        err.print("warning: --json is deprecated: use --format json", markup=False)
    return json_out or format is StateFormat.json


FleetArg = Annotated[str, typer.Argument(help="the fleet's name (metadata.name in its spec)", show_default=False)]


def _fail(exc: Exception) -> None:
    _, err = consoles()
    err.print(f"error: {exc}", markup=False)
    raise typer.Exit(ERROR)


def _open(state: str | None, fleet: str) -> StateBackend:
    from fleetspec.state.backend import open_state, state_location

    return open_state(state_location(None, state), fleet)


@state_app.command("list")
def list_(state: StateOption = None, format: FormatOption = StateFormat.table, json_out: JsonOption = False) -> None:
    """The fleets in the store: serial, last write, lock holder."""
    from fleetspec.state.backend import copy_state, list_fleets, open_state, parse_location, state_location  # noqa: F401
    from fleetspec.state.lock import LockHeld
    from fleetspec.state.store import StateError
    out, _ = consoles()
    try:
        location = state_location(None, state)
        rows = []
        for name in list_fleets(location):
            store = open_state(location, name)
            current, holder = store.read(), store.holder()
            last = current.journal[-1] if current.journal else {}
            rows.append({"fleet": name, "serial": current.serial, "lineage": current.lineage,
                         "updated": last.get("time"), "by": _who(last), "in_progress": current.in_progress,
                         "locked_by": holder.describe() if holder else None})
    except (StateError, LockHeld) as exc:
        _fail(exc)
    if _wants_json(format, json_out):
        print(json.dumps({"location": location.shown, "fleets": rows}, indent=2))
        return
    table = Table(title=f"states at {location.shown}", title_justify="left")
    for column in ("fleet", "serial", "last write", "by", "apply in progress", "locked by"):
        table.add_column(column, overflow="fold")
    for r in rows:
        table.add_row(escape(r["fleet"]), str(r["serial"]), r["updated"] or "", escape(r["by"]),
                      "yes" if r["in_progress"] else "", escape(r["locked_by"] or ""))
    out.print(table if rows else f"no fleet has a state at {escape(location.shown)}")


@state_app.command("show")
def show(fleet: FleetArg, state: StateOption = None, format: FormatOption = StateFormat.table,
         json_out: JsonOption = False,
         last: Annotated[int, typer.Option("--last", help="history entries to show", min=1)] = 10) -> None:
    """One fleet's state: serial, lineage, nodes an interrupted apply moved, lock, history."""
    from fleetspec.state.backend import copy_state, list_fleets, open_state, parse_location, state_location  # noqa: F401
    from fleetspec.state.lock import LockHeld
    from fleetspec.state.store import StateError
    out, _ = consoles()
    try:
        store = _open(state, fleet)
        current, holder, history = store.read(), store.holder(), store.history()
    except (StateError, LockHeld) as exc:
        _fail(exc)
    data: dict[str, Any] = {
        "fleet": fleet, "location": store.location, "exists": current.exists, "serial": current.serial,
        "lineage": current.lineage,
        "applied_nodes": len(_applied_nodes(current)),
        "in_progress_nodes": sorted(current.nodes) if current.in_progress else [],
        "limited": None if current.limited is None else {
            "restriction": current.limited.restriction, "unapplied": list(current.limited.unapplied),
            "converged": sorted(current.limited.converged)},
        "locked_by": None if holder is None else {**asdict(holder), "describe": holder.describe()},
        "history": history[-last:],
    }
    if _wants_json(format, json_out):
        print(json.dumps(data, indent=2, default=str))
        return
    if not current.exists:
        out.print(f"fleet {escape(fleet)} has no state at {escape(store.location)} (never applied)")
    else:
        out.print(f"fleet [bold]{escape(fleet)}[/] at {escape(store.location)}: serial {current.serial}, "
                  f"lineage {escape(current.lineage)}, {data['applied_nodes']} node(s) applied")
    if current.in_progress:
        out.print(f"[yellow]an apply did not finish[/]: {len(current.nodes)} node(s) already moved: "
                  f"{escape(', '.join(sorted(current.nodes)))}")
    elif current.limited is not None:
        left = current.limited.unapplied
        out.print(f"the last apply finished, limited to {escape(current.limited.restriction)}: "
                  + (f"{len(left)} node(s) with changes not applied yet: {escape(compress(left))} (the next plan "
                     "shows them)" if left else "no node was left out"))
    out.print(f"lock: held by {escape(holder.describe())}" if holder else "lock: free")
    if history:
        table = Table(title=f"history (last {min(last, len(history))} of {len(history)})", title_justify="left")
        for column in ("serial", "time", "kind", "by", "command", "hosts", "summary"):
            table.add_column(column, overflow="fold")
        for e in history[-last:]:
            table.add_row(escape(str(e.get("serial"))), escape(str(e.get("time", ""))), escape(str(e.get("kind", ""))),
                          escape(_who(e)),
                          escape(str(e.get("command", ""))), escape(str(e.get("hosts", ""))),
                          escape(str(e.get("summary", ""))))
        out.print(table)


@state_app.command("unlock")
def unlock(fleet: FleetArg, state: StateOption = None,
           force: Annotated[bool, typer.Option("--force", help="remove the lock even though someone holds "
                                               "it")] = False) -> None:
    """Free a fleet's lock. Without --force, only say who holds it (exit 1 when someone does)."""
    from fleetspec.state.backend import copy_state, list_fleets, open_state, parse_location, state_location  # noqa: F401
    from fleetspec.state.lock import LockHeld
    from fleetspec.state.store import StateError
    out, err = consoles()
    try:
        store = _open(state, fleet)
        holder = store.holder()
        if not force:
            if holder is None:
                out.print(f"the lock of {escape(fleet)} is free", markup=True)
                return
            err.print(f"the lock of {fleet} is held by {holder.describe()}. If that apply is gone, run "
                      f"'fleetspec state unlock {fleet} --force'", markup=False)
            raise typer.Exit(ERROR)
        removed = store.force_unlock()
    except (StateError, LockHeld) as exc:
        _fail(exc)
    if removed is None:
        out.print(f"the lock of {escape(fleet)} was free: nothing removed")
    else:
        out.print(f"removed the lock of {escape(fleet)} held by {escape(removed.describe())}")


@state_app.command("copy")
def copy(fleet: FleetArg,
         source: Annotated[str, typer.Option("--from", help="where the state is now (directory or URL)",
                                             show_default=False)],
         target: Annotated[str, typer.Option("--to", help="an empty location to copy it to (directory or URL)",
                                             show_default=False)]) -> None:
    """Copy a fleet's state to another location (a .fleetspec/ directory into PostgreSQL): the
    same lineage and serial, both locks held; refused when the target already has a state."""
    from fleetspec.state.backend import copy_state, list_fleets, open_state, parse_location, state_location  # noqa: F401
    from fleetspec.state.lock import LockHeld
    from fleetspec.state.store import StateError
    out, _ = consoles()
    try:
        src, dst = open_state(parse_location(source), fleet), open_state(parse_location(target), fleet)
        state = copy_state(src, dst)
    except (StateError, LockHeld) as exc:
        _fail(exc)
    out.print(f"copied fleet {escape(fleet)} at serial {state.serial} (lineage {state.lineage}) from "
              f"{escape(src.location)} to {escape(dst.location)}; point --state or $FLEETSPEC_STATE at the new "
              f"location")


def _who(entry: dict[str, Any]) -> str:
    if not entry:
        return ""
    return f"{entry.get('user')}@{entry.get('host')}" + (f" pid {entry['pid']}" if entry.get("pid") else "")


def _applied_nodes(state: Any) -> set[str]:
    """The nodes the state records as applied: the applied fleet's, moved by per-node records."""
    nodes = {n.hostname for n in state.applied.nodes} if state.applied else set()
    for host, record in state.nodes.items():
        if record is None:
            nodes.discard(host)
        else:
            nodes.add(host)
    return nodes
