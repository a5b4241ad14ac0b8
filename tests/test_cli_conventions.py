"""The conventions operators bring (issue #28 item 8): ``--version``, ``-h`` beside
``--help`` in every command, and ``NO_COLOR`` (https://no-color.org/) switching colour off
even where colour is forced."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from fleetspec import __version__
from tests.conftest import EXAMPLES

COLOUR = re.compile(r"\x1b\[[0-9;]*(3[0-7]|9[0-7]|38;)[0-9;]*m")


def fleetspec(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fleetspec.cli", *args], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=120)


def test_version_flag() -> None:
    done = fleetspec("--version")
    assert done.returncode == 0 and done.stdout.strip() == __version__


def test_h_is_help_everywhere() -> None:
    for args in (["-h"], ["plan", "-h"], ["state", "show", "-h"], ["lab", "up", "-h"]):
        done = fleetspec(*args)
        assert done.returncode == 0 and done.stdout.startswith("Usage:"), (args, done.stderr)


def test_no_color_wins_over_forced_colour(tmp_path) -> None:
    args = ("plan", str(EXAMPLES / "quickstart.yaml"), "--state", str(tmp_path))
    assert COLOUR.search(fleetspec(*args, FORCE_COLOR="1").stdout)  # the check can fail
    assert not COLOUR.search(fleetspec(*args, FORCE_COLOR="1", NO_COLOR="1").stdout)


def test_one_format_spelling_and_json_is_a_deprecated_hidden_alias(tmp_path) -> None:
    import json

    for args in (["state", "list"], ["state", "show", "quickstart"]):
        new = fleetspec(*args, "--state", str(tmp_path), "--format", "json")
        assert new.returncode == 0 and json.loads(new.stdout) and "deprecated" not in new.stderr, new.stderr
        old = fleetspec(*args, "--state", str(tmp_path), "--json")
        assert old.returncode == 0 and json.loads(old.stdout) == json.loads(new.stdout)
        assert "--json is deprecated: use --format json" in old.stderr
        assert "--json" not in fleetspec(*args, "-h").stdout  # hidden


def test_quiet_and_verbose_on_the_root_command() -> None:
    plan = ("plan", str(EXAMPLES.parent / "tests/plan/specs/driver-bump.yaml"), "--base",
            str(EXAMPLES / "quickstart.yaml"))
    quiet = fleetspec("-q", *plan)
    assert quiet.returncode == 0 and quiet.stdout.strip().splitlines() == [
        "Plan for fleet quickstart against spec " + str(EXAMPLES / "quickstart.yaml") + ": 11 change(s), 8 of them "
        "on nodes; most disruptive: drain-reboot; modelled rollout 1 h 04 min"], quiet.stdout
    default, verbose = fleetspec(*plan), fleetspec("--verbose", *plan)
    assert "waves apply would run" in default.stdout and "--- node:h100-[001-008]" not in default.stdout
    assert "--- node:h100-[001-008] (update, 8 nodes)" in verbose.stdout  # the before and after too
    museum = str(EXAMPLES / "museum.yaml")
    assert "warning" in fleetspec("validate", museum).stderr.replace("warning(s)", "")
    quiet = fleetspec("--quiet", "validate", museum)
    assert quiet.returncode == 0 and quiet.stderr.strip() == "0 error(s), 2 warning(s)"
    assert fleetspec("-q", "-v", "version").returncode == 64


def test_shell_completion_is_on_and_completes_lazy_commands_and_options() -> None:
    as_installed = "from fleetspec.cli import app; app(prog_name='fleetspec')"  # the console script's name

    def complete(words: str) -> list[str]:
        env = {**os.environ, "_FLEETSPEC_COMPLETE": "complete_bash", "COMP_WORDS": words,
               "COMP_CWORD": str(len(words.split()) - 1)}
        done = subprocess.run([sys.executable, "-c", as_installed], capture_output=True, text=True, env=env,
                              timeout=120)
        assert done.returncode == 0, done.stderr
        return done.stdout.split()

    assert complete("fleetspec pl") == ["plan"]
    assert complete("fleetspec state s") == ["show"]  # a lazy sub-app
    assert {"--format", "--forks"} <= set(complete("fleetspec plan --for"))
    script = subprocess.run([sys.executable, "-c", as_installed, "--show-completion", "bash"], capture_output=True,
                            text=True, timeout=120)
    assert script.returncode == 0 and "_fleetspec_completion" in script.stdout
