"""docs/cli.md: the command reference, written from the commands' own definitions.

Every command and sub-command (the lazily loaded ones too: fleetspec/cli_lazy.py builds
each on lookup), its usage line, its help text, and each argument and option with the
names, value, default and environment variable exactly as ``--help`` prints them (the
same click help records), then the exit codes every command shares. Hidden options and
commands (deprecated spellings) are left out, as ``--help`` leaves them out.

    python -m fleetspec.cli_reference > docs/cli.md

``tests/test_cli_reference.py`` fails when docs/cli.md differs from what this writes.
"""

from __future__ import annotations

import sys
from typing import Any

import typer

from fleetspec import exit_codes
from fleetspec.markdown import cell, code

REGENERATE = "python -m fleetspec.cli_reference > docs/cli.md"

# What each code of fleetspec/exit_codes.py means to a user (README "Exit codes" before #44).
EXIT_CODES: tuple[tuple[int, str], ...] = (
    (exit_codes.OK, "success (`plan`: planned; with `--detailed-exitcode`: no changes)"),
    (exit_codes.ERROR, "an error the command found and explains: invalid spec, drift, failed apply, "
                       "unreadable state, a path it refuses to write"),
    (exit_codes.CHANGES, "with `--detailed-exitcode` only: `plan` found changes, `verify` found drift"),
    (exit_codes.USAGE, "a usage error (`EX_USAGE`, sysexits.h): unknown command or option, missing argument, "
                       "a value out of range (`--canary -1`, `--max-unavailable 150%`, `--limit 'x[3-1]'`), "
                       "a `--limit` that leaves no host, conflicting options; nothing was done"),
)


def _root() -> Any:
    from fleetspec.cli import app

    return typer.main.get_command(app)


def _context(command: Any, name: str, parent: Any = None) -> Any:
    return command.context_class(command, info_name=name, parent=parent, **command.context_settings)


def _anchor(path: str) -> str:
    return path.replace(" ", "-")


def _params(ctx: Any) -> list[str]:
    """Markdown tables of the arguments and options --help lists, in its order."""
    rows: dict[str, list[tuple[str, str]]] = {"argument": [], "option": []}
    for param in ctx.command.get_params(ctx):
        if getattr(param, "hidden", False):
            continue
        record = param.get_help_record(ctx)
        if record is None:  # a click argument without Typer's help record
            record = (param.make_metavar(ctx), "")
        kind = "option" if param.param_type_name == "option" else "argument"
        rows[kind].append(record)
    lines: list[str] = []
    for kind, records in rows.items():
        if not records:
            continue
        lines += ["", f"| {kind} | what it does |", "|---|---|"]
        lines += [f"| {code(names)} | {cell(' '.join(text.split()))} |" for names, text in records]
    return lines


def _help(command: Any) -> list[str]:
    text = (command.help or "").strip()
    return ["", cell_paragraphs(text)] if text else []


def cell_paragraphs(text: str) -> str:
    """Help text as Markdown paragraphs: its words shown as written, its blank lines kept."""
    return "\n\n".join(cell(" ".join(part.split())) for part in text.split("\n\n") if part.strip())


def _section(command: Any, ctx: Any, level: int) -> list[str]:
    path = ctx.command_path
    usage = " ".join([path, *command.collect_usage_pieces(ctx)])
    lines = ["", f"{'#' * level} {path}", "", "```text", usage, "```", *_help(command), *_params(ctx)]
    subcommands = getattr(command, "list_commands", None)
    if subcommands is None:
        return lines
    children = [(name, command.get_command(ctx, name)) for name in subcommands(ctx)]
    children = [(name, child) for name, child in children if child is not None and not child.hidden]
    lines += ["", "| command | what it does |", "|---|---|"]
    lines += [f"| [`{path} {name}`](#{_anchor(f'{path} {name}')}) | {cell(child.get_short_help_str(limit=200))} |"
              for name, child in children]
    for name, child in children:
        lines += _section(child, _context(child, name, ctx), min(level + 1, 4))
    return lines


def reference() -> str:
    """The whole of docs/cli.md."""
    root = _root()
    ctx = _context(root, "fleetspec")
    lines = [
        "# Command reference",
        "",
        "<!-- Generated from the commands' own definitions (what `--help` prints): do not edit.",
        f"     Regenerate with: {REGENERATE}",
        "     tests/test_cli_reference.py fails when this file is out of date. -->",
        "",
        "Every command takes `-h`/`--help`, which prints what its section below says. The exit",
        "codes are the same for every command:",
        "",
        "| code | meaning |",
        "|---|---|",
        *(f"| {value} | {meaning} |" for value, meaning in EXIT_CODES),
        *_section(root, ctx, 2),
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    sys.stdout.write(reference())


if __name__ == "__main__":
    main()
