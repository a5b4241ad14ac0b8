"""Site hooks in the plan: a hook playbook that is new, edited (its content hash moved)
or declared differently runs on its nodes at the next apply, so each of those nodes gets
the disruption class the site declared for it. A node that already changes keeps one
change, with the worse class and both reasons, so it sits in one wave."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from fleetspec.compile.ir import Fleet, Hook
from fleetspec.plan.model import Action, Change, Disruption, worst
from fleetspec.site.ansible import hook_hosts


def _hooks(fleet: Fleet | None) -> tuple[Hook, ...]:
    return fleet.site.hooks if fleet is not None and fleet.site is not None else ()


def hook_changes(new: Fleet, old: Fleet | None) -> list[Change]:
    """One change per node a new or changed hook will run on."""
    before = set(_hooks(old))
    changes: dict[str, Change] = {}
    for hook in _hooks(new):
        if hook in before:
            continue
        action = Action.UPDATE if any(h.playbook == hook.playbook for h in before) else Action.CREATE
        why = (f"site hook {hook.playbook} ({hook.phase} fleetspec's playbooks) "
               f"{'changed' if action is Action.UPDATE else 'added'}: it runs on the node, "
               f"declared {hook.disruption}")
        for host in hook_hosts(new, hook, (n.hostname for n in new.nodes)):
            node = new.node(host)
            assert node is not None
            change = Change(f"node:{host}", action, Disruption(hook.disruption), None,
                            {"hook": hook.playbook, "phase": hook.phase}, why, node.partition, node.rack)
            changes[change.target] = _merged(changes.get(change.target), change)
    return list(changes.values())


def merge_hook_changes(changes: Iterable[Change], hooks: Iterable[Change]) -> list[Change]:
    """``changes`` with the hook changes folded in: one change per node."""
    out = {c.target: c for c in changes}
    order = list(out)
    for h in hooks:
        if h.target not in out:
            order.append(h.target)
        out[h.target] = _merged(out.get(h.target), h)
    return [out[t] for t in order]


def _merged(first: Change | None, second: Change) -> Change:
    if first is None:
        return second
    return dataclasses.replace(first, disruption=worst((first.disruption, second.disruption)),
                               reason=f"{first.reason}; {second.reason}")
