"""Secret values never reach rendered files, plans, state, logs, JSON output or errors."""

import json

from typer.testing import CliRunner

from fleetspec.cli import app
from tests.conftest import EXAMPLES

runner = CliRunner()


def test_render_plan_and_validate_outputs_carry_no_secret(tmp_path, monkeypatch):
    spec = tmp_path / "museum.yaml"
    spec.write_text((EXAMPLES / "museum.yaml").read_text().replace(
        "  slurm:\n", "  secrets:\n    pulumi_passphrase: env:FLEETSPEC_TEST_PASSPHRASE\n  slurm:\n", 1))
    passphrase = "pp-7d0c2b1e9f"
    monkeypatch.setenv("FLEETSPEC_TEST_PASSPHRASE", passphrase)
    outputs = [runner.invoke(app, ["secrets", "init", str(spec)]).output]
    values = [p.read_bytes() for p in (tmp_path / ".fleetspec" / "secrets").iterdir()] + [passphrase.encode()]
    outputs.append(runner.invoke(app, ["secrets", "check", str(spec)]).output)
    outputs.append(runner.invoke(app, ["validate", str(spec), "--format", "json"]).output)
    outputs.append(runner.invoke(app, ["render", str(spec), "--out", str(tmp_path / "build")]).output)
    outputs.append(runner.invoke(app, ["plan", str(spec), "--format", "json", "--out", str(tmp_path / "plan.json")]).output)
    outputs.append(runner.invoke(app, ["plan", str(spec)]).output)
    files = [p for p in tmp_path.rglob("*") if p.is_file() and "secrets" not in p.parts]
    assert any(p.name == "slurmdbd.conf" for p in files) and (tmp_path / "plan.json").exists()
    blobs = [o.encode() for o in outputs] + [p.read_bytes() for p in files]
    for value in values:
        assert len(value) >= 12
        assert not any(value in blob for blob in blobs)
    # The references themselves are there, which is what a reviewer needs to see.
    assert b"@@secret:slurmdbd_password@@" in (tmp_path / "build" / "slurm" / "slurmdbd.conf").read_bytes()
    assert json.loads((tmp_path / "plan.json").read_text())["fleet"] == "museum"
