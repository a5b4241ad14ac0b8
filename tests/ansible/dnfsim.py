"""Real dnf and rpm, resolving and installing against stand-in EL repositories, in a private root.

Why not a lab host: whether a stack's pins install, hold and roll back is dnf's decision and
rpm's record alone. dnf 4.14/libdnf 0.69 from Debian (EL9's own dnf generation) takes
``--installroot`` with ``reposdir``/``pluginconfpath`` of its own, so the rendered
``.dnf``/``.versionlock``/``.module`` files are exercised without root namespaces or a
running system: the rpmdb, the module state (``etc/dnf/modules.d``) and the versionlock list
all live under the root, where an EL node keeps them.

The repositories: fleetspec.lab.rpmrepo's stand-ins (``rpmbuild``, ``createrepo_c``,
``modifyrepo_c``), the ones ``fleetspec lab`` serves to its EL hosts.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from pathlib import Path

# EL's rpmdb path (rpm 4.16+ on EL9: /var/lib/rpm, sqlite). Debian's rpm keeps its own
# database under ~/.rpmdb; a macros file in the private HOME puts it where an EL node has it.
EL_DBPATH = "/var/lib/rpm"
_QF = "%{NAME} %{EPOCHNUM}:%{VERSION}-%{RELEASE}\\n"


class DnfRoot:
    """An EL node's package state in a directory: rpmdb, module state, versionlock list."""

    def __init__(self, root: Path, repos: Mapping[str, Path] | None, el: int = 9) -> None:
        """``repos``: {id: directory} in a private reposdir; None: dnf reads the root's own
        etc/yum.repos.d, as a node's dnf does (what the role writes there). ``el``: the EL major
        dnf runs as (``--releasever``, ``module_platform_id=platform:el<N>``, the PLATFORM_ID of
        EL's /etc/os-release)."""
        self.el = el
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
        return subprocess.run(["dnf", "-y", f"--installroot={self.root}", f"--releasever={self.el}", "--nogpgcheck",
                               *([f"--setopt=reposdir={self.reposd}"] if self.own_repos else []),
                               f"--setopt=pluginconfpath={self.plugins}",
                               f"--setopt=cachedir={self.root.parent}/cache", f"--setopt=module_platform_id=platform:el{self.el}",
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
