"""`fleetspec baremetal plan|apply|replace`: the bare-metal plane as a Typer sub-app.

Thin: compile the spec, call one function of fleetspec.baremetal, print, pick the exit code.
``plan``: 0 when no BMC error and every BMC answered, 1 otherwise. ``apply``: 0 when every
change was made. ``join``: 0 when every node passed verify and is in service. ``replace``: 0 when every ``replace`` verdict got a spare and a ticket.
"""

from __future__ import annotations

import json
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from fleetspec.console import command_class, lazy_consoles
from fleetspec.exit_codes import ERROR, OK

baremetal_app = typer.Typer(
    help="The bare-metal plane: BMCs over Redfish (power, boot, BIOS, inventory, firmware), hot spares and "
    "break-fix tickets (docs/bare-metal.md).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
_out, _err = lazy_consoles()
COMMAND = command_class()
SpecArg = Annotated[Path, typer.Argument(help="the fleet spec (YAML)", show_default=False)]
HostsOpt = Annotated[str | None, typer.Option("--hosts", help="only these nodes (a hostlist)")]


class Format(str, Enum):
    text = "text"
    json = "json"


def _compiled(spec: Path, baremetal: bool = True):  # type: ignore[no-untyped-def]
    from fleetspec.pipeline import compile_file

    compiled = compile_file(spec)
    if compiled.fleet is None or not compiled.valid:
        for f in compiled.located():
            if str(f.severity) == "error":
                _err.print(f"{f.file}:{f.line}:{f.column}: error [{f.rule}] {f.message}", markup=False)
        _err.print(f"{spec}: the spec has errors; fix them (fleetspec validate) first", markup=False)
        raise typer.Exit(ERROR)
    if baremetal and compiled.fleet.baremetal is None:
        _err.print(f"{spec}: the spec has no bmc or baremetal section: nothing to do", markup=False)
        raise typer.Exit(ERROR)
    return compiled


def _hosts(hosts: str | None) -> list[str] | None:
    from fleetspec.node_side.hostlist import HostlistError, expand

    if hosts is None:
        return None
    try:
        return expand(hosts)
    except HostlistError as exc:
        _err.print(f"--hosts: {exc}", markup=False)
        raise typer.Exit(ERROR) from None


def _read_and_plan(spec: Path, hosts: str | None, canary: int, max_unavailable: str):  # type: ignore[no-untyped-def]
    from fleetspec.baremetal.run import observe, plan_bmcs
    from fleetspec.findings import locate

    compiled = _compiled(spec)
    observation = observe(compiled.fleet, spec.resolve().parent, _hosts(hosts))
    plan, findings = plan_bmcs(compiled.fleet, observation, canary, max_unavailable)
    located = sorted((locate(f, compiled.source) for f in findings), key=lambda f: (f.line, f.column, f.message))
    return plan, located, observation


def _report(located, observation) -> bool:  # type: ignore[no-untyped-def]
    """Print findings and unreachable BMCs; True when nothing is an error."""
    from fleetspec.baremetal.run import unreachable_lines

    for f in located:
        _err.print(f"{f.file}:{f.line}:{f.column}: {f.severity} [{f.rule}] {f.message}", markup=False)
    for why in unreachable_lines(observation):
        _err.print(f"error: {why}", markup=False)
    return not observation.unreachable and not any(str(f.severity) == "error" for f in located)


@baremetal_app.command("plan", cls=COMMAND)
def plan(spec: SpecArg, hosts: HostsOpt = None, format: Annotated[Format, typer.Option("--format")] = Format.text,
         canary: Annotated[int, typer.Option("--canary", min=0)] = 1,
         max_unavailable: Annotated[str, typer.Option("--max-unavailable")] = "25%") -> None:
    """Read every node's BMC over Redfish and show the changes apply would make, with their disruption."""
    from fleetspec.plan.render_text import print_plan

    result, located, observation = _read_and_plan(spec, hosts, canary, max_unavailable)
    ok = _report(located, observation)
    if format is Format.json:
        data = result.to_dict()
        data["findings"] = [f.to_dict() for f in located]
        data["unreachable"] = dict(sorted(observation.unreachable.items()))
        data["observed"] = {h: o.to_dict() for h, o in sorted(observation.seen.items())}
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
    elif observation.unreachable and result.empty:  # never "matches": those BMCs were not read
        _out.print(f"No plan: {len(observation.unreachable)} BMC(s) could not be read (the errors above); "
                   f"{len(observation.seen)} read", markup=False)
    elif result.empty and not ok:  # nor where an error says what differs
        _out.print("No changes apply can make, and the fleet does not match the BMCs: the errors above",
                   markup=False)
    else:
        print_plan(result, _out)
        if observation.unreachable:
            _out.print(f"Not in this plan: the {len(observation.unreachable)} node(s) whose BMC could not be read "
                       "(the errors above)", markup=False)
    raise typer.Exit(OK if ok else ERROR)


class Drain(str, Enum):
    slurm = "slurm"
    kubernetes = "kubernetes"
    none = "none"


@baremetal_app.command("apply", cls=COMMAND)
def apply(spec: SpecArg, hosts: HostsOpt = None,
          drain: Annotated[Drain, typer.Option("--drain", help="drain nodes before a BIOS or firmware reboot "
                                               "through this scheduler's client here (none: refuse reboots)")] = Drain.none,
          canary: Annotated[int, typer.Option("--canary", min=0)] = 1,
          max_unavailable: Annotated[str, typer.Option("--max-unavailable")] = "25%",
          tftp: Annotated[Path | None, typer.Option("--tftp", file_okay=False, exists=True,
                                                    help="the boot server's TFTP root (the rendered baremetal/tftp): "
                                                    "write nodes/<mac>.ipxe there for every NIC each BMC reports, "
                                                    "before any node is powered on")] = None,
          join: Annotated[list[Path] | None, typer.Option("--join", help="an Ansible inventory that reaches the "
                                                          "nodes: join every node this run powers on, as "
                                                          "'baremetal join' does, once it has booted")] = None,
          join_timeout: Annotated[float, typer.Option("--join-timeout", min=1, help="seconds to wait for each "
                                                      "powered-on node's slurmd to register")] = 900) -> None:
    """Make the BMC changes: power on (boot once from the network), BIOS attributes and firmware updates
    (drain, stage or update, restart, read back, resume); with --join, join the nodes it powered on."""
    from fleetspec.apply.control import KubernetesControl, SlurmControl, local_runner
    from fleetspec.baremetal.run import apply_bmcs
    from fleetspec.plan.render_text import print_plan
    from fleetspec.secrets import Redactor

    result, located, observation = _read_and_plan(spec, hosts, canary, max_unavailable)
    if not _report(located, observation):
        _err.print("not applied: fix the errors above first", markup=False)
        raise typer.Exit(ERROR)
    joining = None
    if join:
        if drain is not Drain.slurm:
            _err.print("--join lets nodes into Slurm: give --drain slurm (the nodes are held drained until they join)",
                       markup=False)
            raise typer.Exit(ERROR)
        booting = sorted({c.host for c in result.changes if c.host and c.after.get("power") == "On"})
        joining = _joining(result.fleet, spec, booting, join, register=True) if booting else None
    print_plan(result, _out)
    if tftp is not None:
        from fleetspec.baremetal.run import BootScriptError, write_boot_scripts

        try:
            scripts, skipped = write_boot_scripts(tftp, result.fleet, observation)
        except BootScriptError as exc:
            for problem in exc.problems:
                _err.print(f"error: {problem}", markup=False)
            _err.print("not applied: fix the errors above first", markup=False)
            raise typer.Exit(ERROR) from None
        for line in skipped:
            _err.print(f"warning: {line}", markup=False)
        for written in scripts:
            _out.print(f"boot script {written}", markup=False)
    run = local_runner(timeout=120)
    control = {Drain.slurm: SlurmControl(run), Drain.kubernetes: KubernetesControl(run), Drain.none: None}[drain]
    done = apply_bmcs(result, spec.resolve().parent, control, lambda line: _out.print(line, markup=False),
                      redactor=Redactor())
    for host, why in sorted(done.failed.items()):
        _err.print(f"{host}: {why}", markup=False)
    if not done.ok:
        raise typer.Exit(ERROR)
    raise typer.Exit(OK if joining is None or joining(join_timeout) else ERROR)


@baremetal_app.command("replace", cls=COMMAND)
def replace(spec: SpecArg,
            facts: Annotated[Path, typer.Option("--facts", help="a directory of <hostname>.json verdicts (the node "
                                                "check's --format json)", file_okay=False)]) -> None:
    """For each node whose health verdict is 'replace': a spare joins its Slurm partition and a ticket is posted."""
    from fleetspec.apply.control import local_runner
    from fleetspec.baremetal.spares import replace_nodes
    from fleetspec.health.fleet import HealthError, from_dir

    compiled = _compiled(spec)
    try:
        health = from_dir(compiled.fleet, facts)
    except HealthError as exc:
        _err.print(f"error: {exc}", markup=False)
        raise typer.Exit(ERROR) from None
    done = replace_nodes(compiled.fleet, health.verdicts, local_runner(timeout=60), spec.resolve().parent,
                         lambda line: _out.print(line, markup=False))
    if not done:
        _out.print("no node's verdict is 'replace'", markup=False)
    raise typer.Exit(OK if all(r.ok for r in done) else ERROR)


@baremetal_app.command("join", cls=COMMAND)
def join(spec: SpecArg,
         hosts: Annotated[str, typer.Option("--hosts", help="the nodes that booted (a hostlist)", show_default=False)],
         inventory: Annotated[list[Path], typer.Option("--inventory", "-i", help="Ansible inventory that reaches "
                                                       "the nodes (verify collects their facts through it)")],
         timeout: Annotated[float, typer.Option("--timeout", min=1, help="seconds to wait for each slurmd to "
                                                "register")] = 900,
         register: Annotated[bool, typer.Option("--register/--no-register", help="install the fleet's munge key and "
                                                "start munge and slurmd on each node first (a golden image holds "
                                                "no key)")] = True) -> None:
    """Let booted nodes into Slurm only once verify passes: hold them drained, start their munge and
    slurmd (the fleet's munge key), wait for slurmd to register, verify them, resume those that pass;
    the others stay drained with the failing check."""
    compiled = _compiled(spec, baremetal=False)
    joining = _joining(compiled.fleet, spec, _hosts(hosts) or [], inventory, register)
    raise typer.Exit(OK if joining(timeout) else ERROR)


def _joining(fleet, spec: Path, wanted: list[str], inventory: list[Path], register: bool):  # type: ignore[no-untyped-def]
    """Check the hosts and resolve the munge key now (an error exits before anything is done);
    return the join to run: timeout -> whether every node joined."""
    from fleetspec.ansible_adhoc import AdhocError, run_script
    from fleetspec.apply.control import ControlError, SlurmControl, local_runner
    from fleetspec.baremetal.join import check_hosts, register_script
    from fleetspec.baremetal.join import join as join_nodes
    from fleetspec.secrets import SecretError, refs, resolve
    from fleetspec.verify.run import VerifyError, verify_joining

    def verify(fleet, nodes):  # type: ignore[no-untyped-def]
        return verify_joining(fleet, nodes, inventory, spec.resolve().parent)

    start = None
    try:
        check_hosts(fleet, wanted)
        if register:
            ref = next((r for r in refs(fleet) if r.name == "munge_key"), None)
            if ref is None:
                raise SecretError("the spec has no native Slurm, so no munge key to install: join with --no-register")
            script = register_script(resolve(ref, spec.resolve().parent))

            def start(nodes):  # type: ignore[no-untyped-def]
                answers = run_script(inventory, nodes, "fleetspec-join.sh", script, executable="/bin/sh")
                return {h: ((True, "no answer from Ansible") if h not in answers
                            else (answers[h].status == "unreachable", answers[h].last_line()))
                        for h in nodes if h not in answers or answers[h].status != "ok"}
    except (SecretError, ValueError) as exc:
        _err.print(f"error: {exc}", markup=False)
        raise typer.Exit(ERROR) from None

    def run(timeout: float) -> bool:
        try:
            done = join_nodes(fleet, wanted, SlurmControl(local_runner(timeout=60)), verify,
                              lambda line: _out.print(line, markup=False), timeout_s=timeout, register=start)
        except (ValueError, ControlError, VerifyError, AdhocError) as exc:
            _err.print(f"error: {exc}", markup=False)
            return False
        return all(j.in_service for j in done)

    return run
