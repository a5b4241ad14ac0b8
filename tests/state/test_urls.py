"""State URLs in messages (issue 27, items 8 and 10): a password in the userinfo or in a
``password``/``sslpassword`` query parameter is never printed; a URL ``urlsplit`` cannot
parse is a worded error, not a traceback. Through the real CLI, against a port where no
server listens (the driver's own error is printed too)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from fleetspec.cli import app
from fleetspec.state.urls import redact_url

SECRETS = ("hunter2", "keypass", "pw%40x", "pw@x")


@pytest.mark.parametrize(("url", "shown"), [
    ("postgresql://fs:hunter2@db/fleet", "postgresql://fs:***@db/fleet"),
    ("postgresql://fs@db/fleet?password=hunter2&sslmode=require", "postgresql://fs@db/fleet?password=***&sslmode=require"),
    ("postgresql://db/fleet?sslmode=verify-full&sslpassword=keypass", "postgresql://db/fleet?sslmode=verify-full&sslpassword=***"),
    ("postgres://fs:pw%40x@[::1/fleet?Password=hunter2", "postgres://fs:***@[::1/fleet?Password=***"),
    ("postgresql://db/fleet", "postgresql://db/fleet"),
])
def test_every_password_of_a_url_is_masked(url: str, shown: str) -> None:
    assert redact_url(url) == shown


@pytest.mark.parametrize("url", [
    "postgresql://fs:hunter2@127.0.0.1:1/fleet?sslpassword=keypass",
    "postgresql://fs@127.0.0.1:1/fleet?password=hunter2&sslpassword=keypass",
    "postgresql://fs:pw%40x@127.0.0.1:1/fleet",
])
def test_state_commands_never_print_a_password_of_the_url(url: str) -> None:
    for args in (["state", "list", "--state", url], ["state", "show", "f", "--state", url]):
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 1, result.output
        assert "cannot open the state database" in result.output
        assert not any(s in result.output for s in SECRETS), result.output
        assert result.exception is None or isinstance(result.exception, SystemExit)


def test_a_url_with_an_unclosed_bracket_is_an_error_not_a_traceback() -> None:
    result = CliRunner().invoke(app, ["state", "list", "--state", "postgresql://fs:hunter2@[::1/fleet"])
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit), result.exception
    assert "is not a valid URL" in result.output and "[::1]" in result.output
    assert "hunter2" not in result.output
