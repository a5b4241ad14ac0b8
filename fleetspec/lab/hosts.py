"""Start and stop lab nodes: namespaced stand-in hosts with sshd, on a private bridge.

Each node is a root filesystem (overlayfs over the cached base) run either by
systemd-nspawn with systemd as PID 1 (mode "nspawn") or by unshare with sshd as PID 1
(mode "unshare", for machines where nspawn cannot boot). Each node has its own network
namespace; a dedicated "fabric" namespace holds the bridge joining them, so the lab's
addresses never appear on the host's interfaces. Every process, namespace and cgroup the
lab creates is recorded in `work_dir/lab.json`, and `down()` removes exactly those.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from fleetspec.lab.base import REPO_MOUNT, LabUnavailable
from fleetspec.lab.slurm import process_start_time
from fleetspec.lab.ssh import LabSSH

NAME_RE = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
SUBNET = "10.251.0"  # /24, exists only inside the lab's namespaces
FIRST_HOST = 10
BRIDGE = "br0"
APT_SOURCE = "/etc/apt/sources.list.d/fleetspec-lab.list"
# Characters that would break overlayfs option strings or nspawn's --bind-ro=SRC:DST.
_UNSAFE_PATH = re.compile(r"[,:\s\\]")

# Fixed launcher scripts: every value arrives as a positional argument, never spliced in.
_NSPAWN_LAUNCHER = r"""set -eu
lower=$1 upper=$2 work=$3 root=$4 ns=$5 machine=$6 host=$7 repo=$8 mnt=$9; shift 9
mount -t overlay overlay -o "lowerdir=$lower,upperdir=$upper,workdir=$work" "$root"
for cg in "$@"; do echo $$ > "$cg/cgroup.procs"; done
if [ -n "$repo" ]; then set -- "--bind-ro=$repo:$mnt"; else set --; fi
exec systemd-nspawn -b -q --register=no --keep-unit --console=passive --link-journal=no \
  -M "$machine" --hostname="$host" -D "$root" --network-namespace-path="/run/netns/$ns" "$@"
"""
_UNSHARE_LAUNCHER = r"""set -eu
lower=$1 upper=$2 work=$3 root=$4 ns=$5 machine=$6 host=$7 repo=$8 mnt=$9; R=$root
mount -t overlay overlay -o "lowerdir=$lower,upperdir=$upper,workdir=$work" "$R"
mount -t proc proc "$R/proc"
mount --bind "$R/proc/sys" "$R/proc/sys"; mount -o remount,bind,ro "$R/proc/sys"
mount -t sysfs -o ro sysfs "$R/sys"
mount -t tmpfs -o mode=755,size=8m,nosuid tmpfs "$R/dev"
for n in "null 1 3" "zero 1 5" "full 1 7" "random 1 8" "urandom 1 9" "tty 5 0"; do
  set -- $n; mknod -m 666 "$R/dev/$1" c "$2" "$3"; done
mkdir "$R/dev/pts" "$R/dev/shm"; ln -s pts/ptmx "$R/dev/ptmx"; ln -s /proc/self/fd "$R/dev/fd"
mount -t devpts -o newinstance,ptmxmode=0666,mode=620 devpts "$R/dev/pts"
mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs "$R/dev/shm"
mount -t tmpfs -o mode=755,nosuid,nodev tmpfs "$R/run"; mkdir -m 755 "$R/run/sshd"
mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs "$R/tmp"
if [ -n "$repo" ]; then mount --bind "$repo" "$R$mnt"; mount -o remount,bind,ro "$R$mnt"; fi
hostname "$host"
chroot "$R" /usr/bin/ssh-keygen -A
exec chroot "$R" /usr/sbin/sshd -D -e
"""
# Waits until sshd on this namespace's loopback sends its banner (argv[1] = seconds).
_PROBE = r"""import socket, sys, time
end = time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    try:
        with socket.create_connection(("127.0.0.1", 22), timeout=1) as s:
            if s.recv(4) == b"SSH-":
                sys.exit(0)
    except OSError:
        pass
    time.sleep(0.05)
sys.exit(1)
"""


class LabError(RuntimeError):
    """A lab operation failed; the message says which node and why."""


def validate_name(name: str) -> str:
    """Node names become hostnames, namespace and cgroup names: DNS-1123 labels only."""
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise ValueError(f"invalid lab node name {name!r}: want {NAME_RE.pattern}")
    return name


@dataclass(frozen=True)
class LabNode:
    """One running node: its name (= hostname), network namespace, fabric address,
    directory on the host, and the launcher process we started (pid + start time, so a
    recycled pid is never mistaken for ours)."""

    name: str
    ns: str
    address: str
    dir: Path
    pid: int
    start_time: int
    machine: str
    cgroups: tuple[str, ...]


def _run(argv: list[str], check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(argv, capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise LabError(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc


# What the kernel answers for a cgroup that systemd (inside the container, or the host's for
# the machine's scope) removed while we walk it: ENOENT for a vanished entry, ENODEV when
# reading a directory whose cgroup is already dead (kernfs answers -ENODEV once a node is
# deactivated: fs/kernfs/file.c and dir.c, kernfs_get_active() failing; seen in this
# project's CI as "[Errno 19] No such device"). Either way that part is gone.
CGROUP_GONE = (errno.ENOENT, errno.ENODEV)


def remove_cgroup(root: Path, attempts: int = 5) -> list[str]:
    """rmdir the cgroup tree at ``root``, deepest first; the problems left, as text.

    The walk is retried while systemd removes parts of the tree under it."""
    for _ in range(attempts):
        try:
            dirs = sorted((p for p in root.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts))
            break
        except OSError as exc:
            if exc.errno not in CGROUP_GONE:
                raise
            time.sleep(0.05)
    else:
        dirs = []
    problems = []
    for d in [*dirs, root]:
        try:
            d.rmdir()
        except OSError as exc:
            if exc.errno not in CGROUP_GONE:
                problems.append(f"cgroup {d}: {exc}")
    return problems


def _cgroup_roots() -> list[Path]:
    """Where a per-node cgroup must be made: pure v2, or hybrid name=systemd + unified."""
    root = Path("/sys/fs/cgroup")
    if (root / "cgroup.controllers").exists():
        return [root]
    return [root / sub for sub in ("systemd", "unified") if (root / sub).is_dir()]


def _check_path(path: Path) -> Path:
    if _UNSAFE_PATH.search(str(path)):
        raise ValueError(f"lab path {str(path)!r} contains ',', ':', '\\' or whitespace")
    return path


def _put(upper: Path, lower: Path, rel: str, content: str, mode: int) -> None:
    """Write a file into a node's upper layer; parent dirs copy the base's mode and owner,
    because in overlayfs an upper directory's attributes replace the lower one's."""
    parts = Path(rel.lstrip("/")).parts
    for i in range(1, len(parts)):
        sub = Path(*parts[:i])
        dest = upper / sub
        if not dest.exists():
            dest.mkdir()
            src = lower / sub
            if src.is_dir():
                st = src.stat()
                os.chown(dest, st.st_uid, st.st_gid)
                dest.chmod(st.st_mode & 0o7777)
    target = upper / rel.lstrip("/")
    target.write_text(content)
    target.chmod(mode)


class Lab:
    """A set of nodes under `work_dir`, booted from `base`, optionally serving `repo_dir`
    to every node as a read-only trusted apt source."""

    def __init__(self, work_dir: Path, base: Path, repo_dir: Path | None = None, mode: str = "nspawn") -> None:
        if mode not in ("nspawn", "unshare"):
            raise ValueError(f"mode must be 'nspawn' or 'unshare', not {mode!r}")
        self.work_dir = _check_path(Path(work_dir).resolve())
        self.base = _check_path(Path(base).resolve())
        self.repo_dir = _check_path(Path(repo_dir).resolve()) if repo_dir is not None else None
        self.mode = mode
        self.id = hashlib.sha256(str(self.work_dir).encode()).hexdigest()[:8]
        self.fabric_ns = f"fsl-{self.id}-fabric"
        self.ssh = LabSSH(self.work_dir)
        self.nodes: list[LabNode] = self._load()
        # Launchers started by this process, waited for in down() so none lingers as a zombie.
        self._procs: dict[str, subprocess.Popen[bytes]] = {}

    # ------------------------------------------------------------------ state

    @property
    def _state_file(self) -> Path:
        return self.work_dir / "lab.json"

    def _load(self) -> list[LabNode]:
        """Nodes recorded by an earlier process (so a crashed session can still be downed)."""
        if not self._state_file.exists():
            return []
        data = json.loads(self._state_file.read_text())
        return [LabNode(**{**n, "dir": Path(n["dir"]), "cgroups": tuple(n["cgroups"])}) for n in data["nodes"]]

    def _save(self) -> None:
        nodes = [{**asdict(n), "dir": str(n.dir)} for n in self.nodes]
        self._state_file.write_text(json.dumps({"mode": self.mode, "fabric_ns": self.fabric_ns, "nodes": nodes}, indent=1))

    # ------------------------------------------------------------------ up

    def up(self, names: list[str], timeout: float = 60.0) -> list[LabNode]:
        """Start nodes `names` and return once sshd answers on every one of them.

        One call per lab: /etc/hosts of each node lists all nodes started together.
        """
        if self.nodes:
            raise LabError(f"lab {self.work_dir} is already up; down() it first")
        names = [validate_name(n) for n in names]
        if len(set(names)) != len(names) or not names:
            raise ValueError(f"node names must be unique and non-empty: {names}")
        if len(names) > 240:
            raise ValueError("at most 240 nodes per lab (one /24)")
        if os.geteuid() != 0:
            raise LabUnavailable("lab nodes need root (namespaces, mounts)")
        self.work_dir.mkdir(parents=True, exist_ok=True)
        pubkey = self.ssh.ensure_key()
        addresses = {n: f"{SUBNET}.{FIRST_HOST + i}" for i, n in enumerate(names)}
        try:
            self._make_fabric()
            for i, name in enumerate(names):
                self.nodes.append(self._start(i, name, addresses, pubkey))
                self._save()
            self.ssh.write_config({n.name: n.ns for n in self.nodes})
            self._wait_ssh(timeout)
        except BaseException:
            self.down()
            raise
        return list(self.nodes)

    def _make_fabric(self) -> None:
        _run(["ip", "netns", "add", self.fabric_ns])
        self._save()
        _run(["ip", "-n", self.fabric_ns, "link", "set", "lo", "up"])
        _run(["ip", "-n", self.fabric_ns, "link", "add", BRIDGE, "type", "bridge"])
        _run(["ip", "-n", self.fabric_ns, "link", "set", BRIDGE, "up"])

    def _prepare_dir(self, name: str, addresses: dict[str, str], pubkey: str) -> Path:
        node_dir = self.work_dir / "nodes" / name
        if node_dir.exists():
            shutil.rmtree(node_dir)
        for sub in ("upper", "work", "root"):
            (node_dir / sub).mkdir(parents=True)
        upper = node_dir / "upper"
        hosts = "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"
        hosts += "".join(f"{addr}\t{n}\n" for n, addr in addresses.items())
        _put(upper, self.base, "/etc/hostname", name + "\n", 0o644)
        _put(upper, self.base, "/etc/hosts", hosts, 0o644)
        _put(upper, self.base, "/root/.ssh/authorized_keys", pubkey, 0o600)
        if self.repo_dir is not None and not (self.base / "etc/redhat-release").exists():
            # An EL-shaped host (fleetspec.lab.el) reads its repositories from yum.repos.d, not apt.
            _put(upper, self.base, APT_SOURCE, f"deb [trusted=yes] file:{REPO_MOUNT} ./\n", 0o644)
        return node_dir

    def _link(self, index: int, ns: str, address: str) -> None:
        veth = f"v{index}"
        _run(["ip", "netns", "add", ns])
        _run(["ip", "-n", ns, "link", "set", "lo", "up"])
        _run(["ip", "-n", self.fabric_ns, "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns])
        _run(["ip", "-n", self.fabric_ns, "link", "set", veth, "master", BRIDGE, "up"])
        _run(["ip", "-n", ns, "addr", "add", f"{address}/24", "dev", "eth0"])
        _run(["ip", "-n", ns, "link", "set", "eth0", "up"])

    def _start(self, index: int, name: str, addresses: dict[str, str], pubkey: str) -> LabNode:
        ns = f"fsl-{self.id}-{name}"
        machine = f"fsl-{self.id}-{index}"
        node_dir = self._prepare_dir(name, addresses, pubkey)
        self._link(index, ns, addresses[name])
        cgroups: tuple[str, ...] = ()
        args = [str(self.base), str(node_dir / "upper"), str(node_dir / "work"), str(node_dir / "root"),
                ns, machine, name, str(self.repo_dir or ""), REPO_MOUNT]
        if self.mode == "nspawn":
            # No systemd as PID 1 on CI hosts: give each container a cgroup of its own,
            # otherwise nspawn --keep-unit containers share one and trample each other.
            cgroups = tuple(str(root / machine) for root in _cgroup_roots())
            for cg in cgroups:
                Path(cg).mkdir(exist_ok=True)
            argv = ["unshare", "--mount", "--propagation", "private", "sh", "-c", _NSPAWN_LAUNCHER, "lab-node",
                    *args, *cgroups]
        else:
            argv = ["ip", "netns", "exec", ns, "unshare", "--mount", "--uts", "--ipc", "--pid", "--fork",
                    "--kill-child=SIGKILL", "--propagation", "private", "sh", "-c", _UNSHARE_LAUNCHER, "lab-node", *args]
        with open(node_dir / "console.log", "wb") as log:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        self._procs[name] = proc
        start = process_start_time(proc.pid) or 0
        return LabNode(name, ns, addresses[name], node_dir, proc.pid, start, machine, cgroups)

    def _wait_ssh(self, timeout: float) -> None:
        probes = {
            n.name: subprocess.Popen(["ip", "netns", "exec", n.ns, sys.executable, "-c", _PROBE, str(timeout)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for n in self.nodes
        }
        failed = [name for name, p in probes.items() if p.wait() != 0]
        if failed:
            logs = {n: (self.work_dir / "nodes" / n / "console.log").read_text(errors="replace")[-1500:] for n in failed}
            raise LabError(f"sshd did not come up on {failed} within {timeout}s; console: {logs}")

    def ansible_vars(self) -> dict[str, dict[str, object]]:
        """{node name: Ansible host vars} for an inventory of this lab's nodes: how to reach
        each, and what a lab host cannot do. PMIx (fleetspec_pmix_packages) is a distribution
        library, not part of the tuple, and lab hosts reach no Debian mirror; their slurmd
        runs on the host with MpiDefault=none (localize_slurm_conf)."""
        return {n.name: {**self.ssh.ansible_vars(n.name, n.ns), "fleetspec_pmix_packages": []}
                for n in self.nodes}

    # ------------------------------------------------------------------ status / down

    def _alive(self, node: LabNode) -> bool:
        return node.start_time != 0 and process_start_time(node.pid) == node.start_time

    def status(self) -> dict[str, str]:
        """{node name: "running" | "stopped"} from the launcher processes we recorded."""
        return {n.name: "running" if self._alive(n) else "stopped" for n in self.nodes}

    def _ns_pids(self, ns: str) -> list[int]:
        proc = _run(["ip", "netns", "pids", ns], check=False)
        return [int(p) for p in proc.stdout.split()] if proc.returncode == 0 else []

    def _node_pids(self, node: LabNode) -> set[int]:
        """The node itself: our launcher and whatever runs in the node's cgroups."""
        pids = {node.pid} if self._alive(node) else set()
        for cg in node.cgroups:
            try:
                for procs in Path(cg).rglob("cgroup.procs") if Path(cg).exists() else ():
                    pids.update(int(p) for p in procs.read_text().split())
            except OSError as exc:
                if exc.errno not in CGROUP_GONE:
                    raise
                continue  # systemd inside the node removed that cgroup while we walked it
        return pids

    def _leftover_pids(self, node: LabNode) -> list[int]:
        """Processes that can only be this node's: its own, plus anything still inside its
        netns (e.g. an ssh ProxyCommand `nc` whose peer sshd is gone)."""
        return sorted(self._node_pids(node) | set(self._ns_pids(node.ns)))

    def _stop_targets(self, node: LabNode) -> list[int]:
        """nspawn: the launcher itself (SIGTERM = clean container poweroff). unshare: the
        node's PID 1, the launcher's child; unshare then reaps it and exits by itself."""
        if not self._alive(node):
            return []
        if self.mode == "nspawn":
            return [node.pid]
        children = Path(f"/proc/{node.pid}/task/{node.pid}/children")
        try:
            return [int(p) for p in children.read_text().split()] or [node.pid]
        except OSError:
            return []

    def down(self, timeout: float = 15.0) -> None:
        """Stop every node and remove every namespace, cgroup, mount and file we made.

        Mounts live in each launcher's private mount namespace, so they vanish with it.
        """
        self.ssh.close([n.name for n in self.nodes])
        sig = signal.SIGTERM if self.mode == "nspawn" else signal.SIGKILL
        for node in self.nodes:
            for pid in self._stop_targets(node):
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + timeout
        for proc in self._procs.values():  # reap our launchers (else they stay zombies)
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        while time.monotonic() < deadline and any(self._node_pids(n) for n in self.nodes):
            time.sleep(0.05)
        for node in self.nodes:
            for pid in self._leftover_pids(node):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for proc in self._procs.values():
            proc.wait(timeout=5)
        self._procs.clear()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(self._leftover_pids(n) for n in self.nodes):
            time.sleep(0.05)
        problems = [f"{n.name}: pids {self._leftover_pids(n)} survive SIGKILL" for n in self.nodes
                    if self._leftover_pids(n)]
        for node in self.nodes:
            _run(["ip", "netns", "del", node.ns], check=False)
            for cg in node.cgroups:
                problems.extend(f"{node.name}: {p}" for p in remove_cgroup(Path(cg)))
            shutil.rmtree(Path("/run/systemd/nspawn/propagate") / node.machine, ignore_errors=True)
            shutil.rmtree(node.dir, ignore_errors=True)
        if Path("/run/netns", self.fabric_ns).exists():
            _run(["ip", "netns", "del", self.fabric_ns], check=False)
        self.nodes = []
        self._state_file.unlink(missing_ok=True)
        if problems:
            raise LabError("lab down left something behind: " + "; ".join(problems))
