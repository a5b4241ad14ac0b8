"""Real Slurm at more than one release on this machine: the host's, and Debian's newer
builds in cached roots.

The host (Debian 12) carries slurm-wlm 22.05.8 (fleetspec/lab/slurm.py installs it). The
releases fleetspec renders for users are newer, and Debian ships two of them
(packages.debian.org, source package slurm-wlm): trixie (Debian 13) 24.11.5 and sid
26.05.5. Each is installed by ``mmdebstrap`` into a root of its own, built once per
machine and cached beside the lab's base image (`fleetspec.lab.base.default_cache_dir`),
keyed by suite and package list, built in a temporary directory and renamed when done.

A daemon or client of such a release runs as ``unshare --mount`` + ``chroot``: in a mount
namespace of its own, /proc, /dev and /sys (slurmd reads /sys/fs/cgroup) and /tmp (where
the cluster's scratch directory lives, at the same path inside and out) are bind-mounted
recursively into the root. The root itself is never written to at run time, and the
mounts go away with the last process of the namespace: nothing to unmount, nothing left
behind by a test that crashed. The pid `Cluster` records is the daemon's own (unshare,
sh and chroot each exec the next).

Use::

    with slurm_cluster(tmp, render_slurm(fleet), release="26.05") as cluster:
        cluster.node_states()   # {"gb200-r07-01": "idle", ...}
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from collections.abc import Callable, Collection, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from fleetspec.lab.base import DEFAULT_MIRROR, build_root, default_cache_dir
from fleetspec.lab.slurm import Cluster, SlurmUnavailable, ensure_slurm
from fleetspec.versions import at_least


@dataclass(frozen=True)
class Release:
    """A Slurm release the tests can start: ``suite`` None is the host's own packages."""

    series: str
    version: str
    suite: str | None


# The Debian suites and their slurm-wlm versions (packages.debian.org/{bookworm,trixie,sid}/
# slurmctld; Debian's tracker https://tracker.debian.org/pkg/slurm-wlm), as installed here:
# bookworm 22.05.8-4+deb12u*, trixie 24.11.5-4+deb13u1, sid 26.05.5-1.
RELEASES: dict[str, Release] = {
    "22.05": Release("22.05", "22.05.8", None),
    "24.11": Release("24.11", "24.11.5", "trixie"),
    "26.05": Release("26.05", "26.05.5", "sid"),
}
# What a root needs: the daemons and clients (auth/none here, munge for completeness: the
# packages depend on it).
ROOT_PACKAGES: tuple[str, ...] = ("slurmctld", "slurmd", "slurmdbd", "slurm-client", "munge", "python3")
# A sid snapshot's Release file is past its Valid-Until date (sid's is a week); the archive
# is still signed and checked, only the freshness window is not.
APT_OPTIONS: tuple[str, ...] = ('Acquire::Check-Valid-Until "false"',)
# Bind-mounted into the root for every process (see the module docstring).
BIND_MOUNTS: tuple[str, ...] = ("/proc", "/dev", "/sys", "/tmp")
# Run as: sh -c RUN_SCRIPT sh ROOT ARGV...: fixed text, the root and argv are arguments.
RUN_SCRIPT = (
    'r=$1; shift; for m in ' + " ".join(BIND_MOUNTS) + '; do mount --rbind "$m" "$r$m" || exit 125; done; '
    'exec chroot "$r" "$@"'
)
# Fixed content of the root's /etc/hosts: slurm.conf's SlurmctldHost=localhost resolves.
HOSTS = "127.0.0.1 localhost\n::1 localhost ip6-localhost ip6-loopback\n"


def release_for(version: str) -> Release:
    """The release a render for Slurm ``version`` starts on: the oldest one here at or above
    its series (a newer slurmctld reads an older release's syntax, not the other way round:
    topology.yaml from 25.05 means nothing to 24.11), else the newest one here."""
    for release in sorted(RELEASES.values(), key=lambda r: tuple(int(p) for p in r.series.split("."))):
        if at_least(release.version, _series(version)):
            return release
    return RELEASES[max(RELEASES, key=lambda s: tuple(int(p) for p in s.split(".")))]


def _series(version: str) -> str:
    match = re.match(r"^(\d+)\.(\d+)", version)
    if match is None:
        raise ValueError(f"not a Slurm version: {version!r}")
    return f"{match[1]}.{match[2]}"


def root_key(release: Release, packages: tuple[str, ...] = ROOT_PACKAGES) -> str:
    """Cache key: another suite, package list, apt options or /etc/hosts rebuilds the root."""
    text = "\n".join((str(release.suite), *sorted(packages), *APT_OPTIONS, HOSTS, "layout-1"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def host_mirror(sources: Path = Path("/etc/apt")) -> str:
    """The Debian mirror this machine's apt uses (the first ``.../debian`` URI of its
    sources, deb822 or one-line), else deb.debian.org; ``$FLEETSPEC_LAB_MIRROR`` wins."""
    if env := os.environ.get("FLEETSPEC_LAB_MIRROR"):
        return env
    files = [sources / "sources.list", *sorted((sources / "sources.list.d").glob("*.sources")),
             *sorted((sources / "sources.list.d").glob("*.list"))]
    for path in files:
        try:
            text = path.read_text()
        except OSError:
            continue
        for uri in re.findall(r"^\s*(?:URIs:\s*|deb\s+(?:\[[^]]*\]\s+)?)(\S+)", text, re.MULTILINE):
            if uri.rstrip("/").endswith("/debian"):
                return uri.rstrip("/")
    return DEFAULT_MIRROR


def _customize_hook() -> str:
    """Shell run by mmdebstrap on the finished root ("$1"); fixed text, no user values."""
    hosts = HOSTS.replace("\n", "\\n")
    return f'printf "{hosts}" > "$1/etc/hosts"; for m in {" ".join(BIND_MOUNTS)}; do mkdir -p "$1$m"; done'


def ensure_release_root(release: Release, cache_dir: Path | None = None, mirror: str | None = None,
                        progress: Callable[[str], None] | None = None) -> Path | None:
    """The root holding ``release``'s Slurm (None: the host's own, installed if missing),
    built once with mmdebstrap and cached; ``progress`` is told the build and its time."""
    if release.suite is None:
        ensure_slurm()
        return None
    say = progress or (lambda _line: None)
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    final = cache / f"slurm-{release.series}-{release.suite}-{root_key(release)}"
    if (final / "usr/sbin/slurmctld").exists():
        return final
    if os.geteuid() != 0:
        raise SlurmUnavailable(f"building the Slurm {release.series} root needs root (mmdebstrap --mode=root)")
    for tool in ("mmdebstrap", "unshare", "chroot"):
        if shutil.which(tool) is None:
            raise SlurmUnavailable(f"{tool} is not installed (scripts/test installs mmdebstrap)")
    options = ["--variant=apt", "--mode=root", *(f"--aptopt={o}" for o in APT_OPTIONS),
               "--include=" + ",".join(ROOT_PACKAGES), "--customize-hook=" + _customize_hook()]
    say(f"building the Slurm {release.series} root (Debian {release.suite}, about 220 MB; cached in {cache})")
    return build_root(final, options, release.suite, mirror or host_mirror(), "usr/sbin/slurmctld",
                      f"Slurm {release.series} root", say, SlurmUnavailable)


def command_prefix(root: Path | None) -> tuple[str, ...]:
    """What runs a command inside ``root`` (empty for the host's Slurm)."""
    if root is None:
        return ()
    return ("unshare", "--mount", "--propagation", "private", "--", "sh", "-c", RUN_SCRIPT, "sh", str(root))


def release_prefix(release: str, scratch: Path, cache_dir: Path | None = None,
                   progress: Callable[[str], None] | None = None) -> tuple[str, ...]:
    """What runs a command of Slurm ``release`` (`command_prefix` of its root, built if
    missing) over files under ``scratch``, which must lie under /tmp for a chroot release."""
    if release not in RELEASES:
        raise SlurmUnavailable(f"no Slurm {release} here; releases: {', '.join(RELEASES)}")
    root = ensure_release_root(RELEASES[release], cache_dir, progress=progress)
    if root is not None and not Path(scratch).resolve().is_relative_to("/tmp"):
        raise SlurmUnavailable(f"{scratch}: a Slurm {release} cluster's scratch directory must be under /tmp "
                               "(the only host directory its root sees)")
    return command_prefix(root)


@contextmanager
def slurm_cluster(scratch: Path, files: Mapping[PurePosixPath, str], release: str = "22.05",
                  wait_idle: bool = True, keep: Collection[str] = (), cache_dir: Path | None = None,
                  progress: Callable[[str], None] | None = None,
                  accounting_port: int | None = None) -> Iterator[Cluster]:
    """A real slurmctld and slurmds of Slurm ``release`` (a key of RELEASES) running the
    rendered ``files`` under ``scratch`` (which must lie under /tmp for a chroot release),
    stopped by pid on exit. ``release_for(fleet.slurm.version)`` picks one for a render.
    ``accounting_port``: a slurmdbd of the same release (`release_prefix`) to account to."""
    prefix = release_prefix(release, scratch, cache_dir, progress)
    cluster = Cluster(Path(scratch).resolve(), files, keep, accounting_port, prefix=prefix)
    try:
        cluster.start(wait_idle=wait_idle)
        yield cluster
    finally:
        cluster.stop()
