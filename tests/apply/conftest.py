"""Fixtures for the apply tests: real Slurm binaries, installed when missing."""

from __future__ import annotations

import os

import pytest

from fleetspec.lab.slurm import SlurmUnavailable, ensure_slurm


@pytest.fixture(scope="session")
def slurm_installed() -> None:
    """Debian's slurmctld/slurmd/slurm-client/munge; skip where they cannot be
    installed (not root, no apt), fail under CI where the test script provides them."""
    try:
        ensure_slurm()
    except SlurmUnavailable as exc:
        if os.environ.get("CI"):
            pytest.fail(f"real Slurm is required under CI: {exc}")
        pytest.skip(f"real Slurm unavailable: {exc}")
