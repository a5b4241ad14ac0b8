"""The site's Machine Owner Key in the spec (#24 item 9): stacks.<name>.secure_boot names two
paths on the node; bad input is a located error, a key pasted where its path belongs is
never echoed, and the render carries the paths to the stack's group_vars only."""

from __future__ import annotations

import yaml
from typer.testing import CliRunner

from fleetspec.cli import app
from fleetspec.findings import Severity
from fleetspec.pipeline import compile_text
from fleetspec.render.ansible import render_ansible
from tests.conftest import EXAMPLES

QUICKSTART = (EXAMPLES / "quickstart.yaml").read_text()
MOK = ('      secure_boot:\n'
       '        mok_certificate: /var/lib/shim-signed/mok/MOK.der\n'
       '        mok_signing_key: /var/lib/shim-signed/mok/MOK.priv\n')
ANCHOR = '      nccl: "2.28.3"\n'


def _with(block: str) -> str:
    assert ANCHOR in QUICKSTART
    return QUICKSTART.replace(ANCHOR, ANCHOR + block, 1)


def _errors(text: str):
    result = compile_text(text, "fleet.yaml")
    return [f for f in result.located() if f.severity >= Severity.ERROR], result


def test_the_declared_mok_reaches_the_stacks_group_vars_and_nothing_else():
    errors, result = _errors(_with(MOK))
    assert not errors, errors
    stack = result.fleet.stacks[0]
    assert (stack.mok_certificate, stack.mok_signing_key) == ("/var/lib/shim-signed/mok/MOK.der",
                                                              "/var/lib/shim-signed/mok/MOK.priv")
    files = render_ansible(result.fleet)
    group = yaml.safe_load(files[next(p for p in files if p.name == "stack_hopper_cu13.yml")])
    assert group["fleetspec_dkms_mok_certificate"] == "/var/lib/shim-signed/mok/MOK.der"
    assert group["fleetspec_dkms_mok_signing_key"] == "/var/lib/shim-signed/mok/MOK.priv"
    others = [text for path, text in files.items() if path.name != "stack_hopper_cu13.yml"]
    assert not any("MOK.priv" in text for text in others)


def test_no_declaration_renders_no_key_variables():
    _, result = _errors(QUICKSTART)
    files = render_ansible(result.fleet)
    assert not any("fleetspec_dkms_mok" in text for text in files.values())


def test_bad_paths_are_located_errors_with_what_to_do():
    cases = {
        "relative": MOK.replace("/var/lib/shim-signed/mok/MOK.der", "MOK.der"),
        "dotdot": MOK.replace("/var/lib/shim-signed/mok/MOK.der", "/var/lib/../../etc/MOK.der"),
        "shell": MOK.replace("/var/lib/shim-signed/mok/MOK.der", '"/var/lib/$(reboot)/MOK.der"'),
        "same": MOK.replace("/var/lib/shim-signed/mok/MOK.der", "/var/lib/shim-signed/mok/MOK.priv"),
        "missing": '      secure_boot:\n        mok_certificate: /var/lib/shim-signed/mok/MOK.der\n',
        "unknown": MOK + "        mok_password: /x\n",
    }
    lines = _with(MOK).splitlines()
    cert_line = next(i for i, line in enumerate(lines, 1) if "mok_certificate" in line)
    for name, block in cases.items():
        errors, _ = _errors(_with(block))
        assert len(errors) == 1, (name, errors)
        error = errors[0]
        assert "secure_boot" in error.path, (name, error.path)
        assert error.line in (cert_line - 1, cert_line, cert_line + 1, cert_line + 2), (name, error.line)
        assert error.column >= 1
    errors, _ = _errors(_with(cases["relative"]))
    assert "absolute path of the file on the node" in errors[0].message
    errors, _ = _errors(_with(cases["dotdot"]))
    assert "'..'" in errors[0].message
    errors, _ = _errors(_with(cases["missing"]))
    assert "missing required key 'mok_signing_key'" in errors[0].message


def test_a_private_key_pasted_into_the_spec_is_refused_and_never_echoed(tmp_path):
    body = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7secretmaterial"
    block = MOK.replace("/var/lib/shim-signed/mok/MOK.priv", f'"-----BEGIN PRIVATE KEY----- {body}"')
    spec = tmp_path / "fleet.yaml"
    spec.write_text(_with(block))
    for fmt in ("text", "json", "github", "sarif"):
        out = CliRunner().invoke(app, ["validate", str(spec), "--format", fmt])
        assert out.exit_code == 1, out.output
        assert "mok_signing_key" in out.output
        assert body[:12] not in out.output and "BEGIN PRIVATE" not in out.output, (fmt, out.output)
    text = CliRunner().invoke(app, ["validate", str(spec)]).output
    assert "never goes in the spec" in text and "fleet.yaml:" in text
