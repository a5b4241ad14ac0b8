"""Findings: what the compiler and the rules say about a fleet, and where.

A `Finding` carries the key path of the offending spec element; `locate` resolves it
against the loader's source map into ``file:line:column``. Only the CLI formats them.
Both are NamedTuples, immutable like frozen dataclasses but made at each start without
compiling six generated methods (Python 3.11; tests/test_startup_imports.py).
"""

from __future__ import annotations

from enum import IntEnum
from typing import TYPE_CHECKING, Literal, NamedTuple

if TYPE_CHECKING:
    from fleetspec.spec.loader import SourceMap

SpecPath = tuple[str | int, ...]


class Severity(IntEnum):
    INFO = 0
    WARNING = 1
    ERROR = 2

    def __str__(self) -> str:
        return self.name.lower()


class Finding(NamedTuple):
    """What a rule found, at a spec path (located against the file by `locate`)."""

    rule: str
    severity: Severity
    message: str  # says what is wrong and what to do
    path: SpecPath = ()
    anchor: Literal["value", "key"] = "value"


class LocatedFinding(NamedTuple):
    """A finding at ``file:line:column``, with the source line and a caret, as printed."""

    rule: str
    severity: Severity
    message: str
    path: str  # dotted spec path, e.g. spec.racks[0].nodes[1].gpu.model
    file: str
    line: int
    column: int
    source_line: str  # an excerpt of the line (never a line holding a secret); "" when none
    caret: int = 0  # 0-based offset of the column in ``source_line``

    def to_dict(self) -> dict[str, object]:
        return {
            "rule": self.rule,
            "severity": str(self.severity),
            "message": self.message,
            "path": self.path,
            "file": self.file,
            "line": self.line,
            "column": self.column,
        }


def dotted(path: SpecPath) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def locate(finding: Finding, source: SourceMap) -> LocatedFinding:
    pos = source.locate(finding.path, prefer=finding.anchor)
    excerpt, caret = source.excerpt(pos.line, pos.column)
    return LocatedFinding(
        rule=finding.rule,
        severity=finding.severity,
        message=finding.message,
        path=dotted(finding.path),
        file=source.file,
        line=pos.line,
        column=pos.column,
        source_line=excerpt,
        caret=caret,
    )
