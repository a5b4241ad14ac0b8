"""The rendered plugstack.conf read by a real srun: Pyxis is loaded, and required, only
where the package put its plugstack line; a host without it keeps a working srun.

srun loads the SPANK stack before parsing its options, so ``srun --help`` fails exactly
when a required plugin cannot be loaded. The package's directory is moved under a temp
dir; the plugin path in its line points at a file that does not exist.
"""

from __future__ import annotations

import subprocess
from pathlib import Path, PurePosixPath

import pytest

from fleetspec.render.slurm import PYXIS_CONF_GLOB, render_slurm

from . import fleets

pytestmark = [pytest.mark.slurm, pytest.mark.usefixtures("slurm_installed")]


def _srun_help(tmp_path: Path) -> subprocess.CompletedProcess[str]:
    plugstack = render_slurm(fleets.museum())[PurePosixPath("slurm/plugstack.conf")]
    assert PYXIS_CONF_GLOB in plugstack
    (tmp_path / "plugstack.conf").write_text(plugstack.replace(PYXIS_CONF_GLOB, f"{tmp_path}{PYXIS_CONF_GLOB}"))
    (tmp_path / "slurm.conf").write_text(
        f"ClusterName=t\nSlurmctldHost=localhost\nPlugStackConfig={tmp_path}/plugstack.conf\n")
    env = {"PATH": "/usr/bin:/bin", "SLURM_CONF": str(tmp_path / "slurm.conf")}
    return subprocess.run(["srun", "--help"], capture_output=True, text=True, env=env, timeout=30, check=False)


def test_a_host_without_pyxis_keeps_a_working_srun(tmp_path):
    result = _srun_help(tmp_path)
    assert result.returncode == 0, result.stderr


def test_a_host_whose_pyxis_line_cannot_load_fails_loudly(tmp_path):
    share = tmp_path / "usr/share/pyxis"
    share.mkdir(parents=True)
    (share / "pyxis.conf").write_text(f"required {tmp_path}/usr/lib/x86_64-linux-gnu/slurm/spank_pyxis.so\n")
    result = _srun_help(tmp_path)
    assert result.returncode != 0
    assert "spank_pyxis.so" in result.stderr and "Aborting" in result.stderr, result.stderr
