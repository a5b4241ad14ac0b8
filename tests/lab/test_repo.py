"""Stand-in packages: vendor-shaped names and versions, honest descriptions, real files,
and a reproducible repository. Needs dpkg-deb, apt-ftparchive and gcc, not root."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import pytest

from fleetspec.lab.repo import StandInPackage, build_repo, nccl_code, rocm_int, vendor_standins
from tests.conftest import unavailable

TUPLES = [
    {"driver": "580.95.05", "cuda": "13.0.2", "cudnn": "9.17.0", "nccl": "2.28.3"},
    {"rocm": "7.0.2", "rccl": "2.26.6", "amdgpu": "30.10.2"},
]


@pytest.fixture
def stand_in_tools() -> None:
    if not all(shutil.which(t) for t in ("dpkg-deb", "apt-ftparchive", "gcc")):
        unavailable("dpkg-deb, apt-ftparchive (apt-utils) and gcc are needed to build stand-ins")


needs_tools = pytest.mark.usefixtures("stand_in_tools")


def test_encodings_match_the_vendors() -> None:
    assert nccl_code("2.28.3") == 22803  # as ncclGetVersion on the real H200 node
    assert rocm_int("7.0.2") == "70002"


@needs_tools
def test_vendor_standins_are_named_and_versioned_like_the_real_packages(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("FLEETSPEC_LAB_CACHE", str(tmp_path))
    got = {p.name: p for p in vendor_standins(TUPLES)}
    assert {n: p.version for n, p in got.items()} == {
        "nvidia-driver-580": "580.95.05-0ubuntu1",
        "libnvidia-compute-580": "580.95.05-0ubuntu1",
        "nvidia-fabricmanager": "580.95.05-1",  # unsuffixed from 580
        "cuda-toolkit-13-0": "13.0.2-1",
        "libcudnn9-cuda-13": "9.17.0.0-1",
        "libnccl2": "2.28.3-1+cuda13.0",
        "libnccl-dev": "2.28.3-1+cuda13.0",
        "rocm-core": "7.0.2.70002-56~24.04",
        "rccl": "2.26.6.70002-56~24.04",
        "amdgpu-dkms": "1:30.10.2.30100200-2226257.24.04",
    }
    assert got["nvidia-driver-580"].depends == ("libnvidia-compute-580 (= 580.95.05-0ubuntu1)",)
    assert got["libnccl-dev"].depends == ("libnccl2 (= 2.28.3-1+cuda13.0)",)


@needs_tools
def test_repo_is_reproducible_and_says_stand_in(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("FLEETSPEC_LAB_CACHE", str(tmp_path / "cache"))
    pkgs = vendor_standins(TUPLES)
    one, two = build_repo(pkgs, tmp_path / "one"), build_repo(pkgs, tmp_path / "two")
    names = sorted(p.name for p in one.iterdir())
    assert names == sorted(p.name for p in two.iterdir()) and "Packages" in names and "Release" in names
    assert all((one / n).read_bytes() == (two / n).read_bytes() for n in names)
    stanzas = [s for s in (one / "Packages").read_text().split("\n\n") if s.strip()]
    assert len(stanzas) == len(pkgs)
    assert all("fleetspec test stand-in: not the vendor package" in s for s in stanzas)


@needs_tools
def test_libnccl_standin_is_a_real_library_returning_the_version(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("FLEETSPEC_LAB_CACHE", str(tmp_path / "cache"))
    repo = build_repo([p for p in vendor_standins(TUPLES) if p.name == "libnccl2"], tmp_path / "repo")
    root = tmp_path / "root"
    subprocess.run(["dpkg-deb", "-x", str(repo / "libnccl2_2.28.3-1+cuda13.0_amd64.deb"), str(root)], check=True)
    lib = root / "usr/lib/x86_64-linux-gnu/libnccl.so.2"
    assert lib.is_symlink() and lib.resolve().name == "libnccl.so.2.28.3"
    version = ctypes.c_int()
    assert ctypes.CDLL(str(lib)).ncclGetVersion(ctypes.byref(version)) == 0
    assert version.value == 22803


@needs_tools
def test_rebuild_unpublishes_versions_no_longer_given(tmp_path: Path) -> None:
    old = StandInPackage("libfoo1", "1.0-1", files={"/usr/share/foo": "1.0"})
    new = StandInPackage("libfoo1", "2.0-1", files={"/usr/share/foo": "2.0"})
    build_repo([old, new], tmp_path)
    build_repo([new], tmp_path)
    assert sorted(p.name for p in tmp_path.glob("*.deb")) == ["libfoo1_2.0-1_amd64.deb"]
    assert "Version: 1.0-1" not in (tmp_path / "Packages").read_text()


def test_invalid_packages_are_rejected() -> None:
    for bad in (dict(name="Bad_Name", version="1"), dict(name="ok", version="x1"),
                dict(name="ok", version="1", files={"relative/path": ""}),
                dict(name="ok", version="1", files={"/a/../../etc/passwd": ""})):
        with pytest.raises(ValueError):
            StandInPackage(**bad)
    with pytest.raises(ValueError):
        vendor_standins([{"rccl": "2.26.6"}])
