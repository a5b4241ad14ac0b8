"""The Rich consoles every command prints through: plain (no highlighting), and wide in
pipes and CI logs instead of Rich's 80-column default."""

from __future__ import annotations

import sys

from rich.console import Console


def consoles() -> tuple[Console, Console]:
    """(stdout, stderr) consoles for one command."""
    out = Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 200)
    err = Console(stderr=True, highlight=False, soft_wrap=True, width=None if sys.stderr.isatty() else 200)
    return out, err
