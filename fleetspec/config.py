"""User defaults from a config file: ``./.fleetspec.toml`` when the working directory has
one, else ``$XDG_CONFIG_HOME/fleetspec/config.toml`` (``~/.config/...`` when unset). One
file is read, never both; none is fine.

Precedence, as Click and Terraform users expect: command line > environment > this file >
built-in default. The file is a trust boundary, refused by default and allowed by this
list of top-level keys, each with a reason:

- ``state``: where the state lives (a directory, ``file://`` or ``postgresql://`` URL), so
  a workstation need not export $FLEETSPEC_STATE in every shell; a relative directory is
  relative to the config file. It comes after $FLEETSPEC_STATE and $FLEETSPEC_STATE_DIR.
  A URL with a password is refused: a config file is not a secret store (use
  ``~/.pgpass`` or $PGPASSWORD, which libpq reads).
- ``format``: ``text`` or ``json``, the output of every command that has ``--format`` and
  both spellings (``text`` means each command's human default: text or table).
- ``lock_timeout``: seconds plan and apply wait for the state's lock (0 to 86400).

Nothing else (no secrets, no spec values, no command-specific flags): an unknown key, a
table, or a wrong type is an error naming ``file:line``. Read with ``tomllib`` only when a
file exists, so startup stays fast (tests/test_startup_imports.py).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, NamedTuple

MAX_BYTES = 64 * 1024
PROJECT_FILE = ".fleetspec.toml"
MAX_LOCK_TIMEOUT = 86400
FORMATS = ("text", "json")
# Commands whose --format takes json, and what "text" means for each (their default).
FORMAT_COMMANDS = ("validate", "partitions", "catalog", "plan", "apply", "verify", "health", "state list",
                   "state show", "baremetal plan")
KEYS = ("state", "format", "lock_timeout")
LOCK_COMMANDS = ("plan", "apply")


class ConfigError(Exception):
    """The config file is unreadable or holds something not allowed; the message names file:line."""


class Config(NamedTuple):  # not a dataclass: `version` and `validate` import this (startup time)
    path: Path | None = None
    state: str | None = None
    format: str | None = None
    lock_timeout: float | None = None

    def default_map(self) -> dict[str, Any]:
        """Click's ``default_map`` for the root context: below the command line and the
        environment, above the built-in defaults."""
        found: dict[str, Any] = {}
        if self.format == "json":
            for name in FORMAT_COMMANDS:
                *group, command = name.split()
                target = found
                for part in group:
                    target = target.setdefault(part, {})
                target.setdefault(command, {})["format"] = "json"
        if self.lock_timeout is not None:
            for name in LOCK_COMMANDS:
                found.setdefault(name, {})["lock_timeout"] = self.lock_timeout
        return found


_LOADED: list[Config] = [Config()]


def config_path(cwd: Path | None = None) -> Path | None:
    """The file that would be read, or None."""
    project = (cwd or Path.cwd()) / PROJECT_FILE
    if project.is_file():
        return project
    try:
        base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    except RuntimeError:  # no $HOME and no password entry: no user file
        return None
    user = Path(base) / "fleetspec" / "config.toml"
    return user if user.is_file() else None


def load(path: Path | None) -> Config:
    """Read and check ``path`` (None: the built-in defaults) and remember it for `loaded`."""
    found = Config() if path is None else _parse(path)
    _LOADED[0] = found
    return found


def loaded() -> Config:
    """What the command line's root loaded (the built-in defaults when nothing was)."""
    return _LOADED[0]


def _parse(path: Path) -> Config:
    import tomllib

    from fleetspec.safe_io import UnsafePathError, read_bounded

    try:
        text = read_bounded(path, MAX_BYTES).decode("utf-8")
    except (OSError, UnsafePathError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read the config file ({exc})") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        line = re.search(r"line (\d+)", str(exc))
        raise ConfigError(f"{path}:{line.group(1) if line else 1}: not TOML: {exc}") from None

    def where(key: str) -> str:
        for number, row in enumerate(text.splitlines(), 1):
            if re.match(rf"\s*(\[\s*)?[\"']?{re.escape(key)}[\"']?\s*[=\].]", row):
                return f"{path}:{number}"
        return str(path)

    for key, value in data.items():
        if key not in KEYS:
            raise ConfigError(f"{where(key)}: {key!r} is not a config key: allowed are {', '.join(KEYS)} "
                              "(anything else is an option of one command: give it on the command line)")
        if isinstance(value, dict):
            raise ConfigError(f"{where(key)}: {key} is a table: give it as '{key} = ...' at the top")
    state = data.get("state")
    if state is not None:
        if not isinstance(state, str) or not state.strip():
            raise ConfigError(f"{where('state')}: state must be a non-empty string: a directory or URL")
        if re.match(r"postgres(ql)?://[^/@]*:[^/@]*@", state):
            raise ConfigError(f"{where('state')}: state holds a password: a config file is not a secret "
                              "store. Drop it from the URL and use ~/.pgpass or $PGPASSWORD")
        if "://" not in state and not Path(state).expanduser().is_absolute():
            state = str(path.parent / state)
    fmt = data.get("format")
    if fmt is not None and fmt not in FORMATS:
        raise ConfigError(f"{where('format')}: format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    timeout = data.get("lock_timeout")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
                                or not 0 <= timeout <= MAX_LOCK_TIMEOUT):
        raise ConfigError(f"{where('lock_timeout')}: lock_timeout must be seconds from 0 to {MAX_LOCK_TIMEOUT}, "
                          f"not {timeout!r}")
    return Config(path, state, fmt, None if timeout is None else float(timeout))
