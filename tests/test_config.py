"""The config file for defaults (#28 item 8): allowlisted keys, located errors, no
secrets, precedence command line > environment > file > built-in (fleetspec/config.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
QUICKSTART = ROOT / "examples" / "quickstart.yaml"


def fleetspec(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("FLEETSPEC_") and k != "XDG_CONFIG_HOME"}
    base.update(PYTHONPATH=str(ROOT), HOME=str(cwd / "home"))
    return subprocess.run([sys.executable, "-m", "fleetspec.cli", *args], capture_output=True, text=True,
                          cwd=cwd, env={**base, **env}, timeout=120)


def test_project_file_sets_state_and_format_below_env_and_command_line(tmp_path: Path) -> None:
    (tmp_path / ".fleetspec.toml").write_text('# defaults\nstate = "states"\nformat = "json"\nlock_timeout = 2\n')
    listed = fleetspec(tmp_path, "state", "list")
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout)["location"] == str(tmp_path / "states")  # relative to the file
    env = fleetspec(tmp_path, "state", "list", FLEETSPEC_STATE=str(tmp_path / "from-env"))
    assert json.loads(env.stdout)["location"] == str(tmp_path / "from-env")  # the environment wins
    cli = fleetspec(tmp_path, "state", "list", "--state", str(tmp_path / "cli"), "--format", "table",
                    FLEETSPEC_STATE=str(tmp_path / "from-env"))
    assert cli.returncode == 0 and "no fleet has a state at " + str(tmp_path / "cli") in " ".join(cli.stdout.split())
    assert "gpus" in json.loads(fleetspec(tmp_path, "catalog").stdout)  # a command whose "text" is "table"
    plan = fleetspec(tmp_path, "plan", str(QUICKSTART))
    assert plan.returncode == 0 and json.loads(plan.stdout)["fleet"]
    assert not (tmp_path / "states").exists() or (tmp_path / "states").is_dir()


def test_user_file_under_xdg_config_home(tmp_path: Path) -> None:
    user = tmp_path / "xdg" / "fleetspec"
    user.mkdir(parents=True)
    (user / "config.toml").write_text(f'state = "{tmp_path / "mine"}"\n')
    done = fleetspec(tmp_path, "state", "list", "--format", "json", XDG_CONFIG_HOME=str(tmp_path / "xdg"))
    assert json.loads(done.stdout)["location"] == str(tmp_path / "mine")


def test_bad_files_are_located_errors_and_secrets_are_refused(tmp_path: Path) -> None:
    cases = {
        'format = "json"\n\npassword = "x"\n': ":3: 'password' is not a config key: allowed are state, format, "
                                               "lock_timeout",
        'format = "yaml"\n': ":1: format must be one of text, json, not 'yaml'",
        '\nlock_timeout = -1\n': ":2: lock_timeout must be seconds from 0 to 86400",
        'state = "postgresql://fleet:hunter2@db/fleet"\n': ":1: state holds a password",
        '[format]\nkind = "json"\n': ":1: format is a table",
        'state = \n': ":1: not TOML",
    }
    for text, message in cases.items():
        (tmp_path / ".fleetspec.toml").write_text(text)
        done = fleetspec(tmp_path, "state", "list")
        assert done.returncode == 64 and f"error: {tmp_path / '.fleetspec.toml'}{message}" in done.stderr, done.stderr
        assert "Traceback" not in done.stderr and "hunter2" not in done.stderr
