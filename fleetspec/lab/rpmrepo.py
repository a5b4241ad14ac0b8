"""Stand-in EL repositories: empty RPMs named and versioned as the vendors' (from the catalog's
EL rows), built by the real ``rpmbuild``, indexed by ``createrepo_c``, with a modulemd
``modules.yaml`` added by ``modifyrepo_c``: the three steps by which a vendor's RPM tree
carries module streams. One builder for the lab (``fleetspec lab up`` on an EL fleet serves
them to its hosts) and for tests/ansible/test_pins_dnf.py (dnf in an installroot).

What the stand-ins model (and from where):
- every catalog NEVRA, plus the same name at the next release (``-1`` -> ``-2``): a repository
  that holds newer builds of everything, as NVIDIA's and AMD's trees do (modelled, not seen);
- the driver family (the driver rows' packages with a dist tag) as artifacts of the
  ``nvidia-driver`` stream of its branch (``580-open``); a 590 build (590.48.01, the R590 build
  tests/ansible/test_pins_apt.py uses) in ``590-open``: on EL8/9 the branch is a module stream
  and another stream's packages are filtered out (NVIDIA driver installation guide; issue #42).
  The fabric manager and IMEX are left outside the streams: no artefact read shows them in one;
- exact-EVR ``Requires`` inside the driver family (``nvidia-driver-cuda`` needs its ``-libs``
  and ``nvidia-kmod-common`` at ``%{epoch}:%{version}-%{release}``; the versioned Requires of
  negativo17's / terrapkg's NVIDIA specs) and ``rocm`` needing ``rocm-core`` at its EVR
  (ROCm/rocm-install-on-linux#628: ``rocm-7.1.0.70100-20.el8 requires rocm-developer-tools =
  7.1.0.70100-20.el8``);
- ``kmod-nvidia-open-dkms`` and ``amdgpu-dkms`` noarch (the catalog rows' ``.noarch.rpm`` and
  dnf capture), everything else x86_64.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import NamedTuple
from urllib.parse import urlsplit

from fleetspec.catalog.el import ElRelease, Nevra, el_data, el_repo
from fleetspec.lab.base import default_cache_dir
from fleetspec.lab.repo import (
    LIBDIR,
    STANDIN_NOTE,
    StandInPackage,
    _cuda,
    _cudnn,
    _nccl,
    _nvidia,
    _pin_standin,
    _rocm,
    _rocm_from_int,
)

R590 = "590.48.01"  # the other branch's build in the 590-open stream
# Host tools: command -> Debian package providing it.
RPM_TOOLS: dict[str, str] = {"rpmbuild": "rpm", "createrepo_c": "createrepo-c", "modifyrepo_c": "createrepo-c"}


class StandInRpm(NamedTuple):
    nevra: Nevra
    arch: str = "x86_64"
    requires: tuple[str, ...] = ()  # rpm dependency strings: "name = 3:580.82.07-1.el9"
    # (absolute path, content) the package lays down; content starting "#!" is installed 0755
    files: tuple[tuple[str, str | bytes], ...] = ()
    symlinks: tuple[tuple[str, str], ...] = ()  # (absolute path, target)

    @property
    def label(self) -> str:
        n = self.nevra
        return f"{n.name}-{n.epoch}:{n.version}-{n.release}.{self.arch}"


def missing_tools() -> list[str]:
    """Debian packages whose RPM tools are absent from PATH, sorted."""
    return sorted({pkg for tool, pkg in RPM_TOOLS.items() if shutil.which(tool) is None})


def _spec(evr: tuple[int, str, str], rpms: list[StandInRpm]) -> str:
    """One spec per EVR, a subpackage per name; every file comes from ``%{_sourcedir}/tree``
    (``_tree``), so binary payloads (the stand-in libraries) go in as built. No automatic
    Requires/Provides: an EL lab host's rpmdb has no glibc to satisfy libc.so.6()(64bit)."""
    epoch, version, release = evr
    head = [f"Name: fleetspec-standin\nVersion: {version}\nRelease: {release}\n"
            + (f"Epoch: {epoch}\n" if epoch else "")
            + "Summary: stand-in\nLicense: none\nAutoReqProv: no\n%description\nstand-in\n"]
    for r in rpms:
        paths = sorted({path for path, _ in (*r.files, *r.symlinks)})
        head.append(f"%package -n {r.nevra.name}\nSummary: {STANDIN_NOTE}\nAutoReqProv: no\n"
                    + (f"BuildArch: {r.arch}\n" if r.arch == "noarch" else "")
                    + "".join(f"Requires: {q}\n" for q in r.requires)
                    + f"%description -n {r.nevra.name}\n{STANDIN_NOTE}\n%files -n {r.nevra.name}\n"
                    + "".join(f"{path}\n" for path in paths))
    if any(r.files or r.symlinks for r in rpms):
        head.append("%install\ncp -a %{_sourcedir}/tree/. %{buildroot}/\n")
    return "\n".join(head)


def _tree(rpms: list[StandInRpm], root: Path) -> None:
    for r in rpms:
        for path, content in r.files:
            dest = root / path.lstrip("/")
            dest.parent.mkdir(parents=True, exist_ok=True)
            data = content.encode() if isinstance(content, str) else content
            dest.write_bytes(data)
            dest.chmod(0o755 if data.startswith(b"#!") else 0o644)
        for path, target in r.symlinks:
            dest = root / path.lstrip("/")
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.symlink_to(target)


def modulemd(name: str, streams: Mapping[str, Iterable[StandInRpm]]) -> str:
    """modulemd v2 documents, one per stream, listing its artifacts as N-E:V-R.A (the shape of a
    vendor's modules.yaml: document/version/data with name, stream, version, context, arch,
    profiles, artifacts.rpms; e.g. EuroLinux/eurolinux-8-modules-md modules.md)."""
    docs = []
    for stream, rpms in streams.items():
        artifacts = "".join(f"    - {r.label}\n" for r in rpms)
        docs.append(f"---\ndocument: modulemd\nversion: 2\ndata:\n  name: {name}\n  stream: \"{stream}\"\n"
                    f"  version: 1\n  context: \"00000000\"\n  arch: x86_64\n  summary: {name} {stream}\n"
                    f"  description: stand-in stream\n  license:\n    module: [MIT]\n  profiles:\n    default:\n"
                    f"      rpms: []\n  artifacts:\n    rpms:\n{artifacts}...\n")
    return "".join(docs)


def _group_key(spec: str, members: list[StandInRpm]) -> str:
    h = hashlib.sha256(spec.encode())
    for r in members:
        for path, content in (*r.files, *r.symlinks):
            h.update(f"\0{path}\0".encode() + (content.encode() if isinstance(content, str) else content))
    return h.hexdigest()[:20]


def _store(built: Path, cached: Path) -> None:
    """Copy a build into the cache, whole or not at all (renamed into place)."""
    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
        partial = Path(tempfile.mkdtemp(prefix=".partial-", dir=cached.parent))
    except OSError:
        return  # a cache this process cannot write: it builds every time
    try:
        shutil.copytree(built, partial, dirs_exist_ok=True)
        partial.rename(cached)
    except OSError:
        shutil.rmtree(partial, ignore_errors=True)  # another builder renamed first, or the disk is full


def build_rpms(rpms: Iterable[StandInRpm], dest: Path, cache_dir: Path | None = None) -> Path:
    """Every RPM under ``dest/<arch>/``: one rpmbuild per EVR (its names as subpackages).

    Each EVR's RPMs are cached under ``cache_dir`` (default: the lab cache's ``standin-rpms/``)
    by the hash of their spec and payload, and linked (or copied) from there: the catalog's
    trees are the same for every lab and test on the machine, and ~50 rpmbuild runs cost
    ~10 s on two busy cores. The same input gives the same RPMs either way."""
    groups: dict[tuple[int, str, str], list[StandInRpm]] = defaultdict(list)
    for r in rpms:
        groups[(r.nevra.epoch, r.nevra.version, r.nevra.release)].append(r)
    dest.mkdir(parents=True, exist_ok=True)
    cache = (Path(cache_dir) if cache_dir is not None else default_cache_dir()) / "standin-rpms"
    work = dest.parent / f".{dest.name}-build"
    for i, (evr, members) in enumerate(sorted(groups.items())):
        text = _spec(evr, members)
        cached = cache / _group_key(text, members)
        if not cached.is_dir():
            spec = work / f"s{i}.spec"
            spec.parent.mkdir(parents=True, exist_ok=True)
            spec.write_text(text)
            _tree(members, work / f"src{i}" / "tree")
            built = work / f"rpms{i}"
            # Payloads go in as built: no strip, no debuginfo split (brp scripts), no build-id links.
            subprocess.run(["rpmbuild", "-bb", "--quiet", "--target", "x86_64", "--define", f"_topdir {work}/top",
                            "--define", f"_sourcedir {work}/src{i}", "--define", f"_rpmdir {built}",
                            "--define", "_build_id_links none", "--define", "__os_install_post %{nil}",
                            "--define", "debug_package %{nil}", str(spec)],
                           check=True, capture_output=True, text=True, timeout=120)
            _store(built, cached)
            source = cached if cached.is_dir() else built
        else:
            source = cached
        for rpm in source.rglob("*.rpm"):
            target = dest / rpm.relative_to(source)
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(rpm, target)
            except OSError:
                shutil.copy2(rpm, target)
    shutil.rmtree(work, ignore_errors=True)
    return dest


def index(repo: Path, modules: str | None = None) -> Path:
    """createrepo_c over ``repo``, then (with ``modules``) the modulemd document set as its
    ``modules`` metadata (modifyrepo_c --mdtype=modules)."""
    subprocess.run(["createrepo_c", "-q", str(repo)], check=True, capture_output=True, text=True, timeout=120)
    if modules:
        (repo.parent / "modules.yaml").write_text(modules)
        subprocess.run(["modifyrepo_c", "--mdtype=modules", str(repo.parent / "modules.yaml"), str(repo / "repodata")],
                       check=True, capture_output=True, text=True, timeout=120)
    return repo


# ------------------------------------------------------------------ the catalog's EL rows as trees


def newer(n: Nevra) -> Nevra:
    """The same package at the next release: 1.el9 -> 2.el9, 20.el8 -> 21.el8, 1+cuda12.8 -> 2+cuda12.8."""
    m = re.match(r"^([0-9]+)(.*)$", n.release)
    if m is None:
        raise ValueError(f"release {n.release!r} of {n.name} does not start with a number")
    return n._replace(release=f"{int(m[1]) + 1}{m[2]}")


def standin(n: Nevra, row: ElRelease | None = None) -> StandInRpm:
    """``n`` as a stand-in RPM with its arch, the vendors' exact-EVR Requires (module docstring),
    the stand-in marker (/usr/share/doc/<name>/fleetspec-standin: verify then knows a lab host)
    and, for the packages that report a version, the payload of the apt stand-in of the same
    role (``payload``) so that the collector reads the tuple on an EL lab host as on an apt one."""
    arch = "noarch" if n.name.startswith(("kmod-nvidia", "amdgpu-dkms")) else "x86_64"
    evr = n.evr if n.epoch else f"{n.version}-{n.release}"
    requires: tuple[str, ...] = ()
    if n.name == "nvidia-driver-cuda":
        requires = (f"nvidia-driver-cuda-libs = {evr}", f"nvidia-kmod-common = {evr}")
    elif n.name == "kmod-nvidia-open-dkms":
        requires = (f"nvidia-kmod-common = {evr}",)
    elif n.name == "rocm":
        requires = (f"rocm-core = {evr}",)
    made = payload(row, n)
    marker = (f"/usr/share/doc/{n.name}/fleetspec-standin", f"{STANDIN_NOTE}\n{n.name} {evr}\n")
    files = (marker, *sorted((made.files if made else {}).items()))
    links = tuple(sorted((made.symlinks if made else {}).items()))
    return StandInRpm(n, arch, requires,
                      tuple((_el_path(p), _el_path(c) if isinstance(c, str) else c) for p, c in files),
                      tuple((_el_path(p), t) for p, t in links))


def _el_path(path: str) -> str:
    """An apt stand-in's path (or a text naming one) where EL keeps it: /usr/lib64 for Debian's
    multiarch libdir, /usr/include for its multiarch include dir."""
    return path.replace(LIBDIR + "/", "/usr/lib64/").replace("/usr/include/x86_64-linux-gnu/", "/usr/include/")


def payload(row: ElRelease | None, n: Nevra) -> StandInPackage | None:
    """The apt stand-in (fleetspec.lab.repo) whose files report what ``n`` reports on a node:
    NVIDIA's EL packaging puts nvidia-smi in nvidia-driver-cuda (the apt stand-in's
    nvidia-driver-<branch>), the toolkit's version.json in cuda-toolkit-<M>-<m>, cuDNN's header
    and library in libcudnn<major>-cuda-<cuda major>, NCCL's in libnccl/libnccl-devel (Debian's
    libnccl2/libnccl-dev), ROCm's .info/version in rocm-core, librccl in rccl, DCGM's host engine
    and unit in datacenter-gpu-manager-4-core, Pyxis's plugstack line in nvslurm-plugin-pyxis (one
    name on both; paths and that line's library path moved to EL's). None for the rest."""
    version = n.version
    if n.name in ("datacenter-gpu-manager-4-core", "nvslurm-plugin-pyxis"):
        # nv-hostengine and its nvidia-dcgm.service unit; Pyxis's plugstack line
        # (/usr/share/pyxis/pyxis.conf, %{_datadir}/pyxis/pyxis.conf in pyxis.spec)
        return _pin_standin(n.name, f"{n.version}-{n.release}", {})
    if row is None:
        return None
    if row.component in ("driver", "driver-tools"):
        compute, driver, fabric = _nvidia(version, None)
        return {"nvidia-driver-cuda": driver, "nvidia-fabricmanager": fabric}.get(n.name)
    if row.component == "cuda" and n.name == "cuda-toolkit-" + "-".join(row.release.split(".")[:2]):
        return _cuda(row.release)
    if row.component == "cudnn" and re.fullmatch(r"libcudnn[0-9]+-cuda-[0-9]+", n.name):
        return _cudnn(version, n.name.rsplit("-", 1)[1])
    if row.component == "nccl" and n.name in ("libnccl", "libnccl-devel"):
        lib, dev = _nccl(row.release, row.cuda)
        return lib if n.name == "libnccl" else dev
    rocm = re.fullmatch(r"(?P<v>[0-9]+\.[0-9]+\.[0-9]+)\.(?P<rint>[0-9]{5,})", version)
    if rocm and n.name in ("rocm-core", "rccl"):
        build = n.release.split(".")[0]  # 20.el8 -> 20, as /opt/rocm/.info/version reads "7.1.0-20"
        if n.name == "rocm-core":
            return _rocm(rocm["v"], None, build)[0]
        return _rocm(_rocm_from_int(rocm["rint"]), rocm["v"], build)[1]
    return None


def _stream_member(n: Nevra) -> bool:
    return ".el" in n.release and not n.name.startswith(("nvidia-fabricmanager", "nvidia-imex"))


class ElTree(NamedTuple):
    """One vendor repository's stand-in: its baseurl (the catalog's), packages, module streams."""

    baseurl: str
    rpms: tuple[StandInRpm, ...]
    streams: Mapping[str, tuple[StandInRpm, ...]]


def el_trees(el: int) -> list[ElTree]:
    """Per vendor repository of EL major ``el`` (NVIDIA's rhel<el> tree; each ROCm/amdgpu
    release's own baseurl), its stand-in RPMs: every catalog build and a newer one, the driver
    family in the ``nvidia-driver`` streams (EL9 only: EL10 has no streams, issue #42)."""
    trees: dict[str, dict[Nevra, StandInRpm]] = defaultdict(dict)
    streams: dict[str, dict[str, list[StandInRpm]]] = defaultdict(lambda: defaultdict(list))
    nvidia = el_repo(el, "nvidia")
    other_branch = el < 10 and nvidia is not None  # the 590 stand-ins: once, from the first driver row
    for row in el_data()[0]:
        if row.el != el:
            continue
        url = row.repo.rstrip("/")
        tree = trees[url]
        for n in row.packages:
            for build in (n._replace(condition=None), newer(n._replace(condition=None))):
                tree[build] = standin(build, row)
                if el < 10 and row.component == "driver" and _stream_member(build):
                    streams[url][f"{build.version.split('.')[0]}-open"].append(tree[build])
        if other_branch and row.component == "driver" and nvidia is not None and url == nvidia.baseurl.rstrip("/"):
            other_branch = False
            for n in row.packages:
                if _stream_member(n):
                    r590 = standin(n._replace(version=R590, condition=None), row._replace(release=R590))
                    tree[r590.nevra] = r590
                    streams[url]["590-open"].append(r590)
    return [ElTree(url, tuple(tree.values()), {s: tuple(m) for s, m in sorted(streams[url].items())})
            for url, tree in sorted(trees.items())]


def tree_path(baseurl: str) -> str:
    """Where a vendor URL's stand-in lives under a lab repository: its host and path, as the
    vendor lays it out (``developer.download.nvidia.com/compute/cuda/repos/rhel9/x86_64``)."""
    parts = urlsplit(baseurl)
    path = f"{parts.netloc}{parts.path}".strip("/")
    if not path or ".." in path.split("/"):
        raise ValueError(f"cannot lay out {baseurl!r} as a directory")
    return path


def build_el_repos(trees: Iterable[ElTree], out_dir: Path, extra: Mapping[str, Iterable[StandInRpm]] = {}) -> dict[str, Path]:
    """Each tree built and indexed under ``out_dir/<tree_path(baseurl)>``, plus ``extra``
    (path -> RPMs: the distribution's stand-ins); returns {baseurl or path: directory}."""
    built: dict[str, Path] = {}
    for tree in trees:
        dest = out_dir / tree_path(tree.baseurl)
        modules = modulemd("nvidia-driver", tree.streams) if tree.streams else None
        built[tree.baseurl] = index(build_rpms(tree.rpms, dest), modules)
    for rel, rpms in extra.items():
        built[rel] = index(build_rpms(rpms, out_dir / rel))
    return built
