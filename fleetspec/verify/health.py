"""The node check's verdict as one check of ``fleetspec verify --local``.

One program answers both questions a node is asked: does it run its partition's tuple
(the comparison) and is it healthy (``fleetspec.node_side.node_check``, the code Slurm's
``HealthCheckProgram`` and node-problem-detector run). With ``spec.health`` set, the
node's report gains a ``health`` check, and the verdict folds into verify's one exit
code: healthy is ``ok``, degraded (faults whose action is ``none``) a ``warning``, sick
``drift`` (exit 1; 2 with ``--detailed-exitcode``), naming the fault as the drain reason does.
A check that fails itself is ``drift`` too, found ``unknown``, its one-line message naming the
exception and the line it came from: a node nobody could judge must not pass a health check.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from fleetspec.compile.ir import Fleet
from fleetspec.verify.compare import Check, NodeReport, Status, VerifyReport

_STATUS = {"healthy": Status.OK, "degraded": Status.WARNING}


def node_verdict(fleet: Fleet, hostname: str, root: str = "/") -> dict[str, Any]:
    """The node check's verdict for this machine as node ``hostname``. It looks without
    writing the check's state (kernel-log cursor, IB counters): the scheduled check still
    sees every fault first. A check that fails itself (a bug, tool output no parser expected)
    is an ``unknown`` verdict naming the exception and where it was raised, never a traceback."""
    from fleetspec.node_side.collector import Host
    from fleetspec.node_side.node_check import run_check
    from fleetspec.render.health import node_config

    try:
        return run_check(node_config(fleet), hostname, Host(root), persist=False)
    except Exception as exc:  # the node check's own failure, as its main() turns it into Unknown
        return {"node": hostname, "status": "unknown", "action": "none", "faults": [],
                "errors": [f"the check failed: {type(exc).__name__}: {exc} ({_where(exc)})"]}


def _where(exc: BaseException) -> str:
    """``module.py:LINE`` of the innermost frame, relative to the package (the place to look)."""
    import traceback
    from pathlib import Path

    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return "no traceback"
    path = Path(frames[-1].filename)
    parts = path.parts
    shown = "/".join(parts[parts.index("fleetspec"):]) if "fleetspec" in parts else path.name
    return f"{shown}:{frames[-1].lineno}"


def health_check(verdict: dict[str, Any]) -> Check:
    from fleetspec.node_side.classify import reason

    status = _STATUS.get(verdict["status"], Status.DRIFT)
    faults = verdict.get("faults", [])
    if verdict["status"] == "unknown":  # the check could not judge: a failure, never a pass
        return Check("health", Status.DRIFT, "healthy", "unknown",
                     ("unknown: " + "; ".join(verdict.get("errors") or ["no verdict"]))[:400])
    if status is Status.DRIFT:
        message = f"sick: {reason(verdict)}"
    elif faults:
        message = "degraded: " + "; ".join(f"{f['class']}: {f['device']} {f['detail']}" for f in faults[:3])
    else:
        message = "no fault found"
    if verdict.get("errors"):
        message += " (could not read: " + "; ".join(verdict["errors"][:2]) + ")"
    return Check("health", status, "healthy", verdict["status"], message[:400])


def with_check(report: VerifyReport, hostname: str, check: Check) -> VerifyReport:
    """``report`` with ``check`` added to node ``hostname`` (wherever the report lists it)."""

    def grown(node: NodeReport) -> NodeReport:
        return replace(node, checks=node.checks + (check,)) if node.hostname == hostname else node

    partitions = tuple(replace(p, nodes=tuple(grown(n) for n in p.nodes)) for p in report.partitions)
    return replace(report, partitions=partitions, nodes=tuple(grown(n) for n in report.nodes))
