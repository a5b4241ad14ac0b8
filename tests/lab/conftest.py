"""Session fixtures for real lab nodes (namespaced hosts with sshd) and a stand-in repo.

A machine that cannot host a lab skips these tests with the reason, unless CI is set,
where the same condition fails (tests.conftest.unavailable): CI must exercise the real thing.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import pytest

from fleetspec.compile.ir import StackTuple
from fleetspec.lab import (
    Lab,
    LabNode,
    LabUnavailable,
    StandInPackage,
    build_repo,
    ensure_base,
    ensure_host_packages,
    vendor_standins,
)
from fleetspec.lab.repo import pin_standins
from fleetspec.packages import packages_for, slurm_packages
from tests.conftest import unavailable

# Two tuples, so the repo carries two versions of libnccl2 (up/downgrade paths).
LAB_TUPLES = [
    {"driver": "580.95.05", "cuda": "13.0.2", "cudnn": "9.17.0", "nccl": "2.28.3"},
    {"cuda": "13.0.2", "nccl": "2.27.3"},
    {"rocm": "7.0.2", "rccl": "2.26.6", "amdgpu": "30.10.2"},
]
LAB_NODE_NAMES = ["node-a", "node-b"]
# tests/lab/test_converge.py converges node-a from its bundle with the real roles: a ROCm
# user-space tuple (the third one above, without amdgpu: a lab host has no kernel to build
# a driver for) and a Slurm node's packages: SchedMD's packaging at this release, and
# PMIx's -dev package at Debian 12's version (bookworm archive: libpmix-dev
# 4.2.2-1+deb12u1), as stand-ins of exactly the pinned names.
LAB_SLURM = "25.11.8"
LAB_CONVERGE_STACK = StackTuple("cdna3-rocm7", "amd", rocm="7.0.2", rccl="2.26.6")


def lab_unavailable(reason: str) -> NoReturn:
    """Skip locally, fail in CI where the lab must work."""
    unavailable(f"lab unavailable: {reason}")


def lab_mode() -> str:
    return os.environ.get("FLEETSPEC_LAB_MODE", "nspawn")


@pytest.fixture(scope="session")
def lab_base() -> Path:
    """The cached bookworm base rootfs (built once per machine, ~16 s), on a machine that
    can host a lab: root, namespaces (and nspawn), the host packages. Every lab fixture
    starts from it, so none repeats these checks."""
    if os.geteuid() != 0:
        lab_unavailable("needs root (network namespaces, overlay mounts, nspawn)")
    problem = namespaces_problem()
    if problem:
        lab_unavailable(problem)
    try:
        ensure_host_packages()
        return ensure_base()
    except (LabUnavailable, subprocess.CalledProcessError, OSError) as exc:
        lab_unavailable(str(exc))
        raise  # unreachable: lab_unavailable raises


@pytest.fixture(scope="session")
def lab_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A flat apt repo with stand-ins for LAB_TUPLES."""
    vendor = vendor_standins(LAB_TUPLES)
    have = {(p.name, p.version) for p in vendor}
    pins = [(p.name, p.version) for p in (*packages_for(LAB_CONVERGE_STACK, "ubuntu-24.04", []),
                                          *slurm_packages(LAB_SLURM, ["slurm_node"]))]
    converge = [p for p in pin_standins(pins) if (p.name, p.version) not in have]
    pmix = [StandInPackage("libpmix-dev", "4.2.2-1+deb12u1")]
    return build_repo(vendor + converge + pmix, tmp_path_factory.mktemp("lab-repo"))


def namespaces_problem() -> str | None:
    """Why this kernel/container cannot give a node its own mount+network namespaces, if so."""
    probe = subprocess.run(["unshare", "--mount", "--net", "--pid", "--fork", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"cannot create namespaces: {probe.stderr.strip()}"
    if lab_mode() == "nspawn":
        nspawn = subprocess.run(["systemd-nspawn", "--version"], capture_output=True, text=True)
        if nspawn.returncode != 0:
            return f"systemd-nspawn does not run: {nspawn.stderr.strip()}"
    return None


@pytest.fixture(scope="session")
def lab(lab_base: Path, lab_repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """A running lab of LAB_NODE_NAMES serving lab_repo; torn down at session end."""
    lab = Lab(tmp_path_factory.mktemp("lab"), lab_base, repo_dir=lab_repo, mode=lab_mode())
    lab.up(LAB_NODE_NAMES)
    try:
        yield lab
    finally:
        lab.down()


@pytest.fixture(scope="session")
def lab_nodes(lab: Lab) -> list[LabNode]:
    """The running nodes of the session lab."""
    return list(lab.nodes)
