"""#28 item 10: secret sources beyond env and file. ``ansible-vault:`` (``vault:`` kept as
a deprecated spelling, with a validate warning), HashiCorp Vault KV version 2 over its
HTTP API (a server on 127.0.0.1 that answers as Vault documents it), and SOPS-encrypted
files through the real ``sops`` binary with a real age key. Values are resolved at
apply time (``secrets check`` here) and never printed or written."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fleetspec import secrets as sec
from fleetspec.cli import app
from fleetspec.pipeline import compile_text
from tests.conftest import EXAMPLES

QUICKSTART = (EXAMPLES / "quickstart.yaml").read_text()
VALUE = "s3cr3t-Password-from-the-source"
TOKEN = "hvs.test-token-0123456789"


def _spec(tmp_path: Path, reference: str) -> Path:
    spec = tmp_path / "fleet.yaml"
    spec.write_text(QUICKSTART + f"  secrets:\n    slurmdbd_password: \"{reference}\"\n")
    return spec


def test_vault_is_the_old_spelling_of_ansible_vault_and_warns() -> None:
    old = compile_text(QUICKSTART + "  secrets:\n    slurmdbd_password: \"vault:v.yml#db\"\n", "f.yaml")
    assert old.valid
    (warning,) = [f for f in old.located() if "old spelling" in f.message]
    assert warning.severity.name == "WARNING" and "ansible-vault:v.yml#db" in warning.message and warning.line > 0
    new = compile_text(QUICKSTART + "  secrets:\n    slurmdbd_password: \"ansible-vault:v.yml#db\"\n", "f.yaml")
    assert new.valid and not [f for f in new.located() if "old spelling" in f.message]
    assert sec.SecretRef.parse("x", "vault:v.yml#db").kind == "ansible-vault"
    for ref in ("hashicorp-vault:secret/fleet/db#password", "sops:secrets.enc.yaml#db"):
        assert compile_text(QUICKSTART + f"  secrets:\n    slurmdbd_password: \"{ref}\"\n", "f.yaml").valid, ref
    bad = compile_text(QUICKSTART + "  secrets:\n    slurmdbd_password: \"hashicorp-vault:secret#password\"\n", "f")
    assert not bad.valid  # a KV v2 reference is MOUNT/PATH#KEY


class _Vault(BaseHTTPRequestHandler):
    """Vault's KV v2 'Read secret version' as documented
    (https://developer.hashicorp.com/vault/api-docs/secret/kv/kv-v2): GET
    /v1/<mount>/data/<path> with X-Vault-Token; 200 with {"data": {"data": {...},
    "metadata": {...}}}; 403 for a bad token; 404 for no secret."""

    secrets = {"/v1/secret/data/fleet/db": {"password": VALUE, "user": "slurm"}}
    seen: list[dict[str, str]] = []

    def do_GET(self) -> None:
        self.seen.append(dict(self.headers))
        if self.headers.get("X-Vault-Token") != TOKEN:
            return self._send(403, {"errors": ["permission denied"]})
        data = self.secrets.get(self.path)
        if data is None:
            return self._send(404, {"errors": []})
        return self._send(200, {"request_id": "r", "lease_id": "", "renewable": False, "lease_duration": 0,
                                "data": {"data": data, "metadata": {"created_time": "2026-11-01T00:00:00Z",
                                                                    "deletion_time": "", "destroyed": False,
                                                                    "version": 2}}})

    def _send(self, code: int, body: dict) -> None:
        raw = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def vault(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Vault)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv("VAULT_ADDR", f"http://127.0.0.1:{server.server_address[1]}")
    monkeypatch.setenv("VAULT_TOKEN", TOKEN)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.vault-token of the machine's
    yield server
    server.shutdown()
    server.server_close()
    thread.join(5)


def test_hashicorp_vault_kv2_resolves_one_key(vault, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    ref = sec.SecretRef.parse("slurmdbd_password", "hashicorp-vault:secret/fleet/db#password")
    monkeypatch.setenv("VAULT_NAMESPACE", "team-a")
    assert sec.resolve(ref, tmp_path) == VALUE.encode()
    assert _Vault.seen[-1]["X-Vault-Token"] == TOKEN and _Vault.seen[-1]["X-Vault-Namespace"] == "team-a"
    spec = _spec(tmp_path, "hashicorp-vault:secret/fleet/db#password")
    (tmp_path / ".fleetspec/secrets").mkdir(parents=True, mode=0o700)
    munge = tmp_path / ".fleetspec/secrets/munge.key"
    munge.write_bytes(b"k" * 1024)
    munge.chmod(0o600)
    result = CliRunner().invoke(app, ["secrets", "check", str(spec)])
    assert result.exit_code == 0 and VALUE not in result.output and TOKEN not in result.output, result.output


@pytest.mark.parametrize(("target", "token", "says"), [
    ("secret/fleet/db#nokey", TOKEN, "has no key 'nokey'"),
    ("secret/fleet/other#password", TOKEN, "no such secret"),
    ("secret/fleet/db#password", "wrong-token", "permission denied"),
])
def test_hashicorp_vault_errors_name_the_path_never_a_value(vault, monkeypatch, tmp_path, target, token,
                                                            says) -> None:
    monkeypatch.setenv("VAULT_TOKEN", token)
    with pytest.raises(sec.SecretError, match=says) as exc:
        sec.resolve(sec.SecretRef.parse("db", f"hashicorp-vault:{target}"), tmp_path)
    assert VALUE not in str(exc.value) and TOKEN not in str(exc.value)


def test_hashicorp_vault_refuses_a_token_in_clear_and_needs_its_settings(monkeypatch, tmp_path) -> None:
    ref = sec.SecretRef.parse("db", "hashicorp-vault:secret/fleet/db#password")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("VAULT_TOKEN", TOKEN)
    monkeypatch.setenv("VAULT_ADDR", "http://vault.example.internal:8200")
    with pytest.raises(sec.SecretError, match="in clear"):
        sec.resolve(ref, tmp_path)
    monkeypatch.delenv("VAULT_ADDR")
    with pytest.raises(sec.SecretError, match="set VAULT_ADDR"):
        sec.resolve(ref, tmp_path)
    monkeypatch.setenv("VAULT_ADDR", "http://127.0.0.1:9")  # nothing listens on discard
    monkeypatch.delenv("VAULT_TOKEN")
    with pytest.raises(sec.SecretError, match="set VAULT_TOKEN"):
        sec.resolve(ref, tmp_path)
    monkeypatch.setenv("VAULT_TOKEN", TOKEN)
    with pytest.raises(sec.SecretError, match="cannot reach Vault"):
        sec.resolve(ref, tmp_path)


def _tool(name: str) -> str:
    found = shutil.which(name) or shutil.which(name, path=str(Path(sys.executable).parent))
    if found is None:
        pytest.fail(f"{name} is missing: scripts/test installs it")
    return found


def test_sops_file_resolves_one_key_with_a_real_age_key(monkeypatch, tmp_path) -> None:
    keys = tmp_path / "age.key"
    subprocess.run([_tool("age-keygen"), "-o", str(keys)], check=True, capture_output=True)
    recipient = next(line.split(": ", 1)[1] for line in keys.read_text().splitlines() if "public key" in line)
    plain = tmp_path / "secrets.yaml"
    plain.write_text(f"db: {VALUE}\nother: x\n")
    encrypted = tmp_path / "secrets.enc.yaml"
    done = subprocess.run([_tool("sops"), "--encrypt", "--age", recipient, "--input-type", "yaml",
                           "--output-type", "yaml", str(plain)], capture_output=True, text=True, check=True)
    encrypted.write_text(done.stdout)
    plain.unlink()
    assert VALUE not in encrypted.read_text()
    monkeypatch.setenv("PATH", f"{Path(_tool('sops')).parent}:{os.environ['PATH']}")
    monkeypatch.setenv("SOPS_AGE_KEY_FILE", str(keys))
    ref = sec.SecretRef.parse("slurmdbd_password", "sops:secrets.enc.yaml#db")
    assert sec.resolve(ref, tmp_path) == VALUE.encode()
    with pytest.raises(sec.SecretError, match="could not read key 'nokey'") as exc:
        sec.resolve(sec.SecretRef.parse("db", "sops:secrets.enc.yaml#nokey"), tmp_path)
    assert VALUE not in str(exc.value)
    monkeypatch.setenv("SOPS_AGE_KEY_FILE", str(tmp_path / "missing.key"))
    with pytest.raises(sec.SecretError, match="sops could not read") as exc:
        sec.resolve(ref, tmp_path)
    assert VALUE not in str(exc.value)
