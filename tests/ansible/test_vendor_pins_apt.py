"""The rendered pins and sources against repositories generated from the vendors' published
packages (``fleetspec/lab/vendor_packages.yaml``, the evidence table of docs/packaging.md),
resolved by real apt. Those repositories are not made by ``fleetspec.packages``: they carry
what NVIDIA, Canonical and AMD publish, awkward parts included (580's unsuffixed fabric
manager beside Canonical's ``-580`` builds, the 0ubuntu1 -> 1ubuntu1 revision change, builds
newer than the pins, cuDNN's meta chain, rocprofiler-sdk's own version shape, the graphics
repository), so a renderer that drifts from the evidence fails here."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from fleetspec.compile.ir import Fleet, StackTuple
from fleetspec.lab.repo import build_repo, evidence_standins
from fleetspec.render.ansible import render_ansible, render_pins
from tests.ansible.aptsim import AptRoot
from tests.ansible.fleets import lab
from tests.conftest import unavailable

CUDA_REPO = "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/x86_64/"
UBUNTU = "http://archive.ubuntu.com/ubuntu/"


@pytest.fixture(autouse=True)
def _apt_tools() -> None:
    if shutil.which("apt-get") is None or shutil.which("apt-ftparchive") is None:
        unavailable("needs apt-get and apt-ftparchive (Debian/Ubuntu: apt, apt-utils)")


# Tuples of published builds: NVIDIA's CUDA 12.8.1 image (cuDNN 9.8.0.87, NCCL 2.25.1) on the
# 580.95.05 driver; ROCm 7.0.2 with its amdgpu 30.10.2 (amdgpu-install 7.0.2).
HOPPER = StackTuple("hopper-cu12", "nvidia", driver="580.95.05", cuda="12.8.1", cudnn="9.8.0.87", nccl="2.25.1")
ROCM = StackTuple("cdna3-rocm7", "amd", rocm="7.0.2", rccl="2.26.6", amdgpu="30.10.2")
ROCM71 = replace(ROCM, rocm="7.1.0", rccl="2.27.7", amdgpu=None)


@pytest.fixture(scope="module")
def repos(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """{repository URL: a flat repository of what the evidence shows it publishes}."""
    tmp = tmp_path_factory.mktemp("vendor")
    return {url: build_repo(pkgs, tmp / f"repo{i}") for i, (url, pkgs) in enumerate(evidence_standins().items())
            if url != "installed"}


def rendered(fleet: Fleet, stack: str) -> tuple[str, list[str], list[str]]:
    """The stack's .pref, its .list lines and the URLs of the apt sources rendered for it."""
    files = {str(p): t for p, t in render_ansible(fleet).items()}
    pins = {p.name: t for p, t in render_pins(fleet).items()}
    group = yaml.safe_load(files[f"ansible/group_vars/stack_{stack.replace('-', '_')}.yml"])
    urls = [s["uri"].replace("{{ fleetspec_cuda_repo_arch }}", "x86_64") for s in group["fleetspec_apt_sources"]]
    return pins[f"{stack}.pref"], pins[f"{stack}.list"].split(), urls


def node_apt(tmp: Path, repos: dict[str, Path], urls: list[str]) -> AptRoot:
    """A node with the rendered vendor sources and Ubuntu's archive; a rendered URL that no
    evidence shows is a repository that does not exist (apt would 404 on it)."""
    missing = [u for u in urls if u not in repos]
    assert not missing, f"rendered apt sources that no published artefact shows: {missing}"
    return AptRoot(tmp, [repos[u] for u in urls] + [repos[UBUNTU]])


def installed(*urls: str, names: set[str] | None = None, versions: set[str] | None = None) -> list:
    """Evidence packages a node has installed (from the given repositories, filtered)."""
    found = [p for u in urls for p in evidence_standins()[u]]
    return [p for p in found if (names is None or p.name in names) and (versions is None or p.version in versions)]


def test_580_fabric_manager_and_imex_are_the_unsuffixed_names_nvidia_publishes(repos, tmp_path):
    """Item 1: `nvidia-fabricmanager-580` is only a virtual package in NVIDIA's repository
    (and Canonical's real one is another build): the pin names nvidia-fabricmanager."""
    fleet = lab(HOPPER, ROCM)
    pref, specs, urls = rendered(fleet, HOPPER.name)
    apt = node_apt(tmp_path, repos, urls)
    apt.preferences(pref)
    done, moves = apt.simulate(specs)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "nvidia-fabricmanager=580.95.05-1" in specs
    assert moves["nvidia-fabricmanager"][1] == "580.95.05-1" and "nvidia-fabricmanager-580" not in moves
    # GB200 tray: IMEX, unsuffixed too
    gb = lab(replace(HOPPER, name="gb200-cu12"), ROCM, nvidia_gpu="gb200")
    pref, specs, urls = rendered(gb, "gb200-cu12")
    apt.preferences(pref)
    done, moves = apt.simulate(specs)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "nvidia-imex=580.95.05-1" in specs
    assert moves["nvidia-imex"][1] == "580.95.05-1"


def test_570_tools_keep_the_branch_in_the_name():
    from fleetspec.packages import driver_family

    published = {(p.name, p.version) for p in evidence_standins()[CUDA_REPO]}
    family = driver_family("570.172.08", "ubuntu-24.04", "open")
    for name in ("nvidia-fabricmanager-570", "nvidia-imex-570", "libnvidia-nscq-570"):
        assert (name, family[name]) in published


def test_a_570_stack_installs_its_family_and_its_branch_named_fabric_manager(repos, tmp_path):
    """Done-when of #24 (a museum-like fleet's 570 stack): the 570.172.08 family at NVIDIA's
    0ubuntu1 and nvidia-fabricmanager-570 at -1 resolve beside 580's unsuffixed tools and
    Canonical's -580 builds; nothing of the 580 family comes with it."""
    stack = replace(HOPPER, name="hopper-570", driver="570.172.08")
    pref, specs, urls = rendered(lab(stack, ROCM), stack.name)
    apt = node_apt(tmp_path, repos, urls)
    apt.preferences(pref)
    done, moves = apt.simulate(specs)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "nvidia-fabricmanager-570=570.172.08-1" in specs
    assert moves["nvidia-fabricmanager-570"][1] == "570.172.08-1"
    assert {n: to for n, (_, to) in moves.items() if n.endswith("-570") or n.endswith("-570-open")} == dict.fromkeys(
        ("nvidia-driver-570-open", "nvidia-dkms-570-open", "nvidia-kernel-source-570-open", "nvidia-utils-570",
         "libnvidia-compute-570", "nvidia-kernel-common-570", "nvidia-firmware-570", "nvidia-compute-utils-570",
         "libnvidia-decode-570", "libnvidia-encode-570", "libnvidia-extra-570", "libnvidia-fbc1-570",
         "libnvidia-gl-570", "xserver-xorg-video-nvidia-570"), "570.172.08-0ubuntu1") | {
        "nvidia-fabricmanager-570": "570.172.08-1"}
    assert not [n for n in moves if "-580" in n or n == "nvidia-fabricmanager"]


def test_the_driver_revision_follows_the_build_0ubuntu1_then_1ubuntu1(repos, tmp_path):
    """Item 2: 580.126.20 is published at 1ubuntu1; the rendered pins name it, and the
    upgrade from 580.95.05 (0ubuntu1) moves the whole family, the fabric manager with it."""
    new = replace(HOPPER, driver="580.126.20")
    pref, specs, urls = rendered(lab(new, ROCM), new.name)
    apt = node_apt(tmp_path, repos, urls)
    apt.installed(installed(CUDA_REPO, versions={"580.95.05-0ubuntu1", "580.95.05-1"}))
    apt.preferences(pref)
    done, moves = apt.simulate(specs)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "nvidia-driver-580-open=580.126.20-1ubuntu1" in specs
    assert "nvidia-fabricmanager=580.126.20-1" in specs
    assert moves["libnvidia-gl-580"] == ("580.95.05-0ubuntu1", "580.126.20-1ubuntu1")
    assert moves["nvidia-fabricmanager"] == ("580.95.05-1", "580.126.20-1")
    # Nothing of the family at the newer 580.159.03 the repository also carries.
    assert not [n for n, (_, to) in moves.items() if to.startswith("580.159.03")]


def test_the_museums_580_95_to_580_173_upgrade_moves_the_family_and_the_tools_at_1ubuntu1(repos, tmp_path):
    """Done-when of #24: the museum's blackwell-cu13 stack (580.173.02) over nodes on
    580.95.05. From 580.159.04 NVIDIA's fabric manager and IMEX carry the driver packages'
    revision (nvidia-fabricmanager=580.173.02-1ubuntu1, nvidia-imex_580.159.04-1ubuntu1):
    a pin at `-1` is "Version not found" on every HGX node and NVL72 tray."""
    for gpu, tool in (("h100-sxm", "nvidia-fabricmanager"), ("gb200", "nvidia-imex")):
        new = replace(HOPPER, name=f"{gpu}-cu12", driver="580.173.02")
        pref, specs, urls = rendered(lab(new, ROCM, nvidia_gpu=gpu), new.name)
        apt = node_apt(tmp_path / gpu, repos, urls)
        apt.installed(installed(CUDA_REPO, versions={"580.95.05-0ubuntu1", "580.95.05-1"}))
        apt.preferences(pref)
        done, moves = apt.simulate(specs)
        assert done.returncode == 0, done.stdout + done.stderr
        assert f"{tool}=580.173.02-1ubuntu1" in specs
        assert moves[tool] == ("580.95.05-1", "580.173.02-1ubuntu1")
        assert moves["nvidia-driver-580-open"] == ("580.95.05-0ubuntu1", "580.173.02-1ubuntu1")
        assert moves["libnvidia-gl-580"] == ("580.95.05-0ubuntu1", "580.173.02-1ubuntu1")
        assert "/^580\\.173\\.02-(1ubuntu1)$/" in pref


def test_a_version_glob_on_the_command_line_takes_the_highest_match_whatever_the_preferences(tmp_path):
    """Why the pins carry per-build revisions and not `name=<build>-*`: apt 2.6 accepts the
    glob, but installs the highest matching version, so Canonical's build of the same
    upstream version wins wherever its revision sorts higher (explicit versions ignore pins)."""
    from fleetspec.lab.repo import StandInPackage

    repo = build_repo([StandInPackage("libnvidia-compute-580", "580.126.20-1ubuntu1"),
                       StandInPackage("libnvidia-compute-580", "580.126.20-2ubuntu0")], tmp_path / "repo")
    apt = AptRoot(tmp_path / "root", repo)
    apt.preferences("Package: /^libnvidia-/\nPin: version /^580\\.126\\.20-(1ubuntu1)$/\nPin-Priority: 1000\n\n"
                    "Package: /^libnvidia-/\nPin: version *\nPin-Priority: -1\n")
    done, moves = apt.simulate(["libnvidia-compute-580=580.126.20-*"])
    assert done.returncode == 0 and moves["libnvidia-compute-580"][1] == "580.126.20-2ubuntu0"


def test_the_lock_does_not_admit_canonicals_build_of_the_same_version(repos, tmp_path):
    """Item 7: Canonical publishes libnvidia-compute-580 580.126.09-0ubuntu0.24.04.2; under a
    580.126.09 stack's .pref a dependency on the unversioned name must not get it at the
    lock's priority (before: `Pin: version 580.126.09-*` admitted it at 1000)."""
    stack = replace(HOPPER, driver="580.126.09")
    pref, specs, urls = rendered(lab(stack, ROCM), stack.name)
    apt = node_apt(tmp_path, repos, urls)
    apt.preferences(pref)
    done, moves = apt.simulate(["libnvidia-compute-580"])
    assert done.returncode == 0, done.stdout + done.stderr
    assert moves["libnvidia-compute-580"][1] != "580.126.09-0ubuntu0.24.04.2"
    assert "/^580\\.126\\.09-(1|1ubuntu1)$/" in pref
    # And NVIDIA's own 580.126.09 is not in these repositories: the exact pin fails, early.
    done, _ = apt.simulate(specs)
    assert done.returncode != 0 and "'580.126.09-1ubuntu1' for 'nvidia-driver-580-open' was not found" in done.stderr


def test_cudnn_installs_what_nvidias_images_install_and_locks_the_meta_chain(repos, tmp_path):
    """Item 3: with a newer cuDNN in the repository, the meta chain (cudnn9-cuda-12 ->
    cudnn9-cuda-12-8, -static at =) is locked too; the pins are the image's two packages."""
    pref, specs, urls = rendered(lab(HOPPER, ROCM), HOPPER.name)
    apt = node_apt(tmp_path, repos, urls)
    apt.preferences(pref)
    done, moves = apt.simulate([s for s in specs if "cudnn" in s])
    assert done.returncode == 0, done.stdout + done.stderr
    assert [s for s in specs if "cudnn" in s] == ["libcudnn9-cuda-12=9.8.0.87-1", "libcudnn9-dev-cuda-12=9.8.0.87-1"]
    assert moves["libcudnn9-headers-cuda-12"][1] == "9.8.0.87-1"
    # A user who asks for the meta package gets the pinned release, chain and all.
    done, moves = apt.simulate(["cudnn9-cuda-12"])
    assert done.returncode == 0, done.stdout + done.stderr
    assert {to for n, (_, to) in moves.items() if "cudnn" in n} == {"9.8.0.87-1"}
    assert {"cudnn9-cuda-12-8", "libcudnn9-static-cuda-12"} <= set(moves)


def test_rocm_702_with_amdgpu_3010_2_installs_from_the_rendered_sources(repos, tmp_path):
    """Items 4 and 5: the graphics repository is rendered (rocdecode -> mesa-amdgpu-va-drivers),
    and the 30.x firmware, versioned apart without an epoch, replaces the 6.4 driver's."""
    pref, specs, urls = rendered(lab(HOPPER, ROCM), ROCM.name)
    apt = node_apt(tmp_path, repos, urls)
    apt.installed(installed("installed"))  # amdgpu-dkms-firmware 1:6.12.12.60404-2202139.24.04
    apt.preferences(pref)
    done, moves = apt.simulate(specs)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "https://repo.radeon.com/graphics/7.0.2/ubuntu" in urls
    assert moves["mesa-amdgpu-va-drivers"][1]
    assert moves["rocprofiler-sdk"][1] == "1.0.0-56~24.04"
    assert moves["amdgpu-dkms-firmware"] == ("1:6.12.12.60404-2202139.24.04", "30.10.2.0.30100200-2226257.24.04")


def test_rocm_702_to_710_upgrade_resolves_from_rocm_apt_71(repos, tmp_path):
    """Item 5: 7.1.0 is served from rocm/apt/7.1; its rocprofiler-sdk (1.0.0-20~24.04) sorts
    below 7.0.2's (1.0.0-56~24.04), so only a lock that covers it moves it (ROCm issue 5590)."""
    pref, specs, urls = rendered(lab(HOPPER, ROCM71), ROCM71.name)
    assert "https://repo.radeon.com/rocm/apt/7.1" in urls
    apt = node_apt(tmp_path, repos, urls)
    apt.installed(installed("https://repo.radeon.com/rocm/apt/7.0.2", "https://repo.radeon.com/graphics/7.0.2/ubuntu"))
    apt.preferences(pref)
    done, moves = apt.simulate(specs)
    assert done.returncode == 0, done.stdout + done.stderr
    assert moves["rocprofiler-sdk"] == ("1.0.0-56~24.04", "1.0.0-20~24.04")
    assert moves["rocm"][1] == "7.1.0.70100-20~24.04"


def test_every_pinned_name_and_version_of_the_tuples_is_published(repos):
    """The drift check in one place: each rendered name=version of these published tuples is
    a package the evidence shows (or marks unconfirmed) in the rendered repositories."""
    published = {(p.name, p.version) for pkgs in evidence_standins().values() for p in pkgs}
    for fleet, stack in ((lab(HOPPER, ROCM), HOPPER.name), (lab(HOPPER, ROCM), ROCM.name),
                         (lab(HOPPER, ROCM71), ROCM71.name)):
        _, specs, _ = rendered(fleet, stack)
        assert [s for s in specs if tuple(s.split("=", 1)) not in published] == []


def test_cuda_toolkit_components_stay_at_the_pinned_releases_versions(repos, tmp_path):
    """Item 12: cuda-toolkit-12-8 depends on its components with `>=`; with a later update of a
    component in the repository (modelled 12.8.94-1 / 12.8.91-1), the components must still
    come at 12.8.1's versions (the published captures), not float to the newest."""
    pref, specs, urls = rendered(lab(HOPPER, ROCM), HOPPER.name)
    apt = node_apt(tmp_path, repos, urls)
    apt.preferences(pref)
    done, moves = apt.simulate(specs)
    assert done.returncode == 0, done.stdout + done.stderr
    assert moves["cuda-toolkit-12-8"][1] == "12.8.1-1"
    assert {n: moves[n][1] for n in ("cuda-nvcc-12-8", "cuda-crt-12-8", "libnvjitlink-12-8", "cuda-cudart-12-8",
                                     "cuda-cccl-12-8")} == {
        "cuda-nvcc-12-8": "12.8.93-1", "cuda-crt-12-8": "12.8.93-1", "libnvjitlink-12-8": "12.8.93-1",
        "cuda-cudart-12-8": "12.8.90-1", "cuda-cccl-12-8": "12.8.90-1"}


def test_the_rdma_user_space_resolves_from_the_distribution_archive(repos, tmp_path):
    """Item 11: an InfiniBand fleet's nodes get rdma-core, libibverbs1 and ibverbs-providers
    (named: libibverbs1 only recommends the provider) from Ubuntu's archive, unpinned."""
    files = {str(p): t for p, t in render_ansible(lab(HOPPER, ROCM)).items()}
    group = yaml.safe_load(files[f"ansible/group_vars/stack_{HOPPER.name.replace('-', '_')}.yml"])
    wanted = group["fleetspec_rdma_userspace"]
    apt = AptRoot(tmp_path, [repos[UBUNTU]])
    done, moves = apt.simulate(wanted)
    assert done.returncode == 0, done.stdout + done.stderr
    assert {n: to for n, (_, to) in moves.items()} == {n: "50.0-2ubuntu0.2" for n in
                                                        ("rdma-core", "libibverbs1", "ibverbs-providers")}


def test_dcgm_is_pinned_per_cuda_major_and_held_below_a_later_release(repos, tmp_path):
    """Item 11: a stack's dcgm: gives DCGM 4 at 1:<release>-1, core and the package for the CUDA
    major the 580 driver reports (13), locked below the later 4.7.0 the repository carries."""
    stack = replace(HOPPER, dcgm="4.5.2")
    pref, specs, urls = rendered(lab(stack, ROCM), stack.name)
    assert [s for s in specs if "datacenter-gpu-manager" in s] == [
        "datacenter-gpu-manager-4-core=1:4.5.2-1", "datacenter-gpu-manager-4-cuda13=1:4.5.2-1"]
    apt = node_apt(tmp_path, repos, urls)
    apt.preferences(pref)
    done, moves = apt.simulate(specs)
    assert done.returncode == 0, done.stdout + done.stderr
    assert moves["datacenter-gpu-manager-4-core"][1] == "1:4.5.2-1"
    # Someone asking for the package by name still gets the pinned release, not 4.7.0.
    done, moves = apt.simulate(["datacenter-gpu-manager-4-cuda13"])
    assert done.returncode == 0 and moves["datacenter-gpu-manager-4-cuda13"][1] == "1:4.5.2-1", done.stdout
