"""Turn pydantic's validation errors into `schema` findings a person can act on.

Each finding keeps pydantic's ``loc`` as the spec path (the source map turns it into
``line:column``), says what is wrong in plain words, and what to do: the allowed keys
with a did-you-mean for unknown ones, the allowed values for enums, and "quote this
version" where YAML read a version as a number.
"""

from __future__ import annotations

import difflib
import types
import typing
from typing import Any

from pydantic import BaseModel, ValidationError

from fleetspec.findings import Finding, Severity, SpecPath, dotted
from fleetspec.spec.loader import SourceMap

URL_KEYS = {"endpoint", "url"}  # BMC endpoints and webhooks: the value may hold a credential
SECRET_KEYS = {"munge_key", "slurmdbd_password", "pulumi_passphrase", "registry_password", "password", "token"}
VERSION_KEYS = {"driver", "cuda", "cudnn", "nccl", "dcgm", "amdgpu", "rocm", "rccl", "version"}


def schema_findings(error: ValidationError, root: type[BaseModel], source: SourceMap) -> list[Finding]:
    findings = []
    seen: set[tuple[SpecPath, str]] = set()
    for err in error.errors(include_url=False):
        path = tuple(p for p in err["loc"] if not _is_union_tag(p))
        message = _message(err, path, root, source)
        if (path, message) in seen:
            continue
        seen.add((path, message))
        anchor = "key" if err["type"] == "extra_forbidden" else "value"
        findings.append(Finding("schema", Severity.ERROR, message, path, anchor))
    return findings


def _is_union_tag(part: Any) -> bool:
    # pydantic adds union member names ("str", "constrained-str", "function-after[...]")
    return isinstance(part, str) and ("[" in part or part in {"str", "int", "constrained-str", "none"})


def _message(err: dict[str, Any], path: SpecPath, root: type[BaseModel], source: SourceMap) -> str:
    kind = err["type"]
    key = path[-1] if path else "document"
    where = _label(path)
    if kind == "extra_forbidden":
        allowed = sorted(_fields_at(root, path[:-1]))
        hint = difflib.get_close_matches(str(key), allowed, n=1, cutoff=0.6)
        did_you_mean = f" Did you mean '{hint[0]}'?" if hint else ""
        return f"unknown key '{key}' in {_label(path[:-1]) or 'the document'}.{did_you_mean} Allowed keys: {', '.join(allowed)}"
    if kind == "missing":
        return f"missing required key '{key}' in {_label(path[:-1]) or 'the document'}. Add it"
    raw = source.numbers.get(path)
    if raw is not None and kind in ("string_type", "string_pattern_mismatch") and str(key) in VERSION_KEYS:
        return (
            f"{where} is written as a number ({raw}); YAML reads it as {_shown(err.get('input'))}, not as a version. "
            f'Quote this version: {key}: "{raw}"'
        )
    if kind == "literal_error":
        expected = err.get("ctx", {}).get("expected", "")
        return f"{where} is {_shown(err.get('input'))}; it must be one of {expected}. Pick one of those"
    if kind == "string_pattern_mismatch":
        if path[-2:-1] == ("secrets",) or str(key) in SECRET_KEYS:
            # Never echo what was written there: it may be the secret itself.
            return f"{where} is not a secret reference. {_pattern_hint(str(key))}"
        if str(key) == "mok_signing_key":  # a key pasted where its path belongs: never echoed
            return f"{where} is not a path on the node. {_pattern_hint(str(key))}"
        if str(key) in URL_KEYS:  # it may carry a user and password: never echoed
            return f"{where} is not a URL fleetspec accepts here. {_pattern_hint(str(key))}"
        listed = path[-2:-1] if path[-2:-1] in (("database_clients",), ("fingerprint",)) else ()
        hint = _pattern_hint(str(listed[0]) if listed else str(key))
        return f"{where} is {_shown(err.get('input'))}, which is not allowed here. {hint}"
    if kind in ("string_type", "int_type", "bool_type", "dict_type", "list_type", "model_type", "model_attributes_type"):
        expected = {
            "string_type": "a string",
            "int_type": "a whole number",
            "bool_type": "true or false",
            "dict_type": "a mapping",
            "list_type": "a list",
            "model_type": "a mapping",
            "model_attributes_type": "a mapping",
        }[kind]
        return f"{where} must be {expected}, not {_type_name(err.get('input'))}. Fix the value"
    if kind in ("too_short", "too_long"):
        return f"{where}: {err['msg'].lower()}. Fix the value"
    if kind in ("greater_than_equal", "less_than_equal", "greater_than", "less_than"):
        return f"{where} is {_shown(err.get('input'))}: {err['msg'].lower()}. Fix the value"
    if kind == "value_error":
        return f"{where}: {err['msg'].removeprefix('Value error, ')}"
    return f"{where}: {err['msg']}. Fix the value"


def _shown(value: Any, limit: int = 80) -> str:
    """``repr(value)``, cut to ``limit`` characters: a 10 MB value is not echoed whole."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 4] + "...'"


def _pattern_hint(key: str) -> str:
    if key in VERSION_KEYS:
        return 'Write a version of dotted numbers in quotes, like "13.0.2"'
    if key == "max_time":
        return "Use Slurm time syntax: MM, HH:MM:SS, D-HH, D-HH:MM:SS or UNLIMITED"
    if key in SECRET_KEYS:
        return ("Write a reference to the secret, never the secret itself: env:NAME, file:PATH, "
                "ansible-vault:PATH#KEY, hashicorp-vault:MOUNT/PATH#KEY, sops:PATH#KEY or pulumi:KEY")
    if key in ("mok_certificate", "mok_signing_key"):
        return ("Write the absolute path of the file on the node, of letters, digits and . _ + - (like "
                "/var/lib/shim-signed/mok/MOK.der and /var/lib/shim-signed/mok/MOK.priv); the site provisions "
                "the key there, and the key itself never goes in the spec (docs/security.md)")
    if key in URL_KEYS:
        return ("Write an https:// URL with no user or password in it (a BMC: https://{host}-bmc.mgmt.example.com); "
                "give the credential as a secret reference")
    if key in ("uri", "key_url"):
        return "Use an https:// or file:/ URL: plain http lets anyone on the path swap packages"
    if key == "sha256":
        return "Write the SHA-256 as 64 lower-case hex digits, as sha256sum prints it"
    if key == "fingerprint":
        return ("Write the certificate's SHA-256 fingerprint as `openssl x509 -noout -fingerprint -sha256 -in CERT` "
                "prints it (32 hex pairs joined by ':'), or as 64 hex digits")
    if key == "server_name":
        return "Write the DNS name the BMC's certificate carries (its subjectAltName, or its CN: AMI)"
    if key == "state_save_location":
        return "Write an absolute path of letters, digits, '.', '_' and '-', like /var/spool/slurmctld"
    if key in ("timeout", "recovery_timeout"):
        return "Use a duration like 10m, 600s or 1h"
    if key == "database_clients":
        return ("Write an IPv4 network with a prefix length from /1 to /32, like 10.244.0.0/16 "
                "(never /0: the database user would be open to any host)")
    return "Use lower-case letters, digits and '-' (a DNS label, at most 63 characters)"


def _label(path: SpecPath) -> str:
    return f"'{dotted(path)}'" if path else ""


def _type_name(value: Any) -> str:
    return {dict: "a mapping", list: "a list", str: "a string", int: "a number", float: "a number",
            bool: "a boolean", type(None): "empty"}.get(type(value), type(value).__name__)


def _fields_at(model: Any, path: SpecPath) -> set[str]:
    """The keys allowed at ``path`` below ``model`` (walks models, dicts, lists, optionals)."""
    current: Any = model
    for part in path:
        current = _unwrap(current)
        if isinstance(current, type) and issubclass(current, BaseModel):
            field = current.model_fields.get(str(part))
            if field is None:
                return set()
            current = field.annotation
            continue
        origin = typing.get_origin(current)
        args = typing.get_args(current)
        if origin is dict and args:
            current = args[1]
        elif origin is list and args:
            current = args[0]
        else:
            return set()
    current = _unwrap(current)
    if isinstance(current, type) and issubclass(current, BaseModel):
        return set(current.model_fields)
    return set()


def _unwrap(annotation: Any) -> Any:
    """Strip Optional/Annotated so the model type shows."""
    while True:
        origin = typing.get_origin(annotation)
        if origin is typing.Annotated:
            annotation = typing.get_args(annotation)[0]
        elif origin in (typing.Union, types.UnionType):
            members = [a for a in typing.get_args(annotation) if a is not type(None)]
            annotation = members[0] if len(members) == 1 else annotation
            if len(members) != 1:
                return annotation
        else:
            return annotation
