"""Plans: what applying a fleet spec would change, how disruptive each change is, and
the waves apply would run (``planner``: ``make_plan``, ``plan_against_state``,
``restrict_to_hosts``, ``hold_back``, ``with_pending_reboots``; ``model``: the Plan itself).

The names are loaded on first use (PEP 562), so importing ``fleetspec.plan.cli`` to
build the command line does not import the planner.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "make_plan": "planner", "plan_against_state": "planner", "restrict_to_hosts": "planner",
    "with_pending_reboots": "planner", "layout_drift": "planner", "hold_back": "planner", "converged_parts": "planner",
    "adopt_known": "planner",
    "plan_waves": "waves", "Change": "model", "Disruption": "model", "Plan": "model", "Wave": "model",
}


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'fleetspec.plan' has no attribute {name!r}")
    return getattr(importlib.import_module(f"fleetspec.plan.{_EXPORTS[name]}"), name)


__all__ = sorted(_EXPORTS)
