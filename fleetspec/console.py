"""The Rich consoles every command prints through: plain (no highlighting, no emoji
codes: ``museum.yaml:100:18`` and a path with ``:fire:`` print as written), as wide as
``COLUMNS`` says, and wide in pipes and CI logs instead of Rich's 80-column default."""

from __future__ import annotations

import os
import sys

from rich.console import Console

PIPE_WIDTH = 200


def _width(stream) -> int | None:  # type: ignore[no-untyped-def]
    """None lets Rich use COLUMNS or the terminal's size; a pipe without COLUMNS gets PIPE_WIDTH."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    return None if stream.isatty() else PIPE_WIDTH


def consoles() -> tuple[Console, Console]:
    """(stdout, stderr) consoles for one command."""
    out = Console(highlight=False, emoji=False, soft_wrap=True, width=_width(sys.stdout))
    err = Console(stderr=True, highlight=False, emoji=False, soft_wrap=True, width=_width(sys.stderr))
    return out, err
