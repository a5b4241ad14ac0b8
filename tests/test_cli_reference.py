"""docs/cli.md is the command reference the commands themselves define (issue #44 item 2):
it is what ``python -m fleetspec.cli_reference`` writes now, and every command,
sub-command and option that ``--help`` prints has its place in it."""

from __future__ import annotations

import re

from typer.testing import CliRunner

from fleetspec.cli import COMMANDS, app
from fleetspec.cli_reference import REGENERATE, reference
from tests.conftest import ROOT

DOC = ROOT / "docs" / "cli.md"
runner = CliRunner()


def test_docs_cli_md_is_what_the_commands_define() -> None:
    written = DOC.read_text() if DOC.exists() else ""
    assert written == reference(), f"docs/cli.md is out of date with the commands: run `{REGENERATE}`"


def _help(*path: str) -> str:
    done = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "200", "NO_COLOR": "1"})
    assert done.exit_code == 0, done.output
    return done.output


def _listed(help_text: str, heading: str) -> list[str]:
    """The first word of each line under ``heading:`` in plain click help."""
    section = help_text.split(f"\n{heading}:\n", 1)
    if len(section) == 1:
        return []
    words = []
    for line in section[1].split("\n\n", 1)[0].splitlines():
        if line.startswith("  ") and not line.startswith("   "):
            words.append(line.split()[0].rstrip(","))
    return words


def test_every_command_and_option_help_prints_is_in_the_reference() -> None:
    doc = DOC.read_text()
    sections = dict(re.findall(r"^#{2,4} (fleetspec(?: [\w-]+)*)\n(.*?)(?=^#{2,4} fleetspec|\Z)", doc, re.M | re.S))
    paths: list[tuple[str, ...]] = [()]
    assert set(_listed(_help(), "Commands")) >= set(COMMANDS) - {"version"}  # every lazy command is listed
    seen = 0
    while paths:
        path = paths.pop()
        text = _help(*path)
        name = " ".join(("fleetspec", *path))
        assert name in sections, f"docs/cli.md has no section for '{name}': run `{REGENERATE}`"
        for option in _listed(text, "Options"):
            assert f"`{option}" in sections[name] or f" {option}" in sections[name], (name, option)
        paths += [(*path, sub) for sub in _listed(text, "Commands")]
        seen += 1
    assert seen == len(sections) and seen >= 30
