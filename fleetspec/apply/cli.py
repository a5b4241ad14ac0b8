"""``fleetspec apply SPEC|PLAN``: show the plan, ask, then roll it out in waves.

The command builds the engines apply drives (ansible-runner over the rendered
inventory plus any overlay, Slurm and Kubernetes node control, verify through Ansible)
and hands them to `rollout.apply_plan`. Exit 0 when the fleet converged (or nothing
changed), 1 when a wave or the converge run failed, or on any error.
"""

from __future__ import annotations

import functools
import json
import shutil
import sys
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from fleetspec.cli_usage import (
    Engine,
    EngineOpt,
    InventoryOpt,
    SigningKeyOpt,
    SlurmControlOpt,
    SlurmMode,
    UsageError,
    batch_minutes_option,
    canary_option,
    forks_option,
    hostlist_option,
    max_unavailable_option,
    require_ansible,
    seconds_option,
)
from fleetspec.console import lazy_consoles
from fleetspec.exit_codes import ERROR, OK, USAGE

if TYPE_CHECKING:
    from collections.abc import Callable

    from fleetspec.apply.rollout import ApplyEvent, Engines
    from fleetspec.apply.slurm_native import NativeSlurm
    from fleetspec.compile.ir import Fleet
    from fleetspec.plan.model import Plan
    from fleetspec.state import StateBackend

out, err = lazy_consoles()


class ApplyFormat(str, Enum):
    text = "text"
    json = "json"


def apply(
    target: Annotated[Path, typer.Argument(help="the fleet spec (YAML), or a plan saved with 'plan --out'", metavar="SPEC|PLAN",
                                           show_default=False)],
    yes: Annotated[bool, typer.Option("--yes", "-y", help="do not ask for confirmation")] = False,
    state: Annotated[str | None, typer.Option("--state", help="state directory, file:// or postgresql:// URL "
                                              "(default: $FLEETSPEC_STATE, else .fleetspec/ beside the spec)")] = None,
    lock_timeout: Annotated[float, typer.Option("--lock-timeout", help="seconds to wait while another apply "
                                                "holds the state's lock (default: refuse at once)", min=0)] = 0.0,
    canary: Annotated[int, typer.Option("--canary", callback=canary_option, help="nodes in each partition's first wave")] = 1,
    max_unavailable: Annotated[str, typer.Option("--max-unavailable", callback=max_unavailable_option,
                                                 help="per partition, N nodes or P% at once")] = "25%",
    lab: Annotated[Path | None, typer.Option("--lab", help="apply to the lab made by 'fleetspec lab up' "
                                                           "(its directory)")] = None,
    inventory: InventoryOpt = None,
    slurm_control: SlurmControlOpt = SlurmMode.auto,
    allow_reboot: Annotated[bool, typer.Option("--allow-reboot", help="let driver changes reboot drained "
                                               "nodes")] = False,
    drain_timeout: Annotated[float, typer.Option("--drain-timeout", min=0, callback=seconds_option, help="seconds to wait for jobs to "
                                                 "leave a drained node")] = 3600.0,
    skip_kubernetes: Annotated[bool, typer.Option("--skip-kubernetes", help="apply nodes and Slurm only; "
                                                  "the Kubernetes layer is applied elsewhere (Argo CD, Flux)")] = False,
    format: Annotated[ApplyFormat, typer.Option("--format", help="text, or json events for pipelines")] =
    ApplyFormat.text,
    ansible_config: Annotated[Path | None, typer.Option(
        "--ansible-config", exists=True, dir_okay=False, metavar="FILE",
        help="the site's ansible.cfg (bastions, ssh_args, vault password files); default: $ANSIBLE_CONFIG, "
             "./ansible.cfg, ~/.ansible.cfg, /etc/ansible/ansible.cfg, else fleetspec's own. Host keys are "
             "checked; only --lab turns that off")] = None,
    limit: Annotated[str | None, typer.Option("--limit", metavar="PATTERN", callback=hostlist_option,
                                              help="apply only to these hosts (hosts or a hostlist, partitions, "
                                                   "racks, inventory groups, wildcards, ~regex, &and, !not, as "
                                                   "Ansible); the state records only them, the next plan still "
                                                   "shows the rest")] = None,
    signing_key: SigningKeyOpt = None,
    batch_minutes: Annotated[float | None, typer.Option("--batch-minutes", callback=batch_minutes_option,
                                                        help="modelled minutes per install+reboot batch, for the "
                                                             "plan's estimate (default 12.75)")] = None,
    forks: Annotated[int | None, typer.Option("--forks", callback=forks_option, help="hosts a wave's Ansible run "
                                              "works on at once (default: the whole wave)")] = None,
    engine: EngineOpt = None,
    bundle_key: Annotated[str | None, typer.Option("--bundle-key", metavar="REF", help="slurm-native: the "
                                                   "bundle signing key, a secret reference (file:PATH, env:NAME, "
                                                   "ansible-vault:PATH#KEY, ...)")] = None,
    bundle_dir: Annotated[Path | None, typer.Option("--bundle-dir", metavar="DIR", help="slurm-native: where "
                                                    "the signed bundles are published (the mirror the nodes "
                                                    "fetch from)")] = None,
    results_dir: Annotated[Path | None, typer.Option("--results", metavar="DIR", help="slurm-native: the "
                                                     "shared directory the nodes write their results to")] = None,
) -> None:
    """Apply the spec (or a saved plan) in rolling waves: drain, upgrade, verify, resume."""
    require_ansible(err)  # before the plan is shown or the lock taken: a missing extra stops nothing half-way
    if lab is not None and ansible_config is not None:
        raise UsageError("--ansible-config does not go with --lab: the lab runs with fleetspec's own ansible.cfg")
    native_options = {"--bundle-key": bundle_key, "--bundle-dir": bundle_dir, "--results": results_dir}
    if engine is None and target.suffix != ".json":
        engine = Engine.ssh  # a saved plan says which engine it was reviewed with
    if engine is Engine.slurm_native and None in native_options.values():
        missing = ", ".join(k for k, v in native_options.items() if v is None)
        raise UsageError(f"--engine slurm-native needs {missing}: the key that signs the nodes' bundles, where "
                         "they are published and where the nodes write their results")
    if engine is Engine.ssh and any(v is not None for v in native_options.values()):
        raise UsageError("--bundle-key, --bundle-dir and --results go with --engine slurm-native")
    from fleetspec import secrets as sec
    from fleetspec.apply.rollout import ApplyError, ApplyEvent, ApplyOptions, apply_plan, wave_name
    from fleetspec.lab.fleet import LabSetupError
    from fleetspec.node_side.hostlist import HostlistError
    from fleetspec.pipeline import compile_file
    from fleetspec.plan import plan_against_state
    from fleetspec.plan.render_text import print_plan
    from fleetspec.plan.saved import SavedPlanError, check_plan_current, load_saved_plan, signing_key_from
    from fleetspec.plan.schedule import with_rollout_figures
    from fleetspec.render import render_all
    from fleetspec.render.writer import RenderWriteError, write_tree
    from fleetspec.safe_io import UnsafePathError
    from fleetspec.state import StateError, local_work_dir, locked, open_state, state_location
    from fleetspec.state.build import applied_tree, build_dir
    from fleetspec.state.lock import LockHeld

    emit = _emitter(format)
    report = None  # once the apply starts: text (milestones, a live line, a summary, the log file) or JSON lines
    saved: Plan | None = None
    try:
        if target.suffix == ".json":
            saved = load_saved_plan(target, signing_key_from(signing_key, target))
            engine = _saved_engine(saved, engine, native_options)
            fleet = saved.fleet
        else:
            compiled = compile_file(target)
            if not compiled.valid or compiled.fleet is None:
                for f in compiled.located():
                    err.print(f"{f.file}:{f.line}:{f.column}: {f.severity} [{f.rule}] {f.message}", markup=False)
                raise typer.Exit(ERROR)
            fleet = compiled.fleet
        if lab is not None and state is None:
            state = str(lab / "state")  # a rehearsal keeps its own state, never the fleet's
        location = state_location(target, state)
        store = open_state(location, fleet.name, work_dir=local_work_dir(location, target))
        base_dir = Path(target).resolve().parent
        only, why = _restriction(fleet, lab, limit)
        if not yes and not sys.stdin.isatty():
            # Nobody can answer: show the plan, take no lock, write nothing.
            current = store.read()
            plan = saved or _adopted(plan_against_state(fleet, current, canary=canary,
                                                        max_unavailable=max_unavailable,
                                                        old_files=applied_tree(store, current)),
                                     lab, inventory, slurm_control)
            plan = _held_back(_restricted(plan, only, why), lab, inventory, slurm_control)
            _show(with_rollout_figures(plan, batch_minutes, forks, engine.value), format, emit, print_plan)
            err.print("refusing to apply without confirmation: no terminal to ask on. Pass --yes")
            raise typer.Exit(ERROR)
        with locked(store, "apply", lock_timeout):
            current = store.read()
            if saved is not None:
                check_plan_current(saved, current)  # refuse a stale plan before rendering anything
                _check_saved(saved, lab, inventory, slurm_control)
            plan = saved or _adopted(plan_against_state(fleet, current, canary=canary,
                                                        max_unavailable=max_unavailable,
                                                        old_files=applied_tree(store, current)),
                                     lab, inventory, slurm_control)
            plan = with_rollout_figures(_held_back(_restricted(plan, only, why), lab, inventory, slurm_control),
                                        batch_minutes, forks, engine.value)
            _show(plan, format, emit, print_plan)
            if plan.empty:
                emit(ApplyEvent("done", "no changes"))
                raise typer.Exit(OK)
            if not yes:
                typer.confirm("Apply this plan?", abort=True)
            if format is ApplyFormat.text:
                from fleetspec.apply.report import TextReport

                log = store.work_dir / f"{fleet.name}.apply.log"
                try:
                    report = TextReport(out, log, [(wave_name(w), w.hosts) for w in plan.waves])
                except OSError as exc:  # a read-only or full disk: nothing was applied yet
                    raise ApplyError(f"cannot write the event log {log}: {exc.strerror or exc}; nothing was "
                                     f"applied. Free or fix {log.parent}, or run with --format json") from None
                emit = report.emit
            else:  # JSON lines; a final "interrupted" event when the apply does not finish
                from fleetspec.apply.report import JsonReport

                report = JsonReport([(wave_name(w), w.hosts) for w in plan.waves])
                emit = report.emit
            extravars, redact = _secrets(fleet, base_dir, sec)
            build = build_dir(store)
            rendered = render_all(fleet)
            write_tree(rendered, build)
            inventories = [build / "ansible" / "inventory.yml", *_overlays(lab, inventory)]
            engines = _engines(fleet, inventories, lab, slurm_control, ansible_config)
            if engine is Engine.slurm_native:
                assert bundle_key is not None and bundle_dir is not None and results_dir is not None
                engines.native = _native(fleet, plan, engines, max(1, current.serial), bundle_key, base_dir,
                                         bundle_dir, results_dir, emit)
            if only is not None:
                inventory_hosts = engines.all_hosts
                engines.all_hosts = lambda: [h for h in inventory_hosts() if h in only]
            if _has_kubernetes_changes(plan) and not skip_kubernetes:
                _pulumi_up(fleet, store, emit, extravars)
            result = apply_plan(plan, store, engines,
                                ApplyOptions(allow_reboot=allow_reboot, drain_timeout_s=drain_timeout,
                                             extravars=extravars, hooks_dir=base_dir, rendered=rendered),
                                emit, redact)
    except (StateError, SavedPlanError, LockHeld, ApplyError, sec.SecretError, LabSetupError, HostlistError,
            UnsafePathError, RenderWriteError) as exc:
        if report is not None:
            report.finish(None)
        err.print(f"error: {exc}", markup=False)
        raise typer.Exit(ERROR) from None
    except BaseException:  # Ctrl-C while draining, a bug: the live view stops, the log is closed
        if report is not None:
            report.finish(None)
        raise
    if report is not None:
        report.finish(result)
    raise typer.Exit(OK if result.ok else ERROR)


def _saved_engine(saved: Plan, engine: Engine | None, native_options: dict[str, Any]) -> Engine:
    """The engine a saved plan was reviewed with (its waves' engines were shown); an
    --engine that differs is refused: the plan confirmed is the plan run."""
    planned = Engine(saved.settings.get("engine") or Engine.ssh.value)
    if engine is not None and engine is not planned:
        raise UsageError(f"the saved plan was made for --engine {planned.value}, not {engine.value}: plan again with "
                         f"--engine {engine.value} to review its waves' engines")
    if planned is Engine.slurm_native and None in native_options.values():
        missing = ", ".join(k for k, v in native_options.items() if v is None)
        raise UsageError(f"the saved plan runs its Slurm waves with --engine slurm-native, which needs {missing}")
    if planned is Engine.ssh and any(v is not None for v in native_options.values()):
        raise UsageError("--bundle-key, --bundle-dir and --results go with --engine slurm-native")
    return planned


def _native(fleet: Fleet, plan: Plan, engines: Engines, version: int, key: str, base_dir: Path, bundle_dir: Path,
            results: Path, emit: Callable[[ApplyEvent], None]) -> NativeSlurm:
    """Publish the signed bundle of every partition a Slurm wave rolls (version: the state's
    serial, which only grows), and the engine that hands those waves to Slurm."""
    from fleetspec.apply.ansible import playbooks_dir
    from fleetspec.apply.bundle import BundleSignError, publish
    from fleetspec.apply.control import SlurmControl
    from fleetspec.apply.rollout import ApplyError, ApplyEvent
    from fleetspec.apply.slurm_native import NativeSlurm
    from fleetspec.render.bundle import BundleError

    if not isinstance(engines.slurm, SlurmControl):
        raise ApplyError("--engine slurm-native needs Slurm: the fleet has no Slurm, or scontrol cannot be reached")
    from fleetspec.plan.engines import SLURM_NATIVE, wave_engines

    routes = wave_engines(plan, SLURM_NATIVE)  # only the waves the plan shows as slurm-native get a bundle
    partitions = sorted({w.partition for w in plan.waves if routes[(w.partition, w.index)].native})
    for partition in partitions:
        try:
            published = publish(fleet, partition, version, key, base_dir, playbooks_dir(), bundle_dir)
        except (BundleSignError, BundleError) as exc:
            raise ApplyError(f"cannot publish the bundle of partition {partition}: {exc}; nothing was "
                             "applied") from None
        emit(ApplyEvent("converge", f"published {published.bundle} (signed: {published.signature.name})"))
    return NativeSlurm(engines.slurm.run, results, version, requests=bundle_dir / "requests")


def _restriction(fleet: Fleet, lab: Path | None, limit: str | None) -> tuple[set[str] | None, str | None]:
    """The hosts this apply may touch (None: all) and the restriction in words. A --limit
    that leaves no host is a usage error (exit 64), before the lock is taken."""
    from fleetspec.plan.select import SelectError, select

    only: set[str] | None = None
    words = []
    if lab is not None:
        from fleetspec.lab.fleet import LabHandle

        only = set(LabHandle.load(lab).hosts)
        words.append(f"the lab's hosts ({lab})")
    if limit is not None:
        try:
            chosen = select(fleet, limit)
        except SelectError as exc:
            err.print(f"error: {exc}", markup=False)
            raise typer.Exit(USAGE) from None
        for term in chosen.unmatched:
            err.print(f"warning: --limit: {term} matched no host", markup=False)
        only = set(chosen.hosts) if only is None else only & chosen.hosts
        words.append(f"--limit {limit}")
        if not only:
            err.print(f"error: --limit {limit} leaves none of the lab's hosts ({lab}) to target", markup=False)
            raise typer.Exit(USAGE)
    return only, (" and ".join(words) or None)


def _adopted(plan: Plan, lab: Path | None, inventory: list[Path] | None, mode: SlurmMode) -> Plan:
    """Nodes the plan would create that already run (Slurm or Kubernetes has them, or they
    answer SSH: a running cluster's first apply, a node added by hand) planned as adoptions:
    drained first, in waves (#28 item 4; ``apply.membership``). A source that cannot be
    asked leaves its nodes new, and apply says so."""
    from fleetspec.apply.membership import live_membership, with_membership

    found = live_membership(plan, lab=lab, inventory=inventory, slurm_mode=mode.value)
    for warning in found.warnings:
        err.print(f"warning: {warning}", markup=False)
    return with_membership(plan, found)


def _check_saved(saved: Plan, lab: Path | None, inventory: list[Path] | None, mode: SlurmMode) -> None:
    """A saved plan runs as reviewed, but never provisions as new a node that runs now
    (it was planned offline, or the node came up since): ApplyError, nothing done."""
    from fleetspec.apply.membership import live_membership, stale_news
    from fleetspec.apply.rollout import ApplyError

    if not saved.creates_nodes:
        return
    found = live_membership(saved, lab=lab, inventory=inventory, slurm_mode=mode.value)
    for warning in found.warnings:
        err.print(f"warning: {warning}", markup=False)
    why = stale_news(saved, found)
    if why is not None:
        raise ApplyError(why)


def _held_back(plan: Plan, lab: Path | None, inventory: list[Path] | None, mode: SlurmMode) -> Plan:
    """The plan without the wave nodes someone else drained (an operator, the health
    check), read before it is shown: the plan confirmed is the plan run, its canary never a
    held node. apply reads the states again before its first wave. When Slurm or
    Kubernetes cannot be asked here, the plan is shown as planned and apply says so."""
    from fleetspec.apply.control import ControlError, KubernetesControl, foreign_drains, local_runner
    from fleetspec.plan.planner import hold_back

    fleet = plan.fleet
    by_owner: dict[str, list[str]] = {}
    for wave in plan.waves:
        partition = fleet.partition(wave.partition)
        by_owner.setdefault(partition.scheduler if partition else "slurm", []).extend(wave.hosts)
    held: dict[str, str] = {}
    try:
        if by_owner.get("slurm") and fleet.slurm is not None and fleet.slurm.mode == "native":
            from fleetspec.apply.membership import slurm_control

            with slurm_control(fleet, lab, inventory, mode) as control:
                held.update(foreign_drains(control.states(by_owner["slurm"])))
        if by_owner.get("kubernetes") and shutil.which("kubectl"):
            held.update(foreign_drains(KubernetesControl(local_runner()).states(by_owner["kubernetes"])))
    except ControlError as exc:
        err.print(f"warning: could not read the wave nodes' drain state before showing the plan ({exc}); "
                  "apply reads it again before its first wave and leaves nodes someone else drained as found",
                  markup=False)
    return hold_back(plan, held) if held else plan


def _restricted(plan: Plan, only: set[str] | None, why: str | None) -> Plan:
    from fleetspec.plan import restrict_to_hosts

    return plan if only is None or why is None else restrict_to_hosts(plan, only, why)


def _show(plan: Plan, fmt: ApplyFormat, emit: Any, print_plan: Any) -> None:
    from fleetspec.apply.rollout import ApplyEvent
    from fleetspec.console import verbosity

    if fmt is ApplyFormat.text:
        print_plan(plan, out, verbosity())
    else:
        emit(ApplyEvent("plan", json.dumps(plan.to_dict())))


def _emitter(fmt: ApplyFormat):  # type: ignore[no-untyped-def]
    from rich.markup import escape

    colors = {"error": "red", "wave-start": "bold", "wave-done": "green", "done": "bold green"}

    def emit(event: ApplyEvent) -> None:
        if fmt is ApplyFormat.json:
            from fleetspec.apply.report import print_json_event

            print_json_event(event)
        elif event.kind != "plan":
            color = colors.get(event.kind, "")
            text = escape(event.message)
            out.print(f"[{color}]{text}[/]" if color else text)

    return emit


def _secrets(fleet: Fleet, base_dir: Path, sec: Any) -> tuple[dict[str, Any], Any]:
    """Resolve the secrets the playbooks need; values only in extravars and the redactor."""
    extravars: dict[str, Any] = {}
    redact = sec.Redactor()
    for ref in sec.refs(fleet):
        if ref.name == "munge_key":
            value = sec.resolve(ref, base_dir)
            redact.add(value)
            if ref.kind == "file":
                extravars["fleetspec_munge_key_file"] = str(sec.file_path(ref, base_dir))
            else:
                raise sec.SecretError("secret 'munge_key': the playbooks copy the key from a file: use file:PATH")
        elif ref.name == "slurmdbd_password":
            value = sec.resolve(ref, base_dir)
            redact.add(value)
            extravars["fleetspec_slurmdbd_password"] = value.decode()
    from fleetspec.site.ansible import site_secret_refs

    for variable, reference in site_secret_refs(fleet).items():  # ansible.vars given as {secret: REF}
        value = sec.resolve(sec.SecretRef.parse(f"ansible.vars.{variable}", reference), base_dir)
        redact.add(value)
        extravars[variable] = value.decode()
    return extravars, redact


def _overlays(lab: Path | None, inventory: list[Path] | None) -> list[Path]:
    paths = list(inventory or [])
    if lab is not None:
        from fleetspec.lab.fleet import LabHandle

        paths.append(LabHandle.load(lab).inventory_overlay)
    return paths


def _engines(fleet: Fleet, inventories: list[Path], lab: Path | None, mode: SlurmMode,
             ansible_config: Path | None = None) -> Engines:
    from fleetspec.apply.ansible import PLAYBOOKS_ENV, ansible_config_env, playbooks_dir, run_playbook
    from fleetspec.apply.rollout import ApplyError, Engines

    playbooks = playbooks_dir()
    if not (playbooks / "site.yml").exists():
        raise ApplyError(f"no site.yml in {playbooks}: run fleetspec from its source checkout (pip install -e .) "
                         f"or point {PLAYBOOKS_ENV} at a copy of its playbooks/ directory")
    from fleetspec.apply.control import KubernetesControl, SlurmControl, ansible_runner_on, local_runner
    from fleetspec.apply.wave_inventory import narrowed_runner
    from fleetspec.verify.compare import compare
    from fleetspec.verify.run import collect_inventory

    run = narrowed_runner(functools.partial(run_playbook, project_dir=playbooks,
                                            envvars=ansible_config_env(playbooks, lab=lab is not None,
                                                                       explicit=ansible_config)),
                          inventories,
                          [n.hostname for n in fleet.nodes])

    def verify(f: Fleet, hosts: list[str]):  # type: ignore[no-untyped-def]
        if len(hosts) * 2 > len(fleet.nodes):
            facts, problems = collect_inventory(inventories, hosts, forks=20)
        else:  # the wave's inventory, as its playbook run had
            with run.waves.for_hosts(hosts) as inventory:
                facts, problems = collect_inventory([inventory, *inventories[1:]], hosts, forks=20)
        return compare(f, facts, hosts=hosts, unreachable=problems)

    slurm = None
    all_hosts = functools.partial(_inventory_hosts, inventories[0])
    if lab is not None:
        from fleetspec.lab.fleet import LabHandle

        handle = LabHandle.load(lab)
        lab_hosts = list(handle.hosts)
        all_hosts = lambda: lab_hosts  # noqa: E731 - the lab holds a subset of the fleet
    if fleet.slurm is not None:
        if lab is not None:
            env = {"SLURM_CONF": str(handle.slurm_conf)} if handle.slurm_conf else {}
            slurm = SlurmControl(local_runner(env))
        elif mode is SlurmMode.local or (mode is SlurmMode.auto and shutil.which("scontrol")):
            slurm = SlurmControl(local_runner())
        elif fleet.slurm.controllers:
            slurm = SlurmControl(ansible_runner_on(inventories, fleet.slurm.controllers[0]))
    kubernetes = KubernetesControl(local_runner()) if shutil.which("kubectl") else None
    return Engines(
        run_playbook=run,
        verify=verify,
        slurm=slurm,
        kubernetes=kubernetes,
        all_hosts=all_hosts,
        health=functools.partial(_health_gate, inventories) if fleet.health is not None else None,
    )


def _health_gate(inventories: list[Path], fleet: Fleet, hosts: list[str]) -> dict[str, str]:
    """The node check on the wave's nodes (over Ansible, read-only): {host: why} for each
    node that is sick or gave no verdict."""
    from fleetspec.health.fleet import from_inventory
    from fleetspec.node_side.classify import reason

    found = from_inventory(fleet, inventories, hosts)
    sick = {h: f"{v.get('status', 'sick')}: {reason(v)}" for h, v in found.quarantined.items()}
    sick.update({h: f"no verdict: {why}" for h, why in found.unknown.items()})
    return sick


def _inventory_hosts(path: Path) -> list[str]:
    import yaml

    hosts: set[str] = set()

    def walk(group: Any) -> None:
        if not isinstance(group, dict):
            return
        hosts.update((group.get("hosts") or {}).keys())
        for child in (group.get("children") or {}).values():
            walk(child)

    data = yaml.safe_load(path.read_text()) or {}
    for group in data.values():
        walk(group)
    return sorted(hosts)


def _has_kubernetes_changes(plan: Plan) -> bool:
    return any(c.target.startswith(("kubernetes:", "helm:")) for c in plan.changes)


def _pulumi_up(fleet: Fleet, store: StateBackend, emit: Any, extravars: dict[str, Any]) -> None:
    from fleetspec.apply.pulumi import PulumiOptions, unavailable_reason, up
    from fleetspec.apply.rollout import ApplyError, ApplyEvent

    # Slinky's accounting Secret is made by the stack from the same resolved password.
    password = extravars.get("fleetspec_slurmdbd_password")
    options = PulumiOptions(state_dir=store.work_dir,
                            secrets={"slurmdbd_password": password} if password else {})
    reason = unavailable_reason(options)
    if reason is not None:
        raise ApplyError(f"the plan changes the Kubernetes layer, but {reason}. Install pulumi, set "
                         "PULUMI_CONFIG_PASSPHRASE and FLEETSPEC_KUBE_CONTEXT, or pass --skip-kubernetes "
                         "and apply build/kubernetes/ with your GitOps tool")
    result = up(fleet, options, lambda line: emit(ApplyEvent("kubernetes", line)))
    if not result.ok:
        raise ApplyError(f"pulumi up failed: {result.summary}")
    emit(ApplyEvent("kubernetes", f"Kubernetes layer applied: {result.summary}"))
