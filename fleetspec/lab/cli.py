"""`fleetspec lab up|status|down`: the lab as a Typer sub-app (registered by fleetspec.cli).

Thin: each command calls one function of fleetspec.lab.fleet and prints its result.
Exit codes: 0 done (``down`` with no lab there too); 1 the lab could not be made, read or
taken down (message on stderr).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from fleetspec.console import command_class, lazy_consoles
from fleetspec.exit_codes import ERROR
from fleetspec.lab import DEFAULT_PER_PARTITION, STATE_FILE

lab_app = typer.Typer(
    help="A scaled-down stand-in of the fleet on this machine (real hosts, real Slurm, "
    "a package repository with the spec's pinned versions), to rehearse plan, apply and verify.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain help: real metavars, no '<bool>'
)
_out, _err = lazy_consoles()
COMMAND = command_class()


def _failures() -> tuple[type[BaseException], ...]:
    from fleetspec.lab.base import LabUnavailable
    from fleetspec.lab.fleet import LabSetupError
    from fleetspec.lab.hosts import LabError
    from fleetspec.lab.slurm import SlurmError, SlurmUnavailable

    return (LabSetupError, LabUnavailable, LabError, SlurmError, SlurmUnavailable, OSError)

DirOption = Annotated[
    Path | None,
    typer.Option("--dir", help="the lab directory [default: .fleetspec/lab beside the spec, or in the cwd]"),
]


def _fail(exc: BaseException) -> None:
    from rich.markup import escape

    _err.print(f"[red]error:[/red] {escape(str(exc))}")
    raise typer.Exit(ERROR)


@lab_app.command(cls=COMMAND)
def up(
    spec: Annotated[Path, typer.Argument(help="the fleet spec (YAML)", metavar="SPEC", show_default=False)],
    nodes: Annotated[int, typer.Option("--nodes", help="nodes per partition")] = DEFAULT_PER_PARTITION,
    dir: DirOption = None,
) -> None:
    """Start the lab for SPEC; when it is up already, rebuild its repository for SPEC as it is now."""
    from rich.markup import escape

    from fleetspec.lab.fleet import lab_up

    try:
        handle, started = lab_up(spec, nodes, dir, progress=lambda line: _err.print(f"lab up: {escape(line)}"))
    except _failures() as exc:
        _fail(exc)
        return
    verb = "up" if started else "already up; repository refreshed"
    _out.print(f"lab {escape(str(handle.dir))}: {verb}")
    _out.print(f"  hosts: {', '.join(handle.hosts)} ({handle.mode})")
    _out.print(f"  packages: {handle.package_count()} in {escape(str(handle.repo_dir))}")
    _out.print(f"  inventory overlay: {escape(str(handle.inventory_overlay))}")
    if handle.slurm_conf:
        _out.print(f"  Slurm: {len(handle.slurm_nodes)} slurmd; source {escape(str(handle.env_file))} for SLURM_CONF")


def _resolve(dir: Path | None) -> Path:
    """Without --dir, the lab of a spec in the current directory."""
    return dir if dir is not None else Path.cwd() / ".fleetspec" / "lab"


@lab_app.command(cls=COMMAND)
def status(dir: DirOption = None) -> None:
    """Hosts up or down, Slurm node states, repository size."""
    from rich.markup import escape
    from rich.table import Table

    from fleetspec.lab.fleet import lab_status

    try:
        st = lab_status(_resolve(dir))
    except _failures() as exc:
        _fail(exc)
        return
    table = Table("host", "lab", "slurm state", "reason")
    for host, state in st.hosts.items():
        slurm_state, reason = st.slurm.get(host, ("", ""))
        table.add_row(host, state, slurm_state, escape(reason))
    _out.print(table)
    controller = "running" if st.controller_running else "not running"
    _out.print(f"slurmctld: {controller}; repository: {st.packages} packages")
    if any(s != "running" for s in st.hosts.values()):
        raise typer.Exit(ERROR)


@lab_app.command(cls=COMMAND)
def down(dir: DirOption = None) -> None:
    """Stop the Slurm daemons and the hosts, remove namespaces, mounts and the lab's files.
    With no lab there, nothing to do: exit 0 (so running it twice is safe)."""
    from rich.markup import escape

    from fleetspec.lab.fleet import lab_down

    target = _resolve(dir)
    if not (target / STATE_FILE).exists():
        _out.print(f"lab {escape(str(target))}: no lab here, nothing to take down")
        return
    try:
        lab_down(target)
    except _failures() as exc:
        _fail(exc)
        return
    _out.print(f"lab {escape(str(target))}: down")
