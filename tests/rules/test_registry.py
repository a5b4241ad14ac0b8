"""Meta-tests over the rule registry, in the manner of ansible-lint's test_rules_collection.

Rule ids are public: users suppress warnings by them and read ``rules/docs/<id>.md``. So
every registered rule must have a well-formed id, a doc with the required sections and
pass/fail fixtures; nothing may document or test a rule that is not registered; the
ids DESIGN.md promises must exist; and a rule that crashes must surface as an
``internal-error`` finding instead of hiding the other rules' findings.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from importlib import resources
from pathlib import Path

import pytest
import yaml

import fleetspec.rules
from fleetspec.findings import Finding, Severity
from fleetspec.pipeline import compile_file
from fleetspec.rules import RULES, RULES_BY_ID
from tests.conftest import require_shared

FIXTURES = Path(__file__).resolve().parent / "fixtures"
DOCS = Path(str(resources.files("fleetspec.rules") / "docs"))
SOURCES = Path(str(resources.files("fleetspec.catalog") / "data" / "sources.yaml"))
KEBAB = re.compile(r"^[a-z0-9]+(-[a-z0-9.]+)*$")
REQUIRED_SECTIONS = ("Problem", "Fix", "Severity")
ACTION = re.compile(
    r"\b(use|raise|pick|fix|remove|add|set|split|keep|give|let|upgrade|point|quote|drop|define|write|lower"
    r"|check|constrain|start|save|flatten|pin|prefer|rename|suppress|run|declare|did you mean)\b",
    re.IGNORECASE,
)
FIXTURE_NAME = re.compile(r"^(pass|fail)(_[a-z0-9_]+)?\.yaml$")

DESIGN_IDS = ["schema", "duplicate-host", "bad-hostlist", "unknown-gpu-model", "stack-vendor-mismatch", "driver-too-old-for-cuda", "driver-unsupported-gpu", "cuda-unsupported-gpu", "nccl-cuda-mismatch", "cudnn-cuda-mismatch", "rocm-unsupported-gpu", "rccl-rocm-mismatch", "mixed-vendor-partition", "mixed-generation-partition", "mixed-stack-partition", "double-allocation-owner", "quota-owner-ambiguous", "gang-needs-k8s-1.37", "slurm-security-release", "tcp-fallback-risk", "nvlink-domain-model", "unknown-version"]

# Rules whose verdict rests on a catalog fact: their doc must cite where it comes from.
CATALOG_BACKED = {
    "driver-too-old-for-cuda", "driver-unsupported-gpu", "cuda-unsupported-gpu", "nccl-cuda-mismatch",
    "nccl-unsupported-gpu", "cudnn-cuda-mismatch", "rocm-unsupported-gpu", "rccl-rocm-mismatch",
    "unknown-version", "gang-needs-k8s-1.37", "slurm-security-release", "gpu-operator-unsupported",
    "nvlink-domain-model",
}

# Rules whose fixtures show findings above the rule's declared severity (strict xfail).
SEVERITY_BUGS: dict[str, str] = {}

RULE_IDS = [rule.id for rule in RULES]


def sections(rule_id: str) -> dict[str, str]:
    """The doc's ``## <name>`` sections, by name; the title line under key ``""``."""
    text = (DOCS / f"{rule_id}.md").read_text(encoding="utf-8")
    parts: dict[str, str] = {}
    name = ""
    for line in text.splitlines():
        if line.startswith("## "):
            name = line[3:].strip()
            parts[name] = ""
        else:
            parts[name] = parts.get(name, "") + line + "\n"
    return parts


@functools.cache
def fixture_findings() -> tuple[tuple[str, Finding], ...]:
    """(fixture, finding) for every finding over every fixture file."""
    return tuple(
        (path.relative_to(FIXTURES).as_posix(), finding)
        for path in sorted(FIXTURES.glob("*/*.yaml"))
        for finding in compile_file(path).findings
    )


def _severity_params() -> Iterator[object]:
    for rule_id in RULE_IDS:
        marks = [pytest.mark.xfail(strict=True, reason=SEVERITY_BUGS[rule_id])] if rule_id in SEVERITY_BUGS else []
        yield pytest.param(rule_id, id=rule_id, marks=marks)


# --- ids -------------------------------------------------------------------------------


def test_rule_ids_are_unique() -> None:
    assert len(RULE_IDS) == len(set(RULE_IDS)), sorted(i for i in RULE_IDS if RULE_IDS.count(i) > 1)
    assert set(RULES_BY_ID) == set(RULE_IDS)


@pytest.mark.parametrize("rule_id", RULE_IDS)
def test_rule_id_is_kebab_case(rule_id: str) -> None:
    assert KEBAB.match(rule_id), rule_id


@pytest.mark.parametrize("rule_id", DESIGN_IDS)
def test_design_rule_is_registered(rule_id: str) -> None:
    assert rule_id in RULES_BY_ID


def test_design_md_rule_list_is_registered() -> None:
    """The ids in DESIGN.md's Rules section itself (the list above is its copy)."""
    text = require_shared("DESIGN.md").read_text(encoding="utf-8")
    section = text.split("\n## Rules", 1)[1].split("\n## ", 1)[0]
    ids = {t for t in re.findall(r"`([^`]+)`", section) if KEBAB.match(t)}
    assert set(DESIGN_IDS) <= ids
    assert ids <= set(RULES_BY_ID), sorted(ids - set(RULES_BY_ID))


# --- declaration -----------------------------------------------------------------------


@pytest.mark.parametrize("rule", RULES, ids=RULE_IDS)
def test_rule_declaration_is_valid(rule: fleetspec.rules.Rule) -> None:
    assert rule.severity in (Severity.WARNING, Severity.ERROR)
    assert rule.stage in ("compile", "fleet")
    assert (rule.check is None) == (rule.stage == "compile"), "fleet rules have a check, compile rules none"
    assert rule.check is None or callable(rule.check)
    assert rule.summary and rule.summary == rule.summary.strip()
    assert rule.suppressible == (rule.severity < Severity.ERROR or rule.warns)


@pytest.mark.parametrize("rule_id", list(_severity_params()))
def test_findings_stay_within_the_declared_severity(rule_id: str) -> None:
    """A rule's findings never exceed its severity; an error rule warns only if it says so."""
    rule = RULES_BY_ID[rule_id]
    seen = [(fixture, f) for fixture, f in fixture_findings() if f.rule == rule_id]
    assert seen, f"no fixture produces a {rule_id} finding"
    above = [(fx, str(f.severity), f.message) for fx, f in seen if f.severity > rule.severity]
    assert not above, above
    if not rule.warns and rule.severity == Severity.ERROR:
        warned = [(fx, f.message) for fx, f in seen if f.severity < Severity.ERROR]
        assert not warned, f"{rule_id} reports warnings but is not declared warns=True: {warned}"


def test_every_reported_rule_id_is_registered() -> None:
    unknown = {(fx, f.rule) for fx, f in fixture_findings() if f.rule not in RULES_BY_ID}
    assert not unknown, sorted(unknown)


def test_every_finding_message_says_what_to_do() -> None:
    """Each message names an action (an imperative, or a did-you-mean), not only the fault."""
    terse = {(f.rule, f.message) for _, f in fixture_findings() if not ACTION.search(f.message)}
    assert not terse, sorted(terse)


# --- docs ------------------------------------------------------------------------------


@pytest.mark.parametrize("rule_id", RULE_IDS)
def test_rule_has_a_doc_with_the_required_sections(rule_id: str) -> None:
    path = DOCS / f"{rule_id}.md"
    assert path.is_file(), f"missing {path}"
    parts = sections(rule_id)
    assert parts.get("", "").strip().splitlines()[0] == f"# {rule_id}", "the title is the rule id"
    for name in REQUIRED_SECTIONS:
        assert parts.get(name, "").strip(), f"{path.name}: missing or empty '## {name}'"


@pytest.mark.parametrize("rule_id", RULE_IDS)
def test_doc_fix_has_a_yaml_snippet_that_parses(rule_id: str) -> None:
    snippets = re.findall(r"```yaml\n(.*?)```", sections(rule_id).get("Fix", ""), re.S)
    assert snippets, "the Fix section shows the change as a ```yaml block"
    for snippet in snippets:
        assert isinstance(yaml.safe_load(snippet), dict)


@pytest.mark.parametrize("rule_id", RULE_IDS)
def test_doc_severity_matches_the_rule(rule_id: str) -> None:
    rule = RULES_BY_ID[rule_id]
    text = sections(rule_id)["Severity"].lower()
    if rule.severity == Severity.ERROR:
        assert "error" in text
    if rule.warns or rule.severity == Severity.WARNING:
        assert "warning" in text
    assert "suppress" in text, "say whether the finding can be suppressed"


@pytest.mark.parametrize("rule_id", RULE_IDS)
def test_doc_sources_are_catalog_sources(rule_id: str) -> None:
    known = set(yaml.safe_load(SOURCES.read_text(encoding="utf-8")).values())
    source = sections(rule_id).get("Source")
    if rule_id in CATALOG_BACKED:
        assert source and source.strip(), "a rule resting on a catalog fact cites it under '## Source'"
    urls = re.findall(r"https?://[^\s)]+", source or "")
    cleaned = [u.rstrip(".,;") for u in urls]
    assert not set(cleaned) - known, f"not in catalog/data/sources.yaml: {sorted(set(cleaned) - known)}"


def test_no_orphan_docs() -> None:
    orphans = sorted(p.stem for p in DOCS.glob("*.md") if p.stem not in RULES_BY_ID)
    assert not orphans


# --- fixtures --------------------------------------------------------------------------


@pytest.mark.parametrize("rule_id", RULE_IDS)
def test_rule_has_pass_and_fail_fixtures(rule_id: str) -> None:
    folder = FIXTURES / rule_id
    assert folder.is_dir(), f"missing {folder}"
    names = sorted(p.name for p in folder.iterdir())
    assert all(FIXTURE_NAME.match(n) for n in names), names
    assert any(n.startswith("pass") for n in names), "needs a pass*.yaml"
    assert any(n.startswith("fail") for n in names), "needs a fail*.yaml"


def test_no_orphan_fixture_dirs() -> None:
    orphans = sorted(p.name for p in FIXTURES.iterdir() if p.is_dir() and p.name not in RULES_BY_ID)
    assert not orphans


# --- a broken rule ---------------------------------------------------------------------


def test_a_rule_that_raises_becomes_an_internal_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(fleet: object, catalog: object) -> list[Finding]:
        raise KeyError("no such fact")

    broken = tuple(r._replace(check=boom) if r.id == "nccl-cuda-mismatch" else r for r in RULES)
    monkeypatch.setattr(fleetspec.rules, "RULES", broken)
    # A fixture where another rule fires: its finding must survive the crash.
    result = compile_file(FIXTURES / "nccl-unsupported-gpu" / "fail.yaml")
    rules = [f.rule for f in result.findings]
    [crash] = [f for f in result.findings if f.rule == "internal-error"]
    assert crash.severity == Severity.ERROR
    assert "nccl-cuda-mismatch" in crash.message and "KeyError" in crash.message
    assert "nccl-unsupported-gpu" in rules
    assert not result.valid
    assert result.located()  # an internal error still has a location (the file)


def test_an_internal_error_cannot_be_suppressed(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(fleet: object, catalog: object) -> list[Finding]:
        raise RuntimeError("bug")

    broken = tuple(r._replace(check=boom) if r.id == "tcp-fallback-risk" else r for r in RULES)
    monkeypatch.setattr(fleetspec.rules, "RULES", broken)
    result = compile_file(FIXTURES / "tcp-fallback-risk" / "pass_suppressed.yaml")
    assert [f.rule for f in result.findings if f.severity == Severity.ERROR] == ["internal-error"]
    assert not result.valid
