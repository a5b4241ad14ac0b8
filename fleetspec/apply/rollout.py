"""Apply a plan in safe rolling waves, through the engines that already exist.

For each wave (a canary first, never more than ``max_unavailable`` of a partition):
drain through the allocation owner and wait for its jobs (or a deadline), run the
playbooks limited to the wave, verify the wave's nodes, resume them, record the wave in
the state. A wave that fails stops the rollout and leaves its nodes drained with the
reason; the rest of the fleet keeps serving and the state keeps every completed wave,
so the next ``plan`` shows exactly what is left. After the waves one converge run
covers every other host (controllers, new nodes, configuration), the nodes it touched
are verified, Slurm reconfigures when its partitions changed, and the whole fleet is
recorded as applied. A plan restricted to some hosts (the lab, ``--limit``) records
only the nodes it applied and verified, and says which nodes it skipped: the state
never claims work that was not done.

The engines are injected (`Engines`), so the same code drives a datacenter, the lab,
and the tests.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import Any

from fleetspec.apply.ansible import HostEvent, PlaybookResult
from fleetspec.apply.control import APPLY_REASON_PREFIX, ControlError, NodeControl, OwnedOnly, foreign_drains
from fleetspec.apply.hooks import run_with_hooks
from fleetspec.apply.lanes import run_steps
from fleetspec.apply.slurm_native import NativeSlurm, RequestsError
from fleetspec.compile.ir import Fleet
from fleetspec.node_side.hostlist import compress
from fleetspec.plan.engines import REBOOT, SLURM_NATIVE, SSH, wave_engines
from fleetspec.plan.files import needs_empty_queue
from fleetspec.plan.model import Disruption, Plan, Wave
from fleetspec.plan.planner import converged_parts, hold_back
from fleetspec.plan.saved import SavedPlanError, check_plan_current
from fleetspec.plan.schedule import Step, wave_id
from fleetspec.safe_io import UnsafePathError
from fleetspec.secrets import Redactor
from fleetspec.state import LimitedApply, StateBackend
from fleetspec.state.build import mark_applied
from fleetspec.verify.compare import Status, VerifyReport


@dataclass(frozen=True)
class ApplyEvent:
    kind: str  # plan | held | wave-start | drain | busy | hook | playbook | host | verify | resume | wave-done
    # | converge | skipped | done | error
    message: str
    wave: str | None = None
    hosts: tuple[str, ...] = ()
    ok: bool = True
    task: HostEvent | None = None  # a "host" event: the task event itself (status started|ok|changed|...)

    def to_dict(self) -> dict[str, Any]:
        data = {"event": self.kind, "message": self.message, "wave": self.wave, "hosts": list(self.hosts),
                "ok": self.ok}
        if self.task is not None:
            data.update(task=self.task.task, item=self.task.item, status=self.task.status)
        return data


Emit = Callable[[ApplyEvent], None]
PlaybookRunner = Callable[..., PlaybookResult]  # (limit=..., extravars=..., on_event=...) -> result
Verifier = Callable[[Fleet, list[str]], VerifyReport]
# The node check's verdict on each of the hosts: {host: why it is not healthy} (sick, or no
# verdict at all); {} when every one is healthy or degraded.
HealthGate = Callable[[Fleet, list[str]], dict[str, str]]


@dataclass
class Engines:
    run_playbook: PlaybookRunner
    verify: Verifier | None
    slurm: NodeControl | None
    kubernetes: NodeControl | None
    all_hosts: Callable[[], list[str]]  # every host the inventory holds (nodes, controllers, db)
    health: HealthGate | None = None  # with spec.health: a wave whose nodes come back unhealthy stops
    native: NativeSlurm | None = None  # Slurm waves go to Slurm and the nodes' own converge (#30 item 2)


@dataclass(frozen=True)
class ApplyOptions:
    allow_reboot: bool = False
    drain_timeout_s: float = 3600.0
    extravars: dict[str, Any] = field(default_factory=dict)
    hooks_dir: Path | None = None  # where ansible.hooks playbooks are (the spec's directory)
    rendered: Mapping[PurePosixPath, str] | None = None  # the tree the playbooks read (render_all of the fleet)


@dataclass(frozen=True)
class ApplyResult:
    ok: bool
    message: str
    waves_done: tuple[str, ...] = ()
    failed_wave: str | None = None
    drained: tuple[str, ...] = ()  # nodes left drained by a failure
    carried: tuple[str, ...] = ()  # nodes whose jobs outlived the drain timeout twice: not applied, at work


Lock = AbstractContextManager[Any]  # the apply's one lock (state writes, events) across lanes


class ApplyError(Exception):
    pass


def wave_name(wave: Wave) -> str:
    return f"{wave.partition}#{wave.index}{' (canary)' if wave.canary else ''}"


def apply_plan(plan: Plan, store: StateBackend, engines: Engines, options: ApplyOptions, emit: Emit,
               redact: Redactor | None = None) -> ApplyResult:
    """Run ``plan``; the caller holds ``store``'s lock. Never raises for a failed wave."""
    redact = redact or Redactor()
    lock = threading.RLock()  # waves of several lanes at once: one event and one state write at a time

    def say(kind: str, message: str, wave: str | None = None, hosts: Sequence[str] = (), ok: bool = True,
            task: HostEvent | None = None) -> None:
        with lock:
            emit(ApplyEvent(kind, redact(message), wave, tuple(hosts), ok, task))

    try:
        before = store.read()
        check_plan_current(plan, before)
    except SavedPlanError as exc:
        say("error", str(exc), ok=False)
        return ApplyResult(False, str(exc))
    if plan.empty:
        say("done", "no changes: the fleet already matches the spec")
        return ApplyResult(True, "no changes")

    fleet = plan.fleet
    busy_queue = _queue_not_empty(plan, engines)
    if busy_queue is not None:
        say("error", busy_queue, ok=False)
        return ApplyResult(False, busy_queue)
    reasons = _reasons(plan)
    controls = [_control_for(fleet, wave, engines, plan.unowned) for wave in plan.waves]  # refuse before draining anything
    try:
        held = _held(plan, controls)
    except ControlError as exc:
        say("error", f"cannot read the nodes' drain state: {exc}; nothing was drained", ok=False)
        return ApplyResult(False, f"cannot read the nodes' drain state: {exc}")
    if held:
        plan = hold_back(plan, held)
        controls = [_control_for(fleet, wave, engines, plan.unowned) for wave in plan.waves]
    held = {**dict(plan.held), **held}  # and those held back before the plan was shown (apply's CLI)
    if held:
        say("held", f"{len(held)} node(s) drained by someone else are left exactly as found (not drained again, "
                    "not changed, not resumed; their changes stay pending): "
                    + "; ".join(f"{h} ({why})" for h, why in sorted(held.items())), None, sorted(held), ok=False)
    done: list[str] = []
    failures: dict[str, ApplyResult] = {}
    carried: dict[str, Wave] = {}  # wave id -> the wave's nodes whose jobs outlived the drain timeout
    control_of = {wave_id(w): c for w, c in zip(plan.waves, controls, strict=True)}

    drains = _drains(plan)
    by_wave = wave_engines(plan, SLURM_NATIVE if engines.native is not None else SSH)
    routes = {wave_id(w): by_wave[(w.partition, w.index)] for w in plan.waves}
    native_of = {wid: engines.native for wid, r in routes.items()
                 if r.native and engines.native is not None and control_of[wid] is engines.slurm}
    policy = any(c.disruption is Disruption.ROLLING for c in plan.changes) and engines.health is not None

    def run_wave(step: Step, cancel: Callable[[], bool]) -> bool:
        wave, control = step.wave, control_of[step.id]
        name = wave_name(wave)
        hosts = list(wave.hosts)
        route = routes[step.id]
        engine = f", {route.engine} ({route.method})" if route.native else ""
        say("wave-start", f"wave {name}: {len(hosts)} node(s), {wave.disruption.value}{engine}", name, hosts)
        if policy:  # a new health policy: checked on the wave's nodes before any of them gets it
            refused = _policy_precheck(plan, before.applied, name, hosts, engines, say, redact, done)
            if refused is not None:
                failures[step.id] = refused
                return False
        to_drain = [h for h in hosts if h in drains]
        reason = f"{APPLY_REASON_PREFIX}{reasons.get(to_drain[0] if to_drain else hosts[0], wave.disruption.value)}"
        # Slurm-native waves (plan/engines.py, the rule the plan showed): a reboot change goes to
        # Slurm's reboot and the nodes' boot-time converge; a drain-only change is drained here
        # (drain timeout, carry round) and the nodes converge in place on a request. The rest
        # (rolling, unowned, CPU-only, ...) take the SSH path.
        native = native_of.get(step.id)
        if native is not None and route.method == REBOOT:
            failure = _native_wave(plan, wave, name, hosts, reason, control, engines, engines.native, store, say,
                                   redact, done, lock)
            if failure is not None:
                failures[step.id] = failure
            return failure is None
        try:
            if not to_drain:  # a rolling wave: the nodes keep their jobs
                busy = []
            else:
                control.drain(to_drain, reason)
                say("drain", f"drained {', '.join(to_drain)}: {reason}", name, to_drain)
                busy = control.wait_drained(to_drain, options.drain_timeout_s,
                                            lambda b, n=name: say("busy", _busy_message(n, b, options), n, b))
            if busy and wave.canary:  # the canary proves the change before the rest: never carried past
                failures[step.id] = _stop(say, control, name, hosts,
                                          f"jobs still running on {', '.join(busy)} after "
                                          f"{options.drain_timeout_s:.0f}s: a canary must be idle before the "
                                          "rest roll; apply again when it is", done, redact, to_drain)
                return False
            if busy:  # not a global stop: those nodes go back to work and wait for the carry round
                busy = _carry(say, control, name, busy, options)
                if busy:
                    carried[step.id] = replace(wave, hosts=tuple(busy), canary=False)
                hosts = [h for h in hosts if h not in busy]
                if not hosts:
                    return True
        except ControlError as exc:
            failures[step.id] = _stop(say, control, name, hosts, f"drain failed: {exc}", done, redact, to_drain)
            return False
        failure = _converge_wave(plan, wave, name, hosts, control, engines, store, options, say, redact, done, lock,
                                 forks=step.parallel, cancel=cancel, drained=[h for h in hosts if h in drains],
                                 native=native)
        if failure is not None:
            failures[step.id] = failure
            return False
        return True

    _, stopped = run_steps(plan.schedule.steps, run_wave)
    if stopped is not None:  # the first wave that failed; waves of other lanes that were running finished
        return replace(failures[stopped], waves_done=tuple(done))
    left: list[str] = []
    if carried:
        leftover = _carry_round(plan, carried, control_of, engines, store, options, say, redact, done, lock,
                                native_of)
        if isinstance(leftover, ApplyResult):
            return leftover
        left = leftover
    waved = {h for w in plan.waves for h in w.hosts}
    rest = sorted(set(engines.all_hosts()) - waved - set(held))  # a held node gets no playbook either
    converged: list[str] = []
    if rest:
        say("converge", f"converging {len(rest)} other host(s) (controllers, new nodes, configuration)", None, rest)
        result = run_with_hooks(engines.run_playbook, fleet, options.hooks_dir, rest,
                                lambda m: say("hook", m, None, rest),
                                extravars={**options.extravars, "fleetspec_allow_reboot": False},
                                on_event=lambda e: _host_event(say, redact, None, e))
        unseen = sorted(set(rest) - set(result.hosts))
        if not result.ok or unseen:
            failed = result.failed_hosts + [f"{h} (never reached: not in the inventory?)" for h in unseen]
            message = f"converge run failed on {', '.join(failed) or result.status}; completed waves are recorded"
            say("error", message, None, failed, ok=False)
            return ApplyResult(False, message, tuple(done))
        converged = [h for h in rest if fleet.node(h) is not None]
        if converged and engines.verify is not None:
            drift = _drift(engines.verify(fleet, converged))
            if drift:
                message = "verify failed after the converge run: " + "; ".join(drift) + \
                          ". Completed waves are recorded; these nodes are not"
                say("error", message, None, converged, ok=False)
                return ApplyResult(False, redact(message), tuple(done))
            say("verify", f"{compress(converged)} run the partition's tuple", None, converged)
    if engines.slurm is not None and fleet.slurm is not None and _slurm_config_changed(plan):
        try:
            engines.slurm.reconfigure()
            say("converge", "scontrol reconfigure: Slurm read the new partitions")
        except ControlError as exc:
            say("error", f"scontrol reconfigure failed: {exc}", ok=False)
            return ApplyResult(False, str(exc), tuple(done))
    if plan.restriction is None and not left:
        recorded = store.record_applied(fleet, f"applied {len(plan.changes)} change(s) in {len(plan.waves)} wave(s)")
        mark_applied(store, recorded.serial)  # the next plan reads the old files from the build tree
        say("done", f"applied: {len(plan.changes)} change(s), {len(done)} wave(s)")
        return ApplyResult(True, "applied", tuple(done))
    # Restricted, or nodes carried over: the state records only the nodes this run applied
    # and verified (the waves did theirs); everything else stays pending, so the next plan
    # still shows it.
    if converged:
        store.record_wave(fleet, converged, f"converged {compress(converged)} ({plan.restriction or 'carried over'})")
    if left:
        say("carried", f"{len(left)} node(s) still ran jobs after the drain timeout twice: {compress(left)}. They "
                       "are back at work, unchanged, and the state does not record them: the next apply takes them "
                       "(or run it when they are idle)", None, left, ok=False)
    # Finished: the state says so, with the control-plane parts this run converged (kept
    # from earlier limited applies too), and the nodes it left (skipped or carried over).
    parts = {**(before.limited.converged if before.limited else {}),
             **converged_parts(fleet, options.rendered or {}, (waved - set(left)) | set(rest))}
    unapplied = tuple(sorted(set(plan.skipped) | set(left)))
    restriction = plan.restriction or "carried over"
    store.record_limited(LimitedApply(restriction, unapplied, parts),
                         f"limited apply finished ({restriction}); "
                         + (f"not applied: {compress(list(unapplied))}" if unapplied else "no node left"))
    if plan.skipped:
        say("skipped", f"skipped {len(plan.skipped)} node(s) outside {plan.restriction}: {compress(plan.skipped)}. "
                       "They were not touched and the state does not record them: the next plan still shows "
                       "their changes", None, plan.skipped, ok=False)
    applied = len(({h for w in plan.waves for h in w.hosts} - set(left)) | set(converged))
    why = plan.restriction or f"{len(left)} node(s) carried over"
    say("done", f"applied to {applied} node(s) of {len(fleet.nodes)} ({why}): {len(done)} wave(s)")
    return ApplyResult(True, "applied (restricted)" if plan.restriction else "applied (nodes carried over)",
                       tuple(done), carried=tuple(left))


def _converge_wave(plan: Plan, wave: Wave, name: str, hosts: list[str], control: NodeControl, engines: Engines,
                   store: StateBackend, options: ApplyOptions, say: Callable[..., None], redact: Redactor, done: list[str],
                   lock: Lock, forks: int | None = None, cancel: Callable[[], bool] | None = None,
                   drained: list[str] | None = None, native: NativeSlurm | None = None) -> ApplyResult | None:
    """Upgrade a wave, verify it, pass the health gate, resume the nodes it drained
    (``drained``, default all: a rolling change's nodes were never drained) and record it;
    None when it did, else the stopped rollout's result (the drained nodes stay drained).
    ``native``: the drained nodes converge in place on a request (no Ansible from here)."""
    fleet = plan.fleet
    drained = list(hosts) if drained is None else drained
    stop = functools.partial(_stop, say, control, name, hosts, done=done, redact=redact, drained=drained)
    why = (_native_in_place(fleet, name, hosts, native, say) if native is not None
           else _ansible_wave(plan, name, hosts, engines, options, say, redact, forks, cancel, drained))
    if why is not None:
        return stop(why)
    if engines.health is not None:
        sick = _gate(engines, fleet, hosts)
        if sick:
            return stop("unhealthy after the wave: " + "; ".join(f"{h}: {why}" for h, why in sorted(sick.items())))
        say("verify", f"{', '.join(hosts)} passed the node health check", name, hosts)
    try:
        taken = foreign_drains(control.states(drained)) if drained else {}  # drained by someone else meanwhile
        if taken:
            say("held", f"wave {name}: not resuming " + "; ".join(f"{h} (drained by someone else "
                        f"during the wave: {why})" for h, why in sorted(taken.items())), name, sorted(taken),
                ok=False)
        if [h for h in drained if h not in taken]:
            control.resume([h for h in drained if h not in taken])
    except ControlError as exc:
        return stop(f"resume failed: {exc}")
    with lock:
        how = f" (slurm-native in place, bundle version {native.version})" if native is not None else ""
        store.record_wave(fleet, hosts, f"wave {name}: {wave.disruption.value}{how}")
        done.append(name)
    say("wave-done", f"wave {name} done; " + ("nodes resumed" if drained else "no node was drained"), name, hosts)
    return None


def _ansible_wave(plan: Plan, name: str, hosts: list[str], engines: Engines, options: ApplyOptions,
                  say: Callable[..., None], redact: Redactor, forks: int | None, cancel: Callable[[], bool] | None,
                  drained: list[str]) -> str | None:
    """The wave's playbooks from here (Ansible, limited to the wave) and verify over SSH;
    why it failed, or None."""
    fleet = plan.fleet
    # Drained nodes may have their kernel modules reloaded by a driver change (the
    # nvidia_driver role) where no reboot is allowed; only when every host of the wave is
    # drained (a rolling change's nodes keep their jobs; an unowned node has no scheduler
    # that drained it), and the converge run never reboots.
    extravars = {**options.extravars, "fleetspec_allow_reboot": options.allow_reboot,
                 "fleetspec_drained": set(hosts) <= set(drained) - set(plan.unowned)}
    runner = engines.run_playbook
    if forks is not None or cancel is not None:
        runner = functools.partial(runner, **({"forks": forks} if forks else {}),
                                   **({"cancel": cancel} if cancel is not None else {}))
    result = run_with_hooks(runner, fleet, options.hooks_dir, hosts,
                            lambda m, n=name, h=hosts: say("hook", m, n, h), extravars=extravars,
                            on_event=lambda e, n=name: _host_event(say, redact, n, e))
    unseen = sorted(set(hosts) - set(result.hosts))
    if not result.ok or unseen:
        failures = [f"{h}: {'; '.join(r.failures) or ('unreachable' if r.unreachable else 'failed')}"
                    for h, r in sorted(result.hosts.items()) if r.failed or r.unreachable]
        failures += [f"{h}: the playbook never reached it (not in the inventory?)" for h in unseen]
        return "playbook failed: " + " | ".join(failures or [result.status])
    say("playbook", f"playbooks ran on {', '.join(hosts)} ({len(result.changed_hosts)} changed)", name, hosts)

    if engines.verify is not None:
        report = engines.verify(fleet, hosts)
        drift = _drift(report)
        if drift:
            return "verify failed: " + "; ".join(drift)
        say("verify", f"{', '.join(hosts)} run the partition's tuple", name, hosts)
    return None


def _native_in_place(fleet: Fleet, name: str, hosts: list[str], native: NativeSlurm,
                     say: Callable[..., None]) -> str | None:
    """The drained nodes converge themselves in place, no reboot: one request file each,
    then the results; verify compares their own facts. Why it failed, or None. The
    requests are withdrawn either way (a node never runs a stale one later)."""
    try:
        late = native.settled(hosts)
    except ControlError as exc:
        return f"cannot read the nodes' state: {exc}"
    if late:
        return f"Slurm does not show {compress(late)} drained, though no job runs there: not asked to converge"
    try:
        request = native.request(hosts)
    except RequestsError as exc:
        return f"{exc}; no node was asked to converge"
    except (OSError, UnsafePathError) as exc:
        return f"cannot write the converge requests to {native.requests}: {getattr(exc, 'strerror', None) or exc}"
    say("playbook", f"wave {name}: asked {compress(hosts)} to converge in place to bundle version "
                    f"{native.version} (request {request}; no reboot)", name, hosts)
    try:
        outcome = native.wait(hosts, _progress(say, name, hosts, "converged"), request=request)
    except ControlError as exc:
        return f"cannot read the nodes' state: {exc}"
    finally:
        native.withdraw(hosts)
    if outcome.failed:
        return "node converge failed: " + " | ".join(f"{h}: {why}" for h, why in sorted(outcome.failed.items()))
    drift = _drift(native.verify(fleet, outcome.facts, hosts))
    if drift:
        return "verify failed: " + "; ".join(drift)
    say("verify", f"{compress(hosts)} run the partition's tuple (their own facts, converged in place)", name, hosts)
    return None


def _progress(say: Callable[..., None], name: str, hosts: list[str], done: str) -> Callable[[list[str]], None]:
    """A Slurm-native wave's progress line, said only when the pending nodes change."""
    told: list[list[str]] = [list(hosts)]

    def progress(pending: list[str]) -> None:
        if pending != told[0]:
            told[0] = pending
            say("playbook", f"wave {name}: {len(hosts) - len(pending)} of {len(hosts)} node(s) {done}"
                            + (f"; waiting for {compress(pending)}" if pending else ""), name, hosts)

    return progress


def _native_wave(plan: Plan, wave: Wave, name: str, hosts: list[str], reason: str, control: NodeControl,
                 engines: Engines, native: NativeSlurm, store: StateBackend, say: Callable[..., None],
                 redact: Redactor, done: list[str], lock: Lock) -> ApplyResult | None:
    """The wave handed to Slurm: ``scontrol reboot ASAP nextstate=RESUME``, each node
    converges itself from the signed bundle at boot; then the same gates as the SSH path
    (verify on the nodes' own facts, the health check) and the wave is recorded. A failed
    gate stops the rollout with the wave's nodes drained, as there."""
    fleet = plan.fleet
    try:
        native.reboot(hosts, reason)
    except ControlError as exc:
        return _stop(say, control, name, hosts, f"scontrol reboot failed: {exc}", done, redact)
    say("drain", f"handed {compress(hosts)} to Slurm: reboot ASAP, nextstate=RESUME ({reason}); each node "
                 f"converges itself to bundle version {native.version}", name, hosts)
    try:
        outcome = native.wait(hosts, _progress(say, name, hosts, "back"))
    except ControlError as exc:
        return _stop(say, control, name, hosts, f"cannot read the nodes' state: {exc}", done, redact)
    if outcome.failed:
        return _stop(say, control, name, hosts, "node converge failed: " + " | ".join(
            f"{h}: {why}" for h, why in sorted(outcome.failed.items())), done, redact)
    drift = _drift(native.verify(fleet, outcome.facts, hosts))
    if drift:
        return _stop(say, control, name, hosts, "verify failed: " + "; ".join(drift), done, redact)
    say("verify", f"{compress(hosts)} run the partition's tuple (their own facts)", name, hosts)
    if engines.health is not None:
        try:
            sick = engines.health(fleet, hosts)
        except Exception as exc:  # no verdict is a failed gate, never a pass
            sick = {h: f"no verdict ({type(exc).__name__}: {exc})" for h in hosts}
        if sick:
            return _stop(say, control, name, hosts, "unhealthy after the wave: " + "; ".join(
                f"{h}: {why}" for h, why in sorted(sick.items())), done, redact)
    with lock:
        store.record_wave(fleet, hosts, f"wave {name}: {wave.disruption.value} (slurm-native, bundle "
                                        f"version {native.version})")
        done.append(name)
    say("wave-done", f"wave {name} done; Slurm resumed the nodes", name, hosts)
    return None


def _carry_round(plan: Plan, carried: dict[str, Wave], control_of: dict[str, NodeControl], engines: Engines,
                 store: StateBackend, options: ApplyOptions, say: Callable[..., None], redact: Redactor,
                 done: list[str], lock: Lock, native_of: Mapping[str, NativeSlurm] | None = None,
                 ) -> list[str] | ApplyResult:
    """After the last wave: each carried wave's nodes drained again (never more than their
    wave was, so within its partition's budget), one after another; those idle by the drain
    timeout are upgraded as their wave was, the others stay at work, unchanged (returned)."""
    left: list[str] = []
    for wid, wave in carried.items():
        control = control_of[wid]
        name = f"{wid} (carried)"
        hosts = list(wave.hosts)
        say("wave-start", f"wave {name}: {len(hosts)} node(s) whose jobs outlived the drain timeout, "
                          f"{wave.disruption.value}", name, hosts)
        reason = f"{APPLY_REASON_PREFIX}{_reasons(plan).get(hosts[0], wave.disruption.value)}"
        try:
            control.drain(hosts, reason)
            say("drain", f"drained {', '.join(hosts)}: {reason}", name, hosts)
            busy = control.wait_drained(hosts, options.drain_timeout_s,
                                        lambda b, n=name: say("busy", _busy_message(n, b, options), n, b))
            if busy:
                taken = foreign_drains(control.states(busy))
                if [h for h in busy if h not in taken]:
                    control.resume([h for h in busy if h not in taken])
                left.extend(busy)
                hosts = [h for h in hosts if h not in busy]
        except ControlError as exc:
            return replace(_stop(say, control, name, hosts, f"drain failed: {exc}", done, redact), waves_done=tuple(done))
        if hosts:
            failure = _converge_wave(plan, replace(wave, hosts=tuple(hosts)), name, hosts, control, engines, store,
                                     options, say, redact, done, lock, native=(native_of or {}).get(wid))
            if failure is not None:
                return replace(failure, waves_done=tuple(done))
    return sorted(left)


def _carry(say: Callable[..., None], control: NodeControl, name: str, busy: list[str],
           options: ApplyOptions) -> list[str]:
    """The wave's nodes whose jobs outlived the drain timeout go back to work (resumed: the
    partition's budget stays free for its next waves) and wait for the carry round; a node
    someone else drained meanwhile is left to them."""
    taken = foreign_drains(control.states(busy))
    mine = [h for h in busy if h not in taken]
    if mine:
        control.resume(mine)
    say("carried", f"wave {name}: jobs on {compress(busy)} outlived the drain timeout "
                   f"({options.drain_timeout_s:.0f}s): carried to the round after the last wave, back at work "
                   "meanwhile; the wave goes on with the rest", name, busy, ok=False)
    return mine


def _stop(say: Callable[..., None], control: NodeControl, name: str, hosts: list[str], why: str,
          done: list[str], redact: Redactor, drained: list[str] | None = None) -> ApplyResult:
    """Stop the rollout: the wave's nodes it drained (``drained``, default all) stay
    drained, with the reason Slurm shows; a rolling change's nodes stay in service."""
    why = redact(why)
    reason = f"{APPLY_REASON_PREFIX}{why}"[:250]
    drained = list(hosts) if drained is None else drained
    try:
        try:  # a node someone else drained meanwhile keeps their reason
            ours = [h for h in drained if h not in foreign_drains(control.states(drained))] if drained else []
        except ControlError:
            ours = drained
        if ours:
            control.drain(ours, reason)
    except ControlError as exc:
        why += f" (and setting the drain reason failed: {exc})"
    kept = [h for h in hosts if h not in drained]
    fate = ("Its nodes stay drained" if not kept else f"{compress(kept)} stay in service (never drained)" if not drained
            else f"{compress(drained)} stay drained, {compress(kept)} in service (never drained)")
    say("error", f"wave {name} stopped: {why}. {fate}; the rest of the fleet keeps serving. "
                 "Fix the cause, then run apply again", name, hosts, ok=False)
    return ApplyResult(False, f"wave {name} failed: {why}", tuple(done), name, tuple(drained))


def _held(plan: Plan, controls: Sequence[NodeControl]) -> dict[str, str]:
    """The waves' nodes that someone else drained: {node: their reason, as found}."""
    hosts: dict[int, tuple[NodeControl, list[str]]] = {}
    for wave, control in zip(plan.waves, controls, strict=True):
        hosts.setdefault(id(control), (control, []))[1].extend(wave.hosts)
    held: dict[str, str] = {}
    for control, names in hosts.values():
        held.update(foreign_drains(control.states(names)))
    return held


def _host_event(say: Callable[..., None], redact: Redactor, wave: str | None, event: HostEvent) -> None:
    """Every task event of a host (started, ok, changed, failed, ...), redacted: the
    progress of the run; ``ok`` is False for a failure that stops the host."""
    event = replace(event, task=redact(event.task), message=redact(event.message),
                    item=None if event.item is None else redact(event.item))
    task = f"{event.task} ({event.item})" if event.item else event.task
    say("host", f"{event.host}: {task}: {event.status}{': ' + event.message if event.message else ''}",
        wave, [event.host], event.status not in ("failed", "unreachable"), event)


def _busy_message(name: str, busy: list[str], options: ApplyOptions) -> str:
    if not busy:
        return f"wave {name}: drained, nothing left running"
    return (f"wave {name}: waiting for the jobs (pods) on {compress(busy)} to end "
            f"(--drain-timeout {options.drain_timeout_s:.0f}s)")


def _drift(report: VerifyReport) -> list[str]:
    out = []
    for node in report.nodes:
        for check in node.checks:
            if check.status is Status.DRIFT:
                out.append(f"{node.hostname} {check.component}: expected {check.expected}, found {check.found}")
    return out


def _control_for(fleet: Fleet, wave: Wave, engines: Engines, unowned: tuple[str, ...] = ()) -> NodeControl:
    """The wave's owner's control; nodes adopted though no scheduler has them
    (``Plan.unowned``) are left out of its drains, and a wave of only those needs none."""
    partition = fleet.partition(wave.partition)
    owner = partition.scheduler if partition else "slurm"
    control = engines.slurm if owner == "slurm" else engines.kubernetes
    if unowned and set(wave.hosts) & set(unowned):
        if control is None and not set(wave.hosts) <= set(unowned):
            raise ApplyError(f"wave {wave_name(wave)} needs to drain {owner}-owned nodes, but no {owner} control "
                             "is configured")
        return OwnedOnly(control, frozenset(unowned))
    if control is None:
        raise ApplyError(f"wave {wave_name(wave)} needs to drain {owner}-owned nodes, but no {owner} control is "
                         "configured")
    return control


def _drains(plan: Plan) -> set[str]:
    """The nodes whose changes need them drained; a node with only rolling changes (a new
    health policy) keeps its jobs in its wave."""
    return {c.host for c in plan.changes if c.host is not None and c.disruption.drains}


def _policy_precheck(plan: Plan, applied: Fleet | None, name: str, hosts: list[str], engines: Engines,
                     say: Callable[..., None], redact: Redactor, done: list[str]) -> ApplyResult | None:
    """The node check under the plan's new health policy on the wave's nodes, before any of
    them gets it (the gate ships the new policy with the check, read-only): a node it would
    drain stops the rollout there, no node drained and none given the policy. The nodes it
    would drain are checked under the applied policy too, to say whose fault it is: the new
    policy's (healthy under the old one) or the node's (sick under both). None: all pass."""
    sick = _gate(engines, plan.fleet, hosts)
    if not sick:
        say("verify", f"{', '.join(hosts)} pass the node check under the new health policy", name, hosts)
        return None
    old = _gate(engines, applied, sorted(sick)) if applied is not None and applied.health is not None else {}
    policy = {h: why for h, why in sick.items() if h not in old}
    parts = []
    if policy:
        parts.append("the new health policy would drain " + "; ".join(f"{h} ({why})" for h, why in sorted(policy.items()))
                     + (", which the current policy leaves in service: the policy is wrong for them (a stricter "
                        "action or check reads healthy nodes as sick); fix spec.health" if applied is not None
                        and applied.health is not None else ""))
    if old:
        parts.append("sick under the current policy too: " + "; ".join(
            f"{h} ({sick[h]})" for h in sorted(old)) + "; let the current check drain them (or drain them), "
            "then apply again: a held node is left out of the waves")
    why = redact(". ".join(parts) + ". No node of this wave or a later one gets the new policy; none was drained")
    say("error", f"wave {name} stopped: {why}", name, hosts, ok=False)
    return ApplyResult(False, f"wave {name} failed: {why}", tuple(done), name, ())


def _gate(engines: Engines, fleet: Fleet, hosts: list[str]) -> dict[str, str]:
    """The health gate's verdict on ``hosts`` under ``fleet``'s policy: {host: why not healthy}."""
    assert engines.health is not None
    try:
        return engines.health(fleet, hosts)
    except Exception as exc:  # no verdict is a failed check, never a pass
        return {h: f"no verdict ({type(exc).__name__}: {exc})" for h in hosts}


def _reasons(plan: Plan) -> dict[str, str]:
    """Per host, the most disruptive change in SRE words (the Slurm drain reason)."""
    best: dict[str, tuple[int, str]] = {}
    for change in plan.changes:
        if change.host is None:
            continue
        rank = change.disruption.rank
        if change.host not in best or rank > best[change.host][0]:
            best[change.host] = (rank, change.reason.split(":")[0] if change.reason else change.disruption.value)
    return {h: r for h, (_, r) in best.items()}


def _queue_not_empty(plan: Plan, engines: Engines) -> str | None:
    """Why apply must not start, or None. A SwitchType change restarts slurmctld and the slurmds,
    and slurm.conf(5) SwitchType: "If running jobs exist at the time slurmctld is restarted with a
    new value of SwitchType, records of all jobs in any state may be lost." So the plan says
    ``drain`` (plan/files.py) and apply checks the queue (``squeue -h``) before touching anything."""
    changes = needs_empty_queue(plan.changes)
    if not changes:
        return None
    what = ", ".join(c.target for c in changes)
    queue = getattr(engines.slurm, "queue", None)
    try:
        jobs = queue() if queue is not None else None
    except ControlError as exc:
        return f"{what} changes SwitchType, which needs an empty queue, and squeue failed: {exc}; nothing was changed"
    if jobs is None:
        return f"{what} changes SwitchType, which needs an empty queue, and apply has no Slurm control to read " \
               "the queue with; nothing was changed"
    if not jobs:
        return None
    shown = ", ".join(jobs[:10]) + (f" and {len(jobs) - 10} more" if len(jobs) > 10 else "")
    return (f"{what} changes SwitchType: slurmctld and the slurmds restart with it, and slurm.conf(5) SwitchType "
            "says the records of all jobs may be lost when jobs exist at that restart. squeue shows "
            f"{len(jobs)} job(s) ({shown}). Drain every partition (scontrol update PartitionName=<each> "
            "State=DRAIN), wait until 'squeue -h' prints nothing (let the jobs finish, or requeue or cancel "
            "them), then apply again. Nothing was drained, changed or restarted")


def _slurm_config_changed(plan: Plan) -> bool:
    return any(c.target.startswith(("slurm:", "partition:")) and c.disruption is not Disruption.NONE
               for c in plan.changes)
