"""A real Slurm cluster on this machine, started from fleetspec's rendered files.

One slurmctld and one ``slurmd -N <node>`` per node (Debian's build allows several
slurmd per host), all on 127.0.0.1 with free ports, every state/log/spool path under
one scratch directory, fake GPU character devices made with mknod. The rendered
configuration is "localized" the way ../shared/recipes/slurm-on-one-machine.md
records: production keys that point at real hosts, users, cgroups or slurmdbd are
replaced, everything the fleet decides (nodes, GRES, features, partitions, topology)
is kept as rendered. Daemons are stopped by pid.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path, PurePosixPath

from fleetspec.spec.hostlist import expand

PACKAGES = ("slurmctld", "slurmd", "slurm-client", "munge")
TOOLS = ("slurmctld", "slurmd", "sinfo", "scontrol", "sbatch", "squeue", "scancel")

# Keys of a production slurm.conf that a one-machine cluster must replace.
REPLACED_KEYS = frozenset(k.lower() for k in (
    "SlurmctldHost", "SlurmctldPort", "SlurmdPort", "AuthType", "CredType", "SlurmUser",
    "SlurmdUser", "StateSaveLocation", "SlurmdSpoolDir", "SlurmctldPidFile", "SlurmdPidFile",
    "SlurmctldLogFile", "SlurmdLogFile", "ProctrackType", "TaskPlugin", "JobAcctGatherType",
    "AccountingStorageType", "AccountingStorageHost", "AccountingStoragePort",
    "AccountingStorageTRES", "AccountingStorageEnforce", "PrologFlags", "MpiDefault",
    "ReturnToService",
))
# Files the daemons here do not read: cgroup.conf (22.05 has no CgroupPlugin=disabled and
# cgroup/v2 is fatal in this container), plugstack.conf (no Pyxis installed), slurmdbd.conf.
INSTALLED_FILES = ("slurm.conf", "gres.conf", "topology.conf")


class SlurmUnavailable(RuntimeError):
    """Slurm is not installed and cannot be installed here."""


def missing_tools() -> list[str]:
    return [t for t in TOOLS if shutil.which(t) is None]


def ensure_slurm() -> None:
    """Install Debian's Slurm packages when a tool is missing (root only)."""
    if not missing_tools():
        return
    if os.geteuid() != 0:
        raise SlurmUnavailable(f"missing {missing_tools()} and not root to apt-get install {PACKAGES}")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    apt = ["apt-get", "-o", "DPkg::Lock::Timeout=600"]
    for cmd in (apt + ["update", "-q"], apt + ["install", "-y", "-q", *PACKAGES]):
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
        if done.returncode != 0:
            raise SlurmUnavailable(f"{' '.join(cmd)} failed: {done.stderr[-500:]}")
    if missing_tools():
        raise SlurmUnavailable(f"still missing after install: {missing_tools()}")


def free_ports(count: int) -> list[int]:
    """Ports free on 127.0.0.1 now (held open together so they are distinct)."""
    with ExitStack() as stack:
        ports = []
        for _ in range(count):
            s = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            s.bind(("127.0.0.1", 0))
            ports.append(s.getsockname()[1])
        return ports


def _key(line: str) -> str:
    return line.split("=", 1)[0].strip().lower() if "=" in line and not line.lstrip().startswith("#") else ""


def localize_slurm_conf(text: str, root: Path, ctld_port: int, node_ports: dict[str, int]) -> str:
    """The rendered slurm.conf made runnable here; node and partition lines kept."""
    out: list[str] = []
    for line in text.splitlines():
        key = _key(line)
        if key in REPLACED_KEYS:
            continue
        if key == "nodename":
            out.extend(_split_node_line(line, node_ports))
            continue
        out.append(line)
    out += [
        "",
        "# --- localized for a one-machine test cluster ---",
        "SlurmctldHost=localhost",
        f"SlurmctldPort={ctld_port}",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/none",
        "CredType=cred/none",
        f"StateSaveLocation={root}/state",
        f"SlurmdSpoolDir={root}/spool/%n",
        f"SlurmctldPidFile={root}/run/slurmctld.pid",
        f"SlurmdPidFile={root}/run/slurmd-%n.pid",
        f"SlurmctldLogFile={root}/log/slurmctld.log",
        f"SlurmdLogFile={root}/log/slurmd-%n.log",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "MpiDefault=none",
        "MailProg=/bin/true",
        "SlurmdParameters=config_overrides",
        "ReturnToService=2",
    ]
    return "\n".join(out) + "\n"


def _split_node_line(line: str, node_ports: dict[str, int]) -> list[str]:
    """One NodeName line per host, each reachable on its own port of 127.0.0.1."""
    first, _, rest = line.partition(" ")
    hosts = expand(first.split("=", 1)[1])
    return [
        f"NodeName={h} NodeHostname=localhost NodeAddr=127.0.0.1 Port={node_ports[h]} {rest}"
        for h in hosts
    ]


_FILE = re.compile(r"File=(\S+)")


def localize_gres_conf(text: str, root: Path) -> str:
    """Device paths moved under ``root/dev`` (where the fake devices are)."""
    return _FILE.sub(lambda m: f"File={root}{m.group(1)}", text)


def make_devices(gres_text: str) -> list[Path]:
    """mknod a character device for every File= path in a (localized) gres.conf.

    Major numbers as the drivers use them: 195 for /dev/nvidiaN, 226 for renderD.
    """
    made = []
    for pattern in _FILE.findall(gres_text):
        m = re.match(r"^(.*?)(?:\[(\d+)-(\d+)\]|(\d+))$", pattern)
        assert m, f"unexpected File= pattern {pattern}"
        base, lo, hi, single = m.groups()
        numbers = range(int(lo), int(hi) + 1) if lo else [int(single)]
        major = 226 if "renderD" in base else 195
        for n in numbers:
            path = Path(f"{base}{n}")
            path.parent.mkdir(parents=True, exist_ok=True)
            if not path.exists():
                os.mknod(path, 0o666 | 0o020000, os.makedev(major, n))
            made.append(path)
    return made


class Cluster:
    """A running slurmctld + slurmds under ``root``; ``run`` executes Slurm clients."""

    def __init__(self, root: Path, files: dict[PurePosixPath, str]) -> None:
        self.root = root
        self.conf = root / "etc" / "slurm.conf"
        self.pids: list[int] = []
        self._procs: list[subprocess.Popen] = []
        rendered = {p.name: t for p, t in files.items()}
        self.nodes = [h for line in rendered["slurm.conf"].splitlines() if _key(line) == "nodename"
                      for h in expand(line.split()[0].split("=", 1)[1])]
        ports = free_ports(len(self.nodes) + 1)
        self.ctld_port = ports[0]
        node_ports = dict(zip(self.nodes, ports[1:]))
        for sub in ("etc", "state", "spool", "log", "run", "out"):
            (root / sub).mkdir(parents=True, exist_ok=True)
        local = {
            "slurm.conf": localize_slurm_conf(rendered["slurm.conf"], root, self.ctld_port, node_ports),
            "gres.conf": localize_gres_conf(rendered.get("gres.conf", ""), root),
        }
        if "topology.conf" in rendered:
            local["topology.conf"] = rendered["topology.conf"]
        for name, text in local.items():
            assert name in INSTALLED_FILES
            (root / "etc" / name).write_text(text)
        make_devices(local["gres.conf"])

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def run(self, *args: str, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess:
        done = subprocess.run(list(args), env=self.env, capture_output=True, text=True, timeout=timeout)
        if check and done.returncode != 0:
            raise AssertionError(f"{' '.join(args)} failed ({done.returncode}): {done.stderr}{done.stdout}")
        return done

    def _spawn(self, name: str, *args: str) -> None:
        log = open(self.root / "log" / f"{name}.out", "w")
        proc = subprocess.Popen(list(args), env=self.env, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        self._procs.append(proc)
        self.pids.append(proc.pid)

    def start(self, wait_idle: bool = True, timeout: float = 30) -> None:
        self._spawn("slurmctld", "slurmctld", "-D", "-i")
        self._wait(self._ctld_up, timeout, "slurmctld did not come up")
        for node in self.nodes:
            (self.root / "spool" / node).mkdir(parents=True, exist_ok=True)
            self._spawn(f"slurmd-{node}", "slurmd", "-D", "-N", node)
        if wait_idle:
            self._wait(self._all_idle, timeout, "nodes did not reach IDLE")

    def _ctld_up(self) -> bool:
        if self._procs[0].poll() is not None:
            raise AssertionError("slurmctld exited:\n" + self.log("slurmctld.out"))
        ping = self.run("scontrol", "ping", check=False)
        if "UP" not in ping.stdout:
            return False
        config = self.run("scontrol", "show", "config", check=False).stdout
        return f"{self.root}/state" in config  # our controller, not another one

    def _all_idle(self) -> bool:
        states = self.node_states()
        return len(states) == len(self.nodes) and all(s == "idle" for s in states.values())

    def node_states(self) -> dict[str, str]:
        out = self.run("sinfo", "-h", "-N", "-o", "%N %T", check=False).stdout
        return dict(line.split() for line in out.splitlines() if line.strip())

    def _wait(self, ready, timeout: float, message: str) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if ready():
                return
            time.sleep(0.1)
        raise AssertionError(f"{message}:\n{self.run('sinfo', '-N', '-o', '%N %T %E', check=False).stdout}"
                             f"\n{self.log('slurmctld.log')[-2000:]}")

    def log(self, name: str) -> str:
        path = self.root / "log" / name
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self) -> None:
        """Cancel jobs and wait for them to end, SIGTERM every daemon we started
        (SIGKILL after 10 s), then kill any job step of this cluster left behind."""
        if self._procs and self._procs[0].poll() is None:
            self.run("scancel", "--full", "-u", "root", check=False, timeout=10)
            end = time.monotonic() + 15
            while time.monotonic() < end and self.run("squeue", "-h", "-o", "%i", check=False).stdout.strip():
                time.sleep(0.1)
        for proc in reversed(self._procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in reversed(self._procs):
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        self._procs.clear()
        for pid in self.stray_steps():
            os.kill(pid, signal.SIGKILL)

    def stray_steps(self) -> list[int]:
        """Live slurmstepd processes of this cluster (they detach from slurmd, so they
        are found by the SLURM_CONF they inherited)."""
        marker = f"SLURM_CONF={self.conf}".encode()
        found = []
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                if not (proc / "comm").read_text().startswith("slurmstepd"):
                    continue
                if marker in (proc / "environ").read_bytes().split(b"\0") and "Z" not in _state(proc):
                    found.append(int(proc.name))
            except OSError:
                continue
        return found

    # -- jobs ---------------------------------------------------------------------

    def sbatch(self, *args: str, script: str) -> subprocess.CompletedProcess:
        """Submit ``script``; output goes to ``out/<jobid>.out``."""
        path = self.root / "out" / f"job-{time.monotonic_ns()}.sh"
        path.write_text("#!/bin/bash\n" + script)
        return self.run("sbatch", "--parsable", "-o", f"{self.root}/out/%j.out", *args, str(path), check=False)

    def job(self, job_id: str) -> dict[str, str]:
        """``scontrol show job`` as key -> value."""
        text = self.run("scontrol", "-o", "show", "job", job_id).stdout
        return dict(field.split("=", 1) for field in text.split() if "=" in field)

    def wait_job(self, job_id: str, states: set[str], timeout: float = 20) -> dict[str, str]:
        end = time.monotonic() + timeout
        while True:
            info = self.job(job_id)
            if info.get("JobState") in states or time.monotonic() > end:
                return info
            time.sleep(0.1)

    def output(self, job_id: str) -> str:
        return (self.root / "out" / f"{job_id}.out").read_text()


def _state(proc: Path) -> str:
    return (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]


@contextmanager
def running(root: Path, files: dict[PurePosixPath, str], wait_idle: bool = True) -> Iterator[Cluster]:
    cluster = Cluster(root, files)
    try:
        cluster.start(wait_idle=wait_idle)
        yield cluster
    finally:
        cluster.stop()
