"""``fleetspec import slurm``: thin; parse options, call `import_slurm`, write the spec.

Exit 0 with the spec written (warnings on standard error); 1 when the files cannot
become a spec, with every problem at ``file:line:column``; --out is then left as it was.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from fleetspec.cli_usage import InventoryOpt, SlurmControlOpt, SlurmMode, UsageError
from fleetspec.console import consoles
from fleetspec.exit_codes import ERROR

import_app = typer.Typer(help="Write the fleet spec of a cluster that already runs.", no_args_is_help=True)

MAX_FACTS_FILES = 100_000


@import_app.command("slurm")
def slurm(
    out: Annotated[Path, typer.Option("--out", help="the spec to write", dir_okay=False, show_default=False)],
    conf: Annotated[Path | None, typer.Option("--conf", help="the cluster's slurm.conf (Include files beside it); "
                                              "with --live on a controller: the file slurmctld read",
                                              dir_okay=False, show_default=False)] = None,
    gres: Annotated[Path | None, typer.Option("--gres", help="gres.conf", dir_okay=False)] = None,
    topology: Annotated[Path | None, typer.Option("--topology", help="topology.conf (tree)", dir_okay=False)] = None,
    cgroup: Annotated[Path | None, typer.Option("--cgroup", help="cgroup.conf, kept as written (default: the one "
                                                "beside slurm.conf, if any)", dir_okay=False)] = None,
    slurmdbd: Annotated[Path | None, typer.Option("--slurmdbd", help="slurmdbd.conf, kept as written, StoragePass "
                                                  "as a secret reference (default: the one beside slurm.conf, if "
                                                  "any)", dir_okay=False)] = None,
    facts: Annotated[Path | None, typer.Option("--facts", help="a directory of <hostname>.json facts (the fact "
                                               "collector's, as verify reads them)", file_okay=False)] = None,
    slurm_version: Annotated[str | None, typer.Option("--slurm-version", help="the cluster's Slurm release "
                                                      "(default: what the facts report)")] = None,
    fabric: Annotated[str | None, typer.Option("--fabric", help="infiniband, roce or ethernet: what the "
                                               "topology's switches carry")] = None,
    state: Annotated[str | None, typer.Option("--state", help="also record the cluster as applied in this new "
                                              "state (directory, file:// or postgresql:// URL), so the first plan "
                                              "shows only real differences")] = None,
    live: Annotated[bool, typer.Option("--live", help="also ask the running slurmctld (scontrol show config, "
                                       "node, partition): its values win over the files', node State and Reason "
                                       "included; gres.conf and topology.conf still come from the files")] = False,
    slurm_control: SlurmControlOpt = SlurmMode.auto,
    inventory: InventoryOpt = None,
) -> None:
    """Read a running Slurm cluster's files (and node facts) and write its fleet spec."""
    from fleetspec.importer.build import import_slurm
    from fleetspec.importer.conf import ImportRefused
    from fleetspec.safe_io import UnsafePathError, atomic_write
    from fleetspec.verify.run import VerifyError, load_facts_dir

    _, err = consoles()
    documents = {}
    if facts is not None:
        try:
            documents, unreadable = load_facts_dir(facts)
        except VerifyError as exc:
            err.print(f"error: {exc}", markup=False)
            raise typer.Exit(ERROR) from None
        for reason in unreadable.values():
            err.print(f"error: {reason}", markup=False)
        if unreadable:
            raise typer.Exit(ERROR)
    if fabric is not None and fabric not in ("infiniband", "roce", "ethernet"):
        err.print(f"error: --fabric {fabric!r}: give infiniband, roce or ethernet", markup=False)
        raise typer.Exit(ERROR)
    running = None
    if live:
        from fleetspec.importer.live import LiveError, read_live, runner

        try:
            running = read_live(*runner(slurm_control.value, inventory or [], conf))
        except LiveError as exc:
            err.print(f"error: --live: {exc}", markup=False)
            raise typer.Exit(ERROR) from None
        err.print(f"read slurmctld {running.slurm_version} ({running.where}): {len(running.nodes)} node(s), "
                  f"{len(running.partitions)} partition(s)", markup=False)
        if conf is None and running.slurm_conf and running.where == "scontrol here":
            conf = Path(running.slurm_conf)
        gres = gres if gres is not None or conf is None else _beside(conf, "gres.conf")
        topology = topology if topology is not None or conf is None else _beside(conf, "topology.conf")
        slurm_version = slurm_version or running.slurm_version
    if conf is None:
        raise UsageError("give --conf SLURM.CONF (or --live on a controller, where slurmctld names its file)")
    for name, given in (("cgroup.conf", cgroup), ("slurmdbd.conf", slurmdbd)):
        if given is None and _beside(conf, name) is not None:
            err.print(f"reading {_beside(conf, name)} (beside slurm.conf; give --{name.split('.')[0]} to name "
                      "another)", markup=False)
    cgroup = cgroup or _beside(conf, "cgroup.conf")
    slurmdbd = slurmdbd or _beside(conf, "slurmdbd.conf")
    try:
        result = import_slurm(conf, gres, topology, documents, slurm_version, fabric, running, cgroup, slurmdbd)
    except ImportRefused as exc:
        for problem in exc.problems:
            err.print(str(problem), markup=False)
        err.print(f"{len(exc.problems)} problem(s); {out} not written", markup=False)
        raise typer.Exit(ERROR) from None
    for warning in result.warnings:
        err.print(str(warning), markup=False)
    try:
        atomic_write(out, result.spec_text.encode())
    except (OSError, UnsafePathError) as exc:
        err.print(f"error: cannot write {out}: {exc}", markup=False)
        raise typer.Exit(ERROR) from None
    err.print(f"wrote {out}", markup=False)
    if state is not None:
        from fleetspec.importer.adopt import adopt
        from fleetspec.state.backend import parse_location
        from fleetspec.state.lock import LockHeld
        from fleetspec.state.store import StateError

        try:
            recorded = adopt(result.fleet, parse_location(state), str(conf) + (" and the running slurmctld" if live else ""))
        except (StateError, LockHeld) as exc:
            err.print(f"error: {exc} ({out} is written; the state is not)", markup=False)
            raise typer.Exit(ERROR) from None
        err.print(f"recorded {len(result.fleet.nodes)} node(s) as applied in {state} (serial {recorded.serial})",
                  markup=False)


def _beside(conf: Path, name: str) -> Path | None:
    """``name`` in slurm.conf's directory, where slurmctld reads it, if it is there."""
    path = conf.parent / name
    return path if path.is_file() else None
