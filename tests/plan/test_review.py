"""Plans for review: ``--format markdown`` (a pull-request comment) and ``--base REV``
(a git revision of the spec, as a pipeline on a pull request gives it)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from fleetspec.plan import make_plan
from fleetspec.plan.render_markdown import MARKER, MAX_CHARS, plan_markdown
from tests.plan.conftest import QUICKSTART, SPECS, compiled
from tests.plan.test_cli import run


def test_markdown_comment_has_counts_partitions_reboots_waves_and_folded_changes() -> None:
    result = run(SPECS / "driver-bump.yaml", "--base", QUICKSTART, "--format", "markdown", "--detailed-exitcode")
    assert result.exit_code == 2, result.output
    text = result.stdout
    assert text.startswith(MARKER + "\n### fleetspec plan: fleet `quickstart` against spec ")
    assert "most disruptive: **drain-reboot**" in text
    assert re.search(r"^\| `drain-reboot` \| 8 \| 8 \| drain, upgrade the driver, reboot \|$", text, re.M)
    assert "| partition | drain-reboot |" in text and re.search(r"^\| nvidia-hopper \| 8 \|$", text, re.M)
    assert "#### Reboots: 8 node(s)" in text and "`h100-[001-008]`" in text and "--allow-reboot" in text
    assert re.search(r"^\| nvidia-hopper \| 1 \(canary\) \| 1 \| `h100-001` \|", text, re.M)
    assert "<details><summary><b>drain-reboot</b>: 8 change(s) in 1 row(s)</summary>" in text
    assert "driver 580.95.05 -> 580.126.09" in text and text.count("<details>") == text.count("</details>")


def test_markdown_without_changes_and_with_restart_only() -> None:
    same = run(QUICKSTART, "--base", QUICKSTART, "--format", "markdown", "--detailed-exitcode")
    assert same.exit_code == 0 and "**No changes.**" in same.stdout
    maxtime = run(SPECS / "maxtime.yaml", "--base", QUICKSTART, "--format", "markdown").stdout
    assert "No node reboots." in maxtime and "no waves" in maxtime


def test_markdown_escapes_table_cells_and_fits_a_comment() -> None:
    plan = make_plan(compiled(SPECS / "nodes-added.yaml"), compiled(QUICKSTART))
    huge = type(plan.changes[0])(plan.changes[0].target, plan.changes[0].action, plan.changes[0].disruption,
                                 None, None, "a | pipe <b>and</b> a line\nbreak " + "x" * 100)
    many = [type(huge)(f"kubernetes:ConfigMap/c{i}", huge.action, huge.disruption, None, None, huge.reason)
            for i in range(2000)]
    text = plan_markdown(type(plan)(plan.fleet, (huge, *many), plan.waves, None, None, "spec a"))
    assert "a \\| pipe &lt;b>and&lt;/b> a line break" in text
    assert len(text) <= MAX_CHARS + 200 and "`fleetspec plan --format json` lists all 2001" in text


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A fleet repository with two commits: main has quickstart, HEAD bumps the driver."""
    if shutil.which("git") is None:
        pytest.fail("git is needed for --base REV")
    root = tmp_path / "fleet-repo"
    (root / "fleets").mkdir(parents=True)
    spec = root / "fleets" / "quickstart.yaml"

    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
                       check=True, capture_output=True)

    git("init", "-q", "-b", "main")
    shutil.copy(QUICKSTART, spec)
    git("add", ".")
    git("commit", "-q", "-m", "fleet")
    git("checkout", "-q", "-b", "bump")
    shutil.copy(SPECS / "driver-bump.yaml", spec)
    git("commit", "-q", "-am", "driver bump")
    return spec


def test_base_accepts_a_git_revision_of_the_spec(repo: Path) -> None:
    result = run(repo, "--base", "main", "--format", "json", "--detailed-exitcode")
    assert result.exit_code == 2, result.output
    assert '"base": "main:fleets/quickstart.yaml"' in result.stdout and "drain-reboot" in result.stdout
    assert run(repo, "--base", "HEAD", "--detailed-exitcode").exit_code == 0  # the same revision: no changes
    assert run(repo, "--base", "HEAD~1", "--detailed-exitcode").exit_code == 2


def test_base_revision_errors_are_clear(repo: Path, tmp_path: Path) -> None:
    unknown = run(repo, "--base", "origin/main")
    assert unknown.exit_code == 1 and "neither a file nor a revision" in unknown.output
    assert "fetch-depth: 0" in unknown.output
    outside = tmp_path / "loose.yaml"
    shutil.copy(QUICKSTART, outside)
    assert "not in a git repository" in run(outside, "--base", "main").output


def test_a_spec_the_base_revision_lacks_is_a_new_fleet(repo: Path) -> None:
    new = repo.parent / "new.yaml"
    shutil.copy(QUICKSTART, new)
    result = run(new, "--base", "main", "--format", "json", "--detailed-exitcode")
    assert result.exit_code == 2, result.output
    assert '"base": "nothing (main:fleets/new.yaml does not exist: a new fleet)"' in result.stdout
