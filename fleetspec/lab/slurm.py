"""A real Slurm cluster on this machine, started from fleetspec's rendered files.

One slurmctld and one ``slurmd -N <node>`` per node (Debian's build allows several
slurmd per host), all on 127.0.0.1 with free ports, every state/log/spool path under
one scratch directory, fake GPU character devices made with mknod. The rendered
configuration is "localized" (``localize_slurm_conf``, ``localize_gres_conf``): production
keys that point at real hosts, users, cgroups or slurmdbd are replaced, everything the
fleet decides (nodes, GRES, features, partitions, topology) is kept as rendered. Daemons run in sessions of their own and are recorded with their
start times in ``root/daemons.json``, so another process (``fleetspec lab down``) can
stop exactly them by pid.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import asdict, dataclass
from pathlib import Path, PurePosixPath

from fleetspec.node_side.hostlist import compress, expand

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
))  # fmt: skip
# cgroup.conf is installed as rendered: slurmctld 22.05 parses it at startup (and stops on
# a key it does not know), while no daemon here loads a cgroup plugin (the localized
# slurm.conf runs proctrack/linuxproc and task/none: cgroup/v2 is fatal in this container).
# Not installed: plugstack.conf (no Pyxis here) and slurmdbd.conf (no slurmdbd runs).
INSTALLED_FILES = ("slurm.conf", "gres.conf", "topology.conf", "cgroup.conf")
# topology.yaml (Slurm 25.05+) is installed as rendered too, but not restricted to a lab's
# subset (restrict_conf reads only the key=value files).
STOP_GRACE_S = 10.0


class SlurmUnavailable(RuntimeError):
    """Slurm is not installed and cannot be installed here."""


class SlurmError(RuntimeError):
    """A Slurm daemon or client did not do what was asked; the message carries its output."""


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


def process_start_time(pid: int) -> int | None:
    """Kernel start time of `pid` (clock ticks since boot); None once it exited or is a zombie.

    Recorded beside every pid we start, so a recycled pid is never taken for ours.
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return None if fields[0] in ("Z", "X") else int(fields[19])


def _key(line: str) -> str:
    return line.split("=", 1)[0].strip().lower() if "=" in line and not line.lstrip().startswith("#") else ""


# ---------------------------------------------------------------- configuration (pure)


def _switch_names(line: str) -> list[str]:
    return expand(line.split()[0].split("=", 1)[1])


def _restrict_line(line: str, keep_nodes: set[str], keep_switches: set[str]) -> str | None:
    """One config line limited to the kept nodes/switches; None drops the line.

    Node-bearing keys: NodeName= (slurm.conf, gres.conf), PartitionName= Nodes=,
    SwitchName= Nodes=/Switches=. Everything else passes unchanged.
    """
    key = _key(line)
    if key not in ("nodename", "partitionname", "switchname"):
        return line
    out: list[str] = []
    lists = 0  # Nodes=/Switches= fields left
    for i, field in enumerate(line.split()):
        name, _, value = field.partition("=")
        lname = name.lower()
        if (i == 0 and lname != "nodename") or lname not in ("nodename", "nodes", "switches"):
            out.append(field)
            continue
        if value.upper() in ("ALL", "DEFAULT"):
            out.append(field)
            lists += lname != "nodename"
            continue
        kept = [h for h in expand(value) if h in (keep_switches if lname == "switches" else keep_nodes)]
        if not kept and lname == "nodename":
            return None
        if kept:
            out.append(f"{name}={compress(kept)}")
            lists += lname != "nodename"
    if key != "nodename" and lists == 0:
        return None  # a partition or switch with nothing left in it
    return " ".join(out)


def restrict_conf(text: str, nodes: Collection[str]) -> str:
    """A slurm.conf, gres.conf or topology.conf limited to `nodes` (a lab's subset).

    Why: the lab runs a few nodes of a large fleet; every line naming a node, a partition
    or a switch must name only nodes that exist there, or slurmctld refuses the file.
    Partitions and switches left with no node are dropped; a switch whose children all
    went is dropped too (repeatedly, up the tree). Pure.
    """
    keep = set(nodes)
    lines = text.splitlines()
    switches = {s for line in lines if _key(line) == "switchname" for s in _switch_names(line)}
    while True:
        kept_lines = [r for r in (_restrict_line(line, keep, switches) for line in lines) if r is not None]
        remaining = {s for line in kept_lines if _key(line) == "switchname" for s in _switch_names(line)}
        if remaining == switches:
            return "\n".join(kept_lines) + ("\n" if text.endswith("\n") else "")
        switches = remaining


def restrict_slurm_files(files: Mapping[PurePosixPath, str], nodes: Collection[str]) -> dict[PurePosixPath, str]:
    """Rendered Slurm files with slurm.conf, gres.conf and topology.conf restricted to `nodes`."""
    return {p: restrict_conf(t, nodes) if p.name in INSTALLED_FILES else t for p, t in files.items()}


def localize_for_machines(text: str, root: Path, controller: str, addresses: Mapping[str, str]) -> str:
    """The rendered slurm.conf for a slurmctld here whose nodes are other machines (virtual
    nodes booted from a golden image): every node at its address (``addresses``), the
    controller at ``controller`` on the rendered ports, munge authentication as in production
    (the nodes are other machines), the controller's paths under ``root`` and the nodes' as
    rendered. Kept as rendered: SlurmctldParameters (configless), node and partition lines."""
    out: list[str] = []
    node_side = ("slurmdspooldir", "slurmdpidfile", "slurmdlogfile", "slurmctldport", "slurmdport", "authtype",
                 "credtype", "mpidefault", "proctracktype", "taskplugin", "jobacctgathertype")
    for line in text.splitlines():
        key = _key(line)
        if key in REPLACED_KEYS and key not in node_side:
            continue
        if key == "nodename":
            first, _, rest = line.partition(" ")
            out += [f"NodeName={h} NodeAddr={addresses[h]} {rest}" for h in expand(first.split("=", 1)[1])]
            continue
        if key == "partitionname":
            line = _without_gres_weights(line)
        if key in ("proctracktype", "taskplugin", "jobacctgathertype", "mpidefault"):
            continue  # replaced below: no cgroup v2 delegation in the lab's virtual nodes
        out.append(line)
    out += [
        "",
        "# --- localized: the controller here, the nodes virtual machines ---",
        f"SlurmctldHost=localhost({controller})",
        "SlurmUser=root",
        f"StateSaveLocation={root}/state",
        f"SlurmctldPidFile={root}/run/slurmctld.pid",
        f"SlurmctldLogFile={root}/log/slurmctld.log",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "MpiDefault=none",
        "MailProg=/bin/true",
        "SlurmdParameters=config_overrides",
        "ReturnToService=1",
    ]
    return "\n".join(out) + "\n"


def localize_slurm_conf(text: str, root: Path, ctld_port: int, node_ports: dict[str, int],
                        keep: Collection[str] = (), accounting_port: int | None = None) -> str:
    """The rendered slurm.conf made runnable here; node and partition lines kept.

    ``keep``: replaced keys whose rendered value is kept (``MpiDefault``, where this machine
    has the plugin's library: libpmix for ``pmix``). ``accounting_port``: a slurmdbd on
    127.0.0.1 (tests/slurm/slurmdbd.py) takes the accounting, and the rendered
    AccountingStorageTRES and AccountingStorageEnforce (with the GRES billing weights) stay."""
    kept = {k.lower() for k in keep}
    if accounting_port is not None:
        kept |= {"accountingstoragetres", "accountingstorageenforce"}
        accounting = ["AccountingStorageType=accounting_storage/slurmdbd", "AccountingStorageHost=localhost",
                      f"AccountingStoragePort={accounting_port}"]
    else:
        accounting = ["AccountingStorageType=accounting_storage/none"]
    out: list[str] = []
    for line in text.splitlines():
        key = _key(line)
        if key in REPLACED_KEYS and key not in kept:
            continue
        if key == "nodename":
            out.extend(_split_node_line(line, node_ports))
            continue
        if key == "partitionname" and "accountingstoragetres" not in kept:
            line = _without_gres_weights(line)
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
        *accounting,
        *(() if "mpidefault" in kept else ("MpiDefault=none",)),
        "MailProg=/bin/true",
        "SlurmdParameters=config_overrides",
        "ReturnToService=2",
    ]
    return "\n".join(out) + "\n"


def _without_gres_weights(line: str) -> str:
    """A PartitionName line whose TRESBillingWeights lose their GRES/... weights: without
    slurmdbd there is no gres TRES to weigh (slurmctld 22.05: "fatal: slurmdbd is required
    to run with TRES gres/gpu"), and slurmctld stops on a weight for a TRES it does not
    track ("TRES weight 'GRES:gpu' is not a configured TRES type"). CPU and Mem stay."""
    fields = []
    for field in line.split():
        if field.lower().startswith("tresbillingweights="):
            name, value = field.split("=", 1)
            kept = [w for w in value.split(",") if not w.lower().startswith("gres/")]
            if not kept:
                continue
            field = f"{name}={','.join(kept)}"
        fields.append(field)
    return " ".join(fields)


def _split_node_line(line: str, node_ports: dict[str, int]) -> list[str]:
    """One NodeName line per host, each reachable on its own port of 127.0.0.1."""
    first, _, rest = line.partition(" ")
    hosts = expand(first.split("=", 1)[1])
    return [
        f"NodeName={h} NodeHostname=localhost NodeAddr=127.0.0.1 Port={node_ports[h]} {rest}"
        for h in hosts
    ]


_FILE = re.compile(r"File=(\S+)")
# gres.conf(5) MultipleFiles=: the device files of one MIG instance, comma-separated.
_MULTIPLE = re.compile(r"MultipleFiles=(\S+)")


def localize_gres_conf(text: str, root: Path) -> str:
    """Device paths moved under ``root/dev`` (where the fake devices are)."""
    text = _MULTIPLE.sub(lambda m: "MultipleFiles=" + ",".join(f"{root}{p}" for p in m.group(1).split(",")), text)
    return re.sub(r"(?<![A-Za-z])File=(\S+)", lambda m: f"File={root}{m.group(1)}", text)


def make_devices(gres_text: str) -> list[Path]:
    """mknod a character device for every File= path in a (localized) gres.conf.

    Major numbers as the drivers use them: 195 for /dev/nvidiaN, 226 for renderD; a MIG
    instance's /dev/nvidia-caps/nvidia-capN (MultipleFiles=) gets 240: the driver's
    nvidia-caps major is allotted at load time from the dynamic range (the kernel's
    Documentation/admin-guide/devices.txt: "234-254 char RESERVED FOR DYNAMIC ASSIGNMENT").
    """
    made = []
    patterns = [*re.findall(r"(?<![A-Za-z])File=(\S+)", gres_text),
                *(p for files in _MULTIPLE.findall(gres_text) for p in files.split(","))]
    for pattern in patterns:
        m = re.match(r"^(.*?)(?:\[([0-9]+)-([0-9]+)\]|([0-9]+))$", pattern)
        if m is None:
            raise SlurmError(f"unexpected gres.conf File= pattern {pattern}")
        base, lo, hi, single = m.groups()
        numbers = range(int(lo), int(hi) + 1) if lo else [int(single)]
        major = 226 if "renderD" in base else 240 if "nvidia-cap" in base else 195
        for n in numbers:
            path = Path(f"{base}{n}")
            path.parent.mkdir(parents=True, exist_ok=True)
            if not path.exists():
                os.mknod(path, 0o666 | 0o020000, os.makedev(major, n))
            made.append(path)
    return made


# ---------------------------------------------------------------- daemons


@dataclass(frozen=True)
class Daemon:
    """A daemon we started: its name (slurmctld, slurmd-<node>), pid and kernel start time."""

    name: str
    pid: int
    start_time: int

    @property
    def alive(self) -> bool:
        return self.start_time != 0 and process_start_time(self.pid) == self.start_time


class Cluster:
    """A slurmctld + slurmds under ``root``; ``run`` executes Slurm clients against it.

    ``Cluster(root, files)`` writes the localized configuration; ``Cluster(root)`` attaches
    to one written (and possibly started) earlier, e.g. by another process.
    """

    def __init__(self, root: Path, files: Mapping[PurePosixPath, str] | None = None,
                 keep: Collection[str] = (), accounting_port: int | None = None,
                 machines: tuple[str, Mapping[str, str]] | None = None, prefix: Sequence[str] | None = None) -> None:
        """``machines``: (the controller's address, {node: address}) when the nodes are other
        machines (`localize_for_machines`): only slurmctld runs here. ``prefix``: what runs
        every daemon and client (another release's root, `fleetspec.lab.slurm_releases`);
        kept in ``root/prefix.json`` for a later ``Cluster(root)``."""
        self.root = Path(root)
        self.conf = self.root / "etc" / "slurm.conf"
        prefix_file = self.root / "prefix.json"
        if prefix is not None:
            self.root.mkdir(parents=True, exist_ok=True)
            prefix_file.write_text(json.dumps(list(prefix)))
        self.prefix: tuple[str, ...] = tuple(
            prefix if prefix is not None else json.loads(prefix_file.read_text()) if prefix_file.exists() else ())
        self._procs: dict[int, subprocess.Popen[bytes]] = {}
        if files is not None and machines is not None:
            self._write_for_machines(files, *machines)
        elif files is not None:
            self._write(files, keep, accounting_port)
        elif not self.conf.exists():
            raise SlurmError(f"no cluster under {self.root}: {self.conf} is missing")
        self.nodes = [h for line in self.conf.read_text().splitlines() if _key(line) == "nodename"
                      for h in expand(line.split()[0].split("=", 1)[1])]  # fmt: skip
        self.daemons: list[Daemon] = self._load_daemons()

    def _write(self, files: Mapping[PurePosixPath, str], keep: Collection[str], accounting_port: int | None) -> None:
        rendered = {p.name: t for p, t in files.items()}
        nodes = [h for line in rendered["slurm.conf"].splitlines() if _key(line) == "nodename"
                 for h in expand(line.split()[0].split("=", 1)[1])]  # fmt: skip
        ports = free_ports(len(nodes) + 1)
        node_ports = dict(zip(nodes, ports[1:]))
        for sub in ("etc", "state", "spool", "log", "run", "out"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        local = {
            "slurm.conf": localize_slurm_conf(rendered["slurm.conf"], self.root, ports[0], node_ports, keep,
                                              accounting_port),
            "gres.conf": localize_gres_conf(rendered.get("gres.conf", ""), self.root),
        }
        for name in ("topology.conf", "topology.yaml", "cgroup.conf"):
            if name in rendered:
                local[name] = rendered[name]
        for name, text in local.items():
            (self.root / "etc" / name).write_text(text)
        make_devices(local["gres.conf"])

    def _write_for_machines(self, files: Mapping[PurePosixPath, str], controller: str,
                            addresses: Mapping[str, str]) -> None:
        rendered = {p.name: t for p, t in files.items()}
        for sub in ("etc", "state", "log", "run", "out"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        local = {"slurm.conf": localize_for_machines(rendered["slurm.conf"], self.root, controller, addresses)}
        for name in ("gres.conf", "topology.conf", "topology.yaml", "cgroup.conf"):
            if name in rendered:
                local[name] = rendered[name]
        for name, text in local.items():
            (self.root / "etc" / name).write_text(text)

    @property
    def _daemons_file(self) -> Path:
        return self.root / "daemons.json"

    def _load_daemons(self) -> list[Daemon]:
        if not self._daemons_file.exists():
            return []
        return [Daemon(**d) for d in json.loads(self._daemons_file.read_text())]

    def _save_daemons(self) -> None:
        self._daemons_file.write_text(json.dumps([asdict(d) for d in self.daemons], indent=1))

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def run(self, *args: str, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([*self.prefix, *args], env=self.env, capture_output=True, text=True, timeout=timeout)
        if check and done.returncode != 0:
            raise SlurmError(f"{' '.join(args)} failed ({done.returncode}): {done.stderr}{done.stdout}")
        return done

    def _spawn(self, name: str, *args: str) -> Daemon:
        with open(self.root / "log" / f"{name}.out", "w") as log:
            # A session of its own: a Ctrl-C at the terminal that ran `lab up` must not reach it.
            proc = subprocess.Popen([*self.prefix, *args], env=self.env, stdin=subprocess.DEVNULL, stdout=log,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        self._procs[proc.pid] = proc
        daemon = Daemon(name, proc.pid, process_start_time(proc.pid) or 0)
        self.daemons.append(daemon)
        self._save_daemons()
        return daemon

    def start(self, wait_idle: bool = True, timeout: float = 30, nodes: Collection[str] | None = None) -> None:
        """Start slurmctld, then one slurmd per node (of ``nodes`` only, where given: the others
        boot later, `start_node`); on failure stop what was started."""
        try:
            ctld = self._spawn("slurmctld", "slurmctld", "-D", "-i")
            self._wait(lambda: self._ctld_up(ctld), timeout, "slurmctld did not come up")
            for node in self.nodes if nodes is None else [n for n in self.nodes if n in nodes]:
                self.start_node(node)
            if wait_idle:
                self.wait_idle(timeout)
        except BaseException:
            self.stop()
            raise

    def start_node(self, node: str, dynamic_conf: str | None = None) -> Daemon:
        """Start one node's slurmd (a node that boots later than the controller).
        ``dynamic_conf``: a dynamic node, absent from slurm.conf, that registers itself with
        these NodeName parameters (``slurmd -Z --conf``, as Slinky's NodeSet pods run), on a
        port of its own."""
        (self.root / "spool" / node).mkdir(parents=True, exist_ok=True)
        if dynamic_conf is None:
            return self._spawn(f"slurmd-{node}", "slurmd", "-D", "-N", node)
        if node not in self.nodes:
            self.nodes.append(node)
        conf = f"{dynamic_conf} Port={free_ports(1)[0]}"
        return self._spawn(f"slurmd-{node}", "slurmd", "-D", "-Z", "-N", node, "--conf", conf)

    def wait_idle(self, timeout: float = 30) -> None:
        """Wait until every node (those of slurm.conf and the dynamic ones started) is IDLE."""
        self._wait(self._all_idle, timeout, "nodes did not reach IDLE")

    def _ctld_up(self, ctld: Daemon) -> bool:
        if not ctld.alive:
            raise SlurmError("slurmctld exited:\n" + self.log("slurmctld.out"))
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

    def _wait(self, ready: Callable[[], bool], timeout: float, message: str) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if ready():
                return
            time.sleep(0.1)
        raise SlurmError(f"{message}:\n{self.run('sinfo', '-N', '-o', '%N %T %E', check=False).stdout}"
                         f"\n{self.log('slurmctld.log')[-2000:]}")

    def log(self, name: str) -> str:
        path = self.root / "log" / name
        return path.read_text(errors="replace") if path.exists() else ""

    @property
    def running(self) -> bool:
        """Whether the controller we started is alive."""
        return any(d.name == "slurmctld" and d.alive for d in self.daemons)

    def stop(self) -> None:
        """Cancel jobs and wait for them to end, SIGTERM every daemon we started
        (SIGKILL after 10 s), then kill any job step of this cluster left behind."""
        if self.running:
            self.run("scancel", "--full", "-u", "root", check=False, timeout=10)
            end = time.monotonic() + 15
            while time.monotonic() < end and self.run("squeue", "-h", "-o", "%i", check=False).stdout.strip():
                time.sleep(0.1)
        live = [d for d in reversed(self.daemons) if d.alive]
        for daemon in live:
            _signal(daemon.pid, signal.SIGTERM)
        end = time.monotonic() + STOP_GRACE_S
        while time.monotonic() < end and any(d.alive for d in live):
            self._reap()
            time.sleep(0.05)
        for daemon in live:
            if daemon.alive:
                _signal(daemon.pid, signal.SIGKILL)
        for proc in self._procs.values():
            proc.wait(timeout=5)
        self._procs.clear()
        for pid in self.stray_steps():
            _signal(pid, signal.SIGKILL)
        self.daemons = []
        self._daemons_file.unlink(missing_ok=True)

    def _reap(self) -> None:
        """Collect exited children we started (else they linger as zombies until we exit)."""
        for proc in self._procs.values():
            proc.poll()

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

    def sbatch(self, *args: str, script: str) -> subprocess.CompletedProcess[str]:
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


def _signal(pid: int, sig: signal.Signals) -> None:
    """Signal a process we started; one that exited meanwhile needs nothing more."""
    with suppress(ProcessLookupError):
        os.kill(pid, sig)


def _state(proc: Path) -> str:
    return (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]


@contextmanager
def running(root: Path, files: Mapping[PurePosixPath, str], wait_idle: bool = True,
            keep: Collection[str] = (), accounting_port: int | None = None) -> Iterator[Cluster]:
    cluster = Cluster(root, files, keep, accounting_port)
    try:
        cluster.start(wait_idle=wait_idle)
        yield cluster
    finally:
        cluster.stop()
