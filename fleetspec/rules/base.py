"""What a rule is: a stable public id, a severity, a one-line summary and a pure check.

Rule ids are public (users suppress warnings by id), so they are kebab-case strings
that never change with a refactor. ``check(fleet, catalog)`` yields findings and never
touches the disk. Rules with ``stage="compile"`` are reported by the loader and the
compiler themselves (they decide whether an IR can be built at all); they are listed
here so that they are documented and tested like the others.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Literal, NamedTuple

from fleetspec.catalog import Catalog
from fleetspec.compile.ir import Fleet
from fleetspec.findings import Finding, Severity

Check = Callable[[Fleet, Catalog], Iterable[Finding]]


# A NamedTuple, like Finding (fleetspec/findings.py).
class Rule(NamedTuple):
    """A rule over the fleet: a stable id, its highest severity, a summary and its check."""

    id: str
    severity: Severity  # the highest severity the rule reports
    summary: str
    check: Check | None = None
    stage: Literal["compile", "fleet"] = "fleet"
    warns: bool = False  # also reports warnings (unconfirmed facts, limits): suppressible

    @property
    def suppressible(self) -> bool:
        return self.severity < Severity.ERROR or self.warns


def error(rule: str, message: str, path: tuple[str | int, ...], anchor: str = "value") -> Finding:
    return Finding(rule, Severity.ERROR, message, path, anchor)  # type: ignore[arg-type]


def warning(rule: str, message: str, path: tuple[str | int, ...], anchor: str = "value") -> Finding:
    return Finding(rule, Severity.WARNING, message, path, anchor)  # type: ignore[arg-type]
