"""A changed node health policy, planned node by node as a rolling change (#26 item 4).

The node check drains a Slurm node by itself (``HealthCheckProgram``) under the policy
file rendered from ``spec.health`` (``health/node-check.json``). A new policy can drain
healthy nodes (a stricter action, a check turned on that reads every node as sick), and
the file alone reaches every node at once. So each Slurm node that keeps running under a
new policy gets a ``rolling`` change: apply rolls it out in waves, a canary first, checks
each wave's nodes under the new policy before they get it, and drains nothing (the check
reads the file at each run; nothing restarts). A node added or removed is planned by its
own change; a policy removed (no ``spec.health``) drains nothing and is no rolling change.
Kubernetes nodes get the policy in node-problem-detector's ConfigMap (the Kubernetes layer).

Pure: two fleets in, changes out.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from fleetspec.compile.ir import Fleet
from fleetspec.plan.model import Action, Change, Disruption


def policy_digest(fleet: Fleet | None) -> str | None:
    """sha256 of the node check's policy and program as rendered for ``fleet``; None without spec.health."""
    if fleet is None or fleet.health is None:
        return None
    from fleetspec.render.health import health_check_program, node_config

    text = json.dumps(node_config(fleet), sort_keys=True) + "\n" + health_check_program()
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def policy_changes(new: Fleet, old: Fleet | None) -> list[Change]:
    """A ``rolling`` change for each Slurm node in both fleets whose policy changes."""
    after = policy_digest(new)
    before = policy_digest(old)
    if old is None or after is None or before == after:
        return []
    what = _what_changed(new, old)
    reason = (f"health policy {what}: the node check may drain nodes under it, so it rolls out in waves, a "
              "canary first, each wave checked under the new policy before it gets it (no drain: the check "
              "reads the policy file at each run)")
    return [Change(f"node:{n.hostname}", Action.UPDATE, Disruption.ROLLING, {"health_policy": before},
                   {"health_policy": after}, reason, n.partition, n.rack)
            for n in new.nodes if n.scheduler == "slurm" and old.node(n.hostname) is not None]


def _what_changed(new: Fleet, old: Fleet) -> str:
    """The policy's settings that move, in words ("actions, min_healthy"), or "installed"."""
    if old.health is None:
        return "installed (spec.health is new)"
    from fleetspec.render.health import node_config

    b, a = node_config(old), node_config(new)
    keys = sorted(k for k in set(a) | set(b) if k not in ("nodes", "fleet") and a.get(k) != b.get(k))
    detail: list[str] = []
    for key in keys:
        detail.append(_setting(key, b.get(key), a.get(key)))
    return "change: " + ("; ".join(detail) if detail else "the node check program or its node groups")


def _setting(key: str, before: Any, after: Any) -> str:
    if isinstance(before, dict) and isinstance(after, dict):
        moved = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
        return f"{key} " + ", ".join(f"{k} {before.get(k, '(default)')} -> {after.get(k, '(default)')}" for k in moved)
    return f"{key} {before} -> {after}"
