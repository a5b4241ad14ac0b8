"""Site hooks in the plan: a hook playbook that is new, edited (its content hash moved)
or declared differently runs on its nodes at the next apply, so each of those nodes gets
the disruption class the site declared for it. A node that already changes keeps one
change, with the worse class and both reasons, so it sits in one wave.

``ansible.vars`` reach every host (``group_vars/all.yml``) and are read by the site's
hooks (fleetspec's own playbooks read only ``fleetspec_*`` variables, and a site variable
may not take an Ansible or fleetspec name: site/ansible.py). So a change to them is a
change to every hook's input: each hook runs again on its nodes with its declared class,
as an edited hook does. Each changed Ansible input also gets a line of its own
(``site:ansible.vars``, ``site:hook:<playbook>``) with the worst class it brings and the
number of nodes it reaches, so a reviewer sees it named, never folded into "none"."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable
from typing import Any

from fleetspec.compile.ir import Fleet, Hook
from fleetspec.plan.model import Action, Change, Disruption, worst
from fleetspec.site.ansible import hook_hosts


def _hooks(fleet: Fleet | None) -> tuple[Hook, ...]:
    return fleet.site.hooks if fleet is not None and fleet.site is not None else ()


def _vars(fleet: Fleet | None) -> dict[str, Any]:
    return json.loads(fleet.site.ansible_vars) if fleet is not None and fleet.site is not None else {}


def vars_changed(new: Fleet, old: Fleet | None) -> tuple[list[str], list[str], list[str]]:
    """Names of site variables (added, removed, changed) between the two fleets. Names
    only: a value may be anything the site wrote, so the plan never shows one."""
    if old is None:
        return [], [], []
    a, b = _vars(new), _vars(old)
    return (sorted(set(a) - set(b)), sorted(set(b) - set(a)),
            sorted(k for k in set(a) & set(b) if a[k] != b[k]))


def hook_changes(new: Fleet, old: Fleet | None) -> list[Change]:
    """One change per node a new or changed hook will run on (every hook when
    ``ansible.vars`` changed), then one line per changed Ansible input."""
    before = set(_hooks(old))
    added, removed, changed = vars_changed(new, old)
    vars_moved = bool(added or removed or changed)
    changes: dict[str, Change] = {}
    lines: list[Change] = []
    hosts_all = [n.hostname for n in new.nodes]
    for hook in _hooks(new):
        if hook in before and not vars_moved:
            continue
        if hook in before:
            action, what = Action.UPDATE, "runs again: ansible.vars changed"
        elif any(h.playbook == hook.playbook for h in before):
            action, what = Action.UPDATE, "changed"
        else:
            action, what = Action.CREATE, "added"
        why = (f"site hook {hook.playbook} ({hook.phase} fleetspec's playbooks) {what}: it runs on the node, "
               f"declared {hook.disruption}")
        targets = hook_hosts(new, hook, hosts_all)
        for host in targets:
            node = new.node(host)
            assert node is not None
            change = Change(f"node:{host}", action, Disruption(hook.disruption), None,
                            {"hook": hook.playbook, "phase": hook.phase}, why, node.partition, node.rack)
            changes[change.target] = _merged(changes.get(change.target), change)
        if hook not in before:
            lines.append(Change(f"site:hook:{hook.playbook}", action, Disruption(hook.disruption), None,
                                {"phase": hook.phase, "partitions": list(hook.partitions), "nodes": len(targets)},
                                f"site hook {hook.playbook} {what}: the site's own playbook runs as root on "
                                f"{len(targets)} node(s), declared {hook.disruption}; review it"))
    for hook in before - set(_hooks(new)):
        if not any(h.playbook == hook.playbook for h in _hooks(new)):
            lines.append(Change(f"site:hook:{hook.playbook}", Action.DELETE, Disruption.NONE,
                                {"phase": hook.phase}, None,
                                f"site hook {hook.playbook} removed: it no longer runs; what it did stays"))
    if vars_moved:
        readers = list(_hooks(new))
        disruption = worst(Disruption(h.disruption) for h in readers)
        named = "; ".join(f"{label} {', '.join(names)}" for label, names in
                          (("added", added), ("removed", removed), ("changed", changed)) if names)
        reach = (f"every hook runs again on its nodes ({', '.join(h.playbook for h in readers)}), so the worst "
                 f"class they declare applies: {disruption.value}" if readers else
                 "no site hook reads them and fleetspec's playbooks read only fleetspec_* variables, "
                 "so nothing runs differently: none")
        lines.append(Change("site:ansible.vars", Action.UPDATE, disruption, {"names": sorted(_vars(old))},
                            {"names": sorted(_vars(new))},
                            f"ansible.vars ({named}) reach every host through group_vars/all.yml; {reach}"))
    return list(changes.values()) + lines


def merge_hook_changes(changes: Iterable[Change], hooks: Iterable[Change]) -> list[Change]:
    """``changes`` with the hook changes folded in: one change per node."""
    out = {c.target: c for c in changes}
    order = list(out)
    for h in hooks:
        if h.host is None:  # a site:... line of its own
            order.append(h.target)
            out[h.target] = h
            continue
        if h.target not in out:
            order.append(h.target)
        out[h.target] = _merged(out.get(h.target), h)
    return [out[t] for t in order]


def _merged(first: Change | None, second: Change) -> Change:
    if first is None:
        return second
    return dataclasses.replace(first, disruption=worst((first.disruption, second.disruption)),
                               reason=f"{first.reason}; {second.reason}")
