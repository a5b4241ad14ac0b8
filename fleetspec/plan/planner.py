"""The planner: what applying a fleet spec would change, how disruptive each change is, and
the waves apply would run. ``make_plan`` is pure (two fleets in, a Plan out);
``plan_against_state`` reads the baseline from a State, including the per-node records
an interrupted apply left, so the plan shows exactly what is left to do.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping
from itertools import chain
from pathlib import PurePosixPath
from typing import Any

from fleetspec.compile.ir import Fleet
from fleetspec.node_side.hostlist import compress
from fleetspec.plan.diff import (
    baseline,
    cpu_node_changes,
    node_changes,
    partition_changes,
    partition_digest,
    residual_changes,
)
from fleetspec.plan.files import file_changes
from fleetspec.plan.health_policy import policy_changes
from fleetspec.plan.model import Action, Change, Disruption, Plan
from fleetspec.plan.site_hooks import hook_changes, merge_hook_changes
from fleetspec.plan.waves import MaxUnavailable, parse_max_unavailable, plan_waves
from fleetspec.state.store import NodeRecord, State


def make_plan(new: Fleet, old: Fleet | None, *, records: Mapping[str, NodeRecord | None] | None = None,
              canary: int = 1, max_unavailable: MaxUnavailable = "25%", state_serial: int | None = None,
              lineage: str | None = None, base: str | None = None,
              old_files: Mapping[PurePosixPath, str] | None = None,
              quarantined: Mapping[str, str] | None = None,
              converged: Mapping[str, str] | None = None) -> Plan:
    """``old_files``: the old fleet's rendered tree when it is at hand (what apply rendered,
    ``state.build.applied_tree``), so it is not rendered a second time. ``quarantined``:
    {node: why} from the health check; never canaries (``plan --health``). ``converged``:
    what a finished limited apply converged beyond its nodes (``LimitedApply.converged``):
    a rendered file or partition that still comes out the same is no change."""
    records = records or {}
    settings = {"canary": canary, "max_unavailable": parse_max_unavailable(max_unavailable)}
    quarantined = dict(sorted((quarantined or {}).items()))
    context = {"state_serial": state_serial, "lineage": lineage, "base": base, "settings": settings,
               "quarantined": tuple(quarantined.items())}
    if old is not None and not records and new == old:
        # Renderers are pure functions of the IR: the same fleet renders the same files.
        return Plan(new, (), **context)
    changes = merge_hook_changes(
        merge_hook_changes(chain(node_changes(new, baseline(old, records)), cpu_node_changes(new, old)),
                           hook_changes(new, old)),
        policy_changes(new, old))
    converged = converged or {}
    changes.extend(c for c in partition_changes(new, old)
                   if not (c.target in converged and _partition_same(new, c.target, converged[c.target])))
    changes.extend(_rendered_changes(new, old, old_files, converged))
    if not changes:
        changes.extend(residual_changes(new, old))
    if not changes and records:
        changes.append(Change("state:nodes", Action.UPDATE, Disruption.NONE, sorted(records), None,
                              "an interrupted or limited apply left per-node records and every node already "
                              "matches: applying folds them into the recorded fleet"))
    return Plan(new, tuple(changes), plan_waves(changes, new, canary, max_unavailable, quarantined), **context)


def plan_against_state(new: Fleet, state: State, *, canary: int = 1, max_unavailable: MaxUnavailable = "25%",
                       old_files: Mapping[PurePosixPath, str] | None = None,
                       quarantined: Mapping[str, str] | None = None) -> Plan:
    base = f"state serial {state.serial}" if state.exists else "no state yet (first apply)"
    return make_plan(new, state.applied, records=state.nodes, canary=canary, max_unavailable=max_unavailable,
                     state_serial=state.serial, lineage=state.lineage, base=base, old_files=old_files,
                     quarantined=quarantined, converged=state.limited.converged if state.limited else None)


def restrict_to_hosts(plan: Plan, hosts: set[str], why: str) -> Plan:
    """The plan as it applies to a subset of the fleet (the lab's scaled-down stand-in,
    ``--limit``): waves keep only those hosts, waves left empty go, and the plan says
    which nodes with changes it leaves out (``why`` names the restriction in words)."""
    waves = []
    for wave in plan.waves:
        kept = tuple(h for h in wave.hosts if h in hosts)
        if kept:
            waves.append(dataclasses.replace(wave, hosts=kept))
    skipped = tuple(sorted({c.host for c in plan.changes if c.host is not None and c.host not in hosts}))
    return dataclasses.replace(plan, waves=tuple(waves), restriction=why, skipped=skipped)


def hold_back(plan: Plan, held: Mapping[str, str]) -> Plan:
    """The plan without the nodes someone else drained (``held``: {node: their reason}):
    apply neither drains, changes nor resumes them, so their changes stay pending (like a
    restriction's) and the plan names them with the reason found. An unrestricted plan's
    waves are planned again over the other nodes, so a held node never leaves a wave without
    its canary; a restricted plan's waves just lose those nodes."""
    held = {h: why for h, why in held.items() if any(h in w.hosts for w in plan.waves)}
    if not held:
        return plan
    if plan.restriction is None:
        kept = [c for c in plan.changes if c.host not in held]
        settings = plan.settings
        waves = plan_waves(kept, plan.fleet, settings.get("canary", 1), settings.get("max_unavailable", "25%"),
                           {h for h, _ in plan.quarantined})
    else:
        waves = tuple(dataclasses.replace(w, hosts=tuple(h for h in w.hosts if h not in held))
                      for w in plan.waves)
        waves = tuple(w for w in waves if w.hosts)
    why = f"nodes drained by someone else ({compress(sorted(held))})"
    restriction = why if plan.restriction is None else f"{plan.restriction} and {why}"
    skipped = tuple(sorted({*plan.skipped, *held}))
    return dataclasses.replace(plan, waves=waves, restriction=restriction, skipped=skipped,
                               held=tuple(sorted({**dict(plan.held), **held}.items())))


def adopt_known(plan: Plan, known: Mapping[str, str]) -> Plan:
    """The plan with every node it would create that its scheduler already knows (``known``:
    {node: what the scheduler says of it, e.g. "Slurm state allocated"}) planned as an
    adoption: drained through its owner first, in waves with a canary, like any disruptive
    change. The state has no record of such a node, but it may be running jobs: the
    converge run installs drivers and NCCL, which must never happen under them (#28 item 4)."""
    adopted = []
    changes = []
    for c in plan.changes:
        if c.action is Action.CREATE and c.host is not None and c.host in known:
            adopted.append(c.host)
            c = dataclasses.replace(c, action=Action.UPDATE, disruption=Disruption.DRAIN, reason=(
                f"adoption: not in the state, but {known[c.host]}: it may be running work, so it is drained "
                "through its owner before fleetspec installs its tuple, and resumed after verify"))
        changes.append(c)
    if not adopted:
        return plan
    settings = plan.settings
    waves = plan_waves(changes, plan.fleet, settings.get("canary", 1), settings.get("max_unavailable", "25%"),
                       {h for h, _ in plan.quarantined})
    return dataclasses.replace(plan, changes=tuple(changes), waves=waves)


def with_pending_reboots(plan: Plan, facts: Mapping[str, Mapping[str, Any]]) -> Plan:
    """The plan plus a drain-reboot for every node whose facts (the verify collector's
    documents) show the installed kernel module differing from the loaded one, or a
    driver change waiting for a reboot: the spec did not move, the node did not follow."""
    from fleetspec.verify.compare import reboot_due

    have = {c.host for c in plan.changes if c.host is not None and c.disruption is Disruption.DRAIN_REBOOT}
    extra = []
    for host in sorted(facts):
        node = plan.fleet.node(host)
        due = reboot_due(facts[host]) if node is not None and host not in have else None
        if due is not None and node is not None:
            loaded, installed, why = due
            extra.append(Change(f"node:{host}", Action.UPDATE, Disruption.DRAIN_REBOOT, loaded, installed,
                                f"installed != loaded: {why}", node.partition, node.rack))
    if not extra:
        return plan
    changes = (*plan.changes, *extra)
    settings = plan.settings
    return dataclasses.replace(plan, changes=changes, waves=plan_waves(
        list(changes), plan.fleet, settings["canary"], settings["max_unavailable"]))


def layout_drift(fleet: Fleet, facts: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """For each Slurm node whose node line's socket/core layout differs from ``slurmd -C``
    in its facts (or that has none), the verify finding naming both, as a line."""
    from fleetspec.verify.compare import Status, slurm_layout_checks

    lines = []
    for host in sorted(facts):
        node = fleet.node(host)
        if node is not None and isinstance(facts[host], Mapping):
            lines += [f"{host}: slurm-layout: {c.message}" for c in slurm_layout_checks(node, facts[host])
                      if c.status in (Status.DRIFT, Status.WARNING)]
    return lines


def _rendered_changes(new: Fleet, old: Fleet | None, old_files: Mapping[PurePosixPath, str] | None = None,
                      converged: Mapping[str, str] | None = None) -> list[Change]:
    from fleetspec.render.traced import files_of, render_beside, render_traced

    # fleet.json is not planned (node and partition changes describe it): not rendered.
    # The old side, when not at hand, reuses the files of each renderer whose inputs did
    # not move (fleetspec/render/traced.py): a driver bump renders Slurm's files once.
    traced = render_traced(new, fleet_json=False)
    files = files_of(traced)
    if old is None:
        before: dict[PurePosixPath, str] = {}
    else:
        before = dict(old_files) if old_files is not None else render_beside(old, new, traced)
    for path, text in files.items():  # converged by a limited apply and still the same: no change
        if converged and converged.get(str(path)) == file_digest(text):
            before[path] = text
    return file_changes(files, before)


def file_digest(text: str) -> str:
    """A rendered file as a limited apply records it (``LimitedApply.converged``)."""
    return hashlib.sha256(text.encode()).hexdigest()


def converged_parts(fleet: Fleet, files: Mapping[PurePosixPath, str], hosts: set[str]) -> dict[str, str]:
    """What an apply that converged ``hosts`` (the waves' and the converge run's) made of the
    control plane: the playbooks' inputs (``ansible/``, which that run used), and when every
    Slurm controller was among ``hosts`` the Slurm files and partitions it wrote there
    (slurmdbd.conf only when the accounting host was among them too). The
    Kubernetes layer is not counted: a limited apply does not apply it for the others."""
    controllers = set(fleet.slurm.controllers) if fleet.slurm is not None else set()
    slurm = bool(controllers) and controllers <= hosts
    dbd = fleet.slurm is not None and fleet.slurm.accounting_host in hosts  # slurmdbd.conf lives there
    out = {}
    for path, text in files.items():
        top = path.parts[0] if path.parts else ""
        if top == "ansible" or (top == "slurm" and slurm and (path.name != "slurmdbd.conf" or dbd)):
            out[str(path)] = file_digest(text)
    if slurm:
        out.update({f"partition:{p.name}": partition_digest(p) for p in fleet.partitions if p.scheduler == "slurm"})
    return out


def _partition_same(fleet: Fleet, target: str, digest: str) -> bool:
    partition = fleet.partition(target.split(":", 1)[1])
    return partition is not None and partition_digest(partition) == digest


__all__ = ["adopt_known", "converged_parts", "make_plan", "plan_against_state", "restrict_to_hosts"]
