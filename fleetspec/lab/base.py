"""Build and cache the Debian bookworm root filesystem every lab node overlays.

Why cached: mmdebstrap takes ~20 s and needs the Debian mirror; nodes only need a
read-only lower layer, so one build per package list serves every lab on the machine.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

SUITE = "bookworm"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
# Everything a node needs to be driven by Ansible (apt module: python3-apt) and checked
# by testinfra (procps for ps, iproute2 for addresses), plus ping/nc for fabric checks,
# and ansible-core for the node's own converge run.
BASE_PACKAGES: tuple[str, ...] = (
    "systemd-sysv",
    "dbus",
    "python3",
    "python3-apt",
    "openssh-server",
    "sudo",
    "iproute2",
    "iputils-ping",
    "netcat-openbsd",
    "procps",
    # The boot-time converge (fleetspec_converge role) runs ansible-playbook on the node;
    # the role installs it from the archive, which a lab node cannot reach.
    "ansible-core",
)
# Units that would only slow boot or fight the lab (timers hitting the network, a getty
# on a console nobody reads).
MASKED_UNITS: tuple[str, ...] = ("apt-daily.timer", "apt-daily-upgrade.timer", "console-getty.service")
REPO_MOUNT = "/srv/fleetspec-repo"
# Host tools: command -> Debian package providing it.
HOST_TOOLS: dict[str, str] = {
    "mmdebstrap": "mmdebstrap",
    "apt-ftparchive": "apt-utils",
    "systemd-nspawn": "systemd-container",
    "ssh": "openssh-client",
    "ssh-keygen": "openssh-client",
    "ip": "iproute2",
    "nc": "netcat-openbsd",
    "dpkg-deb": "dpkg",
    "dpkg-scanpackages": "dpkg-dev",
    "gcc": "gcc",
}


class LabUnavailable(RuntimeError):
    """The machine cannot host a lab (not root, tools missing, kernel refuses namespaces)."""


def default_cache_dir() -> Path:
    """`$FLEETSPEC_LAB_CACHE`, else /var/cache/fleetspec-lab (shared by all labs on the machine)."""
    return Path(os.environ.get("FLEETSPEC_LAB_CACHE", "/var/cache/fleetspec-lab"))


def base_key(packages: tuple[str, ...] = BASE_PACKAGES, suite: str = SUITE) -> str:
    """Cache key: a change to the package list, suite, masked units or layout rebuilds the base."""
    text = "\n".join((suite, *sorted(packages), *MASKED_UNITS, REPO_MOUNT, "layout-1"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def missing_host_packages() -> list[str]:
    """Debian packages whose tools are absent from PATH, sorted and de-duplicated."""
    return sorted({pkg for tool, pkg in HOST_TOOLS.items() if shutil.which(tool) is None})


def ensure_host_packages() -> list[str]:
    """apt-get install the host tools that are missing; returns what was installed.

    Only as root (a lab needs root anyway); otherwise raise LabUnavailable naming them.
    """
    missing = missing_host_packages()
    if not missing:
        return []
    if os.geteuid() != 0:
        raise LabUnavailable(f"missing host packages {missing} and not root to install them")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    apt = ["apt-get", "-o", "DPkg::Lock::Timeout=600", "-q"]
    subprocess.run([*apt, "update"], check=True, env=env, capture_output=True)
    subprocess.run([*apt, "install", "-y", "--no-install-recommends", *missing], check=True, env=env, capture_output=True)
    still = missing_host_packages()
    if still:
        raise LabUnavailable(f"host packages still missing after apt-get install: {still}")
    return missing


def customize_hook() -> str:
    """Shell run by mmdebstrap on the finished tree ("$1" is the root); fixed text, no user values."""
    masks = " ".join(MASKED_UNITS)
    return (
        'rm -f "$1/etc/apt/sources.list" "$1/etc/hostname" "$1/etc/machine-id"; '
        ': > "$1/etc/machine-id"; '
        f'for u in {masks}; do ln -sf /dev/null "$1/etc/systemd/system/$u"; done; '
        f'mkdir -p "$1{REPO_MOUNT}" "$1/root/.ssh"; chmod 700 "$1/root/.ssh"; '
        'rm -f "$1"/etc/ssh/ssh_host_*; '
        # Host keys are made per node at first boot (sshd-keygen below); identical keys
        # across nodes would hide mistakes in host addressing.
        'printf "[Unit]\\nDescription=SSH host keys\\nBefore=ssh.service\\n'
        'ConditionPathExists=!/etc/ssh/ssh_host_ed25519_key\\n[Service]\\nType=oneshot\\n'
        'ExecStart=/usr/bin/ssh-keygen -A\\n[Install]\\nWantedBy=multi-user.target\\n" '
        '> "$1/etc/systemd/system/fleetspec-ssh-keygen.service"; '
        'ln -sf /etc/systemd/system/fleetspec-ssh-keygen.service '
        '"$1/etc/systemd/system/multi-user.target.wants/fleetspec-ssh-keygen.service"'
    )


def ensure_base(
    cache_dir: Path | None = None,
    packages: tuple[str, ...] = BASE_PACKAGES,
    mirror: str | None = None,
    progress: Callable[[str], None] | None = None,
) -> Path:
    """Return the cached base rootfs for `packages`, building it once if absent.

    Atomic: built in a temp dir beside the final path, then renamed, so a crash or a
    concurrent build never leaves a half-built base that later labs would trust.
    ``progress`` is told what the build does while it runs: mmdebstrap's own step lines
    ("I: downloading packages with apt...") as they come (#28 item 2: two silent minutes
    looked like a hang).
    """
    say = progress or (lambda _line: None)
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    final = cache / f"base-{SUITE}-{base_key(packages)}"
    if (final / "usr/sbin/sshd").exists():
        return final
    if os.geteuid() != 0:
        raise LabUnavailable("building the lab base needs root (mmdebstrap, device nodes)")
    if shutil.which("mmdebstrap") is None:
        raise LabUnavailable("mmdebstrap is not installed (see ensure_host_packages)")
    options = ["--variant=apt", "--mode=root", "--include=" + ",".join(packages),
               "--customize-hook=" + customize_hook()]
    say(f"building the lab's base image (Debian {SUITE}, about 260 MB, a few minutes; cached in {cache} for "
        "every later lab)")
    return build_root(final, options, SUITE, mirror or os.environ.get("FLEETSPEC_LAB_MIRROR", DEFAULT_MIRROR),
                      "usr/sbin/sshd", "base image", say, LabUnavailable)


def build_root(final: Path, options: list[str], suite: str, mirror: str, marker: str, what: str,
               say: Callable[[str], None], error: type[Exception]) -> Path:
    """``mmdebstrap OPTIONS SUITE ROOT MIRROR`` into a temporary directory beside ``final``,
    then renamed into place, so a crash or a concurrent build never leaves a half-built root
    that a later run would trust (``marker``, a path inside it, says a root is whole).
    mmdebstrap's step lines ("I: downloading packages with apt...") go to ``say`` as they
    come (#28 item 2: two silent minutes looked like a hang); a failure raises ``error``
    with the end of its output."""
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=final.parent))
    try:
        root = tmp / "root"
        started = time.monotonic()
        tail: list[str] = []
        argv = ["mmdebstrap", *options, suite, str(root), mirror]
        with subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) as proc:
            assert proc.stderr is not None
            for line in proc.stderr:
                tail = [*tail[-40:], line]
                if line.startswith("I: "):  # mmdebstrap's step lines; W:/E: lines are kept for the error
                    say(f"{what} ({time.monotonic() - started:.0f} s): {line[3:].strip()}")
        if proc.returncode != 0:
            raise error(f"mmdebstrap {suite} failed ({proc.returncode}): {''.join(tail)[-2000:]}")
        say(f"{what} built in {time.monotonic() - started:.1f} s")
        try:
            root.rename(final)
        except OSError:
            if not (final / marker).exists():  # lost a race only if the winner finished
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final
