"""The EL-shaped lab host (#42 item 5): the lab's Debian base plus dnf 4.14/libdnf 0.69 (EL9's
own dnf generation, from Debian), the versionlock plugin and rpm, and Rocky Linux 9's release
files installed by a stand-in ``rocky-release`` RPM in an EL rpmdb. Ansible's fact gathering
then says ``ansible_os_family == "RedHat"``, ``pkg_mgr == "dnf"``, distribution Rocky 9.x, and
dnf finds ``$releasever`` and the modular platform where an EL node has them.

What it cannot stand in for: an EL kernel (DKMS builds, dracut), SELinux, EL's glibc and
systemd, rpm scriptlets of the vendors' packages (the stand-ins have none), and the
distribution's own packages (none are installed; the lab's BaseOS stand-in serves only what
the roles ask for by name). docs/packaging.md says what only a real EL node proves.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

from fleetspec.lab.base import (
    BASE_PACKAGES,
    DEFAULT_MIRROR,
    REPO_MOUNT,
    SUITE,
    LabUnavailable,
    base_key,
    build_root,
    customize_hook,
    default_cache_dir,
)

# dnf and rpm from Debian bookworm: dnf 4.14.0, libdnf 0.69.0 (EL9 ships dnf 4.14/libdnf 0.69),
# dnf-plugins-core 4.3.1 (its versionlock plugin: /etc/dnf/plugins/versionlock.{conf,list}),
# rpm 4.18 (sqlite rpmdb, as EL9's rpm 4.16+).
EL_PACKAGES: tuple[str, ...] = (*BASE_PACKAGES, "dnf", "python3-dnf", "dnf-plugins-core", "rpm")

# Rocky Linux 9's release package, rocky-release-9.7-1.3.el9.noarch (its spec, SPECS/rocky-release.spec
# in Rocky's rocky-release sources, read as codacy-open-source-projects-scans/rocky-release@8efadfc8:
# major 9, minor 7, rocky_rel 1.3, distro_code "Blue Onyx", support_end 2032-05-31). The texts below
# are what its %install writes, its macros expanded; the Provides are its own (system-release(releasever)
# is how dnf finds $releasever, base-module(platform:el9) libdnf's modular platform).
ROCKY_RELEASE = ("rocky-release", "9.7", "1.3.el9")
ROCKY_PROVIDES: tuple[str, ...] = (
    "rocky-release(upstream) = 9.7", "redhat-release = 9.7-1.3.el9", "system-release = 9.7-1.3.el9",
    "system-release(releasever) = 9", "system-release(releasever_major) = 9", "system-release(releasever_minor) = 7",
    "centos-release = 9.7-1.3.el9", "centos-release(upstream) = 9.7", "base-module(platform:el9)",
)
ROCKY_OS_RELEASE = """\
NAME="Rocky Linux"
VERSION="9.7 (Blue Onyx)"
ID="rocky"
ID_LIKE="rhel centos fedora"
VERSION_ID="9.7"
PLATFORM_ID="platform:el9"
PRETTY_NAME="Rocky Linux 9.7 (Blue Onyx)"
ANSI_COLOR="0;32"
LOGO="fedora-logo-icon"
CPE_NAME="cpe:/o:rocky:rocky:9::baseos"
HOME_URL="https://rockylinux.org/"
VENDOR_NAME="RESF"
VENDOR_URL="https://resf.org/"
BUG_REPORT_URL="https://bugs.rockylinux.org/"
SUPPORT_END="2032-05-31"
ROCKY_SUPPORT_PRODUCT="Rocky-Linux-9"
ROCKY_SUPPORT_PRODUCT_VERSION="9.7"
REDHAT_SUPPORT_PRODUCT="Rocky Linux"
REDHAT_SUPPORT_PRODUCT_VERSION="9.7"
"""
ROCKY_FILES: dict[str, str] = {
    "etc/rocky-release": "Rocky Linux release 9.7 (Blue Onyx)\n",
    "etc/rocky-release-upstream": "Derived from Red Hat Enterprise Linux 9.7\n",
    "etc/system-release-cpe": "cpe:/o:rocky:rocky:9::baseos\n",
    "usr/lib/os-release": ROCKY_OS_RELEASE,
}
ROCKY_LINKS: dict[str, str] = {  # the spec's `ln -s`
    "etc/system-release": "rocky-release",
    "etc/redhat-release": "rocky-release",
    "etc/os-release": "../usr/lib/os-release",
}
# EL9's rpmdb (rpm 4.16+: /var/lib/rpm, sqlite). Debian's rpm keeps it under ~/.rpmdb
# (/usr/lib/rpm/macros: %_dbpath %(bash -c 'echo ~/.rpmdb')); /etc/rpm/macros puts it back.
EL_DBPATH = "/var/lib/rpm"
# The distribution's repositories as the lab serves them: the stand-in of rocky-repos's rocky.repo
# (ids baseos, appstream, crb; crb disabled until enabled, as Rocky ships it), each pointing at the
# lab repository's tree laid out as dl.rockylinux.org's ($contentdir/$releasever/<Repo>/$basearch/os).
EL_DISTRO_TREES = {"baseos": "BaseOS", "appstream": "AppStream", "crb": "CRB"}
EL_TREES = "el"  # under the lab repository: the stand-in RPM repositories of an EL fleet
# The site's own repository (what a site builds: SchedMD's Slurm RPMs, Enroot/Pyxis; the catalog's
# site_built rows), in the hosts' /etc/yum.repos.d/fleetspec-lab-site.repo as a site's node has it.
SITE_TREE = "site.fleetspec.invalid/el9"


def distro_tree(repo: str, major: int = 9) -> str:
    """A Rocky repository's tree under the lab's EL_TREES (``baseos`` -> dl.rockylinux.org/pub/rocky/9/
    BaseOS/x86_64/os: rocky.repo's own baseurl, $contentdir/$releasever/BaseOS/$basearch/os, expanded)."""
    return f"dl.rockylinux.org/pub/rocky/{major}/{EL_DISTRO_TREES[repo]}/x86_64/os"


def rocky_repo_file(major: int = 9) -> str:
    out = ["# fleetspec lab: the stand-in of Rocky's rocky.repo (rocky-repos), served from the lab repository\n"]
    for rid, name in EL_DISTRO_TREES.items():
        out.append(f"\n[{rid}]\nname=Rocky Linux $releasever - {name}\nbaseurl=file://{REPO_MOUNT}/{EL_TREES}/{distro_tree(rid, major)}\n"
                   f"gpgcheck=0\nenabled={0 if rid == 'crb' else 1}\nmetadata_expire=0\n")
    return "".join(out)


def site_repo_file() -> str:
    return ("# fleetspec lab: the site's own repository (Slurm, Enroot/Pyxis built by the site), served by the lab\n"
            f"[fleetspec-lab-site]\nname=site packages\nbaseurl=file://{REPO_MOUNT}/{EL_TREES}/{SITE_TREE}\n"
            "gpgcheck=0\nenabled=1\nmetadata_expire=0\n")


def _release_spec() -> str:
    name, version, release = ROCKY_RELEASE
    files = [*ROCKY_FILES, *ROCKY_LINKS]
    return (f"Name: {name}\nVersion: {version}\nRelease: {release}\nSummary: fleetspec lab stand-in of Rocky Linux's "
            f"release files\nLicense: BSD-3-Clause\nBuildArch: noarch\n"
            + "".join(f"Provides: {p}\n" for p in ROCKY_PROVIDES)
            + "%description\nfleetspec lab stand-in: not the vendor package\n%install\n"
            "cp -a %{_sourcedir}/tree/. %{buildroot}/\n%files\n"
            + "".join(f"/{f}\n" for f in sorted(files)))


def build_release_rpm(work: Path) -> Path:
    """rocky-release as a noarch RPM built by the real rpmbuild; returns its path."""
    tree = work / "src" / "tree"
    for rel, text in ROCKY_FILES.items():
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        (tree / rel).write_text(text)
    for rel, target in ROCKY_LINKS.items():
        (tree / rel).symlink_to(target)
    (tree / "etc/yum.repos.d").mkdir(parents=True, exist_ok=True)
    spec = work / "rocky-release.spec"
    spec.write_text(_release_spec())
    subprocess.run(["rpmbuild", "-bb", "--quiet", "--define", f"_topdir {work}/top", "--define",
                    f"_sourcedir {work}/src", "--define", f"_rpmdir {work}/rpms", "--define", "_build_id_links none",
                    str(spec)], check=True, capture_output=True, text=True, timeout=120)
    (rpm,) = (work / "rpms").rglob("*.rpm")
    return rpm


def el_key() -> str:
    """Cache key of the EL base: the package list, the release package, repo file and hook texts."""
    text = "\n".join((base_key(EL_PACKAGES), _release_spec(), *ROCKY_FILES.values(), rocky_repo_file(),
                      site_repo_file(), _el_hook(Path("release.rpm"), Path("repos"))))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _el_hook(release_rpm: Path, repo_dir: Path) -> str:
    """After the common hook: EL's rpmdb path, rocky-release installed into it with rpm (its files
    replace Debian's /etc/os-release), rocky.repo and the site's repository, dpkg's identity files gone (an EL node has
    no /etc/debian_version, which Ansible's and others' distribution checks read)."""
    return (
        # Debian's dnf-plugins-core enables the `local` plugin (a _dnf_local repository of every
        # downloaded package); EL's dnf-plugins-core.spec builds python3-dnf-plugin-local only
        # where 0%{?rhel} == 0, so an EL node has none.
        'printf "[main]\\nenabled = false\\n" > "$1/etc/dnf/plugins/local.conf"; '
        f'mkdir -p "$1/etc/rpm" "$1{EL_DBPATH}" "$1/etc/yum.repos.d"; '
        f'printf "%%_dbpath {EL_DBPATH}\\n" > "$1/etc/rpm/macros"; '
        'rm -f "$1/etc/os-release" "$1/usr/lib/os-release" "$1/etc/debian_version" "$1/etc/lsb-release"; '
        f'rpm --root "$1" --dbpath {EL_DBPATH} --nodeps -i "{release_rpm}"; '
        f'cp "{repo_dir}/rocky.repo" "{repo_dir}/fleetspec-lab-site.repo" "$1/etc/yum.repos.d/"'
    )


def ensure_el_base(cache_dir: Path | None = None, mirror: str | None = None,
                   progress: Callable[[str], None] | None = None) -> Path:
    """Return the cached EL-shaped base rootfs, building it once if absent (like ensure_base,
    through the same build_root: atomic, mmdebstrap's step lines to ``progress``)."""
    say = progress or (lambda _line: None)
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    final = cache / f"base-{SUITE}-el9-{el_key()}"
    if (final / "usr/sbin/sshd").exists() and (final / EL_DBPATH.lstrip("/")).is_dir():
        return final
    if os.geteuid() != 0:
        raise LabUnavailable("building the lab's EL base needs root (mmdebstrap, device nodes)")
    for tool in ("mmdebstrap", "rpmbuild", "rpm"):
        if shutil.which(tool) is None:
            raise LabUnavailable(f"{tool} is not installed (Debian: mmdebstrap, rpm)")
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".el-release-", dir=cache) as tmp:
        release_rpm = build_release_rpm(Path(tmp))
        (Path(tmp) / "rocky.repo").write_text(rocky_repo_file())
        (Path(tmp) / "fleetspec-lab-site.repo").write_text(site_repo_file())
        hook = customize_hook() + "; " + _el_hook(release_rpm, Path(tmp))
        options = ["--variant=apt", "--mode=root", "--include=" + ",".join(EL_PACKAGES), "--customize-hook=" + hook]
        say(f"building the lab's EL-shaped base image (Debian {SUITE} with dnf and rpm, Rocky Linux 9's release "
            f"files; a few minutes; cached in {cache})")
        return build_root(final, options, SUITE, mirror or os.environ.get("FLEETSPEC_LAB_MIRROR", DEFAULT_MIRROR),
                          "usr/sbin/sshd", "EL base image", say, LabUnavailable)
