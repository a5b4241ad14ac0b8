"""``fleetspec plan``: compile the spec, compare it with the applied state (or with
another revision of the spec, ``--base FILE|REV``), print the plan (text, JSON, or a
Markdown pull-request comment), optionally save it.

Exit codes like ``terraform plan``: 0 when the plan was made (changes or not), 1 on an
error (invalid spec, unreadable or foreign state, bad options); with
``--detailed-exitcode``: 0 no changes, 1 error, 2 changes. fleetspec/cli.py registers
``plan`` (imported when it runs: fleetspec/cli_lazy.py).
"""

from __future__ import annotations

import json
import sys
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from fleetspec import exit_codes
from fleetspec.cli_usage import (
    ChartsOpt,
    EngineOpt,
    InventoryOpt,
    SigningKeyOpt,
    SlurmControlOpt,
    SlurmMode,
    batch_minutes_option,
    canary_option,
    forks_option,
    hostlist_option,
    max_unavailable_option,
)
from fleetspec.console import consoles
from fleetspec.safe_io import STDOUT, UnsafePathError

if TYPE_CHECKING:
    from rich.console import Console

    from fleetspec.compile.compiler import Built
    from fleetspec.pipeline import CompileResult
    from fleetspec.plan.model import Plan



class PlanFormat(str, Enum):
    text = "text"
    json = "json"
    markdown = "markdown"


class PlanError(Exception):
    """Planning could not start or finish; the message is for the user."""


def plan(
    spec: Annotated[Path, typer.Argument(help="the fleet spec (YAML)", metavar="SPEC", show_default=False)],
    state: Annotated[str | None, typer.Option("--state", help="state directory, file:// or postgresql:// URL "
                                              "(default: $FLEETSPEC_STATE, else .fleetspec/ beside the spec)")] = None,
    base: Annotated[str | None, typer.Option("--base", help="compare with another revision of the spec instead "
                                             "of the applied state: a file, or a git revision (origin/main)")] = None,
    format: Annotated[PlanFormat, typer.Option("--format", help="text, json, or markdown (a pull-request "
                                               "comment)")] = PlanFormat.text,
    out: Annotated[Path | None, typer.Option("--out", help="save the plan for 'apply PLAN' ('-': standard "
                                             "output, the readable plan then goes to standard error)")] = None,
    canary: Annotated[int, typer.Option("--canary", callback=canary_option, help="nodes in each partition's first wave")] = 1,
    max_unavailable: Annotated[str, typer.Option("--max-unavailable", callback=max_unavailable_option,
                                                 help="nodes (N) or share (P%) of a partition out at once")] = "25%",
    lock_timeout: Annotated[float, typer.Option("--lock-timeout", help="seconds to wait while an apply holds "
                                                "the state's lock (default: refuse at once)", min=0)] = 0.0,
    limit: Annotated[str | None, typer.Option("--limit", metavar="PATTERN", callback=hostlist_option,
                                              help="plan for these hosts only (as 'apply --limit' would): "
                                                   "hosts or a hostlist, partitions, racks, inventory groups, "
                                                   "wildcards, ~regex, &and, !not, as Ansible")] = None,
    detailed_exitcode: Annotated[bool, typer.Option("--detailed-exitcode",
                                                    help="exit 0 no changes, 1 error, 2 changes")] = False,
    facts: Annotated[Path | None, typer.Option("--facts", help="collector documents (DIR/<host>.json): nodes "
                                               "whose loaded kernel module is not the installed one get a "
                                               "drain-reboot")] = None,
    health: Annotated[Path | None, typer.Option("--health", dir_okay=False, help="verdicts from 'fleetspec health "
                                                "--format json': quarantined nodes are never canaries")] = None,
    charts: ChartsOpt = None,
    signing_key: SigningKeyOpt = None,
    batch_minutes: Annotated[float | None, typer.Option("--batch-minutes", callback=batch_minutes_option,
                                                        help="modelled minutes per install+reboot batch "
                                                             "(default 12.75)")] = None,
    forks: Annotated[int | None, typer.Option("--forks", callback=forks_option, help="hosts one wave works on at "
                                              "once (default: the whole wave)")] = None,
    engine: EngineOpt = None,
    live: Annotated[bool, typer.Option("--live", help="ask Slurm (sinfo), Kubernetes (kubectl) and the nodes "
                                       "(SSH) which nodes new to the state already run, as apply does before it "
                                       "starts: those are planned as adoptions, drained in waves. Without it the "
                                       "plan is offline and says so")] = False,
    inventory: InventoryOpt = None,
    slurm_control: SlurmControlOpt = SlurmMode.auto,
    diff: Annotated[bool, typer.Option("--diff", help="text plan: also print each change's before and after "
                                       "(unified diff for files, key: old -> new for nodes)")] = False,
) -> None:
    """Show what apply would change, how disruptive each change is, and the waves it would run.
    Exit 0: planned; 1: error. With --detailed-exitcode: 0 no changes, 1 error, 2 changes."""
    from rich.markup import escape

    from fleetspec.console import verbosity
    from fleetspec.plan.kubernetes_layer import kubernetes_notes
    from fleetspec.plan.render_markdown import plan_markdown
    from fleetspec.plan.render_text import print_plan
    from fleetspec.plan.saved import SavedPlanError, save_plan, signing_key_from
    from fleetspec.plan.schedule import with_rollout_figures
    from fleetspec.state import local_work_dir, state_location

    console, errors = consoles()
    to_stdout = out is not None and str(out) == STDOUT
    if to_stdout:
        console = errors  # standard output carries the saved plan
    try:
        if live and base is not None:
            raise PlanError("--live asks which nodes new to the state already run: it plans against the state, "
                            "not --base. Leave out one of them")
        result = build_plan(spec, state, base, canary, max_unavailable, errors, lock_timeout,
                            _quarantined(health), charts)
        if live:
            result = _live(result, inventory, slurm_control, errors)
        if facts is not None:
            result = _with_facts(result, facts, errors)
        if limit is not None:
            result = _limited(result, limit, errors)
        result = with_rollout_figures(result, batch_minutes, forks, engine.value if engine else None)
        if out is not None:
            save_plan(result, out, signing_key_from(signing_key, spec))
    except (PlanError, UnsafePathError, SavedPlanError) as exc:
        errors.print(f"error: {exc}", markup=False)
        raise typer.Exit(exit_codes.ERROR) from None
    except OSError as exc:
        errors.print(f"error: {exc.filename or ''}: {exc.strerror}", markup=False)
        raise typer.Exit(exit_codes.ERROR) from None
    notes = kubernetes_notes(result, None if base is not None else local_work_dir(state_location(spec, state), spec))
    if format is PlanFormat.markdown and not to_stdout:
        sys.stdout.write(plan_markdown(result, notes))
    elif format is PlanFormat.json and not to_stdout:
        data = result.to_dict()
        if notes is not None:
            data["kubernetes"] = notes
        print(json.dumps(data, indent=2))
    elif format is PlanFormat.text:
        print_plan(result, console, verbosity())
        if diff or verbosity() > 0:
            from fleetspec.plan.render_diff import diff_lines

            for line in diff_lines(result.changes):
                console.print(line, markup=False, highlight=False, soft_wrap=True)
        for prerequisite in (notes or {}).get("prerequisites", []) if verbosity() >= 0 else ():
            console.print(f"[yellow]prerequisite[/] {escape(prerequisite['message'])}")
        if notes and "preview" in notes and verbosity() >= 0:
            console.print(f"Kubernetes layer (Pulumi preview): {escape(notes['preview']['summary'])}")
        if out is not None and not to_stdout:
            console.print(f"saved to {escape(str(out))}: 'fleetspec apply {escape(str(out))}' applies exactly this "
                          f"plan while the state stays at serial {result.state_serial}" if result.state_serial
                          is not None else f"saved to {escape(str(out))}")
    raise typer.Exit(exit_codes.CHANGES if detailed_exitcode and not result.empty else exit_codes.OK)


def _live(plan: Plan, inventory: list[Path] | None, mode: SlurmMode, errors: Any) -> Plan:
    """The plan with the nodes found running planned as adoptions, as apply plans them."""
    from fleetspec.apply.membership import live_membership, with_membership

    found = live_membership(plan, inventory=inventory, slurm_mode=mode.value)
    for warning in found.warnings:
        errors.print(f"warning: {warning}", markup=False)
    return with_membership(plan, found)


def _with_facts(plan: Plan, directory: Path, errors: Any) -> Plan:
    from fleetspec.plan import layout_drift, with_pending_reboots
    from fleetspec.verify.run import load_facts_dir

    if not directory.is_dir():
        raise PlanError(f"--facts {directory}: not a directory of collector documents")
    found, _unreadable = load_facts_dir(directory)
    for line in layout_drift(plan.fleet, found):
        errors.print(f"warning: {line}", markup=False)
    return with_pending_reboots(plan, found)


def _limited(plan: Plan, limit: str, errors: Any) -> Plan:
    from fleetspec.plan import restrict_to_hosts
    from fleetspec.plan.select import SelectError, select

    try:
        chosen = select(plan.fleet, limit)
    except SelectError as exc:  # the command line names nothing of this fleet: nothing was done
        errors.print(f"error: {exc}", markup=False)
        raise typer.Exit(exit_codes.USAGE) from None
    for term in chosen.unmatched:
        errors.print(f"warning: --limit: {term} matched no host", markup=False)
    return restrict_to_hosts(plan, set(chosen.hosts), f"--limit {limit}")


def _quarantined(path: Path | None) -> dict[str, str] | None:
    """{node: why} from a 'fleetspec health --format json' report."""
    if path is None:
        return None
    from fleetspec.health.fleet import MAX_REPORT_BYTES, quarantined_from_report
    from fleetspec.safe_io import UnsafePathError, loads_json, read_bounded

    try:
        return quarantined_from_report(loads_json(read_bounded(path, MAX_REPORT_BYTES)))
    except (OSError, UnicodeDecodeError, UnsafePathError, ValueError) as exc:
        raise PlanError(f"--health {path}: not a 'fleetspec health --format json' report ({exc})") from None


def build_plan(spec: Path, state: str | None, base: str | None, canary: int, max_unavailable: str,
               errors: Console, lock_timeout: float = 0.0, quarantined: dict[str, str] | None = None,
               charts: Path | None = None) -> Plan:
    from fleetspec.plan import make_plan, plan_against_state
    from fleetspec.plan.base import BaseError, resolve_base
    from fleetspec.plan.waves import parse_max_unavailable
    from fleetspec.state import LockHeld, StateError, local_work_dir, open_state, state_location, wait_unlocked
    from fleetspec.state.build import applied_tree

    try:
        parse_max_unavailable(max_unavailable)
    except ValueError as exc:
        raise PlanError(str(exc)) from None
    if canary < 0:
        raise PlanError("--canary must be 0 or more nodes")
    compiled = _compiled(spec, errors, charts=charts, keep=base is not None)
    new, built = compiled.fleet, compiled.built
    assert new is not None  # _compiled refuses a spec without one
    del compiled  # its source map is not needed past here (memory at 100,000 nodes)
    try:
        if base is not None:
            found = resolve_base(spec, base)
            if found.path is None and found.text is None:
                return make_plan(new, None, canary=canary, max_unavailable=max_unavailable,
                                 base=f"nothing ({found.name} does not exist: a new fleet)", quarantined=quarantined)
            # Beside the spec: a base that differs only in what its stacks pin reuses the
            # spec's build (compile/compiler.py build_beside).
            old = _compiled(found.path, errors, found, beside=built).fleet
            assert old is not None
            del built  # nor the spec's build
            return make_plan(new, old, canary=canary, max_unavailable=max_unavailable, base=found.name,
                             quarantined=quarantined)
        location = state_location(spec, state)
        if location.path is not None and location.path.exists() and not location.path.is_dir():
            raise PlanError(f"--state {location.path} is a file: --state takes the state directory (it holds "
                            f"{new.name}.state.json) or a postgresql:// URL. Pass the directory that holds it")
        store = open_state(location, new.name, work_dir=local_work_dir(location, spec))
        wait_unlocked(store, lock_timeout)
        current = store.read()
        return plan_against_state(new, current, canary=canary, max_unavailable=max_unavailable,
                                  old_files=applied_tree(store, current), quarantined=quarantined)
    except (StateError, LockHeld, BaseError) as exc:
        raise PlanError(str(exc)) from None


def _compiled(path: Path | None, errors: Console, base: object = None, charts: Path | None = None,
              keep: bool = False, beside: Built | None = None) -> CompileResult:
    from rich.markup import escape

    from fleetspec.findings import Severity
    from fleetspec.pipeline import compile_file, compile_text
    from fleetspec.plan.base import BaseSpec

    if isinstance(base, BaseSpec) and base.text is not None:
        result = compile_text(base.text, base.name, beside=beside)
        path = Path(base.name)
    else:
        assert path is not None
        result = compile_file(path, charts=charts, keep=keep, beside=beside)
    if not result.valid or result.fleet is None:
        for f in result.located():
            if f.severity >= Severity.ERROR:
                errors.print(f"{escape(f.file)}:{f.line}:{f.column}: [red]{f.severity}[/] "
                             f"{escape(f'[{f.rule}]')} {escape(f.message)}")
        raise PlanError(f"{path} has errors: fix them, then plan again")
    return result
