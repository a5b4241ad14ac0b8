"""The rendered pins, proven with apt itself: ``apt-get -s install $(cat S.list)`` under
``S.pref`` on a repository that holds other builds of the same branch and another ROCm
release, as the vendors' repositories do (an older pin, a downgrade, an upgrade, 590+)."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from fleetspec.catalog import load_catalog
from fleetspec.compile.ir import Fleet, StackTuple
from fleetspec.lab.repo import NVLSM_LATER, build_repo, nvlink5_standins, stack_standins
from fleetspec.packages import packages_for
from fleetspec.render.ansible import render_pins
from tests.ansible.aptsim import AptRoot
from tests.ansible.fleets import lab
from tests.conftest import unavailable


@pytest.fixture(autouse=True)
def _apt_tools() -> None:
    if shutil.which("apt-get") is None or shutil.which("apt-ftparchive") is None:
        unavailable("needs apt-get and apt-ftparchive (Debian/Ubuntu: apt, apt-utils)")


NVIDIA = StackTuple("hopper-cu13", "nvidia", driver="580.95.05", cuda="13.0.2", cudnn="9.17.0", nccl="2.28.3")
ROCM = StackTuple("cdna3-rocm7", "amd", rocm="7.0.2", rccl="2.26.6", amdgpu="30.30.3")
NEWER = replace(NVIDIA, driver="580.96.05")  # the build stack_standins publishes beside 580.95.05
R590 = replace(NVIDIA, name="hopper-590", driver="590.48.01", cuda="13.1.0")
B200 = replace(NVIDIA, name="blackwell-cu13")


def repo_for(fleets: list[Fleet], tmp: Path) -> Path:
    """Every family of every stack, at its pin and at a newer build / release."""
    packages = {}
    for fleet in fleets:
        for stack in fleet.stacks:
            gpus = sorted({n.gpu for n in fleet.nodes if n.stack == stack.name}, key=lambda g: g.model)
            for p in stack_standins(stack, fleet.os, gpus):
                packages[(p.name, p.version)] = p
    return build_repo(packages.values(), tmp / "repo")


def pins(fleet: Fleet, stack: str) -> tuple[str, list[str]]:
    files = {p.name: t for p, t in render_pins(fleet).items()}
    return files[f"{stack}.pref"], files[f"{stack}.list"].split()


def family_versions(moves: dict[str, tuple[str | None, str]], prefix: str) -> set[str]:
    return {to for name, (_, to) in moves.items() if name.startswith(prefix)}


@pytest.fixture(scope="module")
def fleets() -> dict[str, Fleet]:
    return {"580": lab(NVIDIA, ROCM), "newer": lab(NEWER, ROCM), "590": lab(R590, ROCM),
            "b200": lab(B200, ROCM, nvidia_gpu="b200")}


@pytest.fixture(scope="module")
def repo(fleets: dict[str, Fleet], tmp_path_factory: pytest.TempPathFactory) -> Path:
    return repo_for(list(fleets.values()), tmp_path_factory.mktemp("pins"))


def test_an_older_driver_pin_fails_without_the_preferences_and_resolves_exactly_with_them(repo, fleets, tmp_path):
    apt = AptRoot(tmp_path, repo)
    pref, specs = pins(fleets["580"], NVIDIA.name)
    done, _ = apt.simulate(specs)
    # What every node saw before: companions at their newest build, apt refuses.
    assert done.returncode != 0 and "held broken packages" in done.stderr
    assert "Depends: libnvidia-gl-580 (= 580.95.05-0ubuntu1) but 580.97.05-0ubuntu1 is to be installed" in done.stdout
    apt.preferences(pref)
    done, moves = apt.simulate(specs)
    assert done.returncode == 0, done.stdout + done.stderr
    wanted = dict(s.split("=", 1) for s in specs)
    assert {n: moves[n][1] for n in wanted} == wanted
    # The companions nobody names (libnvidia-gl-580, nvidia-kernel-source-580-open, ...) too.
    assert family_versions(moves, "libnvidia-gl-580") == {"580.95.05-0ubuntu1"}
    assert {to for name, (_, to) in moves.items() if "nvidia" in name} <= {"580.95.05-0ubuntu1", "580.95.05-1"}
    assert "nvidia-kernel-source-580-open" in moves


def test_a_rollback_downgrades_the_whole_driver_family(repo, fleets, tmp_path):
    apt = AptRoot(tmp_path, repo)
    newer = stack_standins(NEWER, "ubuntu-24.04", [fleets["580"].node("gpu-h100-01").gpu], newer=False)
    apt.installed(newer)
    pref, specs = pins(fleets["580"], NVIDIA.name)
    apt.preferences(pref)
    done, moves = apt.simulate(specs)
    assert done.returncode == 0, done.stdout + done.stderr
    downgraded = {n for n, (old, new) in moves.items() if old == "580.96.05-0ubuntu1" and new == "580.95.05-0ubuntu1"}
    assert {"nvidia-driver-580-open", "libnvidia-gl-580", "nvidia-kernel-common-580", "nvidia-utils-580"} <= downgraded
    assert done.stdout.count("Inst ") == len(moves)


def test_an_upgrade_moves_the_family_up_together(repo, fleets, tmp_path):
    apt = AptRoot(tmp_path, repo)
    apt.installed(stack_standins(NVIDIA, "ubuntu-24.04", [fleets["580"].node("gpu-h100-01").gpu], newer=False))
    pref, specs = pins(fleets["newer"], NEWER.name)
    apt.preferences(pref)
    done, moves = apt.simulate(specs)
    assert done.returncode == 0, done.stdout + done.stderr
    assert family_versions(moves, "libnvidia-") == {"580.96.05-0ubuntu1"}
    assert moves["nvidia-fabricmanager"] == ("580.95.05-1", "580.96.05-1")


def test_a_590_tuple_installs_the_unbranched_names(repo, fleets, tmp_path):
    apt = AptRoot(tmp_path, repo)
    pref, specs = pins(fleets["590"], R590.name)
    assert "nvidia-driver-open=590.48.01-0ubuntu1" in specs and "libnvidia-compute=590.48.01-0ubuntu1" in specs
    assert not [s for s in specs if "-590" in s.split("=")[0]]
    apt.preferences(pref)
    done, moves = apt.simulate(specs)
    assert done.returncode == 0, done.stdout + done.stderr
    assert moves["libnvidia-gl"][1] == "590.48.01-0ubuntu1"


def test_rocm_meta_package_resolves_to_its_release_with_a_newer_release_beside_it(repo, fleets, tmp_path):
    apt = AptRoot(tmp_path, repo)
    pref, specs = pins(fleets["580"], ROCM.name)
    done, _ = apt.simulate(specs)
    assert done.returncode != 0 and "held broken packages" in done.stderr
    assert "Depends: rocm-utils (= 7.0.2.70002-56~24.04) but it is not going to be installed" in done.stdout
    apt.preferences(pref)
    done, moves = apt.simulate(specs)
    assert done.returncode == 0, done.stdout + done.stderr
    assert moves["rocm-utils"][1] == moves["rocm"][1] == "7.0.2.70002-56~24.04"
    assert moves["amdgpu-dkms-firmware"][1] == "30.30.3.0.30300300-2327507.24.04"  # versioned apart, no epoch


def test_the_list_names_what_packages_for_installs_on_every_node_of_the_stack(fleets):
    fleet = fleets["580"]
    _, specs = pins(fleet, NVIDIA.name)
    node = fleet.node("gpu-h100-01")
    assert specs == [p.spec for p in packages_for(NVIDIA, fleet.os, [node.gpu])]
    assert "nvidia-fabricmanager=580.95.05-1" in specs  # HGX H100 8-GPU: NVSwitch


def test_debian_12_names_lock_the_same_way(tmp_path):
    fleet = lab(NVIDIA, ROCM, os="debian-12")
    repo = repo_for([fleet], tmp_path)
    apt = AptRoot(tmp_path / "root", repo)
    pref, specs = pins(fleet, NVIDIA.name)
    assert specs[:2] == ["nvidia-driver-cuda=580.95.05-1", "nvidia-kernel-open-dkms=580.95.05-1"]
    assert apt.simulate(specs)[0].returncode != 0
    apt.preferences(pref)
    done, moves = apt.simulate(specs)
    assert done.returncode == 0, done.stdout + done.stderr
    assert moves["libnvidia-ml1"][1] == moves["nvidia-smi"][1] == "580.95.05-1"
    assert "nvidia-driver" not in moves  # compute-only: not the desktop metapackage


def test_hgx_b200_pins_the_nvlink_subnet_manager_with_a_later_release_beside_it(repo, fleets, tmp_path):
    """NVLink 5: nvlsm (NVIDIA's CUDA repository, versioned by date, not by the driver) is in
    the .list of an HGX B200 stack and locked by the .pref; the repository also carries a
    later nvlsm, which an unversioned install (as NVIDIA's driver container does) would take."""
    nvlsm = load_catalog().nvlink5_packages().nvlsm_version
    pref, specs = pins(fleets["b200"], B200.name)
    assert f"nvlsm={nvlsm}" in specs and "nvidia-fabricmanager=580.95.05-1" in specs
    assert f"Package: nvlsm\nPin: version {nvlsm}\nPin-Priority: 1000" in pref
    assert "nvlsm" not in pins(fleets["580"], NVIDIA.name)[0] + " ".join(pins(fleets["580"], NVIDIA.name)[1])
    apt = AptRoot(tmp_path, repo)
    done, moves = apt.simulate(["nvlsm"])
    assert done.returncode == 0 and moves["nvlsm"][1] == NVLSM_LATER, done.stdout  # the newest, unlocked
    assert moves["libibumad3"][1]  # nvlsm depends on the distribution's libibumad3
    apt.preferences(pref)
    done, moves = apt.simulate(specs)
    assert done.returncode == 0, done.stdout + done.stderr
    assert moves["nvlsm"][1] == nvlsm
    # A node that got the later release (an unversioned install) comes down to the pin.
    apt.installed([p for p in nvlink5_standins(NVLSM_LATER, later=False) if p.name != "infiniband-diags"])
    done, moves = apt.simulate(["nvlsm"])
    assert done.returncode == 0 and moves["nvlsm"] == (NVLSM_LATER, nvlsm), done.stdout
