"""The user-facing docs (README.md, docs/, the rules' pages) as a newcomer meets them
(issue #44 items 1, 2 and 4): no path of the project's own machines, every page reachable from
docs/README.md, every relative link landing on a file and heading that exist."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import ROOT

PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "fleetspec" / "rules" / "docs").glob("*.md")])

# Where the project's developers keep things, which a user's clone does not have: the work
# tree's root (/work/...) and the shared tree of other people's files beside the clone
# (../shared/, shared/brownfield, shared/redfish). A user-facing page cites the public
# source of a real file instead (docs/import.md, docs/bare-metal.md: repository, path,
# commit). /tmp/lab/work/... (a lab's own directory) is a user's path, not one of these.
MACHINE_PATH = re.compile(r"(?<![\w.~/-])/work/|\.\./shared\b|(?<![\w-])shared/(?:brownfield|redfish)\b")
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _rel(page: Path) -> str:
    return str(page.relative_to(ROOT))


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_no_path_of_the_projects_machines(page: Path) -> None:
    found = [f"{_rel(page)}:{n}: {line.strip()}" for n, line in enumerate(page.read_text().splitlines(), 1)
             if MACHINE_PATH.search(line)]
    assert not found, "a user's clone has no such path: cite the public source (repository, path, commit)\n" + \
        "\n".join(found)


def test_the_machine_path_pattern_catches_what_it_is_for() -> None:
    for bad in ("in `/work/shared/brownfield/`", "`../shared/redfish/mockups`", "see shared/brownfield/x"):
        assert MACHINE_PATH.search(bad), bad
    for fine in ("ssh -F /tmp/lab/work/ssh/ssh_config", "results: /shared/fleetspec/results", "a shared state"):
        assert not MACHINE_PATH.search(fine), fine


def test_every_docs_page_is_in_the_index() -> None:
    index = (ROOT / "docs" / "README.md").read_text()
    linked = set(LINK.findall(index))
    missing = [p.name for p in (ROOT / "docs").glob("*.md") if p.name != "README.md" and p.name not in linked]
    assert not missing, f"docs/README.md does not link {missing}"


def _anchors(page: Path) -> set[str]:
    """GitHub's heading ids: lower case, punctuation dropped but '-' and '_', blanks to '-'."""
    headings = re.findall(r"^#{1,6} (.+)$", page.read_text(), re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def test_relative_links_land() -> None:
    broken = []
    for page in sorted({ROOT / "README.md", *(ROOT / "docs").glob("*.md")}):
        text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
        for target in LINK.findall(text):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists():
                broken.append(f"{_rel(page)}: {target}")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
                broken.append(f"{_rel(page)}: {target} (no such heading)")
    assert not broken, broken
