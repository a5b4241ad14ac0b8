"""What a plan is: changes with a disruption class each, the waves apply would run,
and the state it was made against. ``Plan.to_dict`` is the stable JSON form
(docs/plan.md); ``Plan.from_dict`` reads it back from a saved plan.
"""

from __future__ import annotations

import functools
import hashlib
from collections import Counter
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from fleetspec.compile.ir import Fleet

PLAN_FORMAT_VERSION = 1


class Disruption(str, Enum):
    """What a change does to running work, most disruptive first."""

    REPLACE = "replace"
    DRAIN_REBOOT = "drain-reboot"
    DRAIN = "drain"
    # No drain, but in waves with a canary: the node check's policy changes (a new policy can
    # drain healthy nodes), so the canary is checked under it before the rest get it.
    ROLLING = "rolling"
    RESTART_DAEMON = "restart-daemon"
    RECONFIGURE = "reconfigure"
    NONE = "none"

    @property
    def rank(self) -> int:
        """Higher is more disruptive."""
        return _RANK[self]

    @property
    def needs_wave(self) -> bool:
        """Apply takes such nodes in waves, a canary first (drained or not: ``drains``)."""
        return _RANK[self] >= _RANK[Disruption.ROLLING]

    @property
    def drains(self) -> bool:
        """Jobs must leave the node first: apply drains it through its owner."""
        return _RANK[self] >= _RANK[Disruption.DRAIN]


_RANK = {d: len(Disruption) - i for i, d in enumerate(Disruption)}  # looked up per change: 20,000-node plans


def worst(classes: Any) -> Disruption:
    return max(classes, key=_RANK.__getitem__, default=Disruption.NONE)


class Action(str, Enum):
    CREATE = "create"
    UPDATE = "update"
    DELETE = "delete"


@dataclass(frozen=True)
class Change:
    target: str  # node:<host>, partition:<name>, slurm:<file>, kubernetes:<kind>/<name>, helm:<release>, ...
    action: Action
    disruption: Disruption
    before: Any
    after: Any
    reason: str
    partition: str | None = None  # node changes: the node's partition and rack (waves, summary)
    rack: str | None = None

    @functools.cached_property  # read several times per change by waves, summary and output
    def host(self) -> str | None:
        return self.target.removeprefix("node:") if self.target.startswith("node:") else None

    def to_dict(self) -> dict[str, Any]:
        return {"target": self.target, "action": self.action.value, "disruption": self.disruption.value,
                "before": self.before, "after": self.after, "reason": self.reason,
                "partition": self.partition, "rack": self.rack}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Change:
        return cls(data["target"], Action(data["action"]), Disruption(data["disruption"]), data["before"],
                   data["after"], data["reason"], data.get("partition"), data.get("rack"))


@dataclass(frozen=True)
class Wave:
    partition: str
    index: int  # 1-based within the partition
    canary: bool
    hosts: tuple[str, ...]
    racks: tuple[str, ...]
    disruption: Disruption

    def to_dict(self) -> dict[str, Any]:
        return {"partition": self.partition, "index": self.index, "canary": self.canary, "hosts": list(self.hosts),
                "racks": list(self.racks), "disruption": self.disruption.value}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Wave:
        return cls(data["partition"], data["index"], data["canary"], tuple(data["hosts"]), tuple(data["racks"]),
                   Disruption(data["disruption"]))


@dataclass(frozen=True)
class Plan:
    fleet: Fleet  # the fleet the plan moves to
    changes: tuple[Change, ...]
    waves: tuple[Wave, ...] = ()
    state_serial: int | None = None  # None: planned against --base, not against state
    lineage: str | None = None
    base: str | None = None  # what it was compared with, in words ("state serial 4", "spec old.yaml")
    settings: dict[str, Any] = field(default_factory=dict)  # canary, max_unavailable
    # A plan restricted to some hosts (the lab's, --limit): in words, and the nodes with
    # changes it leaves out. Apply records only what it applied, so those stay pending.
    restriction: str | None = None
    skipped: tuple[str, ...] = ()
    # Nodes the health check acts on (``plan --health``), with why: never canaries.
    quarantined: tuple[tuple[str, str], ...] = ()
    # Nodes drained by someone else (an operator, the health check) that apply found when
    # it started, with the reason as found: apply leaves them exactly so (``hold_back``).
    held: tuple[tuple[str, str], ...] = ()
    # Whether the nodes the state does not know were asked about live (``apply``, ``plan
    # --live``: Slurm, Kubernetes, SSH), in words; None: an offline plan, not asked.
    # ``unowned``: adopted nodes that answer SSH but their scheduler does not have: their
    # waves keep the canary and the budget, and drain through no scheduler (#28 item 4).
    membership: str | None = None
    unowned: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.changes

    @property
    def creates_nodes(self) -> bool:
        """Whether a node is new to the state (what ``plan --live`` asks about)."""
        return any(c.action is Action.CREATE and c.host is not None for c in self.changes)

    @functools.cached_property
    def schedule(self) -> Any:
        """Which waves run side by side and the modelled duration (``plan.schedule``)."""
        from fleetspec.plan.schedule import DEFAULT_BATCH_MINUTES, parse_batch_minutes, parse_forks, schedule

        # A saved plan's settings are read from a file: checked (ValueError) before they are used.
        return schedule(self.waves, self.fleet,
                        parse_batch_minutes(self.settings.get("batch_minutes", DEFAULT_BATCH_MINUTES)),
                        parse_forks(self.settings.get("forks")))

    @functools.cached_property
    def spec_digest(self) -> str:
        """sha256 of the new fleet's fleet.json: what a saved plan promises to apply."""
        return "sha256:" + hashlib.sha256(self.fleet.to_json().encode()).hexdigest()

    def summary(self) -> dict[str, Any]:
        node_changes = [c for c in self.changes if c.host is not None]
        per_partition: dict[str, Counter[str]] = {}
        for c in node_changes:
            per_partition.setdefault(c.partition or "-", Counter())[c.disruption.value] += 1
        return {
            "changes": len(self.changes),
            "max_disruption": worst(c.disruption for c in self.changes).value,
            "by_disruption": _ordered(Counter(c.disruption.value for c in self.changes)),
            "nodes": _ordered(Counter(c.disruption.value for c in node_changes)),
            "partitions": {p: _ordered(per_partition[p]) for p in sorted(per_partition)},
            "waves": len(self.waves),
        }

    def to_dict(self, include_fleet: bool = False) -> dict[str, Any]:
        data: dict[str, Any] = {
            "format_version": PLAN_FORMAT_VERSION,
            "fleet": self.fleet.name,
            "state_serial": self.state_serial,
            "lineage": self.lineage,
            "base": self.base,
            "spec_digest": self.spec_digest,
            "settings": self.settings,
            "changes": [c.to_dict() for c in self.changes],
            "summary": self.summary(),
            "waves": self._waves_with_schedule(),
            "schedule": self.schedule.to_dict(),
        }
        if self.restriction is not None:
            data["restriction"] = self.restriction
            data["skipped"] = list(self.skipped)
        if self.quarantined:
            data["quarantined"] = [{"node": h, "why": why} for h, why in self.quarantined]
        if self.held:
            data["held"] = [{"node": h, "reason": why} for h, why in self.held]
        if self.membership is not None:
            data["membership"] = {"live": True, "asked": self.membership, "unowned": list(self.unowned)}
        elif self.creates_nodes:
            data["membership"] = {"live": False}
        if include_fleet:
            data["ir"] = self.fleet.to_dict()
        return data


    def _waves_with_schedule(self) -> list[dict[str, Any]]:
        """Each wave with its id, the hosts it works on at once and the waves it waits for."""
        fields = self.schedule.wave_fields()
        from fleetspec.plan.engines import wave_engines
        from fleetspec.plan.schedule import wave_id

        engines = wave_engines(self)  # which engine apply uses for it, and why (settings['engine'])
        return [{**w.to_dict(), **fields[wave_id(w)], **engines[(w.partition, w.index)].to_dict()}
                for w in self.waves]


def _ordered(counts: Counter[str]) -> dict[str, int]:
    """Counts keyed by disruption class, most disruptive first, zeros left out."""
    return {d.value: counts[d.value] for d in Disruption if counts[d.value]}
