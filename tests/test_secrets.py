"""Secrets are references: created safely, resolved at apply time, never echoed."""

import json
import os
import stat

import pytest
from typer.testing import CliRunner

from fleetspec import secrets as sec
from fleetspec.cli import app
from fleetspec.pipeline import compile_file
from tests.conftest import EXAMPLES

runner = CliRunner()


@pytest.fixture
def spec(tmp_path):
    path = tmp_path / "fleet.yaml"
    path.write_text((EXAMPLES / "quickstart.yaml").read_text())
    return path


def test_only_the_secrets_the_fleet_uses():
    assert [n for n, _ in compile_file(EXAMPLES / "quickstart.yaml").fleet.secrets] == ["munge_key", "slurmdbd_password"]
    museum = [n for n, _ in compile_file(EXAMPLES / "museum.yaml").fleet.secrets]
    assert museum == ["munge_key", "slurmdbd_password", "pulumi_passphrase"]


def test_init_creates_private_files_and_never_overwrites(spec):
    result = runner.invoke(app, ["secrets", "init", str(spec)])
    assert result.exit_code == 0, result.output
    key = spec.parent / ".fleetspec/secrets/munge.key"
    password = spec.parent / ".fleetspec/secrets/slurmdbd_password"
    assert len(key.read_bytes()) == sec.MUNGE_KEY_BYTES
    assert stat.S_IMODE(key.stat().st_mode) == 0o600 and stat.S_IMODE(password.stat().st_mode) == 0o600
    assert stat.S_IMODE(key.parent.stat().st_mode) == 0o700
    before = key.read_bytes(), password.read_bytes()
    assert runner.invoke(app, ["secrets", "init", str(spec)]).exit_code == 0
    assert (key.read_bytes(), password.read_bytes()) == before
    assert password.read_text() not in result.output


def test_check_resolves_and_never_prints_values(spec, monkeypatch):
    assert runner.invoke(app, ["secrets", "check", str(spec)]).exit_code == 1  # nothing created yet
    runner.invoke(app, ["secrets", "init", str(spec)])
    result = runner.invoke(app, ["secrets", "check", str(spec)])
    assert result.exit_code == 0
    value = (spec.parent / ".fleetspec/secrets/slurmdbd_password").read_text()
    assert value not in result.output


def test_world_readable_secret_file_is_refused(spec):
    runner.invoke(app, ["secrets", "init", str(spec)])
    path = spec.parent / ".fleetspec/secrets/slurmdbd_password"
    os.chmod(path, 0o644)
    ref = sec.SecretRef("slurmdbd_password", "file", ".fleetspec/secrets/slurmdbd_password")
    with pytest.raises(sec.SecretError, match="chmod 600"):
        sec.resolve(ref, spec.parent)


def test_env_reference(monkeypatch, tmp_path):
    ref = sec.SecretRef.parse("pulumi_passphrase", "env:FLEETSPEC_TEST_PASS")
    with pytest.raises(sec.SecretError, match="FLEETSPEC_TEST_PASS is not set"):
        sec.resolve(ref, tmp_path)
    monkeypatch.setenv("FLEETSPEC_TEST_PASS", "correct horse")
    assert sec.resolve(ref, tmp_path) == b"correct horse"


def test_a_literal_secret_in_the_spec_is_refused_without_echoing_it(spec):
    text = spec.read_text().replace("  slurm:\n", "  secrets:\n    slurmdbd_password: hunter2-literal\n  slurm:\n", 1)
    spec.write_text(text)
    result = runner.invoke(app, ["validate", str(spec), "--format", "json"])
    assert result.exit_code == 1
    [finding] = json.loads(result.stdout)["findings"]
    assert finding["rule"] == "schema" and "not a secret reference" in finding["message"]
    assert "hunter2" not in result.output


def test_redactor_masks_every_known_value():
    redact = sec.Redactor([b"s3cret-value", "another-one"])
    assert redact("a s3cret-value and another-one") == "a ******** and ********"
    assert redact("nothing here") == "nothing here"
