"""Real dnf and rpm, resolving and installing against stand-in EL repositories, in a private root.

Why not a lab host: whether a stack's pins install, hold and roll back is dnf's decision and
rpm's record alone. dnf 4.14/libdnf 0.69 from Debian (EL9's own dnf generation) takes
``--installroot`` with ``reposdir``/``pluginconfpath`` of its own, so the rendered
``.dnf``/``.versionlock``/``.module`` files are exercised without root namespaces or a
running system: the rpmdb, the module state (``etc/dnf/modules.d``) and the versionlock list
all live under the root, where an EL node keeps them.

The repositories: empty RPMs built by the real ``rpmbuild`` (one spec per EVR, one
subpackage per name), indexed by ``createrepo_c``, with a modulemd ``modules.yaml`` added by
``modifyrepo_c``, the three steps by which a vendor's RPM tree carries module streams.
"""

from __future__ import annotations

import subprocess
from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import NamedTuple

from fleetspec.catalog.el import Nevra

# EL's rpmdb path (rpm 4.16+ on EL9: /var/lib/rpm, sqlite). Debian's rpm keeps its own
# database under ~/.rpmdb; a macros file in the private HOME puts it where an EL node has it.
EL_DBPATH = "/var/lib/rpm"
_QF = "%{NAME} %{EPOCHNUM}:%{VERSION}-%{RELEASE}\\n"


class StandInRpm(NamedTuple):
    nevra: Nevra
    arch: str = "x86_64"
    requires: tuple[str, ...] = ()  # rpm dependency strings: "name = 3:580.82.07-1.el9"
    files: tuple[tuple[str, str], ...] = ()  # (absolute path, text) the package lays down

    @property
    def label(self) -> str:
        n = self.nevra
        return f"{n.name}-{n.epoch}:{n.version}-{n.release}.{self.arch}"


def _spec(evr: tuple[int, str, str], rpms: list[StandInRpm]) -> str:
    epoch, version, release = evr
    head = [f"Name: fleetspec-standin\nVersion: {version}\nRelease: {release}\n"
            + (f"Epoch: {epoch}\n" if epoch else "")
            + "Summary: stand-in\nLicense: none\n%description\nstand-in\n"]
    install = [f"mkdir -p %{{buildroot}}{path.rsplit('/', 1)[0]}\ncat > %{{buildroot}}{path} <<'FLEETSPEC_EOF'\n"
               f"{text}FLEETSPEC_EOF\n" for r in rpms for path, text in r.files]
    for r in rpms:
        head.append(f"%package -n {r.nevra.name}\nSummary: stand-in for {r.nevra.name}\n"
                    + (f"BuildArch: {r.arch}\n" if r.arch == "noarch" else "")
                    + "".join(f"Requires: {q}\n" for q in r.requires)
                    + f"%description -n {r.nevra.name}\nstand-in\n%files -n {r.nevra.name}\n"
                    + "".join(f"{path}\n" for path, _ in r.files))
    if install:
        head.append("%install\n" + "".join(install))
    return "\n".join(head)


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


def build_rpms(rpms: Iterable[StandInRpm], dest: Path) -> Path:
    """Every RPM under ``dest/<arch>/``: one rpmbuild per EVR (its names as subpackages)."""
    groups: dict[tuple[int, str, str], list[StandInRpm]] = defaultdict(list)
    for r in rpms:
        groups[(r.nevra.epoch, r.nevra.version, r.nevra.release)].append(r)
    work = dest.parent / f".{dest.name}-build"
    for i, (evr, members) in enumerate(sorted(groups.items())):
        spec = work / f"s{i}.spec"
        spec.parent.mkdir(parents=True, exist_ok=True)
        spec.write_text(_spec(evr, members))
        subprocess.run(["rpmbuild", "-bb", "--quiet", "--target", "x86_64", "--define", f"_topdir {work}/top",
                        "--define", f"_rpmdir {dest}", "--define", "_build_id_links none", str(spec)],
                       check=True, capture_output=True, text=True, timeout=120)
    return dest


def index(repo: Path, modules: str | None = None) -> Path:
    subprocess.run(["createrepo_c", "-q", str(repo)], check=True, capture_output=True, text=True, timeout=120)
    if modules:
        (repo.parent / "modules.yaml").write_text(modules)
        subprocess.run(["modifyrepo_c", "--mdtype=modules", str(repo.parent / "modules.yaml"), str(repo / "repodata")],
                       check=True, capture_output=True, text=True, timeout=120)
    return repo


class DnfRoot:
    """An EL node's package state in a directory: rpmdb, module state, versionlock list."""

    def __init__(self, root: Path, repos: Mapping[str, Path] | None) -> None:
        """``repos``: {id: directory} in a private reposdir; None: dnf reads the root's own
        etc/yum.repos.d, as a node's dnf does (what the role writes there)."""
        self.root = root / "root"
        self.home = root / "home"
        self.reposd = root / "yum.repos.d"
        self.plugins = root / "plugins"
        for d in (self.root / "etc/dnf/modules.d", self.root / "etc/dnf/plugins", self.home, self.reposd, self.plugins):
            d.mkdir(parents=True, exist_ok=True)
        (self.home / ".rpmmacros").write_text(f"%_dbpath {EL_DBPATH}\n")
        self.locklist = self.root / "etc/dnf/plugins/versionlock.list"
        self.locklist.write_text("")
        (self.plugins / "versionlock.conf").write_text(f"[main]\nenabled=1\nlocklist={self.locklist}\n")
        self.own_repos = repos is not None
        (self.root / "etc/yum.repos.d").mkdir(parents=True, exist_ok=True)
        self.repos(repos or {})

    def repos(self, repos: Mapping[str, Path]) -> None:
        for old in self.reposd.glob("*.repo"):
            old.unlink()
        for rid, path in repos.items():
            (self.reposd / f"{rid}.repo").write_text(f"[{rid}]\nname={rid}\nbaseurl=file://{path}\ngpgcheck=0\n"
                                                     "enabled=1\nmetadata_expire=0\n")

    def env(self) -> dict[str, str]:
        return {"LC_ALL": "C.UTF-8", "HOME": str(self.home), "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}

    def dnf(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["dnf", "-y", f"--installroot={self.root}", "--releasever=9", "--nogpgcheck",
                               *([f"--setopt=reposdir={self.reposd}"] if self.own_repos else []),
                               f"--setopt=pluginconfpath={self.plugins}",
                               f"--setopt=cachedir={self.root.parent}/cache", "--setopt=module_platform_id=platform:el9",
                               "--setopt=install_weak_deps=0", *args],
                              capture_output=True, text=True, timeout=180, env=self.env())

    def write(self, rel: str, text: str) -> None:
        (self.root / rel).write_text(text)

    def installed(self) -> dict[str, str]:
        """{name: epoch:version-release} from the rpmdb, through rpm itself."""
        done = subprocess.run(["rpm", f"--root={self.root}", "-qa", "--qf", _QF], capture_output=True, text=True,
                              timeout=60, env=self.env())
        assert done.returncode == 0, done.stderr
        return dict(line.split(" ", 1) for line in done.stdout.splitlines())
