"""Exit codes (issue 13, item 8): a usage error exits 64 (EX_USAGE) from every command,
so it never shares a code with a result (0 success, 1 error, 2 plan changes)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from fleetspec.cli import app
from fleetspec.exit_codes import USAGE
from tests.conftest import EXAMPLES

runner = CliRunner()
QUICKSTART = str(EXAMPLES / "quickstart.yaml")


def _command_paths(command, prefix=()):
    """Every leaf command of the CLI, as the words that invoke it."""
    subcommands = getattr(command, "commands", None)
    if not subcommands:
        yield prefix
        return
    for name, sub in subcommands.items():
        yield from _command_paths(sub, prefix + (name,))


COMMANDS = sorted(_command_paths(typer.main.get_command(app)))


@pytest.mark.parametrize("words", COMMANDS, ids=" ".join)
def test_an_unknown_option_is_a_usage_error_everywhere(words):
    result = runner.invoke(app, [*words, "--no-such-option"])
    assert result.exit_code == USAGE, result.output


@pytest.mark.parametrize("words", [w for w in COMMANDS if w[0] in ("validate", "plan", "apply", "verify",
                                                                     "render", "partitions")
                                   or w[:1] == ("secrets",)], ids=" ".join)
def test_a_missing_argument_is_a_usage_error(words):
    assert runner.invoke(app, list(words)).exit_code == USAGE


@pytest.mark.parametrize("args", [
    ["nosuchcommand"],
    ["validate", QUICKSTART, "--format", "yaml"],
    ["plan", QUICKSTART, "--canary", "-1"],
    ["plan", QUICKSTART, "--canary", "x"],
    ["plan", QUICKSTART, "--max-unavailable", "0"],
    ["plan", QUICKSTART, "--limit", "x[3-1]"],
    ["apply", QUICKSTART, "--yes", "--max-unavailable", "150%"],
    ["apply", QUICKSTART, "--yes", "--max-unavailable", "-3"],
    ["apply", QUICKSTART, "--yes", "--max-unavailable", "\u0665"],  # an Arabic-Indic 5: not a number here
    ["apply", QUICKSTART, "--yes", "--canary", "-1"],
    ["apply", QUICKSTART, "--yes", "--drain-timeout", "-5"],
    ["apply", QUICKSTART, "--yes", "--drain-timeout", "nan"],
    ["apply", QUICKSTART, "--yes", "--drain-timeout", "inf"],
    ["verify", QUICKSTART],
    ["verify", QUICKSTART, "--local", "--facts", "."],
    ["verify", QUICKSTART, "--facts", ".", "--as", "h100-001"],
    ["verify", QUICKSTART, "--local", "--forks", "0"],
])
def test_out_of_range_and_conflicting_values_are_usage_errors(args, tmp_path):
    result = runner.invoke(app, [*args, "--state", str(tmp_path)] if args[0] in ("plan", "apply") else args)
    assert result.exit_code == USAGE, result.output
    assert "Traceback" not in result.output


def test_the_console_script_exits_64_on_a_typo():
    """'fleetspec plan ...; test $? -ne 1' must not pass on a typo: a real process."""
    proc = subprocess.run([sys.executable, "-m", "fleetspec.cli", "plan", QUICKSTART, "--max-unavailabel", "1"],
                          capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(Path(__file__).resolve().parents[1]), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 64, proc.stderr  # the number README and sysexits.h promise, not the constant
