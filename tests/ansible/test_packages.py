"""Package names and exact versions, as the vendors' repositories publish them."""

from __future__ import annotations

import pytest

from fleetspec.compile.ir import StackTuple
from fleetspec.packages import PackageError, kernel_module_flavor, packages_for, slurm_packages
from tests.ansible.fleets import GPUS

HOPPER = StackTuple("hopper-cu13", "nvidia", driver="580.95.05", cuda="13.0.2", cudnn="9.17.0", nccl="2.28.3")
ROCM = StackTuple("cdna3-rocm7", "amd", rocm="7.0.2", rccl="2.26.6", amdgpu="30.30.3")


def specs(pins) -> list[str]:
    return [p.spec for p in pins]


def test_nvidia_tuple_on_ubuntu_2404_names_the_cuda_repository_packages() -> None:
    assert specs(packages_for(HOPPER, "ubuntu-24.04", [GPUS["h100-sxm"]])) == [
        "nvidia-driver-580-open=580.95.05-0ubuntu1",
        "nvidia-dkms-580-open=580.95.05-0ubuntu1",
        "nvidia-utils-580=580.95.05-0ubuntu1",
        "libnvidia-compute-580=580.95.05-0ubuntu1",
        "nvidia-persistenced=580.95.05-0ubuntu1",
        "nvidia-fabricmanager=580.95.05-1",  # unsuffixed from 580 (gpu-driver-container#451)
        "cuda-toolkit-13-0=13.0.2-1",
        "libcudnn9-cuda-13=9.17.0.29-1",  # what NVIDIA's CUDA images install
        "libcudnn9-dev-cuda-13=9.17.0.29-1",
        "libnccl2=2.28.3-1+cuda13.0",
        "libnccl-dev=2.28.3-1+cuda13.0",
    ]


def test_fabric_manager_only_for_nvswitch_boards_and_imex_for_nvl72() -> None:
    four = GPUS["h100-sxm"].__class__("h100-sxm", 4, "nvidia", "hopper", "h100", 80)
    assert not any("fabricmanager" in p.name for p in packages_for(HOPPER, "ubuntu-24.04", [four]))
    fm = [p for p in packages_for(HOPPER, "ubuntu-24.04", [GPUS["h200"]]) if "fabricmanager" in p.name]
    assert fm and fm[0].condition == "nvswitch"
    imex = [p for p in packages_for(HOPPER, "ubuntu-24.04", [GPUS["gb200"]]) if "imex" in p.name]
    assert [p.spec for p in imex] == ["nvidia-imex=580.95.05-1"] and imex[0].condition == "imex"


def test_nvlsm_only_for_hgx_b200_b300_boards() -> None:
    """nvlsm reaches fourth-generation NVSwitches on the 8-GPU HGX B200/B300 baseboards; a
    B200 node of fewer GPUs has no NVSwitch, an HGX H100/H200 switches over PCI."""
    def nvlsm(gpu) -> list[str]:
        return [p.condition for p in packages_for(HOPPER, "ubuntu-24.04", [gpu]) if p.name == "nvlsm"]

    assert nvlsm(GPUS["b200"]) == ["nvlink5"]
    assert nvlsm(GPUS["b200"].__class__("b200", 4, "nvidia", "blackwell", "b200", 180)) == []
    assert nvlsm(GPUS["h200"]) == [] and nvlsm(GPUS["gb200"]) == []


def test_debian_12_uses_the_unbranched_driver_names_and_the_compute_only_set() -> None:
    """#24 item 11: NVIDIA's debian12 repository publishes the compute-only set
    nvidia-driver-cuda (installed as nvidia-driver-cuda=580.159.04-1 with
    nvidia-kernel-open-dkms and libcuda1): nodes get it, not the desktop nvidia-driver."""
    names = specs(packages_for(HOPPER, "debian-12", [GPUS["h100-sxm"]]))
    assert names[:3] == ["nvidia-driver-cuda=580.95.05-1", "nvidia-kernel-open-dkms=580.95.05-1",
                         "libcuda1=580.95.05-1"]
    assert not [n for n in names if n.startswith("nvidia-driver=")]


def test_ubuntu_keeps_the_desktop_metapackage_and_says_why() -> None:
    """No artefact shows a headless set in NVIDIA's Ubuntu repository: today's set, a warning."""
    from fleetspec.packages import compute_only_unconfirmed

    assert packages_for(HOPPER, "ubuntu-24.04", [GPUS["h100-sxm"]])[0].name == "nvidia-driver-580-open"
    why = compute_only_unconfirmed(HOPPER, "ubuntu-24.04", [GPUS["h100-sxm"]])
    assert why is not None and "nvidia-driver-580-open" in why and "headless" in why
    assert compute_only_unconfirmed(HOPPER, "debian-12", [GPUS["h100-sxm"]]) is None
    assert compute_only_unconfirmed(HOPPER, "rocky-9", [GPUS["h100-sxm"]]) is None  # EL: nvidia-driver-cuda


def test_volta_gets_the_proprietary_module_and_cannot_share_with_blackwell() -> None:
    volta = GPUS["a100"].__class__("v100", 8, "nvidia", "volta", "v100", 32)
    assert kernel_module_flavor([volta]) == "proprietary"
    stack = StackTuple("old", "nvidia", driver="580.95.05", cuda="12.8.1")
    assert packages_for(stack, "ubuntu-22.04", [volta])[0].name == "nvidia-driver-580"
    with pytest.raises(PackageError, match="cannot share"):
        kernel_module_flavor([volta, GPUS["b200"]])


def test_rocm_versions_carry_release_number_build_and_distro() -> None:
    assert specs(packages_for(ROCM, "ubuntu-22.04", [GPUS["mi300x"]])) == [
        "amdgpu-dkms=1:6.16.13.30300300-2327507.22.04",
        "rocm-core=7.0.2.70002-56~22.04",
        "rocm=7.0.2.70002-56~22.04",
        "rccl=2.26.6.70002-56~22.04",
    ]


def test_a_tuple_without_cuda_cannot_name_nccl_packages() -> None:
    with pytest.raises(PackageError, match="give cuda"):
        packages_for(StackTuple("x", "nvidia", driver="580.95.05", nccl="2.28.3"), "ubuntu-24.04",
                     [GPUS["h100-sxm"]])


@pytest.mark.parametrize(
    ("stack", "expected"),
    [
        (StackTuple("x", "nvidia", cuda="13.0.2", cudnn="9.99.0"), "libcudnn9-cuda-13=9.99.0.*-1"),
        (StackTuple("x", "nvidia", cuda="12.2.2", cudnn="8.9.5"), "libcudnn8=8.9.5.*-1+cuda12.2"),
        (StackTuple("x", "amd", rocm="6.9.9"), "rocm-core=6.9.9.60909-*~24.04"),
        (StackTuple("x", "amd", rocm="7.0.2", amdgpu="30.10"), "amdgpu-dkms=1:*.30100000-*.24.04"),
    ],
)
def test_unknown_build_numbers_become_version_patterns(stack: StackTuple, expected: str) -> None:
    pins = packages_for(stack, "ubuntu-24.04", [])
    assert expected in specs(pins)
    assert not next(p for p in pins if f"{p.name}={p.version}" == expected).exact


def test_a_four_part_cudnn_version_is_taken_as_given() -> None:
    stack = StackTuple("x", "nvidia", cuda="12.8.1", cudnn="9.99.0.7")
    assert [s for s in specs(packages_for(stack, "ubuntu-24.04", [])) if "cudnn" in s or "toolkit" in s] == [
        "cuda-toolkit-12-8=12.8.1-1", "libcudnn9-cuda-12=9.99.0.7-1", "libcudnn9-dev-cuda-12=9.99.0.7-1"]


def test_unknown_os_is_refused() -> None:
    with pytest.raises(PackageError, match="unsupported node OS"):
        packages_for(HOPPER, "centos-9", [])


def test_an_el_os_never_gets_a_literal_the_catalog_lacks() -> None:
    # CUDA 13.0.2 has apt literals but no EL9 row (#42; the driver 580.95.05 has one since the
    # dnf tests): refused, not derived.
    with pytest.raises(PackageError, match="no published EL9 package literal for cuda 13.0.2"):
        packages_for(HOPPER, "rhel-9", [])


def test_slurm_packages_follow_schedmds_debian_packaging() -> None:
    assert specs(slurm_packages("25.11.8", ["slurm_node", "slurm_controller"])) == [
        "slurm-smd=25.11.8-1", "slurm-smd-client=25.11.8-1",
        "slurm-smd-slurmctld=25.11.8-1", "slurm-smd-slurmd=25.11.8-1",
    ]  # fmt: skip
