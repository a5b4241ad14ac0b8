"""``validate --format sarif``: findings as a SARIF 2.1.0 log, for GitHub code scanning.

Pure: a CompileResult in, the log as a dict out. Shapes follow the OASIS standard
(https://docs.oasis-open.org/sarif/sarif/v2.1.0/sarif-v2.1.0.html) and what GitHub reads
(https://docs.github.com/en/code-security/code-scanning/integrating-with-code-scanning/sarif-support-for-code-scanning):
one run; ``tool.driver.rules`` lists every rule fleetspec has (so a dismissed alert keeps
its rule's help); each result names its rule by id and index, its level, and one
physical location whose ``artifactLocation.uri`` is relative to the repository root
(``uriBaseId`` ``%SRCROOT%``) when the spec lies under the working directory, as in CI.
Findings the spec suppresses are reported with an ``inSource`` suppression, which code
scanning shows as dismissed instead of dropping silently.
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path
from typing import Any

from fleetspec import __version__
from fleetspec.findings import LocatedFinding, Severity, locate
from fleetspec.pipeline import CompileResult

SCHEMA = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
LEVEL = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "note"}
INTERNAL = ("internal-error", "a rule failed while checking the spec: a fleetspec bug, please report it")


@functools.cache
def _rules() -> tuple[dict[str, Any], ...]:
    from importlib import resources

    from fleetspec.rules import RULES

    docs = resources.files("fleetspec.rules") / "docs"
    out = []
    for rule in RULES:
        doc = docs / f"{rule.id}.md"
        markdown = doc.read_text() if doc.is_file() else rule.summary
        out.append({
            "id": rule.id, "name": _camel(rule.id),
            "shortDescription": {"text": rule.summary},
            "fullDescription": {"text": rule.summary},
            "help": {"text": markdown, "markdown": markdown},
            "defaultConfiguration": {"level": LEVEL[rule.severity]},
            "properties": {"tags": ["fleetspec", rule.stage]},
        })
    out.append({"id": INTERNAL[0], "name": _camel(INTERNAL[0]), "shortDescription": {"text": INTERNAL[1]},
                "defaultConfiguration": {"level": "error"}})
    return tuple(out)


def _camel(rule_id: str) -> str:
    return "".join(part.capitalize() for part in rule_id.split("-"))


def to_sarif(compiled: CompileResult, root: Path | None = None) -> dict[str, Any]:
    """The SARIF log of one spec's findings; ``root`` (default: the working directory) is %SRCROOT%."""
    root = (root or Path.cwd()).resolve()
    rules = list(_rules())
    index = {r["id"]: i for i, r in enumerate(rules)}
    results = [_result(f, index, root) for f in compiled.located()]
    for finding in compiled.suppressed:
        result = _result(locate(finding, compiled.source), index, root)
        result["suppressions"] = [{"kind": "inSource", "justification": "listed in the spec's suppress"}]
        results.append(result)
    return {
        "$schema": SCHEMA,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {"name": "fleetspec", "version": __version__, "semanticVersion": __version__,
                                "rules": rules}},
            "originalUriBaseIds": {"%SRCROOT%": {"uri": root.as_uri() + "/"}},
            "results": results,
            "columnKind": "unicodeCodePoints",
        }],
    }


def _result(f: LocatedFinding, index: dict[str, int], root: Path) -> dict[str, Any]:
    rule = f.rule if f.rule in index else INTERNAL[0]
    path = Path(f.file)
    absolute = path if path.is_absolute() else (Path.cwd() / path)
    try:
        artifact = {"uri": absolute.resolve().relative_to(root).as_posix(), "uriBaseId": "%SRCROOT%"}
    except ValueError:
        artifact = {"uri": absolute.resolve().as_uri()}
    region = {"startLine": max(f.line, 1), "startColumn": max(f.column, 1)}
    if f.source_line:
        region["snippet"] = {"text": f.source_line}
    fingerprint = hashlib.sha256(f"{f.rule}\0{f.path}\0{f.message}".encode()).hexdigest()
    return {
        "ruleId": rule,
        "ruleIndex": index[rule],
        "level": LEVEL[f.severity],
        "message": {"text": f.message},
        "locations": [{
            "physicalLocation": {"artifactLocation": artifact, "region": region},
            "logicalLocations": [{"fullyQualifiedName": f.path or "(document)", "kind": "member"}],
        }],
        "partialFingerprints": {"fleetspecFinding/v1": fingerprint},
    }
