"""Saved plans (``plan --out plan.json``): the plan, the state it was made against
(serial and lineage) and the whole new fleet IR, so that apply runs exactly what was
reviewed, and refuses, saying why, when the state moved in between.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from fleetspec.compile.ir import Fleet
from fleetspec.plan.model import PLAN_FORMAT_VERSION, Change, Plan, Wave
from fleetspec.safe_io import UnsafePathError, loads_json, read_bounded, write_output
from fleetspec.state.backend import StateBackend
from fleetspec.state.codec import FleetDecodeError, fleet_from_dict
from fleetspec.state.store import State

KIND = "fleetspec-plan"
MAX_PLAN_BYTES = 1024 * 1024 * 1024  # the whole IR of the largest fleet fleetspec accepts, with room


def _clip(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


class SavedPlanError(Exception):
    """A saved plan that cannot or must not be applied; the message says why."""


def save_plan(plan: Plan, path: Path) -> None:
    data = {"kind": KIND, **plan.to_dict(include_fleet=True)}
    write_output(path, (json.dumps(data, indent=1) + "\n").encode())


def load_saved_plan(path: Path) -> Plan:
    try:
        data = loads_json(read_bounded(path, MAX_PLAN_BYTES))
    except OSError as exc:
        raise SavedPlanError(f"cannot read saved plan {path}: {exc.strerror}") from None
    except UnsafePathError as exc:
        raise SavedPlanError(f"cannot read saved plan: {exc}") from None
    except ValueError as exc:
        raise SavedPlanError(f"{path} is not a saved plan (invalid JSON: {_clip(str(exc))})") from None
    if not isinstance(data, dict) or data.get("kind") != KIND:
        raise SavedPlanError(f"{path} is not a saved plan (write one with 'fleetspec plan SPEC --out {path}')")
    if data.get("format_version") != PLAN_FORMAT_VERSION:
        raise SavedPlanError(f"{path} has plan format {data.get('format_version')!r}; this fleetspec reads "
                             f"{PLAN_FORMAT_VERSION}. Plan again with this fleetspec")
    try:
        fleet = fleet_from_dict(data["ir"])
        plan = _plan_from_dict(data, fleet)
        plan.schedule  # noqa: B018 - checks the rollout figures in its settings (issue #30)
    except (FleetDecodeError, KeyError, TypeError, ValueError) as exc:
        raise SavedPlanError(f"{path} is damaged: {exc}") from None
    expected = "sha256:" + hashlib.sha256(fleet.to_json().encode()).hexdigest()
    if data.get("spec_digest") != expected:
        raise SavedPlanError(f"{path} was edited or damaged: its fleet does not match its spec_digest")
    return plan


def _plan_from_dict(data: dict[str, Any], fleet: Fleet) -> Plan:
    return Plan(fleet, tuple(Change.from_dict(c) for c in data["changes"]),
                tuple(Wave.from_dict(w) for w in data["waves"]), data["state_serial"], data["lineage"],
                data.get("base"), data.get("settings") or {}, data.get("restriction"),
                tuple(data.get("skipped") or ()),
                tuple((q["node"], q["why"]) for q in data.get("quarantined") or ()),
                tuple((h["node"], h["reason"]) for h in data.get("held") or ()))


def check_plan_current(plan: Plan, store: StateBackend | State) -> None:
    """Raise SavedPlanError unless the state is exactly the one the plan was made against."""
    state = store if isinstance(store, State) else store.read()
    if plan.state_serial is None:
        raise SavedPlanError("this plan compares two spec revisions (--base), not the applied state: "
                             "plan against the state to get a plan you can apply")
    if plan.fleet.name != state.fleet_name:
        raise SavedPlanError(f"this plan is for fleet {plan.fleet.name!r}, the state is {state.fleet_name!r}")
    if plan.lineage != state.lineage:
        raise SavedPlanError(f"the state was replaced since this plan was made (lineage {plan.lineage} -> "
                             f"{state.lineage}): plan again")
    if plan.state_serial != state.serial:
        last = state.journal[-1] if state.journal else {}
        who = f" by {last.get('user')}@{last.get('host')} at {last.get('time')}" if last else ""
        raise SavedPlanError(f"the state moved since this plan was made (serial {plan.state_serial} -> "
                             f"{state.serial}{who}): plan again and review the new plan")
