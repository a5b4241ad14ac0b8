"""#27 item 6: a saved plan is bound whole (waves, changes, settings, the fleet, the
state's serial) and, with a signing key, signed: apply refuses an edited plan, and with
the key it refuses a plan the key did not sign."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fleetspec.cli import app
from fleetspec.compile.ir import Fleet
from fleetspec.plan.saved import SavedPlanError, check_plan_current, load_saved_plan, plan_digest
from fleetspec.state import StateStore
from tests.plan.conftest import SPECS
from tests.plan.test_cli import applied, run
from tests.plan.test_cli import spec as spec

KEY = "k" * 48


def _saved(spec: Path, quickstart: Fleet, tmp_path: Path, *extra: str, env: dict[str, str] | None = None) -> Path:
    applied(spec, quickstart)
    spec.write_text((SPECS / "driver-bump.yaml").read_text())
    out = tmp_path / "plan.json"
    result = run(spec, "--out", out, *extra, env=env)
    assert result.exit_code == 2, result.output
    return out


@pytest.mark.parametrize("edit", [
    "one-wave", "no-drains", "settings", "serial", "restriction"])
def test_an_edited_plan_is_refused(spec: Path, quickstart: Fleet, tmp_path: Path, edit: str) -> None:
    out = _saved(spec, quickstart, tmp_path)
    load_saved_plan(out)  # as written: accepted
    data = json.loads(out.read_text())
    if edit == "one-wave":  # every node in one wave, no canary
        hosts = [h for w in data["waves"] for h in w["hosts"]]
        data["waves"] = [{**data["waves"][0], "hosts": hosts, "canary": False}]
    elif edit == "no-drains":
        for change in data["changes"]:
            change["disruption"] = "none"
    elif edit == "settings":
        data["settings"] = {**data.get("settings", {}), "max_unavailable": "100%"}
    elif edit == "serial":
        data["state_serial"] += 1
    else:
        data["restriction"] = "--limit h100-001"
    out.write_text(json.dumps(data))
    with pytest.raises(SavedPlanError, match="plan_digest"):
        load_saved_plan(out)


def test_a_plan_without_a_digest_is_refused(spec: Path, quickstart: Fleet, tmp_path: Path) -> None:
    out = _saved(spec, quickstart, tmp_path)
    data = json.loads(out.read_text())
    del data["plan_digest"]
    out.write_text(json.dumps(data))
    with pytest.raises(SavedPlanError, match="no plan_digest"):
        load_saved_plan(out)


def test_with_a_key_apply_takes_only_plans_that_key_signed(spec: Path, quickstart: Fleet, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PLAN_KEY", KEY)
    signed = _saved(spec, quickstart, tmp_path, "--signing-key", "env:PLAN_KEY")
    plan = load_saved_plan(signed, KEY.encode())
    check_plan_current(plan, StateStore(spec.parent / ".fleetspec", quickstart.name))
    data = json.loads(signed.read_text())
    assert data["signature"].startswith("hmac-sha256:") and KEY not in signed.read_text()

    # Edited and its digest recomputed (anyone can): the signature no longer matches.
    data["waves"] = [{**data["waves"][0], "hosts": [h for w in data["waves"] for h in w["hosts"]]}]
    data["plan_digest"] = plan_digest(data)
    forged = tmp_path / "forged.json"
    forged.write_text(json.dumps(data))
    load_saved_plan(forged)  # without the key only the digest can be checked
    with pytest.raises(SavedPlanError, match="not signed with this apply's signing key"):
        load_saved_plan(forged, KEY.encode())

    unsigned = tmp_path / "unsigned.json"
    data = json.loads(signed.read_text())
    del data["signature"]
    unsigned.write_text(json.dumps(data))
    with pytest.raises(SavedPlanError, match="is not signed"):
        load_saved_plan(unsigned, KEY.encode())

    # Through the CLI: the key's reference from the environment, refused before anything runs.
    for path, says in ((forged, "not signed with this apply's signing key"), (unsigned, "is not signed")):
        result = CliRunner().invoke(app, ["apply", str(path), "--yes"], env={"FLEETSPEC_SIGNING_KEY": "env:PLAN_KEY"})
        assert result.exit_code == 1 and says in " ".join(result.output.split()), result.output
    other = CliRunner().invoke(app, ["apply", str(signed), "--yes", "--signing-key", "env:OTHER_KEY"],
                               env={"OTHER_KEY": "o" * 48})
    assert other.exit_code == 1 and "not signed with this apply's signing key" in " ".join(other.output.split())


def test_a_short_or_missing_key_is_a_worded_error(spec: Path, quickstart: Fleet, tmp_path: Path) -> None:
    applied(spec, quickstart)
    short = run(spec, "--out", tmp_path / "p.json", "--signing-key", "env:SHORT", env={"SHORT": "abc"})
    assert short.exit_code == 1 and "shorter than 32 bytes" in short.output and "abc" not in short.output
    missing = run(spec, "--out", tmp_path / "p.json", "--signing-key", "env:NOPE_NOT_SET")
    assert missing.exit_code == 1 and "NOPE_NOT_SET is not set" in missing.output
    assert not (tmp_path / "p.json").exists()
