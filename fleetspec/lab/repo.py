"""Stand-in vendor packages and the flat apt repository that serves them to lab nodes.

Why: pinning, holding, up/downgrade and drift detection must be exercised through real
apt and dpkg, with package names and version strings shaped like the vendors' own, but
the real packages need GPUs, kernel modules and gigabytes. Each stand-in is a tiny .deb
whose files report its version the way the real tool does (nvidia-smi, version.json,
/opt/rocm/.info/version, ncclGetVersion in a real shared library).
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from email.utils import formatdate
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from fleetspec.catalog import load_catalog
from fleetspec.lab.base import default_cache_dir

if TYPE_CHECKING:
    from fleetspec.compile.ir import GpuSpec, StackTuple

SOURCE_DATE_EPOCH = "1700000000"
STANDIN_NOTE = "fleetspec test stand-in: not the vendor package"
MAINTAINER = "fleetspec lab <lab@fleetspec.invalid>"
LIBDIR = "/usr/lib/x86_64-linux-gnu"
_PKG_NAME = re.compile(r"^[a-z0-9][a-z0-9+.-]+$")
_VERSION = re.compile(r"^([0-9]+:)?[0-9][A-Za-z0-9.+~-]*$")
# The CUDA version a driver branch reports in nvidia-smi (highest CUDA it supports).
DRIVER_CUDA = {"535": "12.2", "550": "12.4", "560": "12.6", "565": "12.7", "570": "12.8", "575": "12.9", "580": "13.0"}
ROCM_BUILD = "56~24.04"  # rocm 7.0.2 ships as 7.0.2.70002-56~24.04; stand-ins reuse the suffix shape
AMDGPU_BUILD = "2226257.24.04"


@dataclass(frozen=True)
class StandInPackage:
    """One stand-in .deb. `files` maps absolute paths to content; `symlinks` paths to targets.

    Content starting with "#!" is installed executable (0755), everything else 0644.
    """

    name: str
    version: str
    depends: tuple[str, ...] = ()
    files: Mapping[str, str | bytes] = field(default_factory=dict)
    description: str = ""
    symlinks: Mapping[str, str] = field(default_factory=dict)
    architecture: str = "amd64"
    conflicts: tuple[str, ...] = ()  # also written as Replaces: the package takes over their files
    provides: tuple[str, ...] = ()
    postinst: str = ""  # a maintainer script (DEBIAN/postinst), e.g. depmod where DKMS would run it

    def __post_init__(self) -> None:
        if not _PKG_NAME.match(self.name):
            raise ValueError(f"invalid Debian package name {self.name!r}")
        if not _VERSION.match(self.version):
            raise ValueError(f"invalid Debian version {self.version!r} for {self.name}")
        for path in (*self.files, *self.symlinks):
            p = PurePosixPath(path)
            if not p.is_absolute() or ".." in p.parts:
                raise ValueError(f"{self.name}: file path must be absolute without '..': {path!r}")

    @property
    def deb_name(self) -> str:
        """File name dpkg would give it (epoch dropped, as in the archive pool)."""
        version = self.version.split(":", 1)[-1]
        return f"{self.name}_{version}_{self.architecture}.deb"


def _control(pkg: StandInPackage) -> str:
    lines = [
        f"Package: {pkg.name}",
        f"Version: {pkg.version}",
        f"Architecture: {pkg.architecture}",
        f"Maintainer: {MAINTAINER}",
        "Section: non-free/libs",
        "Priority: optional",
    ]
    if pkg.depends:
        lines.append("Depends: " + ", ".join(pkg.depends))
    if pkg.provides:
        lines.append("Provides: " + ", ".join(pkg.provides))
    if pkg.conflicts:
        lines.append("Conflicts: " + ", ".join(pkg.conflicts))
        lines.append("Replaces: " + ", ".join(pkg.conflicts))
    lines.append(f"Description: {STANDIN_NOTE} ({pkg.name} {pkg.version})")
    for para in (pkg.description or f"Stands in for {pkg.name} in fleetspec lab tests.").splitlines():
        lines.append(" " + (para if para.strip() else "."))
    return "\n".join(lines) + "\n"


def _write_tree(pkg: StandInPackage, root: Path) -> None:
    """Lay out the package tree with fixed modes and mtimes so the .deb is reproducible."""
    marker = f"/usr/share/doc/{pkg.name}/fleetspec-standin"
    files: dict[str, str | bytes] = {marker: f"{STANDIN_NOTE}\n{pkg.name} {pkg.version}\n", **pkg.files}
    (root / "DEBIAN").mkdir(parents=True)
    (root / "DEBIAN/control").write_text(_control(pkg))
    if pkg.postinst:
        (root / "DEBIAN/postinst").write_text(pkg.postinst)
        (root / "DEBIAN/postinst").chmod(0o755)
    for path, content in sorted(files.items()):
        dest = root / path.lstrip("/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        data = content.encode() if isinstance(content, str) else content
        dest.write_bytes(data)
        dest.chmod(0o755 if data.startswith(b"#!") else 0o644)
    for path, target in sorted(pkg.symlinks.items()):
        dest = root / path.lstrip("/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.symlink_to(target)
    epoch = int(SOURCE_DATE_EPOCH)
    for p in sorted(root.rglob("*"), reverse=True):
        if p.is_dir() and not p.is_symlink():
            p.chmod(0o755)
        os.utime(p, (epoch, epoch), follow_symlinks=False)


def _run(argv: list[str], cwd: Path | None = None) -> str:
    env = {**os.environ, "SOURCE_DATE_EPOCH": SOURCE_DATE_EPOCH, "LC_ALL": "C"}
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{argv[0]} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc.stdout


def build_repo(packages: Iterable[StandInPackage], out_dir: Path) -> Path:
    """Write the packages as .debs plus Packages/Release into `out_dir` (a flat repo).

    Exactly `packages` end up published: stale .debs from a previous call are removed,
    so a test that unpublishes a version sees apt lose it. Same input, same bytes.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    pkgs = {(p.name, p.version): p for p in packages}
    wanted = {p.deb_name for p in pkgs.values()}
    if len(wanted) != len(pkgs):
        raise ValueError("two stand-ins map to the same .deb file name")
    for stale in out.glob("*.deb"):
        if stale.name not in wanted:
            stale.unlink()
    _write_debs(pkgs.values(), out)
    (out / "Packages").write_text(_run(["apt-ftparchive", "packages", "."], cwd=out))
    release = _run(["apt-ftparchive", "-o", "APT::FTPArchive::Release::Origin=fleetspec-lab", "release", "."], cwd=out)
    (out / "Release").write_text(_fixed_date(release))
    return out


def _write_debs(packages: Iterable[StandInPackage], out: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="fleetspec-debs-") as tmp:
        for pkg in packages:
            tree = Path(tmp) / pkg.deb_name
            _write_tree(pkg, tree)
            _run(["dpkg-deb", "--root-owner-group", "-Zxz", "--build", str(tree), str(out / pkg.deb_name)])


def build_suite_repo(packages: Iterable[StandInPackage], out_dir: Path, suite: str, component: str = "main") -> Path:
    """Write the packages as an apt repository laid out as the vendors' are
    (``deb <uri> <suite> <component>``: ``dists/<suite>/Release``,
    ``dists/<suite>/<component>/binary-amd64/Packages``, the .debs under ``pool/<component>/``),
    so a node's rendered source line is used as written, only its URI pointed at the lab.
    ``out_dir`` must be new or empty. Same input, same bytes."""
    out = Path(out_dir)
    pool, index = out / "pool" / component, out / "dists" / suite / component / "binary-amd64"
    if out.exists() and any(out.iterdir()):
        raise ValueError(f"{out} is not empty")
    pkgs = {(p.name, p.version): p for p in packages}
    if len({p.deb_name for p in pkgs.values()}) != len(pkgs):
        raise ValueError("two stand-ins map to the same .deb file name")
    pool.mkdir(parents=True)
    index.mkdir(parents=True)
    _write_debs(pkgs.values(), pool)
    (index / "Packages").write_text(_run(["apt-ftparchive", "packages", f"pool/{component}"], cwd=out))
    fields = {"Origin": "fleetspec-lab", "Suite": suite, "Codename": suite, "Components": component,
              "Architectures": "amd64"}
    release = _run(["apt-ftparchive", *(a for k, v in fields.items() for a in ("-o", f"APT::FTPArchive::Release::{k}={v}")),
                    "release", f"dists/{suite}"], cwd=out)
    (out / "dists" / suite / "Release").write_text(_fixed_date(release))
    return out


def _fixed_date(release: str) -> str:
    """apt-ftparchive stamps Release with the wall clock; pin it so the repo is reproducible."""
    stamp = formatdate(int(SOURCE_DATE_EPOCH), usegmt=True)
    return re.sub(r"^Date: .*$", f"Date: {stamp}", release, count=1, flags=re.M)


# ---------------------------------------------------------------- shared libraries

_VERSION_LIB_C = """\
/* fleetspec test stand-in: not the vendor library. */
int ncclGetVersion(int *version) { *version = FLEETSPEC_CODE; return 0; }
unsigned long cudnnGetVersion(void) { return FLEETSPEC_CODE; }
"""


def version_library(soname: str, code: int, cache_dir: Path | None = None) -> bytes:
    """A real ELF shared library exporting `int ncclGetVersion(int*)` and `size_t
    cudnnGetVersion(void)`, both reporting `code`.

    NCCL and RCCL export the first, cuDNN the second; callers load it with ctypes exactly as they
    would on a real node. Compiled with gcc once per (soname, code) and cached.
    """
    cache = (Path(cache_dir) if cache_dir is not None else default_cache_dir()) / "standin-libs"
    key = hashlib.sha256(f"{soname}\n{code}\n{_VERSION_LIB_C}".encode()).hexdigest()[:16]
    cached = cache / f"{soname}-{code}-{key}"
    if cached.exists():
        return cached.read_bytes()
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="fleetspec-lib-") as tmp:
        src, out = Path(tmp) / "version.c", Path(tmp) / soname
        src.write_text(_VERSION_LIB_C)
        _run(["gcc", "-shared", "-fPIC", "-O2", "-s", f"-DFLEETSPEC_CODE={code}", f"-Wl,-soname,{soname}",
              f"-ffile-prefix-map={tmp}=.", "-o", str(out), str(src)])
        data = out.read_bytes()
    partial = cached.with_suffix(".tmp")
    partial.write_bytes(data)
    partial.rename(cached)
    return data


# ---------------------------------------------------------------- vendor stand-ins


def _parts(version: str, n: int, what: str) -> list[int]:
    if not re.fullmatch(r"[0-9]+(\.[0-9]+)*", version) or len(version.split(".")) < n:
        raise ValueError(f"{what} version {version!r} needs at least {n} numeric parts")
    return [int(x) for x in version.split(".")]


def nccl_code(version: str) -> int:
    """ncclGetVersion's encoding since NCCL 2.9: MAJOR*10000 + MINOR*100 + PATCH."""
    major, minor, patch = _parts(version, 3, "NCCL")[:3]
    return major * 10000 + minor * 100 + patch


def rocm_int(version: str) -> str:
    """ROCm's numeric form used inside package versions: 7.0.2 -> 70002."""
    major, minor, patch = _parts(version, 3, "ROCm")[:3]
    return f"{major}{minor:02d}{patch:02d}"


def _nvidia_smi(driver: str, cuda: str) -> str:
    return f"""#!/bin/sh
# {STANDIN_NOTE}. A node with the driver but no GPUs: reports the driver, attaches none.
case "$*" in
  *--query-gpu=driver_version*) echo "{driver}"; exit 0;;
  *--version*) printf 'NVIDIA-SMI version  : {driver}\\nDRIVER version      : {driver}\\nCUDA Version        : {cuda}\\n'; exit 0;;
  *-q*-x*|*-x*-q*) cat <<'XML'
<?xml version="1.0" ?>
<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v13.dtd">
<nvidia_smi_log>
	<timestamp>Thu Jan  1 00:00:00 1970</timestamp>
	<driver_version>{driver}</driver_version>
	<cuda_version>{cuda}</cuda_version>
	<attached_gpus>0</attached_gpus>
</nvidia_smi_log>
XML
  exit 0;;
esac
echo "No devices were found"
exit 6
"""


def _nvidia(driver: str, cuda_hint: str | None) -> list[StandInPackage]:
    _parts(driver, 2, "driver")
    branch = driver.split(".")[0]
    version = f"{driver}-0ubuntu1"
    reported_cuda = DRIVER_CUDA.get(branch) or ".".join((cuda_hint or "0.0").split(".")[:2])
    compute = StandInPackage(
        f"libnvidia-compute-{branch}", version,
        files={f"/usr/share/doc/libnvidia-compute-{branch}/version": driver + "\n"},
        description="NVIDIA compute libraries (libcuda, libnvidia-ml) of the driver branch.",
    )
    driver_pkg = StandInPackage(
        f"nvidia-driver-{branch}", version, depends=(f"libnvidia-compute-{branch} (= {version})",),
        files={"/usr/bin/nvidia-smi": _nvidia_smi(driver, reported_cuda)},
        description="NVIDIA driver metapackage; its nvidia-smi reports the driver and no GPUs.",
    )
    fabric = StandInPackage(  # unsuffixed from 580 (nvidia-fabricmanager_580.95.05-1_amd64.deb)
        "nvidia-fabricmanager" if int(branch) >= 580 else f"nvidia-fabricmanager-{branch}", f"{driver}-1",
        files={"/usr/bin/nv-fabricmanager": f"#!/bin/sh\necho 'Fabric Manager version is : {driver}'\n"},
        description="NVSwitch fabric manager of the driver branch (no service: no NVSwitch here).",
    )
    return [compute, driver_pkg, fabric]


def _cuda(cuda: str) -> StandInPackage:
    major, minor = _parts(cuda, 2, "CUDA")[:2]
    mm = f"{major}.{minor}"
    version_json = (
        '{\n   "cuda" : {\n      "name" : "CUDA SDK",\n      "version" : "' + cuda + '"\n   }\n}\n'
    )
    return StandInPackage(
        f"cuda-toolkit-{major}-{minor}", f"{cuda}-1",
        files={f"/usr/local/cuda-{mm}/version.json": version_json},
        symlinks={"/usr/local/cuda": f"cuda-{mm}"},
        description="CUDA toolkit metapackage; carries version.json like the real toolkit.",
    )


def _cudnn(cudnn: str, cuda: str | None) -> StandInPackage:
    parts = _parts(cudnn, 3, "cuDNN")
    full = cudnn if len(parts) >= 4 else f"{cudnn}.0"  # real builds carry a 4th field; unknown -> 0
    cuda_major = (cuda or "12").split(".")[0]
    code = parts[0] * 10000 + parts[1] * 100 + parts[2]  # cudnnGetVersion's encoding for cuDNN 9
    soname = f"libcudnn.so.{parts[0]}"
    return StandInPackage(
        f"libcudnn{parts[0]}-cuda-{cuda_major}", f"{full}-1",
        files={f"/usr/include/x86_64-linux-gnu/cudnn_version_v{parts[0]}.h":
               f"#define CUDNN_MAJOR {parts[0]}\n#define CUDNN_MINOR {parts[1]}\n#define CUDNN_PATCHLEVEL {parts[2]}\n",
               f"{LIBDIR}/{soname}.{parts[0]}.{parts[1]}.{parts[2]}": version_library(soname, code)},
        symlinks={f"{LIBDIR}/{soname}": f"{soname}.{parts[0]}.{parts[1]}.{parts[2]}"},
        description=f"cuDNN runtime for the CUDA major; {soname} exports cudnnGetVersion() = {code}.",
    )


def _nccl(nccl: str, cuda: str | None) -> list[StandInPackage]:
    code = nccl_code(nccl)
    mm = ".".join((cuda or "12.8").split(".")[:2])
    version = f"{nccl}-1+cuda{mm}"
    lib = StandInPackage(
        "libnccl2", version,
        files={f"{LIBDIR}/libnccl.so.{nccl}": version_library("libnccl.so.2", code)},
        symlinks={f"{LIBDIR}/libnccl.so.2": f"libnccl.so.{nccl}"},
        description=f"NCCL runtime; libnccl.so.2 exports ncclGetVersion() = {code}.",
    )
    dev = StandInPackage(
        "libnccl-dev", version, depends=(f"libnccl2 (= {version})",),
        files={"/usr/include/nccl.h": "#define NCCL_MAJOR {}\n#define NCCL_MINOR {}\n#define NCCL_PATCH {}\n".format(
            *_parts(nccl, 3, "NCCL")[:3])},
        symlinks={f"{LIBDIR}/libnccl.so": "libnccl.so.2"},
        description="NCCL development files.",
    )
    return [lib, dev]


def _rocm(rocm: str, rccl: str | None, build: str = ROCM_BUILD) -> list[StandInPackage]:
    rint = rocm_int(rocm)
    prefix = f"/opt/rocm-{rocm}"
    core = StandInPackage(
        "rocm-core", f"{rocm}.{rint}-{build}",
        files={f"{prefix}/.info/version": f"{rocm}-{build.split('~')[0]}\n"},
        symlinks={"/opt/rocm": f"rocm-{rocm}"},
        description="ROCm core; /opt/rocm/.info/version as the real package writes it.",
    )
    out = [core]
    if rccl:
        code = nccl_code(rccl)
        out.append(StandInPackage(
            "rccl", f"{rccl}.{rint}-{build}", depends=(f"rocm-core (= {core.version})",),
            files={f"{prefix}/lib/librccl.so.1.0.{rint}": version_library("librccl.so.1", code)},
            symlinks={f"{prefix}/lib/librccl.so.1": f"librccl.so.1.0.{rint}"},
            description=f"RCCL; librccl.so.1 exports ncclGetVersion() = {code}.",
        ))
    return out


def _amdgpu(amdgpu: str) -> StandInPackage:
    if "-" in amdgpu:  # already a full Debian version, e.g. 1:6.14.14.30100200-2226257.24.04
        version = amdgpu
    else:
        parts = _parts(amdgpu, 2, "amdgpu") + [0, 0]
        version = f"1:{amdgpu}.{parts[0]}{parts[1]:02d}{parts[2]:02d}00-{AMDGPU_BUILD}"
    return StandInPackage(
        "amdgpu-dkms", version, architecture="all",
        files={f"/usr/src/amdgpu-{version.split(':')[-1].split('-')[0]}/dkms.conf":
               f'PACKAGE_NAME="amdgpu"\nPACKAGE_VERSION="{version}"\n'},
        description="amdgpu kernel driver sources for DKMS (never built: no kernel modules in the lab).",
    )


def amdgpu_firmware_standin_version(dkms_version: str) -> str:
    """amdgpu-dkms-firmware beside ``amdgpu-dkms`` ``1:6.14.14.30100200-2226257.24.04``: versioned
    apart, without an epoch, in the shape of the published 30.10.2 one
    (``30.10.2.0.30100200-2226257.24.04``, apt policy capture in a ROCm issue, 2025-10-24)."""
    upstream, rest = dkms_version.split(":", 1)[-1].split("-", 1)
    release = upstream.rsplit(".", 1)[1]  # 30100200
    major, minor, patch = int(release[:2]), int(release[2:4]), int(release[4:6])
    return f"{major}.{minor}.{patch}.0.{release}-{rest}"


def vendor_standins(tuples: Iterable[Mapping[str, str]]) -> list[StandInPackage]:
    """Stand-ins for every version in the given stack tuples, de-duplicated, sorted.

    A tuple is a mapping with optional keys driver, cuda, cudnn, nccl, rocm, rccl, amdgpu.
    Several tuples publish several versions of the same package, as a vendor repo does.
    """
    found: dict[tuple[str, str], StandInPackage] = {}
    for t in tuples:
        unknown = set(t) - {"driver", "cuda", "cudnn", "nccl", "rocm", "rccl", "amdgpu"}
        if unknown:
            raise ValueError(f"unknown stack tuple keys: {', '.join(sorted(unknown))}")
        pkgs: list[StandInPackage] = []
        if t.get("driver"):
            pkgs += _nvidia(t["driver"], t.get("cuda"))
        if t.get("cuda"):
            pkgs.append(_cuda(t["cuda"]))
        if t.get("cudnn"):
            pkgs.append(_cudnn(t["cudnn"], t.get("cuda")))
        if t.get("nccl"):
            pkgs += _nccl(t["nccl"], t.get("cuda"))
        if t.get("rocm"):
            pkgs += _rocm(t["rocm"], t.get("rccl"))
        elif t.get("rccl"):
            raise ValueError("an rccl version needs the rocm version it ships with")
        if t.get("amdgpu"):
            pkgs.append(_amdgpu(t["amdgpu"]))
        for p in pkgs:
            found.setdefault((p.name, p.version), p)
    return [found[k] for k in sorted(found)]


# ---------------------------------------------------------------- stand-ins for exact pins

_DRIVER_META = re.compile(r"^nvidia-driver(-[0-9]+)?(-open)?$")
# Packages the driver metapackage pulls in at its own version (Ubuntu and Debian naming).
_DRIVER_PARTS = re.compile(r"^(nvidia-dkms-|nvidia-kernel-|nvidia-utils-|libnvidia-compute-|libcuda1$)")
_UPSTREAM_REVISION = re.compile(r"^(?P<upstream>.+)-(?P<revision>[^-]+)$")
_NCCL_VERSION = re.compile(r"^(?P<nccl>[0-9]+\.[0-9]+\.[0-9]+)-1\+cuda(?P<cuda>[0-9]+\.[0-9]+)$")
_ROCM_VERSION = re.compile(r"^(?P<v>[0-9]+\.[0-9]+\.[0-9]+)\.(?P<rint>[0-9]{5,})-(?P<build>.+)$")


def _upstream(version: str) -> str:
    """``580.95.05-0ubuntu1`` -> ``580.95.05``: the vendor's version without the Debian revision."""
    m = _UPSTREAM_REVISION.match(version.split(":", 1)[-1])
    return m["upstream"] if m else version


def _rocm_from_int(rint: str) -> str:
    """``70002`` -> ``7.0.2`` (inverse of rocm_int)."""
    return f"{int(rint[:-4])}.{int(rint[-4:-2])}.{int(rint[-2:])}"


def _pin_standin(name: str, version: str, versions_of: Mapping[str, set[str]]) -> StandInPackage:
    """The stand-in for one exact pin: the version-reporting content the vendor package
    carries where fleetspec models it, a bare package otherwise (same name, same version)."""
    up = _upstream(version)
    made: StandInPackage | None = None
    if _DRIVER_META.match(name):
        branch = up.split(".")[0]
        siblings = sorted(n for n, vs in versions_of.items() if version in vs and _DRIVER_PARTS.match(n))
        utils = f"nvidia-utils-{branch}" in siblings
        files = {} if utils else {"/usr/bin/nvidia-smi": _nvidia_smi(up, DRIVER_CUDA.get(branch, "0.0"))}
        made = StandInPackage(name, version, depends=tuple(f"{n} (= {version})" for n in siblings), files=files,
                              description="NVIDIA driver metapackage (no kernel module in the lab).")
    elif m := re.match(r"^nvidia-utils-([0-9]+)$", name):
        smi = _nvidia_smi(up, DRIVER_CUDA.get(m[1], "0.0"))
        made = StandInPackage(name, version, files={"/usr/bin/nvidia-smi": smi},
                              description="NVIDIA driver utilities; its nvidia-smi reports the driver and no GPUs.")
    elif re.match(r"^(libnvidia-compute-[0-9]+|nvidia-fabricmanager(-[0-9]+)?)$", name):
        made = next((p for p in _nvidia(up, None) if p.name == name), None)
    elif re.match(r"^cuda-toolkit-[0-9]+-[0-9]+$", name):
        made = _cuda(up)
    elif m := re.match(r"^libcudnn[0-9]+-cuda-([0-9]+)$", name):
        made = _cudnn(up, m[1])
    elif name in ("libnccl2", "libnccl-dev") and (v := _NCCL_VERSION.match(version)):
        made = next(p for p in _nccl(v["nccl"], v["cuda"]) if p.name == name)
    elif name in ("rocm-core", "rccl") and (v := _ROCM_VERSION.match(version)):
        rocm = _rocm_from_int(v["rint"])
        made = _rocm(rocm, v["v"], v["build"])[0 if name == "rocm-core" else 1]
    elif name == "rocm":
        made = StandInPackage(name, version, depends=(f"rocm-core (= {version})",), description="ROCm metapackage.")
    elif name == "amdgpu-dkms" and "-" in version:
        made = _amdgpu(version)
    elif name == "datacenter-gpu-manager-4-core":
        # DCGM's host engine and its unit (NVIDIA's is nvidia-dcgm.service running
        # nv-hostengine); the stand-in engine reports the release and waits.
        made = StandInPackage(name, version, files={
            "/usr/lib/systemd/system/nvidia-dcgm.service": DCGM_UNIT,
            "/usr/bin/nv-hostengine": f"#!/bin/sh\necho 'DCGM version: {up}'\nexec sleep infinity\n"},
            description="DCGM 4 core (lab stand-in: the host engine has no GPU to watch).")
    elif name == "nvslurm-plugin-pyxis":
        # The real deb ships its plugstack line here; plugstack.conf includes it.
        made = StandInPackage(name, version, files={
            "/usr/share/pyxis/pyxis.conf": f"required {LIBDIR}/slurm/spank_pyxis.so\n"},
            description="Pyxis SPANK plugin; ships /usr/share/pyxis/pyxis.conf like `make deb` builds it.")
    if made is None:
        return StandInPackage(name, version, description=f"Stands in for {name}: installed and held, runs nothing.")
    if (made.name, made.version) != (name, version):
        raise ValueError(f"stand-in for {name}={version} came out as {made.name}={made.version}")
    return made


# ---------------------------------------------------------------- whole package families

# DCGM's systemd unit (the DCGM install guide starts it: systemctl --now enable nvidia-dcgm).
DCGM_UNIT = """[Unit]
Description=NVIDIA DCGM service

[Service]
ExecStart=/usr/bin/nv-hostengine -n --service-account nvidia-dcgm
Restart=on-abort

[Install]
WantedBy=multi-user.target
"""

# Ubuntu's nvidia-persistenced unit (the package's debian/nvidia-persistenced.service):
# the daemon runs with --no-persistence-mode, so the GPUs are NOT in persistence mode
# until a site overrides ExecStart. Source: Ubuntu's nvidia-graphics-drivers packaging,
# https://git.launchpad.net/~canonical-kernel-team/ubuntu/+source/nvidia-graphics-drivers
PERSISTENCED_UNIT = """[Unit]
Description=NVIDIA Persistence Daemon
Wants=syslog.target
StopWhenUnneeded=true
Before=systemd-backlight@backlight:nvidia_0.service

[Service]
Type=forking
ExecStart=/usr/bin/nvidia-persistenced --user nvidia-persistenced --no-persistence-mode --verbose
ExecStopPost=/bin/rm -rf /var/run/nvidia-persistenced
"""
# A stand-in daemon: forks, records the arguments it was started with, and stays up.
_PERSISTENCED = f"""#!/bin/sh
# {STANDIN_NOTE}. Records its arguments where verify reads them on a stand-in host.
mkdir -p /run/nvidia-persistenced
echo "$*" > /run/nvidia-persistenced/fleetspec-args
(exec -a nvidia-persistenced sleep infinity) >/dev/null 2>&1 &
echo $! > /run/nvidia-persistenced/nvidia-persistenced.pid
"""


def _with_deps(pkg: StandInPackage, depends: Iterable[str]) -> StandInPackage:
    return StandInPackage(pkg.name, pkg.version, tuple(depends), pkg.files, pkg.description, pkg.symlinks,
                          pkg.architecture, pkg.conflicts, pkg.provides)


def _branched(name: str, branch: str) -> str:
    """The pre-590 Ubuntu name of an unbranched package: nvidia-dkms-open -> nvidia-dkms-580-open."""
    for stem in ("nvidia-driver", "nvidia-dkms", "nvidia-kernel-source"):
        if name.startswith(stem) and name.endswith("-open"):
            return f"{stem}-{branch}-open"
    return f"{name}-{branch}"


def driver_standins(driver: str, os: str, flavor: str) -> list[StandInPackage]:
    """One driver build as NVIDIA's repository publishes it: every package of the family
    (``fleetspec.packages.driver_family``) at its version, the metapackage depending on
    each driver package at ``(= its version)``, the DKMS package on the kernel source and
    common files at ``=``, nvidia-utils on the compute libraries at ``=`` (the real
    graph's shape: apt moves the family only together), the persistence daemon with
    Ubuntu's unit. Files report versions the way the real ones do."""
    from fleetspec.packages import driver_family

    family = driver_family(driver, os, flavor)
    names = list(family)
    debian = os.startswith("debian")
    meta, dkms = names[0], names[1]
    utils, compute = ("nvidia-smi", "libcuda1") if debian else (names[2], names[3])
    branch = driver.split(".")[0]
    smi = _nvidia_smi(driver, DRIVER_CUDA.get(branch, "0.0"))
    eq = {n: f"{n} (= {v})" for n, v in family.items()}
    tools = set(names[-3:])
    out: list[StandInPackage] = []
    for name, v in family.items():
        files: dict[str, str | bytes] = {}
        depends: list[str] = []
        if name == meta:
            depends = [eq[n] for n in names[1:] if n not in tools]
        elif name == "nvidia-driver-cuda":
            # Debian's compute-only set (modelled: the CUDA driver, NVML, nvidia-smi, the
            # persistence daemon and the kernel support files, at the build).
            depends = [eq[n] for n in ("libcuda1", "libnvidia-ml1", "nvidia-smi", "nvidia-persistenced",
                                       "nvidia-kernel-support")]
        elif name == dkms and not debian:
            depends = [eq[n] for n in names if n.startswith(("nvidia-kernel-common", "nvidia-kernel-source"))]
        elif name == utils:
            files["/usr/bin/nvidia-smi"] = smi
            depends = [eq[compute]]
        elif name == compute:
            files[f"/usr/share/doc/{name}/version"] = driver + "\n"
        elif name == "nvidia-persistenced":
            files = {"/usr/lib/systemd/system/nvidia-persistenced.service": PERSISTENCED_UNIT,
                     "/usr/bin/nvidia-persistenced": _PERSISTENCED}
        elif name.startswith("nvidia-fabricmanager"):
            files["/usr/bin/nv-fabricmanager"] = f"#!/bin/sh\necho 'Fabric Manager version is : {driver}'\n"
        elif name.startswith("nvidia-imex"):
            files["/usr/bin/nvidia-imex"] = f"#!/bin/sh\necho 'IMEX version is: {driver}'\n"
            files["/etc/nvidia-imex/config.cfg"] = "IMEX_NODE_CONFIG_FILE=/etc/nvidia-imex/nodes_config.cfg\n"
        # 590+ (unbranched names) takes over from the last branched branch, 580: the
        # branch switch NVIDIA's pinning packages allow needs the new names to replace
        # the old ones. Modelled as Conflicts/Replaces on the 580 names (an assumption:
        # the real packages' fields were not available to copy).
        renamed = (not os.startswith("debian") and int(branch) >= 590 and name not in
                   ("nvidia-persistenced", "nvidia-modprobe"))
        out.append(StandInPackage(name, v, tuple(depends), files,
                                  f"NVIDIA driver {driver}: {name} (no kernel module in the lab).",
                                  conflicts=(_branched(name, "580"),) if renamed else ()))
    return out


def newer_build(version: str) -> str:
    """A build of the same branch/series newer than ``version`` (580.95.05 -> 580.96.05):
    the lab publishes one beside every pin, as NVIDIA's repository carries every build of a
    branch, so a pin that is not the newest build is what the lab rehearses by default."""
    parts = version.split(".")
    parts[1] = str(int(parts[1]) + 1).zfill(len(parts[1]))
    return ".".join(parts)


def _newer(component: str, version: str) -> str:
    """The next release fleetspec knows a build number for (cuDNN, ROCm), else ``newer_build``."""
    from fleetspec.packages import CUDNN_BUILDS, ROCM_BUILDS

    known = {"cudnn": CUDNN_BUILDS, "rocm": ROCM_BUILDS}.get(component)
    if known is None:
        return newer_build(version)
    from fleetspec.versions import version_key

    later = sorted((v for v in known if version_key(v) > version_key(version)), key=version_key)
    return later[0] if later else version


def stack_standins(stack: StackTuple, os: str, gpus: Sequence[GpuSpec], newer: bool = True) -> list[StandInPackage]:
    """Every package the lab's repository carries for one stack tuple: the whole families
    at the pinned builds and, with ``newer``, at a newer build of each (driver, NCCL,
    cuDNN, ROCm release), so that apt sees what the vendors' repositories hold."""
    from dataclasses import replace

    from fleetspec.packages import kernel_module_flavor, packages_for

    tuples = [stack]
    if newer:
        bumped = {k: _newer(k, v) for k, v in stack.versions().items() if k in ("driver", "nccl", "cudnn", "rocm")}
        tuples.append(replace(stack, **bumped))
    out: list[StandInPackage] = []
    for t in tuples:
        pins = {p.name: p.version for p in packages_for(t, os, gpus)}
        if t.driver:
            out += driver_standins(t.driver, os, kernel_module_flavor(gpus))
        if t.cuda:
            out.append(_cuda(t.cuda))
        if t.cudnn and t.cuda:
            runtime = next(p for p in pins if p.startswith("libcudnn"))
            out += _cudnn_family(pins[runtime], runtime, t.cuda)
        if t.nccl and t.cuda:
            out += [p for p in _nccl(t.nccl, t.cuda) if p.name in pins]
        if t.rocm:
            out += _rocm_family(pins["rocm"], pins.get("rccl"))
        if "nvlsm" in pins and t is stack:
            out += nvlink5_standins(pins["nvlsm"], newer)
        if t.amdgpu and "amdgpu-dkms" in pins:
            dkms = _amdgpu(pins["amdgpu-dkms"])
            firmware = StandInPackage("amdgpu-dkms-firmware", amdgpu_firmware_standin_version(dkms.version),
                                      architecture="all", description="amdgpu firmware for DKMS.")
            out += [_with_deps(dkms, [f"amdgpu-dkms-firmware (= {firmware.version})"]), firmware]
    unique = {(p.name, p.version): p for p in out}
    return [unique[k] for k in sorted(unique)]


# NVLink 5 (HGX B200/B300). nvlsm comes from NVIDIA's CUDA repository, one package for every
# driver branch, versioned by date; the repository carries later releases than any pin
# (2025.12.211 beside 2025.10.12), and the .deb depends on libibumad3
# (https://github.com/Getty/rex-gpu/blob/main/lib/Rex/GPU/NVIDIA/Setup/Apt.pm, research of
# the .deb). The fabric manager's start script runs it with /usr/share/nvidia/nvlsm/nvlsm.conf
# (https://github.com/NVIDIA/gpu-driver-container/blob/main/ubuntu24.04/nvidia-driver).
# libibumad3 and infiniband-diags are Ubuntu's (rdma-core, noble-updates 50.0-2ubuntu0.2;
# infiniband-diags Depends: libibumad3 (>= 3.2.30), https://packages.ubuntu.com/noble-updates/infiniband-diags).
NVLSM_LATER = "2025.12.211-1"
RDMA_CORE_NOBLE = "50.0-2ubuntu0.2"


def nvlink5_standins(nvlsm: str, later: bool = True) -> list[StandInPackage]:
    """nvlsm at ``nvlsm`` (and, with ``later``, the later release the repository carries),
    and the distribution's InfiniBand user space it runs with."""
    config = load_catalog().nvlink5_packages().nvlsm_config
    versions = [nvlsm] + ([NVLSM_LATER] if later and nvlsm != NVLSM_LATER else [])
    return [StandInPackage("nvlsm", v, ("libibumad3",), {config: f"# lab stand-in of nvlsm {v}\n"},
                           "NVLink Subnet Manager (SM is an InfiniBand compliant Subnet Manager).")
            for v in versions] + [
        StandInPackage("libibumad3", RDMA_CORE_NOBLE, (), {}, "InfiniBand Userspace Management Datagram (uMAD) library"),
        StandInPackage("infiniband-diags", RDMA_CORE_NOBLE, ("libibumad3 (>= 3.2.30)",),
                       {"/usr/sbin/ibstat": "#!/bin/sh\n# lab stand-in: no InfiniBand device in a container\nexit 0\n"},
                       "InfiniBand diagnostic programs"),
    ]


def kernel_standins(release: str, version: str, ubuntu: bool = True) -> list[StandInPackage]:
    """The headers (and, for an Ubuntu kernel, the extra modules) of kernel ``release``, as
    the distributions package them, for the role's DKMS prerequisites.

    Ubuntu (https://packages.ubuntu.com/noble/linux-headers-6.8.0-117,
    https://packages.ubuntu.com/noble-updates/kernel/linux-modules-extra-6.8.0-117-generic):
    ``linux-headers-<abi>-<flavour>`` depends on the flavour-independent, architecture-``all``
    ``linux-headers-<abi>`` and carries the ``/lib/modules/<release>/build`` link DKMS builds
    against; ``linux-modules-extra-<release>`` depends on ``linux-modules-<release>`` and
    ``wireless-regdb`` and carries the rarer drivers (ib_umad among them). Debian
    (https://packages.debian.org/bookworm/linux-headers-amd64): ``linux-headers-<abi>-<flavour>``
    depends on ``linux-headers-<abi>-common``; there is no modules-extra. The C library and
    toolchain dependencies are left out (the lab's hosts have them); ``version`` is the
    source package's (6.8.0-117.117); wireless-regdb's version is made up (the dependency is real).
    """
    abi = release.rsplit("-", 1)[0]
    build = f"/usr/src/linux-headers-{release}"
    if not ubuntu:
        common = f"linux-headers-{abi}-common"
        return [StandInPackage(f"linux-headers-{release}", version, (f"{common} (= {version})",),
                               {f"{build}/Makefile": f"# lab stand-in: kernel {release} headers\n"},
                               f"Header files for Linux {release}", {f"/lib/modules/{release}/build": build}),
                StandInPackage(common, version, (), {f"/usr/src/{common}/Makefile": "# lab stand-in\n"},
                               f"Common header files for Linux {abi}", architecture="all")]
    modules = f"/lib/modules/{release}/kernel"
    return [
        StandInPackage(f"linux-headers-{release}", version, (f"linux-headers-{abi} (= {version})",),
                       {f"{build}/Makefile": f"# lab stand-in: kernel {release} headers\n"},
                       f"Linux kernel headers for version {abi} on 64 bit x86 SMP",
                       {f"/lib/modules/{release}/build": build}),
        StandInPackage(f"linux-headers-{abi}", version, (), {f"/usr/src/linux-headers-{abi}/Makefile": "# stand-in\n"},
                       f"Header files related to Linux kernel version {abi.split('-')[0]}", architecture="all"),
        StandInPackage(f"linux-modules-{release}", version, (),
                       {f"{modules}/drivers/net/ethernet/mellanox/mlx5/core/mlx5_core.ko.zst": "stand-in\n"},
                       f"Linux kernel extra modules for version {abi.split('-')[0]} on 64 bit x86 SMP"),
        StandInPackage(f"linux-modules-extra-{release}", version, (f"linux-modules-{release}", "wireless-regdb"),
                       {f"{modules}/drivers/infiniband/core/ib_umad.ko.zst": "stand-in\n"},
                       f"Linux kernel extra modules for version {abi.split('-')[0]} on 64 bit x86 SMP"),
        StandInPackage("wireless-regdb", "2024.07.04-0ubuntu1~24.04.1", (), {}, "wireless regulatory database",
                       architecture="all"),
    ]


def _cudnn_family(version: str, runtime: str, cuda: str) -> list[StandInPackage]:
    """cuDNN's package chain as ``apt install cudnn`` pulls it (cudnn9-cuda-12,
    cudnn9-cuda-12-4, libcudnn9-cuda-12, libcudnn9-dev-cuda-12, libcudnn9-static-cuda-12, ...):
    ``cudnn9-cuda-13`` -> ``cudnn9-cuda-13-0`` and ``-static`` at ``=``; ``cudnn9-cuda-13-0`` ->
    runtime and -dev at ``=``; -dev -> runtime and -headers at ``=``. cuDNN 8: runtime, -dev."""
    lib = _cudnn(version.split("-")[0], cuda.split(".")[0])
    lib = StandInPackage(runtime, version, (), lib.files, lib.description, lib.symlinks)
    if runtime.startswith("libcudnn8"):
        return [lib, StandInPackage(f"{runtime}-dev", version, (f"{runtime} (= {version})",))]
    major, cuda_major = runtime.removeprefix("libcudnn").split("-", 1)[0], runtime.rsplit("-", 1)[1]
    cuda_minor = cuda.split(".")[1] if "." in cuda else "0"
    meta, minor_meta = f"cudnn{major}-cuda-{cuda_major}", f"cudnn{major}-cuda-{cuda_major}-{cuda_minor}"
    dev, headers = f"libcudnn{major}-dev-cuda-{cuda_major}", f"libcudnn{major}-headers-cuda-{cuda_major}"
    static = f"libcudnn{major}-static-cuda-{cuda_major}"
    header = {k: v for k, v in lib.files.items() if k.endswith(".h")}
    eq = "{} (= " + version + ")"
    return [
        StandInPackage(meta, version, (eq.format(minor_meta), eq.format(static)),
                       description="cuDNN meta package for the CUDA major."),
        StandInPackage(minor_meta, version, (eq.format(runtime), eq.format(dev)),
                       description="cuDNN meta package for the CUDA minor."),
        StandInPackage(runtime, version, (), {k: v for k, v in lib.files.items() if k not in header},
                       lib.description, lib.symlinks),
        StandInPackage(dev, version, (eq.format(runtime), eq.format(headers)), description="cuDNN development files."),
        StandInPackage(headers, version, (), header, description="cuDNN headers (cudnn_version.h)."),
        StandInPackage(static, version, (eq.format(dev),), description="cuDNN static libraries."),
    ]


# Components ROCm's `rocm` meta package depends on at (= the release's version), modelled
# on repo.radeon.com/rocm/apt/<release>/ Packages (rocm: Depends: rocm-core (= ...), ...).
ROCM_META_DEPENDS = ("rocm-core", "rocm-utils", "rocm-developer-tools", "rocm-openmp-sdk", "rocm-opencl-sdk",
                     "rocm-ml-sdk")


def _rocm_family(rocm_version: str, rccl_version: str | None) -> list[StandInPackage]:
    m = _ROCM_VERSION.match(rocm_version)
    assert m, rocm_version
    rocm = m["v"]
    build = m["build"]
    core, *rest = _rocm(rocm, _ROCM_VERSION.match(rccl_version)["v"] if rccl_version else None, build)
    parts = [core] + [StandInPackage(n, rocm_version, (f"rocm-core (= {rocm_version})",),
                                     description=f"ROCm {rocm} component.") for n in ROCM_META_DEPENDS[1:]]
    meta = StandInPackage("rocm", rocm_version, tuple(f"{n} (= {rocm_version})" for n in ROCM_META_DEPENDS),
                          description=f"ROCm {rocm} meta package.")
    return [meta, *parts, *rest]


# ---------------------------------------------------------------- the vendors' published packages

VENDOR_PACKAGES = Path(__file__).with_name("vendor_packages.yaml")


@dataclass(frozen=True)
class EvidenceGroup:
    """One row of the evidence table: packages as a published artefact shows them."""

    shape: str
    example: str
    source: str
    seen: str
    repo: str
    packages: tuple[StandInPackage, ...]
    unconfirmed: tuple[str, ...]  # "name=version" of packages the artefacts do not show literally


def evidence_groups(path: Path = VENDOR_PACKAGES) -> list[EvidenceGroup]:
    """The rows of ``vendor_packages.yaml``, expanded to stand-ins (names x versions, each
    name's ``depends`` with ``{v}`` its own version). Reads nothing of ``fleetspec.packages``:
    the names and versions are the artefacts', not the renderer's."""
    import yaml

    out = []
    for g in yaml.safe_load(path.read_text())["groups"]:
        rows = [{"name": n, "version": v} for v in g.get("versions", ()) for n in g.get("names", ())]
        rows += g.get("packages", [])
        depends, provides = g.get("depends", {}), g.get("provides", {})
        pkgs, unconfirmed = [], []
        for r in rows:
            name, version = r["name"], str(r["version"])
            deps = tuple(d.replace("{v}", version) for d in r.get("depends", depends.get(name, ())))
            pkgs.append(StandInPackage(name, version, deps, description=f"{g['shape']} (source: {g['source']})",
                                       provides=tuple(provides.get(name, ()))))
            if r.get("unconfirmed"):
                unconfirmed.append(f"{name}={version}")
        out.append(EvidenceGroup(g["shape"], g["example"], g["source"], str(g["seen"]), g["repo"], tuple(pkgs),
                                 tuple(unconfirmed)))
    return out


def evidence_standins(path: Path = VENDOR_PACKAGES) -> dict[str, list[StandInPackage]]:
    """{repository URL: its packages}: what the lab's evidence repositories serve (``installed``:
    packages only a node's dpkg status holds)."""
    repos: dict[str, dict[tuple[str, str], StandInPackage]] = {}
    for g in evidence_groups(path):
        for p in g.packages:
            repos.setdefault(g.repo, {})[(p.name, p.version)] = p
    return {url: [pkgs[k] for k in sorted(pkgs)] for url, pkgs in sorted(repos.items())}


def evidence_repositories(urls: Iterable[str], out_dir: Path, suite: str) -> dict[str, Path]:
    """{repository URL: directory}: one apt repository per evidence repository (``build_suite_repo``),
    each serving only that repository's rows, as the vendor publishes them apart (ROCm's
    ``rocm/apt/<release>`` and its graphics repository ``graphics/<release>/ubuntu``)."""
    served = evidence_standins()
    out = {}
    for url in urls:
        if url not in served or url == "installed":
            raise ValueError(f"no evidence row serves {url} (fleetspec/lab/vendor_packages.yaml)")
        slug = re.sub(r"[^A-Za-z0-9.]+", "-", url.split("://", 1)[-1]).strip("-")
        out[url] = build_suite_repo(served[url], Path(out_dir) / slug, suite)
    return out


def pin_standins(pins: Iterable[tuple[str, str]]) -> list[StandInPackage]:
    """One stand-in per exact ``(name, version)`` pin, de-duplicated and sorted.

    Why pins and not tuples: the playbooks install exactly what ``fleetspec.packages``
    names (``nvidia-driver-580-open``, ``libcudnn9-cuda-13=9.17.0.29-1``, Slurm's
    ``slurm-smd-*``), so the lab repository must carry exactly those names and versions.
    Packages whose files report a version (nvidia-smi, version.json, ncclGetVersion, ...)
    carry the same content as ``vendor_standins`` makes; the driver metapackage depends
    on its same-version siblings, so apt moves them together as it does on a real node.
    """
    unique = sorted(set(pins))
    versions_of: dict[str, set[str]] = {}
    for name, version in unique:
        versions_of.setdefault(name, set()).add(version)
    return [_pin_standin(name, version, versions_of) for name, version in unique]


__all__ = [
    "StandInPackage", "build_repo", "build_suite_repo", "evidence_repositories", "nccl_code", "pin_standins", "rocm_int", "version_library", "vendor_standins",
]
