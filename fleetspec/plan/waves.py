"""The waves apply would run: which nodes leave service together.

Only nodes whose change needs them empty (drain, drain-reboot, replace, or removal)
are in waves; restart-daemon and lighter changes go to the whole fleet at once.
Per partition (the node's primary one), nodes are taken rack by rack in fleet order:
first a canary wave of ``canary`` nodes, then waves as large as ``max_unavailable``
allows; a wave takes a further rack only when all of that rack fits, so small budgets
split racks but never mix parts of two. The budget holds for every partition a node is in, so an extra partition
(``debug`` over two nodes of ``nvidia-hopper``) is never emptied by a wave of its
parent. Cost: linear in nodes plus the nodes a full wave defers.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Collection, Sequence

from fleetspec.compile.ir import Fleet
from fleetspec.plan.model import Change, Plan, Wave, worst

MaxUnavailable = int | str  # N nodes, or "P%" of each partition
_AMOUNT = re.compile(r"[0-9]{1,9}|[0-9]{1,3}(\.[0-9]{1,6})?%")


def parse_max_unavailable(value: MaxUnavailable) -> MaxUnavailable:
    """Accept 3, "3" or "25%"; refuse anything that would allow zero or a negative number."""
    text = str(value).strip()
    try:
        if isinstance(value, bool) or _AMOUNT.fullmatch(text) is None:  # ASCII digits only: int() takes any
            raise ValueError
        if text.endswith("%"):
            percent = float(text[:-1])
            if not 0 < percent <= 100:
                raise ValueError
            return text
        count = int(text)
        if count < 1:
            raise ValueError
        return count
    except ValueError:
        raise ValueError(f"max_unavailable must be a node count >= 1 or a percentage like 25%, not {value!r}") from None


def budget(max_unavailable: MaxUnavailable, size: int) -> int:
    """Nodes of a partition of ``size`` that may be out at once: at least one."""
    if isinstance(max_unavailable, str) and max_unavailable.endswith("%"):
        return max(1, math.floor(size * float(max_unavailable[:-1]) / 100))
    return max(1, int(max_unavailable))


def plan_waves(plan: Plan | Sequence[Change], fleet: Fleet, canary: int = 1,
               max_unavailable: MaxUnavailable = "25%", quarantined: Collection[str] = ()) -> tuple[Wave, ...]:
    """The waves; ``quarantined`` nodes (the health check acts on them) come last in their
    partition and are never a canary: a canary must show the change works on a good node."""
    changes = plan.changes if isinstance(plan, Plan) else plan
    max_unavailable = parse_max_unavailable(max_unavailable)
    if canary < 0:
        raise ValueError("canary must be 0 or more nodes")
    disruptive = [c for c in changes if c.host is not None and c.disruption.needs_wave]
    if not disruptive:
        return ()
    member_of: dict[str, list[str]] = {}
    sizes: dict[str, int] = {}
    for p in fleet.partitions:
        sizes[p.name] = len(p.nodes)
        for host in p.nodes:
            member_of.setdefault(host, []).append(p.name)
    rack_order = {r.name: i for i, r in enumerate(fleet.racks)}
    groups: dict[str, list[Change]] = {}
    for c in disruptive:
        groups.setdefault(c.partition or "-", []).append(c)
    partition_order = {p.name: i for i, p in enumerate(fleet.partitions)}
    waves: list[Wave] = []
    for name in sorted(groups, key=lambda n: (partition_order.get(n, len(partition_order)), n)):
        members = sorted(groups[name], key=lambda c: (c.host in quarantined,
                                                      rack_order.get(c.rack or "", len(rack_order))))
        limits = {p: budget(max_unavailable, size) for p, size in sizes.items()}
        limits.setdefault(name, budget(max_unavailable, len(members)))
        waves.extend(_partition_waves(name, members, member_of, limits, canary, quarantined))
    return tuple(waves)


def _partition_waves(name: str, pending: list[Change], member_of: dict[str, list[str]], limits: dict[str, int],
                     canary: int, quarantined: Collection[str] = ()) -> list[Wave]:
    waves: list[Wave] = []
    left_in_rack = Counter(c.rack for c in pending)
    while pending:
        first = not waves and canary > 0 and pending[0].host not in quarantined
        size = min(canary, limits[name]) if first else limits[name]
        taken: list[Change] = []
        deferred: list[Change] = []
        out: dict[str, int] = {}
        racks: set[str | None] = set()
        i = 0
        while i < len(pending) and len(taken) < size:
            c = pending[i]
            if taken and c.rack not in racks and left_in_rack[c.rack] > size - len(taken):
                break  # the next rack does not fit whole: it starts its own wave
            i += 1
            parts = member_of.get(c.host or "", [name])
            if all(out.get(p, 0) < limits.get(p, size) for p in parts):
                taken.append(c)
                racks.add(c.rack)
                for p in parts:
                    out[p] = out.get(p, 0) + 1
            else:
                deferred.append(c)
        for c in taken:
            left_in_rack[c.rack] -= 1
        pending = deferred + pending[i:]
        racks = tuple(dict.fromkeys(c.rack or "-" for c in taken))
        waves.append(Wave(name, len(waves) + 1, first, tuple(c.host or "" for c in taken), racks,
                          worst(c.disruption for c in taken)))
    return waves
