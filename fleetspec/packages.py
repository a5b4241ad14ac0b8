"""Package names and exact version strings for a stack tuple, as the vendors' apt repositories name them.

Why a module of its own: the playbooks pin with ``apt-get install name=version``, which
takes only the exact Debian version a repository publishes. Those strings carry parts
the spec never states (``-0ubuntu1``, ``+cuda13.0``, cuDNN's build number, ROCm's
``.70002-56~24.04``), so they are derived here, in one place, from the tuple, the node OS
and the GPUs. Pure: no I/O.

Sources of the shapes (checked against published package file names):
- NVIDIA CUDA repository (developer.download.nvidia.com/compute/cuda/repos/<os>/x86_64):
  ``nvidia-driver-580-open_580.95.05-0ubuntu1``, ``libnvidia-compute-580_...-0ubuntu1``
  (``-1ubuntu1`` from 580.126.09), ``nvidia-fabricmanager_580.95.05-1`` (unsuffixed from 580;
  ``nvidia-fabricmanager-570_570.172.08-1`` before), ``cuda-toolkit-13-0_13.0.2-1``,
  ``libcudnn9-cuda-13_9.17.0.29-1``, ``libnccl2_2.28.3-1+cuda13.0``; the debian12 tree
  names the driver without the branch (``nvidia-driver``, ``libcuda1``) at ``<driver>-1``.
- ROCm repository (repo.radeon.com/rocm/apt/<rocm>): ``rocm-core_7.0.2.70002-56~24.04``,
  ``rccl_2.26.6.70002-56~24.04``; amdgpu (repo.radeon.com/amdgpu/<v>/ubuntu):
  ``amdgpu-dkms_1:6.16.13.30300300-2327507.22.04``; ``rocprofiler-sdk_1.0.0-56~24.04``;
  ``amdgpu-dkms-firmware`` ``30.10.2.0.30100200-2226257.24.04`` (no epoch).
Each with its artefact: docs/packaging.md, "Evidence" (fleetspec/lab/vendor_packages.yaml).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Literal, NamedTuple

from fleetspec.catalog import DriverPackaging, load_catalog
from fleetspec.compile.ir import GpuSpec, StackTuple
from fleetspec.versions import version_key

if TYPE_CHECKING:  # the EL catalog is read for EL nodes only (_el_rows): a start without them skips it
    from fleetspec.catalog.el import ElRelease, ElSiteBuilt, Nevra

APT_OS: tuple[str, ...] = ("ubuntu-22.04", "ubuntu-24.04", "debian-12")
# The EL family by major release: pins come only from catalog/data/el_packages.yaml (#42).
EL_OS: dict[str, int] = {"rocky-9": 9, "rhel-9": 9, "almalinux-9": 9, "rocky-10": 10, "rhel-10": 10,
                         "almalinux-10": 10}
SUPPORTED_OS: tuple[str, ...] = (*APT_OS, *EL_OS)
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
# The components of a CUDA toolkit release at the release's own versions: cuda-toolkit-X-Y
# depends on them with `>=`, so without a lock a later update of a component comes in.
# NVIDIA's per-release manifests (redistrib_X.Y.Z.json) were not found by search; these are
# from published artefacts: anaconda cuda-compiler 12.8.1 (cuda-nvcc 12.8.93.*, cuda-cuobjdump
# 12.8.90.*) and apt pins of the same versions in public Dockerfiles and CI scripts (docs/packaging.md,
# "Evidence"). A release not listed, and every component not listed, is not held (verify's cuda-components
# check says so).
CUDA_COMPONENTS: dict[str, dict[str, str]] = {
    "12.8.1": {"cuda-nvcc-12-8": "12.8.93-1", "cuda-crt-12-8": "12.8.93-1", "cuda-nvrtc-12-8": "12.8.93-1",
               "cuda-nvrtc-dev-12-8": "12.8.93-1", "libnvjitlink-12-8": "12.8.93-1",
               "libnvjitlink-dev-12-8": "12.8.93-1", "cuda-cudart-12-8": "12.8.90-1",
               "cuda-cudart-dev-12-8": "12.8.90-1", "cuda-cccl-12-8": "12.8.90-1", "cuda-cuobjdump-12-8": "12.8.90-1"},
}  # fmt: skip
# amdgpu driver release -> (kernel module version, build id) of amdgpu-dkms.
# 30.10.2: amdgpu-dkms-firmware 30.10.2.0.30100200-2226257.24.04 (apt policy capture, ROCm
# issue comment 2025-10-24) and 6.14.14.30100200-2226257 (driver/DKMS/ROCm table).
AMDGPU_BUILDS: dict[str, tuple[str, str]] = {"30.10.2": ("6.14.14", "2226257"), "30.30.3": ("6.16.13", "2327507")}
# amdgpu-dkms-firmware's own version where a published capture shows it (no epoch).
AMDGPU_FIRMWARE: dict[str, str] = {"30.10.2": "30.10.2.0.30100200-2226257"}

# The open kernel module does not support these generations; the others default to it
# (NVIDIA's recommendation since R560), and Blackwell and Grace Hopper require it.
_PROPRIETARY_ONLY = frozenset({"maxwell", "pascal", "volta"})
_OPEN_REQUIRED = frozenset({"blackwell", "blackwell-ultra", "grace-hopper", "grace-blackwell"})
# HGX baseboards with NVSwitch (8 GPUs): the nodes run nvidia-fabricmanager.
_HGX_NVSWITCH_MODELS = frozenset({"a100", "a100-40gb", "a100-sxm", "a800", "h100-sxm", "h800", "h200", "h20", "b200", "b300"})
_NVLINK5_MODELS = frozenset({"b200", "b300"})
# Grace-Blackwell rack-scale systems: NVLink switch trays run the fabric manager, the
# compute nodes run IMEX for cross-node NVLink memory.
_IMEX_MODELS = frozenset({"gb200", "gb300"})


# The RDMA user space NCCL's and RCCL's InfiniBand/RoCE transport loads (libibverbs.so.1 and
# a provider: mlx5 for ConnectX); without it they fall back to sockets, silently. From the
# distribution's rdma-core source, not pinned (like the NVLink 5 user space). libibverbs1
# only recommends ibverbs-providers and the roles install without recommends, so the
# provider is named; rdma-core brings the udev rules and module loading for the HCAs.
# Debian 12: 44.0-2 (apt-cache show on Debian 12.11, bookworm/main;
# https://packages.debian.org/bookworm/libibverbs1 "rec: ibverbs-providers"); Ubuntu 24.04:
# 50.0-2ubuntu0.2 (https://packages.ubuntu.com/noble-updates/libibverbs-dev depends on both
# at that version); 22.04: 39.0-1 (https://packages.ubuntu.com/jammy/ibverbs-providers).
RDMA_PACKAGES: tuple[str, ...] = ("rdma-core", "libibverbs1", "ibverbs-providers")
# EL: rdma-core's RPM build ships the providers inside libibverbs (no ibverbs-providers);
# a script choosing per package manager installs `rdma-core libibverbs librdmacm` with dnf
# against `rdma-core libibverbs1 ibverbs-providers librdmacm1` with apt.
EL_RDMA_PACKAGES: tuple[str, ...] = ("rdma-core", "libibverbs")
_RDMA_FABRICS = frozenset({"infiniband", "roce"})


def rdma_packages(fabric_type: str | None, os: str | None = None) -> tuple[str, ...]:
    """The distribution packages a GPU node on this fabric needs for RDMA (none on Ethernet)."""
    if fabric_type not in _RDMA_FABRICS:
        return ()
    return EL_RDMA_PACKAGES if os in EL_OS else RDMA_PACKAGES


class PackageError(ValueError):
    """A tuple that cannot be named as exact packages; ``component`` is the tuple key at fault."""

    def __init__(self, message: str, component: str | None = None) -> None:
        super().__init__(message)
        self.component = component


# A NamedTuple, immutable like a frozen dataclass but made at each start without compiling
# six generated methods (Python 3.11): tests/test_startup_imports.py counts what validate makes.
class PackagePin(NamedTuple):
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
    if os in EL_OS:
        return [PackagePin(n.name, n.evr, role, n.condition) for role, n, _ in _el_rows(stack, EL_OS[os], gpus)]
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
        # Its components at the release's versions, installed and held with it (the toolkit
        # meta only asks for them with >=); a release without a known manifest: none (warned).
        pins += [PackagePin(n, v, "cuda_toolkit") for n, v in CUDA_COMPONENTS.get(stack.cuda, {}).items()]
    if stack.cudnn:
        if not stack.cuda:
            raise PackageError(f"stack {stack.name}: cuDNN packages are built per CUDA major; give cuda")
        pins += [PackagePin(n, v, "cudnn") for n, v in cudnn_packages(stack.cudnn, stack.cuda)]
    if stack.nccl:
        if not stack.cuda:
            raise PackageError(f"stack {stack.name}: NCCL packages are built per CUDA release; give cuda")
        major, minor = _mm(stack.cuda)
        version = f"{stack.nccl}-1+cuda{major}.{minor}"
        pins += [PackagePin("libnccl2", version, "nccl"), PackagePin("libnccl-dev", version, "nccl")]
    if stack.dcgm:
        # With the host driver (role nvidia_driver): where the GPU Operator owns the driver,
        # it runs DCGM in its own containers and the host gets none.
        pins += [PackagePin(n, v, "nvidia_driver") for n, v in dcgm_packages(stack.dcgm, stack.driver,
                                                                                      stack.cuda)]
    return pins


def driver_packaging(driver: str, os: str) -> DriverPackaging:
    """The catalog's naming scheme for ``driver``'s branch on ``os`` (590+ drops the branch on Ubuntu)."""
    return load_catalog().driver_packaging(driver, "debian" if os.startswith("debian") else "ubuntu")


def driver_family(driver: str, os: str, flavor: str) -> dict[str, str]:
    """Every package of one driver build as NVIDIA's CUDA repository publishes it: {name: version}.

    The metapackage (first) depends on each of the others at ``(= its own version)``; apt
    moves them only together. The fabric manager, NSCQ and IMEX follow the driver's
    version with their own Debian revision. Ubuntu names before 590 carry the branch
    (``libnvidia-gl-580``); from 590 they do not (``libnvidia-gl``). Debian: the
    unbranched names of NVIDIA's debian12 repository.
    """
    scheme = driver_packaging(driver, os)
    branch = str(version_key(driver)[0])
    version, tools = f"{driver}-{scheme.revision_for(driver)}", f"{driver}-{scheme.tools_revision_for(driver)}"
    # From 580 NVIDIA names the fabric manager, NSCQ and IMEX without the branch
    # (nvidia-fabricmanager_580.95.05-1); nvidia-fabricmanager-580 there is only a virtual
    # package, and Canonical's real one is another build (gpu-driver-container#451).
    t = f"-{branch}" if scheme.tools_branch_in_name else ""
    tool_names = [f"nvidia-fabricmanager{t}", f"libnvidia-nscq{t}", f"nvidia-imex{t}"]
    if os.startswith("debian"):
        dkms = "nvidia-kernel-open-dkms" if flavor == "open" else "nvidia-kernel-dkms"
        names = ["nvidia-driver", dkms, "libcuda1", "nvidia-kernel-support", "libnvidia-ml1", "nvidia-smi",
                 "nvidia-persistenced", "nvidia-modprobe", "firmware-nvidia-gsp", "nvidia-driver-cuda"]
    else:
        b = f"-{branch}" if scheme.branch_in_name else ""
        o = "-open" if flavor == "open" else ""
        names = [f"nvidia-driver{b}{o}", f"nvidia-dkms{b}{o}", f"nvidia-utils{b}", f"libnvidia-compute{b}",
                 "nvidia-persistenced", f"nvidia-kernel-common{b}", f"nvidia-kernel-source{b}{o}",
                 f"nvidia-compute-utils{b}", f"nvidia-firmware{b}", "nvidia-modprobe"] + [
                 f"libnvidia-{lib}{b}" for lib in ("cfg1", "common", "decode", "encode", "extra", "fbc1", "gl",
                                                    "gpucomp")] + [f"xserver-xorg-video-nvidia{b}"]
    return {**{n: version for n in names}, **{n: tools for n in tool_names}}


def _driver(driver: str, os: str, gpus: tuple[GpuSpec, ...]) -> list[PackagePin]:
    """What the node asks apt for: the driver's metapackage (it pulls the rest of the family),
    the DKMS module, nvidia-smi, the compute libraries and the persistence daemon; the fabric
    manager on NVSwitch boards, IMEX on rack-scale NVLink nodes.

    Debian (NVIDIA's debian12 repository): the compute-only set, ``nvidia-driver-cuda`` in
    place of the desktop ``nvidia-driver`` (NVIDIA's driver installation guide, "Compute-only
    and Desktop Installation"; installs of ``nvidia-driver-cuda=580.159.04-1``,
    ``=580.126.20-1`` and ``=595.91.07-1`` with ``nvidia-kernel-open-dkms`` and ``libcuda1``
    from that repository, leaving out ``nvidia-driver-libs``). Ubuntu: the desktop
    metapackage, because no artefact shows a headless set in NVIDIA's repository (Canonical's
    ``nvidia-headless-580-open`` is Ubuntu's own build, at its own revisions); verify says so
    on every such node (``compute_only_unconfirmed``)."""
    family = list(driver_family(driver, os, kernel_module_flavor(gpus)).items())
    wanted = family[:3] if os.startswith("debian") else family[:5]
    if os.startswith("debian"):
        versions = dict(family)
        wanted = [("nvidia-driver-cuda", versions["nvidia-driver-cuda"]), *wanted[1:],
                  ("nvidia-persistenced", versions["nvidia-persistenced"])]
    pins = [PackagePin(n, v, "nvidia_driver") for n, v in wanted]
    fabric, nscq, imex = family[-3:]
    if any(_has_nvswitch(g) for g in gpus):
        pins.append(PackagePin(*fabric, "nvidia_driver", "nvswitch"))
    if any(g.model in _IMEX_MODELS for g in gpus):
        pins.append(PackagePin(*imex, "nvidia_driver", "imex"))
    if any(needs_nvlsm(g) for g in gpus):
        pins.append(PackagePin("nvlsm", load_catalog().nvlink5_packages().nvlsm_version, "nvidia_driver", "nvlink5"))
    return pins


def dcgm_packages(dcgm: str, driver: str | None, cuda: str | None) -> list[tuple[str, str]]:
    """DCGM 4 as NVIDIA's CUDA repository publishes it: ``datacenter-gpu-manager-4-core`` and
    ``datacenter-gpu-manager-4-cuda<major>`` at ``1:<release>-1`` (epoch 1; the file names
    drop it: datacenter-gpu-manager-4-cuda13_4.5.2-1_amd64.deb). DCGM's install guide picks
    the CUDA major the driver reports (``nvidia-smi``'s "CUDA Version"): the driver branch's
    newest CUDA major from the catalog, else the toolkit's major. DCGM needs driver R450+."""
    parts = version_key(dcgm)
    if parts[0] != 4 or len(parts) != 3:
        raise PackageError(f"DCGM {dcgm}: fleetspec names DCGM 4 packages (datacenter-gpu-manager-4-*) only; give "
                           "a 4.x.y release", "dcgm")
    if driver is not None and version_key(driver)[0] < 450:
        raise PackageError(f"DCGM needs NVIDIA driver R450 or later; the stack pins {driver}", "dcgm")
    branch = load_catalog().driver_branch(driver) if driver else None
    major = branch.max_cuda_major if branch is not None else (version_key(cuda)[0] if cuda else None)
    if major is None:
        raise PackageError("DCGM's package is built per CUDA major (datacenter-gpu-manager-4-cuda<major>): give "
                           "driver or cuda", "dcgm")
    version = f"1:{dcgm}-1"
    return [("datacenter-gpu-manager-4-core", version), (f"datacenter-gpu-manager-4-cuda{major}", version)]


def dcgm_pins(stack: StackTuple, os: str) -> list[tuple[str, str]]:
    """DCGM's packages of ``stack`` on ``os`` as the package manager shows them installed
    (name, version): on apt ``dcgm_packages``; on EL the catalog's EL row, names and EVRs as
    ``rpm -q`` prints them (``datacenter-gpu-manager-4-core``, ``1:4.5.2-1``)."""
    if os in EL_OS:
        return [(n.name, n.evr) for n in _el_component(os, "dcgm", stack.dcgm or "").packages]
    return dcgm_packages(stack.dcgm or "", stack.driver, stack.cuda)


def cuda_components(cuda: str, os: str) -> dict[str, str] | None:
    """The CUDA toolkit's components fleetspec holds at the release's own versions, {name:
    version}, or None where it knows none: on apt ``CUDA_COMPONENTS``; on EL the packages of
    the catalog's EL ``cuda`` row other than ``cuda-toolkit-X-Y`` itself (its EL names:
    ``cuda-cudart-devel-12-8``, not apt's ``cuda-cudart-dev-12-8``)."""
    if os not in EL_OS:
        return CUDA_COMPONENTS.get(cuda)
    from fleetspec.catalog.el import el_release

    row = el_release(EL_OS[os], "cuda", cuda)
    major, minor = _mm(cuda)
    held = {n.name: n.evr for n in row.packages if n.name != f"cuda-toolkit-{major}-{minor}"} if row else {}
    return held or None


def _el_component(os: str, component: str, release: str) -> ElRelease:
    from fleetspec.catalog.el import el_release

    row = el_release(EL_OS[os], component, release)
    if row is None:
        raise PackageError(f"no published EL{EL_OS[os]} package literal for {component} {release} is in the catalog "
                           "(fleetspec/catalog/data/el_packages.yaml)", component)
    return row


def compute_only_unconfirmed(stack: StackTuple, os: str, gpus: Iterable[GpuSpec]) -> str | None:
    """Why a node of this stack with these GPUs gets the desktop driver metapackage rather than
    a compute-only set, or None where the compute-only set is used (Debian's ``nvidia-driver-cuda``)."""
    if stack.vendor != "nvidia" or not stack.driver or os.startswith("debian") or os in EL_OS:
        return None  # Debian's nvidia-driver-cuda; EL's nvidia-driver-cuda (the catalog's EL rows)
    meta = next(iter(driver_family(stack.driver, os, kernel_module_flavor(gpus))))
    return (f"nodes get the desktop driver metapackage ({meta}): no published artefact shows a compute-only "
            "(headless) set in NVIDIA's Ubuntu repository (Canonical's nvidia-headless-<branch>-open are Ubuntu's "
            "own builds, at other revisions), so fleetspec does not guess one")


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


def nvswitch_on_pci(gpu: GpuSpec) -> bool:
    """Whether the board's NVSwitches show as NVIDIA PCI bridges (class 0x0680): HGX
    A100/H100/H200. The fourth generation (HGX B200/B300, NVLink 5) is reached through
    InfiniBand management devices for the NVLink Subnet Manager instead (Fabric Manager
    User Guide, "Systems using fourth generation NVSwitches")."""
    return _has_nvswitch(gpu) and gpu.model not in _NVLINK5_MODELS


def needs_nvlsm(gpu: GpuSpec) -> bool:
    """Whether the node is an HGX B200/B300 board (fourth-generation NVSwitch, NVLink 5): its
    fabric manager needs the NVLink Subnet Manager (``nvlsm``), which reaches the switches
    through the ConnectX-7 management bridges (Fabric Manager User Guide)."""
    return _has_nvswitch(gpu) and gpu.model in _NVLINK5_MODELS


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


def cudnn_packages(cudnn: str, cuda: str) -> list[tuple[str, str]]:
    """What NVIDIA's own CUDA images install: the runtime and ``-dev`` at one version
    (``libcudnn9-cuda-12=9.8.0.87-1 libcudnn9-dev-cuda-12=9.8.0.87-1`` in
    nvidia/cuda:12.8.1-cudnn-devel-ubuntu24.04; ``-dev`` pulls ``-headers`` at ``=``).
    Not the meta package ``cudnn9-cuda-<major>``: it pulls ``cudnn9-cuda-<major>-<minor>``
    and ``-static`` at ``=`` too. cuDNN 8: ``libcudnn8`` and ``libcudnn8-dev``."""
    name, version = _cudnn(cudnn, cuda)
    if name.startswith("libcudnn8"):
        return [(name, version), (f"{name}-dev", version)]
    major = name.removeprefix("libcudnn").split("-", 1)[0]
    cuda_major = name.rsplit("-", 1)[1]
    return [(name, version), (f"libcudnn{major}-dev-cuda-{cuda_major}", version)]


def cudnn_lock(cudnn: str, cuda: str) -> tuple[str, str]:
    """The .pref's package expression and version for cuDNN: every package of the release
    for the CUDA major (runtime, -dev, -headers, -static, -samples, the metas
    ``cudnn9-cuda-13`` and ``cudnn9-cuda-13-0``), so no member of the chain can come in at a
    newer build and break the ``=`` dependencies ("held broken packages")."""
    name, version = _cudnn(cudnn, cuda)
    if name.startswith("libcudnn8"):
        return f"{name} {name}-dev", version
    major = name.removeprefix("libcudnn").split("-", 1)[0]
    cuda_major = name.rsplit("-", 1)[1]
    return (f"/^libcudnn{major}-(.+-)?cuda-{cuda_major}$/ /^cudnn{major}-cuda-{cuda_major}(-[0-9]+)?$/"
            f" libcudnn{major}-samples"), version


def apt_preferences(stack: StackTuple, os: str, gpu_models: Iterable[GpuSpec]) -> str:
    """An apt_preferences(5) file that locks every package family of ``stack`` at its build.

    Why preferences and not only ``apt-get install name=version``: the driver metapackage,
    ``cudnn9-cuda-*`` and ROCm's ``rocm`` depend on their companions at ``(= the same
    version)``; apt takes each companion at its candidate, the newest build in the
    repository, and refuses the transaction ("held broken packages") whenever the pin is
    not the newest build. NVIDIA's answer is version locking with apt preferences (the
    ``nvidia-driver-pinning-*`` packages ship such a file); the same works for ROCm.
    Priority 1000 also lets apt go down to the pinned build (a rollback). ``Package: *``
    cannot carry a version pin (apt: "Did not understand pin type version"), so the
    families are regular expressions. Pure: the same tuple gives the same bytes.
    """
    gpus = tuple(gpu_models)
    stanzas: list[tuple[str, str, str]] = []
    if stack.vendor == "nvidia":
        if stack.driver:
            family = driver_family(stack.driver, os, kernel_module_flavor(gpus))
            # NVIDIA's own revisions of this build only: Canonical builds the same names at
            # the same upstream version (580.126.09-0ubuntu0.24.04.2), which `<build>-*` admits.
            revisions = "|".join(sorted({v.split("-", 1)[1] for v in family.values()}))
            stanzas.append((f"NVIDIA driver {stack.driver}: every package of the driver family at NVIDIA's own "
                            "revisions (version locking)", _NVIDIA_DRIVER_FAMILY,
                            f"/^{re.escape(stack.driver)}-({revisions})$/"))
            assert all(re.match(r"^(lib)?nvidia-|^libcuda|^libnv|^xserver-xorg-video-nvidia|^firmware-nvidia", n)
                       for n in family), "a driver package the family expression misses"
            if any(needs_nvlsm(g) for g in gpus):
                nvlsm = load_catalog().nvlink5_packages().nvlsm_version
                stanzas.append(("NVLink Subnet Manager (HGX B200/B300): versioned apart from the driver", "nvlsm",
                                nvlsm))
        if stack.cuda:
            major, minor = _mm(stack.cuda)
            stanzas.append((f"CUDA {stack.cuda}", f"cuda-toolkit-{major}-{minor}", f"{stack.cuda}-1"))
            components = CUDA_COMPONENTS.get(stack.cuda, {})
            for version in sorted(set(components.values())):
                names = " ".join(n for n, v in components.items() if v == version)
                stanzas.append((f"CUDA {stack.cuda}: components at the release's versions (cuda-toolkit depends "
                                "on them with >=)", names, version))
        if stack.cudnn and stack.cuda:
            stanzas.append((f"cuDNN {stack.cudnn}: the whole package chain of the release", *cudnn_lock(stack.cudnn,
                                                                                                      stack.cuda)))
        if stack.nccl and stack.cuda:
            major, minor = _mm(stack.cuda)
            stanzas.append((f"NCCL {stack.nccl}", "libnccl2 libnccl-dev", f"{stack.nccl}-1+cuda{major}.{minor}"))
        if stack.dcgm:
            stanzas.append((f"DCGM {stack.dcgm}: every DCGM 4 package of the release", "/^datacenter-gpu-manager-4-/",
                            f"1:{stack.dcgm}-1"))
    else:
        distro = _ROCM_DISTRO[os]
        if stack.amdgpu:
            stanzas.append((f"amdgpu {stack.amdgpu}", "amdgpu-dkms", _amdgpu_version(stack.amdgpu, distro)))
            # Versioned apart, without an epoch (30.10.2.0.30100200-2226257.24.04): it sorts
            # below the 6.4 driver's 1:6.12.12.60404-... firmware, so only a lock moves it.
            stanzas.append((f"amdgpu {stack.amdgpu}: its firmware, versioned apart", "amdgpu-dkms-firmware",
                            amdgpu_firmware_version(stack.amdgpu, distro)))
        if stack.rocm:
            # Every package of a ROCm release ends in the release's number and build
            # (hip-runtime-amd 7.0.51831.70002-56~24.04, rocm-core 7.0.2.70002-56~24.04).
            suffix = rocm_suffix(stack.rocm, distro)
            stanzas.append((f"ROCm {stack.rocm}: every package of the release", "/.*/", f"*.{suffix}"))
            # ... except rocprofiler-sdk*, versioned without the release number
            # (rocprofiler-sdk_1.0.0-56~24.04 in rocm/apt/7.0.2): the release's build only.
            stanzas.append((f"ROCm {stack.rocm}: rocprofiler-sdk*, versioned without the release number",
                            "/^rocprofiler-sdk/", f"*-{suffix.split('-', 1)[1]}"))
    head = f"# fleetspec: the packages of stack {stack.name} on {os}, locked at the tuple's builds.\n"
    return head + "".join(f"\nExplanation: {why}\nPackage: {names}\nPin: version {version}\nPin-Priority: 1000\n"
                          for why, names, version in stanzas)


# Every package NVIDIA's repositories build from one driver release (Ubuntu and Debian names).
_NVIDIA_DRIVER_FAMILY = "/^(lib)?nvidia-/ /^libcuda/ /^libnv/ /^xserver-xorg-video-nvidia/ /^firmware-nvidia/"


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


def unconfirmed_pins(stack: StackTuple, os: str) -> list[tuple[str, str]]:
    """(tuple key, why) for each pin or lock whose version shape no published artefact shows
    for this build: the rule package-pin warns, the pin is still rendered."""
    found: list[tuple[str, str]] = []
    if os in EL_OS:
        rows = {(key, row) for _, _, (key, row) in _el_rows(stack, EL_OS[os], ())}
        return sorted((key, f"EL{row.el} {row.component} {row.release}: {row.unconfirmed} modelled, not seen in a "
                            "published artefact (unconfirmed catalog fact, catalog/data/el_packages.yaml)")
                      for key, row in rows if row.unconfirmed)
    if stack.vendor == "nvidia" and stack.driver:
        scheme = driver_packaging(stack.driver, os)
        revision = scheme.revision_for(stack.driver)
        if "revision" in scheme.unconfirmed:
            found.append(("driver", f"the Debian revision {revision} of the {version_key(stack.driver)[0]} driver "
                                    "packages is not shown by a published listing (unconfirmed catalog fact)"))
        elif scheme.revision_seen_to and version_key(stack.driver) > version_key(scheme.revision_seen_to):
            found.append(("driver", f"driver {stack.driver} is newer than the last build a published listing shows "
                                    f"({scheme.revision_seen_to}): its revision {revision} is extrapolated"))
        if scheme.tools_revision_unseen and scheme.tools_revision_unconfirmed(stack.driver):
            low, high = scheme.tools_revision_unseen
            found.append(("driver", f"no published artefact shows the fabric manager's and IMEX's revision of driver "
                                    f"{stack.driver} (1 up to {low}, 1ubuntu1 from {high}): "
                                    f"{scheme.tools_revision_for(stack.driver)} is extrapolated"))
    if stack.vendor == "amd" and stack.amdgpu and stack.amdgpu not in AMDGPU_FIRMWARE:
        found.append(("amdgpu", f"amdgpu-dkms-firmware of amdgpu {stack.amdgpu} is versioned apart and no published "
                                f"capture shows its version: it is locked by the pattern {stack.amdgpu}.*"))
    return found


def amdgpu_firmware_version(amdgpu: str, distro: str) -> str:
    """amdgpu-dkms-firmware of driver ``amdgpu``: the published version, else the pattern
    ``<amdgpu>.*`` (a release without a capture; the 30.10.2 one starts with its release)."""
    known = AMDGPU_FIRMWARE.get(amdgpu)
    return f"{known}.{distro}" if known else f"{amdgpu}.*"


def rocm_apt_path(rocm: str) -> str:
    """The release's folder under repo.radeon.com/rocm/apt/ and graphics/: an x.y.0 release
    is served from ``x.y`` (7.1.0 from rocm/apt/7.1; no 7.1.0 folder was found), others
    from their full number (7.0.2, 7.1.1)."""
    parts = version_key(rocm)
    return f"{parts[0]}.{parts[1]}" if len(parts) == 3 and parts[2] == 0 else rocm


def slurm_packages(version: str, roles: Iterable[str], os: str | None = None) -> list[PackagePin]:
    """SchedMD's own packaging for the given roles: the Debian one (``slurm-smd-*`` at
    ``<version>-1``), or on EL the RPMs SchedMD's slurm.spec builds (``slurm``,
    ``slurm-slurmctld``, ... at ``<version>-<release>``, catalog/data/el_packages.yaml).

    Roles: ``slurm_controller``, ``slurm_node``, ``slurmdbd``; none gives the packages every
    Slurm host gets. Debian's slurm-wlm trails upstream by years, and SchedMD publishes no
    repository of either: sites build SchedMD's packages into a repository of their own.
    """
    if os in EL_OS:
        row = _site_built(os, "slurm")
        names = [*row.names["common"], *(n for r in sorted(set(roles)) for n in row.names[r])]
        return [PackagePin(n, f"{version}-{row.release}", "slurm") for n in names]
    daemon = {"slurm_controller": "slurm-smd-slurmctld", "slurm_node": "slurm-smd-slurmd",
              "slurmdbd": "slurm-smd-slurmdbd"}  # fmt: skip
    names = ["slurm-smd", "slurm-smd-client"] + [daemon[r] for r in sorted(set(roles))]
    return [PackagePin(n, f"{version}-1", "slurm") for n in names]


def container_packages(enroot: str, pyxis: str, os: str | None = None) -> list[PackagePin]:
    """Enroot's own packages (``enroot``, ``enroot+caps`` at ``<version>-1``, as NVIDIA
    publishes them; on EL its ``.el8`` RPMs) and Pyxis built with its ``make deb``
    (``nvslurm-plugin-pyxis``) or, on EL, its pyxis.spec."""
    if os in EL_OS:
        rows = (_site_built(os, "enroot"), _site_built(os, "pyxis"))
        return [PackagePin(n, f"{v}-{row.release}", "enroot_pyxis")
                for row, v in zip(rows, (enroot, pyxis), strict=True) for n in row.names["slurm_node"]]
    return [PackagePin("enroot", f"{enroot}-1", "enroot_pyxis"),
            PackagePin("enroot+caps", f"{enroot}-1", "enroot_pyxis"),
            PackagePin("nvslurm-plugin-pyxis", f"{pyxis}-1", "enroot_pyxis")]  # fmt: skip


def _site_built(os: str, component: str) -> ElSiteBuilt:
    from fleetspec.catalog.el import el_site_package

    row = el_site_package(EL_OS[os], component)
    if row is None:
        raise PackageError(f"no EL{EL_OS[os]} packaging of {component} is in the catalog "
                           "(fleetspec/catalog/data/el_packages.yaml, site_built)", component)
    return row


def _mm(version: str) -> tuple[int, int]:
    parts = version_key(version)
    return parts[0], parts[1] if len(parts) > 1 else 0


# The tuple key and the Ansible role of each EL catalog component.
_EL_COMPONENTS = (("driver", "driver", "nvidia_driver"), ("cuda", "cuda", "cuda_toolkit"), ("cudnn", "cudnn", "cudnn"),
                  ("nccl", "nccl", "nccl"), ("dcgm", "dcgm", "nvidia_driver"), ("amdgpu", "amdgpu", "amdgpu"),
                  ("rocm", "rocm", "rocm"), ("rccl", "rccl", "rccl"))  # fmt: skip


def _el_rows(stack: StackTuple, el: int, gpus: tuple[GpuSpec, ...]) -> list[tuple[str, Nevra, tuple[str, ElRelease]]]:
    """(role, package, (tuple key, its catalog row)) for every package of ``stack`` on EL ``el``.

    Only what a row of catalog/data/el_packages.yaml names: a component at a release without
    a row is an error naming the file, never a literal made from the apt shape or the OS."""
    from fleetspec.catalog.el import el_release

    if gpus and stack.vendor == "nvidia" and kernel_module_flavor(gpus) != "open":
        raise PackageError(f"stack {stack.name}: the EL catalog has NVIDIA's open DKMS flavour only "
                           "(kmod-nvidia-open-dkms, stream <branch>-open); pre-Turing GPUs need the proprietary one, "
                           "which no EL row names yet", "driver")
    if gpus and any(needs_nvlsm(g) for g in gpus):
        raise PackageError(f"stack {stack.name}: nvlsm (HGX B200/B300) has no EL row in the catalog", "driver")
    versions = stack.versions()
    out: list[tuple[str, Nevra, tuple[str, ElRelease]]] = []
    rocm_tree: str | None = None  # RCCL ships in its ROCm release's tree (rocm/el9/7.1/main, rocm/rhel10/7.1.1/main)
    for key, component, role in _EL_COMPONENTS:
        release = versions.get(key)
        if not release:
            continue
        cuda = None
        if key in ("cudnn", "nccl"):
            if not stack.cuda:
                raise PackageError(f"stack {stack.name}: {key} packages are built per CUDA release; give cuda", key)
            cuda = "{}.{}".format(*_mm(stack.cuda))
        tree = rocm_tree if key == "rccl" else None
        row = el_release(el, component, release, cuda, tree)
        if key == "rocm" and row is not None:
            rocm_tree = row.repo
        if row is None:
            raise PackageError(f"no published EL{el} package literal for {key} {release}"
                               + (f" (CUDA {cuda})" if key == "nccl" else "")
                               + (f" in ROCm {versions.get('rocm')}'s tree {tree}" if tree else "")
                               + " is in the catalog (fleetspec/catalog/data/el_packages.yaml); EL versions are never "
                               "derived from the apt ones: add a row with its source, or pin a release that has one", key)
        # As on apt: the fabric manager only for NVSwitch boards, IMEX only for NVL72 nodes.
        needed = {"nvswitch": any(_has_nvswitch(g) for g in gpus), "imex": any(g.model in _IMEX_MODELS for g in gpus)}
        out += [(role, n, (key, row)) for n in row.packages if n.condition is None or needed.get(n.condition, False)]
    return out


def dnf_spec(pin: PackagePin) -> str:
    """What ``dnf install`` takes: ``name-[epoch:]version-release`` (``nvidia-driver-cuda-3:580.82.07-1.el9``)."""
    return f"{pin.name}-{pin.version}"


def versionlock_line(pin: PackagePin) -> str:
    """A DNF4 versionlock.list line: ``name-epoch:version-release.*`` (the epoch always written,
    as ``dnf versionlock add`` writes it; ``.*`` any architecture). NVIDIA driver installation
    guide, "Version locking", DNF 4."""
    evr = pin.version if ":" in pin.version.split("-", 1)[0] else f"0:{pin.version}"
    return f"{pin.name}-{evr}.*"


def driver_module_stream(driver: str, flavor: str) -> str:
    """The EL8/EL9 ``nvidia-driver`` module stream of a driver branch: ``580-open`` (open
    kernel modules, DKMS) or ``580-dkms`` (proprietary). ``dnf module enable
    nvidia-driver:560-open`` in a published node log; BenjaminSisko/nvidia-r580-rhel9-airgap
    (stream ``nvidia-driver:580-open``); an AMI build script's "the {ver}-dkms stream for the
    proprietary driver"."""
    return f"{version_key(driver)[0]}-{'open' if flavor == 'open' else 'dkms'}"


def dnf_module_file(driver: str, flavor: str) -> str:
    """``/etc/dnf/modules.d/nvidia-driver.module``: the file DNF 4 (libdnf) keeps per module,
    here enabling the branch's stream with no profile installed (the pins name the packages).
    Its text as a node shows it after ``dnf install @nvidia-driver:560-open``
    (``[nvidia-driver]`` / ``name=nvidia-driver`` / ``stream=560-open`` / ``profiles=`` /
    ``state=enabled``, a published ``cat`` of the file).
    A stream holds a branch, not a build; the exact build is the pins' and the versionlock's."""
    return (f"[nvidia-driver]\nname=nvidia-driver\nstream={driver_module_stream(driver, flavor)}\nprofiles=\n"
            "state=enabled\n")
