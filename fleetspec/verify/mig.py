"""Verify a node's MIG geometry (#46): every GPU in MIG mode with the instances the spec
declares (``gpu.mig``), or, without MIG in the spec, no GPU in MIG mode.

The facts are the collector's: ``mig_mode`` from ``nvidia-smi -q -x`` and ``mig_instances``
(each GPU instance's profile) from ``nvidia-smi mig -lgi``, which the collector asks only
where a GPU runs in MIG mode (docs/facts.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from fleetspec.compile.ir import Node


class MigCheck(NamedTuple):
    """The ``mig`` check's fields; compare.py makes it a Check (this module cannot import
    compare.py, which calls it)."""

    status: str  # a Status value: "ok" | "drift"
    expected: str
    found: str
    message: str
    disruption: str | None = None

REPAIR = "drain"  # remaking instances needs an idle GPU (plan/diff.py)
REPAIR_MODE = "drain-reboot"  # MIG mode on/off resets the GPU


def _geometry(profiles: list[str]) -> str:
    counts: dict[str, int] = {}
    for p in profiles:
        counts[p] = counts.get(p, 0) + 1
    return ",".join(f"{c}x{p}" for p, c in sorted(counts.items())) or "no instances"


def _index(gpu: Mapping[str, Any], position: int) -> str:
    index = gpu.get("index")
    return str(index) if isinstance(index, int) and not isinstance(index, bool) else str(position)


def _mode(gpu: Mapping[str, Any]) -> str | None:
    mig = gpu.get("mig_mode")
    current = mig.get("current") if isinstance(mig, Mapping) else None
    return current[:32] if isinstance(current, str) else None


def mig_checks(node: Node, gpus: object) -> list[MigCheck]:
    """One ``mig`` check for the node; none for a node without MIG whose GPUs are not in MIG mode."""
    listed = [g for g in gpus if isinstance(g, Mapping)] if isinstance(gpus, list) else []
    modes = [(_index(g, i), _mode(g)) for i, g in enumerate(listed)]  # facts are untrusted input
    if not node.mig:
        on = [i for i, mode in modes if mode == "Enabled"]
        if not on:
            return []
        return [MigCheck("drift", "MIG off", f"MIG on GPU {', '.join(on)}",
                      f"GPU {', '.join(on)} run in MIG mode, which the spec does not declare: jobs asking for "
                      "whole GPUs get none there. Disable MIG mode (nvidia-smi -mig 0) or declare gpu.mig",
                      disruption=REPAIR_MODE)]
    expected = _geometry([p for p, c in node.mig for _ in range(c)])
    if not listed:
        return [MigCheck("drift", expected, "no GPU listed", "nvidia-smi listed no GPU to attest MIG on")]
    wrong = []
    mode_off = False
    for g, (index, mode) in zip(listed, modes):
        if mode != "Enabled":
            mode_off = True
            wrong.append(f"GPU {index}: MIG {(mode or 'unsupported').lower()}")
            continue
        instances: Any = g.get("mig_instances")
        if not isinstance(instances, list) or not all(isinstance(p, str) for p in instances):
            wrong.append(f"GPU {index}: instances unknown (nvidia-smi mig -lgi)")
        elif _geometry(instances) != expected:
            wrong.append(f"GPU {index}: {_geometry(instances)}")
    if not wrong:
        return [MigCheck("ok", expected, expected,
                      f"every GPU ({len(listed)}) runs MIG with {expected}")]
    found = "; ".join(wrong)
    found = found if len(found) <= 400 else found[:397] + "..."  # facts are untrusted: bounded
    return [MigCheck("drift", expected, found,
                  f"MIG geometry differs from the spec's {expected} on " + found +
                  ": drain the node and apply its geometry again (nvidia-mig-parted apply, or the GPU Operator's "
                  "MIG manager)", disruption=REPAIR_MODE if mode_off else REPAIR)]
