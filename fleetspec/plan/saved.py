"""Saved plans (``plan --out plan.json``): the plan, the state it was made against
(serial and lineage) and the whole new fleet IR, so that apply runs exactly what was
reviewed, and refuses, saying why, when the state moved in between.

The whole plan is bound (#27 item 6): ``plan_digest`` is the sha256 of the canonical
JSON of everything in the file (changes, waves, settings, restriction, held and
quarantined nodes, the fleet, its spec digest, the state's serial and lineage), so an
edit anywhere is refused. A digest has no key, so whoever can edit the file can also
recompute it: a team that applies from a pipeline signs its plans with a key only the
pipeline's protected environment holds (``--signing-key REF``, a secret reference such
as ``env:FLEETSPEC_PLAN_KEY`` or ``file:PATH``; the environment variable
``FLEETSPEC_SIGNING_KEY`` holds the reference). ``signature`` is HMAC-SHA256 of the
digest under that key, and an apply given the key refuses a plan that is unsigned or
signed under another key.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from pathlib import Path
from typing import Any

from fleetspec.compile.ir import Fleet
from fleetspec.plan.engines import parse_engine
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


SIGNATURE = "hmac-sha256:"
_UNBOUND = ("plan_digest", "signature")  # the fields the digest cannot cover


def plan_digest(data: dict[str, Any]) -> str:
    """sha256 of the canonical JSON of the saved plan, every field but the digest and signature."""
    bound = {k: v for k, v in data.items() if k not in _UNBOUND}
    text = json.dumps(bound, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def sign(digest: str, key: bytes) -> str:
    return SIGNATURE + hmac.new(key, digest.encode(), hashlib.sha256).hexdigest()


def signing_key(reference: str | None, base_dir: Path) -> bytes | None:
    """The plan-signing key a secret reference names (None without one). Raises
    SavedPlanError naming the reference, never a value."""
    if not reference:
        return None
    from fleetspec.secrets import SecretError, SecretRef, resolve

    try:
        key = resolve(SecretRef.parse("plan_signing_key", reference), base_dir)
    except SecretError as exc:
        raise SavedPlanError(str(exc)) from None
    if len(key.strip()) < 32:
        raise SavedPlanError("secret 'plan_signing_key': the key is shorter than 32 bytes; use a random key "
                             "(python3 -c 'import secrets; print(secrets.token_urlsafe(48))')")
    return key.strip()


def signing_key_from(reference: str | None, next_to: Path) -> bytes | None:
    """``signing_key`` with a relative ``file:`` reference taken from the directory of ``next_to``."""
    return signing_key(reference, Path(next_to).resolve().parent)


def save_plan(plan: Plan, path: Path, key: bytes | None = None) -> None:
    data = {"kind": KIND, **plan.to_dict(include_fleet=True)}
    data["plan_digest"] = plan_digest(data)
    if key is not None:
        data["signature"] = sign(data["plan_digest"], key)
    write_output(path, (json.dumps(data, indent=1) + "\n").encode())


def load_saved_plan(path: Path, key: bytes | None = None) -> Plan:
    """The saved plan, checked whole: its digest, and its signature when ``key`` is given."""
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
        parse_engine(plan.settings.get("engine"))
    except (FleetDecodeError, KeyError, TypeError, ValueError) as exc:
        raise SavedPlanError(f"{path} is damaged: {exc}") from None
    expected = "sha256:" + hashlib.sha256(fleet.to_json().encode()).hexdigest()
    if data.get("spec_digest") != expected:
        raise SavedPlanError(f"{path} was edited or damaged: its fleet does not match its spec_digest")
    digest = data.get("plan_digest")
    if not isinstance(digest, str):
        raise SavedPlanError(f"{path} has no plan_digest (an older fleetspec wrote it, or it was edited): "
                             f"plan again")
    if not hmac.compare_digest(digest, plan_digest(data)):
        raise SavedPlanError(f"{path} was edited or damaged: its waves, changes or settings do not match its "
                             f"plan_digest. Plan again and review the new plan")
    signature = data.get("signature")
    if key is not None:
        if not isinstance(signature, str):
            raise SavedPlanError(f"{path} is not signed, and this apply has a signing key: apply only plans the "
                                 f"pipeline made with 'plan --signing-key'")
        if not hmac.compare_digest(signature, sign(digest, key)):
            raise SavedPlanError(f"{path} is not signed with this apply's signing key: it was not made by the "
                                 f"pipeline that holds the key, or it was edited")
    return plan


def _plan_from_dict(data: dict[str, Any], fleet: Fleet) -> Plan:
    return Plan(fleet, tuple(Change.from_dict(c) for c in data["changes"]),
                tuple(Wave.from_dict(w) for w in data["waves"]), data["state_serial"], data["lineage"],
                data.get("base"), data.get("settings") or {}, data.get("restriction"),
                tuple(data.get("skipped") or ()),
                tuple((q["node"], q["why"]) for q in data.get("quarantined") or ()),
                tuple((h["node"], h["reason"]) for h in data.get("held") or ()),
                _membership(data).get("asked"), tuple(_membership(data).get("unowned") or ()))


def _membership(data: dict[str, Any]) -> dict[str, Any]:
    found = data.get("membership")
    return found if isinstance(found, dict) and found.get("live") is True else {}


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
