"""The Slurm tests' shared fixture: a real Slurm of a chosen release (fleetspec.lab.slurm_releases)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from fleetspec.lab.slurm import SlurmUnavailable
from fleetspec.lab.slurm_releases import RELEASES, ensure_release_root
from tests.conftest import unavailable


@pytest.fixture(scope="session")
def slurm_release(request: pytest.FixtureRequest) -> Callable[[str], None]:
    """``slurm_release("26.05")`` makes that release's Slurm present (the host's packages, or
    its cached root, built on first use with the build's time on the terminal); a test that
    calls it skips where it cannot be had, and fails under CI (scripts/test provides it)."""
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    ready: set[str] = set()

    def ensure(release: str) -> None:
        if release in ready:
            return
        try:
            ensure_release_root(RELEASES[release], progress=lambda line: reporter and reporter.write_line(line))
        except SlurmUnavailable as exc:
            unavailable(f"real Slurm {release} unavailable: {exc}")
        ready.add(release)

    return ensure
