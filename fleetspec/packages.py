"""Package names and exact version strings for a stack tuple, as the vendors' apt repositories name them.

Why a module of its own: the playbooks pin with ``apt-get install name=version``, which
takes only the exact Debian version a repository publishes. Those strings carry parts
the spec never states (``-0ubuntu1``, ``+cuda13.0``, cuDNN's build number, ROCm's
``.70002-56~24.04``), so they are derived here, in one place, from the tuple, the node OS
and the GPUs. Pure: no I/O.

Sources of the shapes (checked against published package file names):
- NVIDIA CUDA repository (developer.download.nvidia.com/compute/cuda/repos/<os>/x86_64):
  ``nvidia-driver-580-open_580.95.05-0ubuntu1``, ``libnvidia-compute-580_...-0ubuntu1``,
  ``nvidia-fabricmanager-580_580.105.08-1``, ``cuda-toolkit-13-0_13.0.2-1``,
  ``libcudnn9-cuda-13_9.17.0.29-1``, ``libnccl2_2.28.3-1+cuda13.0``; the debian12 tree
  names the driver without the branch (``nvidia-driver``, ``libcuda1``) at ``<driver>-1``.
- ROCm repository (repo.radeon.com/rocm/apt/<rocm>): ``rocm-core_7.0.2.70002-56~24.04``,
  ``rccl_2.26.6.70002-56~24.04``; amdgpu (repo.radeon.com/amdgpu/<v>/ubuntu):
  ``amdgpu-dkms_1:6.16.13.30300300-2327507.22.04``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from fleetspec.compile.ir import GpuSpec, StackTuple
from fleetspec.versions import version_key

OperatingSystem = Literal["ubuntu-22.04", "ubuntu-24.04", "debian-12"]
SUPPORTED_OS: tuple[str, ...] = ("ubuntu-22.04", "ubuntu-24.04", "debian-12")
# Suffix ROCm uses per distribution. AMD documents Debian 12 as installing the jammy packages.
_ROCM_DISTRO = {"ubuntu-22.04": "22.04", "ubuntu-24.04": "24.04", "debian-12": "22.04"}

# cuDNN 9 publishes a fourth (build) field that the spec's three-part version omits.
# From NVIDIA's cuDNN release labels (cudnn-9.x.y -> 9.x.y.b).
CUDNN_BUILDS: dict[str, int] = {
    "9.10.0": 56, "9.10.1": 4, "9.10.2": 21, "9.11.0": 98, "9.11.1": 4, "9.12.0": 46,
    "9.13.0": 50, "9.13.1": 26, "9.14.0": 64, "9.15.0": 58, "9.15.1": 9, "9.16.0": 29,
    "9.17.0": 29, "9.17.1": 4, "9.18.0": 77, "9.18.1": 3, "9.19.0": 56, "9.19.1": 2,
}  # fmt: skip
# ROCm's Jenkins build id per release (the same on every distribution of a release).
# From repo.radeon.com/rocm/apt/<release>/pool file names.
ROCM_BUILDS: dict[str, int] = {
    "6.3.0": 39, "6.3.1": 48, "6.3.2": 66, "6.3.3": 74, "6.4.0": 47, "7.0.0": 38,
    "7.0.2": 56, "7.1.0": 20, "7.1.1": 38, "7.2.0": 43, "7.2.1": 81, "7.2.3": 90, "7.2.4": 93,
}  # fmt: skip
# amdgpu driver release -> (kernel module version, build id) of amdgpu-dkms.
AMDGPU_BUILDS: dict[str, tuple[str, str]] = {"30.30.3": ("6.16.13", "2327507")}

# The open kernel module does not support these generations; the others default to it
# (NVIDIA's recommendation since R560), and Blackwell and Grace Hopper require it.
_PROPRIETARY_ONLY = frozenset({"maxwell", "pascal", "volta"})
_OPEN_REQUIRED = frozenset({"blackwell", "blackwell-ultra", "grace-hopper", "grace-blackwell"})
# HGX baseboards with NVSwitch (8 GPUs): the nodes run nvidia-fabricmanager.
_HGX_NVSWITCH_MODELS = frozenset({"a100", "a100-sxm", "a800", "h100-sxm", "h800", "h200", "h20", "b200", "b300"})
# Grace-Blackwell rack-scale systems: NVLink switch trays run the fabric manager, the
# compute nodes run IMEX for cross-node NVLink memory.
_IMEX_MODELS = frozenset({"gb200", "gb300"})


class PackageError(ValueError):
    """A tuple that cannot be named as exact packages; ``component`` is the tuple key at fault."""

    def __init__(self, message: str, component: str | None = None) -> None:
        super().__init__(message)
        self.component = component


@dataclass(frozen=True, slots=True)
class PackagePin:
    """One package at its exact repository version.

    ``role`` is the Ansible role whose component this is; ``condition`` names a node
    property the package needs (``nvswitch``, ``imex``) or is None for every node.
    """

    name: str
    version: str
    role: str
    condition: str | None = None

    @property
    def exact(self) -> bool:
        """False for a version pattern (``9.8.0.*-1``): the build number was not known."""
        return "*" not in self.version

    @property
    def spec(self) -> str:
        """What ``apt-get install`` takes: ``name=version``."""
        return f"{self.name}={self.version}"


def packages_for(stack: StackTuple, os: str, gpu_models: Iterable[GpuSpec]) -> list[PackagePin]:
    """Every package of ``stack`` on ``os`` for nodes with these GPUs, in install order."""
    if os not in SUPPORTED_OS:
        raise PackageError(f"unsupported node OS {os!r}; supported: {', '.join(SUPPORTED_OS)}")
    gpus = tuple(gpu_models)
    if stack.vendor == "nvidia":
        return _nvidia(stack, os, gpus)
    return _amd(stack, os)


def _nvidia(stack: StackTuple, os: str, gpus: tuple[GpuSpec, ...]) -> list[PackagePin]:
    pins: list[PackagePin] = []
    if stack.driver:
        pins += _driver(stack.driver, os, gpus)
    if stack.cuda:
        major, minor = _mm(stack.cuda)
        pins.append(PackagePin(f"cuda-toolkit-{major}-{minor}", f"{stack.cuda}-1", "cuda_toolkit"))
    if stack.cudnn:
        if not stack.cuda:
            raise PackageError(f"stack {stack.name}: cuDNN packages are built per CUDA major; give cuda")
        pins.append(PackagePin(*_cudnn(stack.cudnn, stack.cuda), "cudnn"))
    if stack.nccl:
        if not stack.cuda:
            raise PackageError(f"stack {stack.name}: NCCL packages are built per CUDA release; give cuda")
        major, minor = _mm(stack.cuda)
        version = f"{stack.nccl}-1+cuda{major}.{minor}"
        pins += [PackagePin("libnccl2", version, "nccl"), PackagePin("libnccl-dev", version, "nccl")]
    return pins


def _driver(driver: str, os: str, gpus: tuple[GpuSpec, ...]) -> list[PackagePin]:
    branch = str(version_key(driver)[0])
    flavor = kernel_module_flavor(gpus)
    if os == "debian-12":
        version = f"{driver}-1"
        dkms = "nvidia-kernel-open-dkms" if flavor == "open" else "nvidia-kernel-dkms"
        names = ["nvidia-driver", dkms, "libcuda1"]
    else:
        version = f"{driver}-0ubuntu1"
        suffix = "-open" if flavor == "open" else ""
        names = [f"nvidia-driver-{branch}{suffix}", f"nvidia-dkms-{branch}{suffix}",
                 f"nvidia-utils-{branch}", f"libnvidia-compute-{branch}"]  # fmt: skip
    pins = [PackagePin(n, version, "nvidia_driver") for n in names]
    if any(_has_nvswitch(g) for g in gpus):
        pins.append(PackagePin(f"nvidia-fabricmanager-{branch}", f"{driver}-1", "nvidia_driver", "nvswitch"))
    if any(g.model in _IMEX_MODELS for g in gpus):
        pins.append(PackagePin(f"nvidia-imex-{branch}", f"{driver}-1", "nvidia_driver", "imex"))
    return pins


def kernel_module_flavor(gpus: Iterable[GpuSpec]) -> Literal["open", "proprietary"]:
    """``open`` unless a GPU predates Turing; a set that needs both cannot share a driver."""
    generations = {g.generation.lower() for g in gpus}
    old, new = generations & _PROPRIETARY_ONLY, generations & _OPEN_REQUIRED
    if old and new:
        raise PackageError(
            f"GPU generations {', '.join(sorted(old))} need the proprietary kernel module and "
            f"{', '.join(sorted(new))} need the open one: they cannot share one driver installation"
        )
    return "proprietary" if old else "open"


def has_nvswitch(gpu: GpuSpec) -> bool:
    """Whether a node with these GPUs sits on an NVSwitch baseboard (needs the fabric manager)."""
    return _has_nvswitch(gpu)


def needs_imex(gpu: GpuSpec) -> bool:
    """Whether a node with these GPUs is a rack-scale NVLink compute node (needs IMEX)."""
    return gpu.model in _IMEX_MODELS


def _has_nvswitch(gpu: GpuSpec) -> bool:
    return gpu.vendor == "nvidia" and gpu.model in _HGX_NVSWITCH_MODELS and gpu.count == 8


def _cudnn(cudnn: str, cuda: str) -> tuple[str, str]:
    """``libcudnn9-cuda-13=9.17.0.29-1``; cuDNN 8: ``libcudnn8=8.9.5.29-1+cuda12.2``.

    Where the repository build number of a release is not in `CUDNN_BUILDS`, the pin is
    the version pattern ``9.8.0.*-1`` that apt resolves (rule package-pin warns)."""
    parts = version_key(cudnn)
    cuda_parts = version_key(cuda)
    if len(parts) >= 4:
        full = cudnn
    else:
        build = CUDNN_BUILDS.get(".".join(str(p) for p in parts[:3]))
        full = f"{cudnn}.{build}" if build is not None else f"{cudnn}.*"
    if parts[0] < 9:
        return f"libcudnn{parts[0]}", f"{full}-1+cuda{cuda_parts[0]}.{cuda_parts[1] if len(cuda_parts) > 1 else 0}"
    return f"libcudnn{parts[0]}-cuda-{cuda_parts[0]}", f"{full}-1"


def _amd(stack: StackTuple, os: str) -> list[PackagePin]:
    pins: list[PackagePin] = []
    distro = _ROCM_DISTRO[os]
    if stack.amdgpu:
        pins.append(PackagePin("amdgpu-dkms", _amdgpu_version(stack.amdgpu, distro), "amdgpu"))
    if stack.rocm:
        suffix = rocm_suffix(stack.rocm, distro)
        pins += [PackagePin("rocm-core", f"{stack.rocm}.{suffix}", "rocm"),
                 PackagePin("rocm", f"{stack.rocm}.{suffix}", "rocm")]  # fmt: skip
        if stack.rccl:
            pins.append(PackagePin("rccl", f"{stack.rccl}.{suffix}", "rccl"))
    elif stack.rccl:
        raise PackageError(f"stack {stack.name}: RCCL packages are versioned by their ROCm release; give rocm")
    return pins


def rocm_suffix(rocm: str, distro: str) -> str:
    """The part every package of a ROCm release shares: ``70002-56~24.04`` for 7.0.2."""
    parts = version_key(rocm)
    if len(parts) != 3:
        raise PackageError(f"ROCm {rocm}: give major.minor.patch (packages carry all three)", "rocm")
    build = ROCM_BUILDS.get(rocm)  # unknown: a pattern apt resolves (rule package-pin warns)
    return f"{parts[0]}{parts[1]:02d}{parts[2]:02d}-{build if build is not None else '*'}~{distro}"


def _amdgpu_version(amdgpu: str, distro: str) -> str:
    kmod, build = AMDGPU_BUILDS.get(amdgpu, ("*", "*"))  # unknown: a pattern (rule package-pin warns)
    parts = (*version_key(amdgpu), 0, 0)
    return f"1:{kmod}.{parts[0]}{parts[1]:02d}{parts[2]:02d}00-{build}.{distro}"


def slurm_packages(version: str, roles: Iterable[str]) -> list[PackagePin]:
    """SchedMD's own Debian packaging (``slurm-smd-*`` at ``<version>-1``) for the given roles.

    Roles: ``slurm_controller``, ``slurm_node``, ``slurmdbd``. Debian's slurm-wlm trails
    upstream by years, so sites build SchedMD's packages into a repository of their own.
    """
    daemon = {"slurm_controller": "slurm-smd-slurmctld", "slurm_node": "slurm-smd-slurmd",
              "slurmdbd": "slurm-smd-slurmdbd"}  # fmt: skip
    names = ["slurm-smd", "slurm-smd-client"] + [daemon[r] for r in sorted(set(roles))]
    return [PackagePin(n, f"{version}-1", "slurm") for n in names]


def container_packages(enroot: str, pyxis: str) -> list[PackagePin]:
    """Enroot's own .deb packages (``enroot``, ``enroot+caps`` at ``<version>-1``, as NVIDIA
    publishes them) and Pyxis built with its ``make deb`` (``nvslurm-plugin-pyxis``)."""
    return [PackagePin("enroot", f"{enroot}-1", "enroot_pyxis"),
            PackagePin("enroot+caps", f"{enroot}-1", "enroot_pyxis"),
            PackagePin("nvslurm-plugin-pyxis", f"{pyxis}-1", "enroot_pyxis")]  # fmt: skip


def _mm(version: str) -> tuple[int, int]:
    parts = version_key(version)
    return parts[0], parts[1] if len(parts) > 1 else 0
