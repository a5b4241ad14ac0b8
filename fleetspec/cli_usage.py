"""Usage errors: what the command line itself gets wrong, and the one exit code for it.

Typer (click underneath) reports an unknown option, a missing argument or a bad value
with exit 2, the code ``plan --detailed-exitcode`` uses for "changes present". Every
fleetspec command group is a `UsageExitGroup`, which turns each usage error below it
into exit 64 (``EX_USAGE``, sysexits.h). Option values that only fleetspec can check
(``--max-unavailable 150%``, ``--limit 'x[3-1]'``) are checked here, as the command
line is parsed, so they are usage errors too and never reach a traceback.
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

try:  # typer >= 0.20 carries its own copy of click
    from typer._click import Context
    from typer._click.exceptions import BadParameter, UsageError
except ImportError:  # pragma: no cover - older typer on plain click
    from click import Context  # type: ignore[assignment]
    from click.exceptions import BadParameter, UsageError  # type: ignore[assignment]

from fleetspec import exit_codes

__all__ = ["BadParameter", "ChartsOpt", "Engine", "EngineOpt", "SigningKeyOpt", "UsageError", "UsageExitGroup", "batch_minutes_option",
           "canary_option", "forks_option", "hostlist_option", "max_unavailable_option", "require_ansible"]


class UsageExitGroup(TyperGroup):
    """Every usage error, in this group and in all commands below it, exits 64."""

    def make_context(self, *args: Any, **kwargs: Any) -> Context:
        try:
            return super().make_context(*args, **kwargs)
        except UsageError as exc:
            exc.exit_code = exit_codes.USAGE
            raise

    def invoke(self, ctx: Context) -> Any:
        try:
            return super().invoke(ctx)
        except UsageError as exc:
            exc.exit_code = exit_codes.USAGE
            raise


def max_unavailable_option(value: str | None) -> str | None:
    """``--max-unavailable``: N nodes (>= 1) or P% (0 < P <= 100)."""
    from fleetspec.plan.waves import parse_max_unavailable

    if value is None:
        return None
    try:
        parse_max_unavailable(value)
    except ValueError:
        raise BadParameter(f"{_shown(value)} is not a node count >= 1 or a percentage like 25%") from None
    return value


def batch_minutes_option(value: float | None) -> float | None:
    """``--batch-minutes``: minutes per install+reboot batch in the modelled schedule."""
    from fleetspec.plan.schedule import parse_batch_minutes

    if value is None:
        return None
    try:
        return parse_batch_minutes(value)
    except ValueError as exc:
        raise BadParameter(str(exc)) from None


def forks_option(value: int | None) -> int | None:
    """``--forks``: hosts one wave's run works on at once (default: the whole wave)."""
    from fleetspec.plan.schedule import parse_forks

    try:
        return parse_forks(value)
    except ValueError as exc:
        raise BadParameter(str(exc)) from None


def canary_option(value: int | None) -> int | None:
    """``--canary``: 0 or more nodes in each partition's first wave."""
    if value is not None and value < 0:
        raise BadParameter(f"{value} is not 0 or more nodes")
    return value


def seconds_option(value: float) -> float:
    """A duration in seconds: finite and >= 0 (``nan`` and ``inf`` pass ``min=0`` but mean nothing)."""
    import math

    if not math.isfinite(value) or value < 0:
        raise BadParameter(f"{value} is not a number of seconds >= 0")
    return value


def hostlist_option(value: str | None) -> str | None:
    """``--limit PATTERN``: Ansible's host patterns over the fleet (``fleetspec.plan.select``);
    what no fleet can make valid (a malformed hostlist or regular expression) is refused here."""
    from fleetspec.plan.select import SelectError, check_pattern

    if value is None:
        return None
    try:
        check_pattern(value)
    except SelectError as exc:
        raise BadParameter(str(exc)) from None
    return value


def _shown(value: str, limit: int = 40) -> str:
    return repr(value) if len(value) <= limit else repr(value[:limit]) + "..."


# validate, render and plan --charts: Helm charts on the operator's machine. Where they are
# is the machine's business, not the fleet's: an option (and an environment variable for
# CI), not a spec field.
ChartsOpt = Annotated[Path | None, typer.Option(
    "--charts", envvar="FLEETSPEC_CHARTS", exists=True, file_okay=False, metavar="DIR",
    help="Helm charts ('helm pull' archives or chart folders): check each release's values against its "
    "chart's values.schema.json, as helm install does (default: $FLEETSPEC_CHARTS)")]


# plan --out and apply PLAN --signing-key: a secret reference to the key that signs saved
# plans (#27 item 6). Only the pipeline's protected environment holds it: an environment
# variable for CI, not a spec field (the spec is what a pull request can change).
class SlurmMode(str, Enum):
    """Where apply (and ``plan --live``) runs Slurm's clients."""

    auto = "auto"
    local = "local"
    controller = "controller"


class Engine(str, Enum):
    """What rolls the waves (``plan/engines.py``): Ansible from here, or Slurm and the nodes."""

    ssh = "ssh"
    slurm_native = "slurm-native"


EngineOpt = Annotated[Engine | None, typer.Option(
    "--engine", help="ssh: Ansible from here, per wave (the default); slurm-native: Slurm drains (or reboots) "
    "each wave and the nodes converge themselves from a signed bundle; the plan shows each wave's engine and "
    "why a wave falls back to SSH (docs/scale.md)")]
SlurmControlOpt = Annotated[SlurmMode, typer.Option(
    "--slurm-control", help="run scontrol/sinfo here (local), on the first controller through Ansible, or auto")]
InventoryOpt = Annotated[list[Path] | None, typer.Option(
    "--inventory", "-i", help="extra inventory with connection settings (repeatable)")]
SigningKeyOpt = Annotated[str | None, typer.Option(
    "--signing-key", envvar="FLEETSPEC_SIGNING_KEY", metavar="REF",
    help="a secret reference (env:NAME, file:PATH, ...) to the key that signs saved plans (plan --out) and "
    "that apply checks them with: apply then refuses an unsigned or differently signed plan "
    "(default: $FLEETSPEC_SIGNING_KEY)")]
def require_ansible(err: Any) -> None:
    """Stop a command that runs Ansible before it does anything when the ``ansible`` extra
    is missing, naming the exact install command (exit 1: nothing was done)."""
    from fleetspec.ansible_adhoc import missing_ansible

    why = missing_ansible()
    if why is not None:
        err.print(f"error: {why}", markup=False)
        raise typer.Exit(exit_codes.ERROR)
