"""``fleetspec facts collect``: thin; parse options, call `fleetspec.facts.collect.collect`,
show each node's answer as it arrives, pick the exit code.

Exit 0: every node's facts are in DIR. 1: some node gave none (each is named, with why;
the others' files are still written) or nothing could run. 64: a usage error.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from fleetspec.cli_usage import UsageError, require_ansible
from fleetspec.console import command_class, lazy_consoles
from fleetspec.exit_codes import ERROR

if TYPE_CHECKING:
    from fleetspec.facts.collect import Answer

facts_app = typer.Typer(
    help="Node facts (the collector's documents, docs/facts.md) that import, verify and plan read.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
_out, _err = lazy_consoles()
COMMAND = command_class()


@facts_app.command("collect", cls=COMMAND)
def collect(
    out: Annotated[Path, typer.Option("--out", help="the directory to write <host>.json into (replaced as a whole, "
                                      "as render replaces its tree)", file_okay=False, show_default=False,
                                      metavar="DIR")],
    inventory: Annotated[list[Path] | None, typer.Option("--inventory", "-i", help="an Ansible inventory: its "
                                                         "hosts and how to reach them (repeatable)",
                                                         dir_okay=False, metavar="INVENTORY")] = None,
    hosts: Annotated[str | None, typer.Option("--hosts", help="a Slurm hostlist (gpu-[001-064]): these hosts "
                                              "(of the inventory, or reached by name with your SSH settings)",
                                              show_default=False, metavar="HOSTLIST")] = None,
    forks: Annotated[int, typer.Option("--forks", help="nodes collected at once", min=1, max=1000)] = 20,
    timeout: Annotated[int, typer.Option("--timeout", help="seconds the collector may run on one node",
                                         min=1)] = 300,
    connect_timeout: Annotated[int, typer.Option("--connect-timeout", help="seconds to reach one node",
                                                 min=1)] = 10,
) -> None:
    """Run the fact collector on every node over SSH (Ansible), write DIR/<host>.json, name the nodes it could
    not reach: exit 0 all collected, 1 otherwise."""
    from rich.markup import escape

    from fleetspec.facts.collect import CollectError
    from fleetspec.facts.collect import collect as run_collect
    from fleetspec.node_side.hostlist import HostlistError, expand

    if not inventory and hosts is None:
        raise UsageError("give -i INVENTORY, --hosts HOSTLIST, or both (--hosts then picks hosts of the inventory)")
    chosen = None
    if hosts is not None:
        try:
            chosen = expand(hosts)
        except HostlistError as exc:
            raise UsageError(f"--hosts: {exc}") from None
    require_ansible(_err)
    show = _Shower()
    try:
        result = run_collect(out, inventories=inventory or [], hosts=chosen, forks=forks,
                             connect_timeout=connect_timeout, timeout=timeout, on_answer=show, on_start=show.start)
    except CollectError as exc:
        show.stop()
        _err.print(f"error: {exc}", markup=False)
        raise typer.Exit(ERROR) from None
    finally:
        show.stop()  # a Ctrl-C during the run too: the terminal gets its cursor back
    for host, why in sorted(result.failed.items()):
        _err.print(f"[red]no facts[/] {escape(host)}: {escape(why)}")
    total = len(result.written) + len(result.failed)
    if result.written:
        _out.print(f"wrote facts of {len(result.written)} of {total} node(s) to {escape(str(result.out))}")
    else:
        _out.print(f"no node gave facts; {escape(str(result.out))} is left as it was")
    if result.failed:
        unreached = ", ".join(sorted(result.failed)[:20]) + (" ..." if len(result.failed) > 20 else "")
        _err.print(f"{len(result.failed)} node(s) without facts: {escape(unreached)}")
        raise typer.Exit(ERROR)


class _Shower:
    """Each node's answer as it arrives: a progress bar on a terminal (failures printed
    above it), one plain line per node elsewhere (a CI log, a pipe)."""

    def __init__(self) -> None:
        self._done = 0
        self._bar: Any = None
        self._task: Any = None

    def start(self, total: int) -> None:
        """Before the first node answers: the bar at 0 of ``total`` (a terminal only)."""
        if self._bar is None and _err.is_terminal:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._bar = Progress(TextColumn("collecting facts"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), console=_err, transient=True)
            self._task = self._bar.add_task("facts", total=total)
            self._bar.start()

    def __call__(self, answer: Answer) -> None:
        self._done += 1
        if self._bar is not None:
            self._bar.update(self._task, completed=self._done)  # nodes without facts are listed at the end
            return
        _err.print(f"{self._done}/{answer.total} {answer.host}: {'ok' if answer.ok else answer.why}", markup=False)

    def stop(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
