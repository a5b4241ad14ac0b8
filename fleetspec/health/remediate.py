"""Act on Kubernetes-owned nodes' verdicts through the normal eviction path.

Slurm-owned nodes act for themselves (the node check drains through slurmctld). For
Kubernetes-owned nodes, ``fleetspec health --remediate`` does what the node check cannot
from the host: a node whose verdict calls for an action is cordoned, annotated with the
reason (``fleetspec.io/drain-reason: fleetspec-health: ...``, the annotation apply's
drain uses) and drained with ``kubectl drain`` (the Eviction API: PodDisruptionBudgets
hold, DaemonSets stay); a node the check cordoned is uncordoned once its verdict needs
no action. A node cordoned by anyone else is left alone, as on Slurm. Device-plugin
pools cannot take one GPU out of service, so ``quarantine-device`` cordons the node too.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from fleetspec.apply.control import KubernetesControl, Runner
from fleetspec.compile.ir import Fleet
from fleetspec.health.classify import reason
from fleetspec.health.fleet import FleetHealth
from fleetspec.health.node_check import LEADER

ANNOTATION = "fleetspec.io/drain-reason"


@dataclass(frozen=True)
class Remedy:
    node: str
    done: str  # what was done, in words


def remediate_kubernetes(fleet: Fleet, health: FleetHealth, run: Runner, deadline_s: float = 1800) -> list[Remedy]:
    control = KubernetesControl(run)
    out: list[Remedy] = []
    for host, verdict in health.verdicts.items():
        node = fleet.node(host)
        if node is None or node.scheduler != "kubernetes":
            continue
        got = run(["kubectl", "get", "node", host, "-o", "json"])
        if got.returncode != 0:
            out.append(Remedy(host, f"not acted on: kubectl get node failed: {(got.stderr or got.stdout).strip()}"))
            continue
        obj = json.loads(got.stdout)
        cordoned = bool(obj.get("spec", {}).get("unschedulable"))
        current = (obj.get("metadata", {}).get("annotations") or {}).get(ANNOTATION, "")
        ours = current.startswith(LEADER)
        if verdict.get("action", "none") != "none":
            if cordoned and not ours:
                out.append(Remedy(host, f"left cordoned by someone else ({current or 'no reason given'})"))
                continue
            control.drain([host], f"{LEADER} {reason(verdict)}")
            busy = control.wait_drained([host], deadline_s)
            out.append(Remedy(host, "cordoned, eviction blocked (a PodDisruptionBudget or a timeout): retried on "
                                    "the next run" if busy else "cordoned and drained"))
        elif cordoned and ours:
            control.resume([host])
            out.append(Remedy(host, f"uncordoned (was: {current})"))
    return out
