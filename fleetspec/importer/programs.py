"""Programs a site's slurm.conf has Slurm run with privilege: a trust boundary.

slurm.conf(5) of 22.05.8 (https://manpages.ubuntu.com/manpages/lunar/en/man5/slurm.conf.5.html):
Prolog and Epilog run as root on every node ("Must be executable by user root"; a glob such
as ``/etc/slurm/prolog.d/*`` may name several), RebootProgram runs on each node to reboot
it, PrologSlurmctld/EpilogSlurmctld run as SlurmUser beside slurmctld ("giving it
permission to drain nodes and requeue the job"), UnkillableStepProgram "Must be executable
by user SlurmUser". Whoever can write such a file runs code as root (or as SlurmUser) on
the fleet, so an imported path is refused where anyone but root can plant or replace it:

- a relative path (slurm.conf(5) wants a "Fully qualified pathname"; a relative one
  resolves against whatever directory the daemon runs in),
- a path under a world-writable tree or a user's home (/tmp, /var/tmp, /dev/shm, /home,
  /run/user), after ``..`` is folded,
- where the path exists on the machine running the import: a world-writable file, or a
  world-writable directory above it (one without the sticky bit anywhere, or its own
  directory even with it: a missing file there can be created by anyone).

Every other site program is kept, with a warning at its line: fleetspec carries the
setting, not the script, and a site Prolog takes the place of fleetspec's GPU prolog.
"""

from __future__ import annotations

import os
import posixpath
import stat

from fleetspec.importer.conf import Pair, Problem

# Key -> who runs it (slurm.conf(5), as quoted above).
PROGRAMS = {
    "Prolog": "slurmd runs it as root on every node before a job's first step",
    "Epilog": "slurmd runs it as root on every node when a job ends",
    "RebootProgram": "slurmd runs it as root to reboot a node",
    "PrologSlurmctld": "slurmctld runs it as SlurmUser before granting each job, with rights to drain nodes",
    "EpilogSlurmctld": "slurmctld runs it as SlurmUser when each job ends",
    "UnkillableStepProgram": "slurmd runs it when a job step cannot be killed",
}
# Trees anyone (or any user, for their own home) can write below.
UNSAFE_TREES = ("/tmp", "/var/tmp", "/dev/shm", "/home", "/run/user")
_GLOB = "*?["


def check_programs(settings: dict[str, Pair], problems: list[Problem], warnings: list[Problem]) -> None:
    """Refuse or note each privileged program ``settings`` (canonical key -> pair) names."""
    for key, why in PROGRAMS.items():
        pair = settings.get(key)
        if pair is None or not pair.value.strip():
            continue
        path = pair.value.strip()
        reason = _unsafe(path)
        if reason:
            problems.append(Problem(pair.value_at, f"{key}={_clip(path)}: {why}, and {reason}: anyone who can write "
                                    "there runs code with that privilege on the fleet. Move the program under a "
                                    "root-owned directory (/etc/slurm, /usr/local/sbin) and import again"))
            continue
        extra = ""
        if key == "Prolog":
            extra = ("; it replaces fleetspec's GPU prolog (spec.health renders Prolog=/usr/local/sbin/"
                     "fleetspec-prolog): keep it and the per-job GPU check does not run, or call that check from it")
        warnings.append(Problem(pair.value_at, f"{key}={_clip(path)}: a site program ({why}); fleetspec keeps the "
                                f"setting, not the program: it must stay installed, root-owned, on every host that "
                                f"runs it{extra}", "warning"))


def _unsafe(path: str) -> str | None:
    if not path.startswith("/"):
        return "the path is relative (slurm.conf(5) wants a fully qualified pathname)"
    folded = posixpath.normpath(path)
    for tree in UNSAFE_TREES:
        if folded == tree or folded.startswith(tree + "/"):
            return f"it lies under {tree}, which users can write to"
    fixed = folded
    for i, ch in enumerate(folded):  # the directory part before any glob character
        if ch in _GLOB:
            fixed = folded[: folded.rfind("/", 0, i) + 1] or "/"
            break
    return _world_writable(fixed)


def _world_writable(path: str) -> str | None:
    """Where ``path`` exists here: a world-writable file or directory in the way."""
    try:
        real = os.path.realpath(path)
        st = os.stat(real)
    except OSError:
        real, st = path, None
    if real != path:
        for tree in UNSAFE_TREES:
            if real == tree or real.startswith(tree + "/"):
                return f"it is a link into {tree}, which users can write to"
    if st is not None and st.st_mode & stat.S_IWOTH and not stat.S_ISLNK(st.st_mode):
        return f"{real} is world-writable"
    parent = posixpath.dirname(real.rstrip("/")) or "/"
    first = True
    while True:
        try:
            mode = os.stat(parent).st_mode
        except OSError:
            mode = 0
        if mode & stat.S_IWOTH and (first or not mode & stat.S_ISVTX):
            return f"{parent} is world-writable"
        if parent == "/":
            return None
        parent, first = posixpath.dirname(parent) or "/", False


def _clip(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
