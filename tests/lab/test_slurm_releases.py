"""fleetspec.lab.slurm_releases without starting anything: which release runs a render, which
mirror builds a root, what runs a command inside one."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetspec.lab.slurm_releases import RELEASES, command_prefix, host_mirror, release_for, root_key


@pytest.mark.parametrize(("version", "series"), [
    ("22.05.8", "22.05"), ("23.02.7", "24.11"), ("23.11.10", "24.11"), ("24.11.6", "24.11"),
    ("25.05.3", "26.05"), ("25.11.8", "26.05"), ("26.05.4", "26.05"), ("26.11.0", "26.05"),
])
def test_a_render_runs_on_the_oldest_release_that_reads_it(version: str, series: str) -> None:
    assert release_for(version).series == series


def test_roots_are_keyed_by_suite() -> None:
    keys = {root_key(r) for r in RELEASES.values() if r.suite}
    assert len(keys) == 2
    assert command_prefix(None) == ()
    prefix = command_prefix(Path("/cache/root"))
    assert prefix[:2] == ("unshare", "--mount") and prefix[-1] == "/cache/root"


def test_the_mirror_is_the_one_apt_uses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FLEETSPEC_LAB_MIRROR", raising=False)
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "a.sources").write_text(
        "Types: deb\nURIs: http://mirror.example/debian-security\nSuites: bookworm-security\n\n"
        "Types: deb\nURIs: http://mirror.example/debian/\nSuites: bookworm\n")
    assert host_mirror(tmp_path) == "http://mirror.example/debian"
    (tmp_path / "sources.list").write_text("deb [arch=amd64] http://other.example/debian bookworm main\n")
    assert host_mirror(tmp_path) == "http://other.example/debian"
    monkeypatch.setenv("FLEETSPEC_LAB_MIRROR", "http://set.example/debian")
    assert host_mirror(tmp_path) == "http://set.example/debian"


def test_without_sources_the_mirror_is_debians(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FLEETSPEC_LAB_MIRROR", raising=False)
    assert host_mirror(tmp_path) == "http://deb.debian.org/debian"
