"""The node check: read this node's health, print a verdict, act through its owner.

Installed on every node by the ``fleet_health`` role (with the fact collector it
builds on) and run by Slurm as ``HealthCheckProgram`` or by hand::

    python3 -m fleetspec.node_side.node_check --config /etc/fleetspec/health.json [--slurm]

Stdlib only, Python 3.8 syntax. What it reads, each through ``--root`` so fixtures can
stand in for a node:

- the kernel log since its last run (``/dev/kmsg`` records after the sequence number it
  saw last; Xid/SXid faults stay latched, since the log line that reported them is never
  printed again: until the node reboots (a new boot id), until ``--clear``, or, for what a
  GPU reset fixes (RESET_CLEARS), until that GPU is reset: ``--gpu-reset BUS`` or its
  ``gpu_recovery_action`` going back to None);
- ``nvidia-smi -q -x`` (memory, PCIe, fabric) and ``amd-smi metric --ecc --json``;
- ``/sys/class/infiniband`` ports and their error counters;
- ``nvidia-smi nvlink --status`` (per-link state) and ``nvidia-smi nvlink -e`` (per-link
  replay/recovery/CRC error counters, judged by their rise since the last run) on NVIDIA nodes;
- with ``dcgm`` among the checks and DCGM installed, ``dcgmi diag -r LEVEL -j`` at the
  policy's level (and, when it finds a fault, ``dcgmi discovery -l`` for each GPU's PCI
  bus id).

With ``--slurm`` it drains the node with a reason naming the fault, in the form LBNL
NHC uses (``fleetspec-health: <action> <class>: <device> <detail>``), and resumes the
node only when it is drained with a reason this program wrote: an operator's drain is
never touched (NHC's node-mark-online does the same).

Exit status: 0 healthy or degraded (faults whose action is ``none``), 1 sick, 2 when the
check itself could not run (bad config, or it failed: never 1, which node-problem-detector
reads as NonOK and the remediator acts on).
"""

import argparse
import errno
import fcntl
import hashlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional, Tuple

from fleetspec.node_side import min_healthy
from fleetspec.node_side.classify import (
    Fault,
    amd_gpu_faults,
    dcgm_diag_faults,
    infiniband_faults,
    kernel_log_faults,
    latch_key,
    nvidia_gpu_faults,
    nvlink_counter_faults,
    nvlink_counter_state,
    nvlink_faults,
    parse_amd_ecc_json,
    parse_dcgm_diag_json,
    parse_dcgmi_discovery,
    parse_gpu_health_xml,
    parse_kmsg,
    parse_nvlink_errors,
    parse_nvlink_status,
    pci_key,
    reason,
    supersede,
    verdict,
)
from fleetspec.node_side.collector import CommandResult, Host, nvidia_smi_command, parse_infiniband_sysfs
from fleetspec.node_side.contract import DEVICE_ACTIONS, NPD_MAX_OUTPUT
from fleetspec.node_side.faults import (
    CHECKS,
    CLEAR_AFTER,
    COUNTER_CLASSES,
    DCGM_TIMEOUT_S,
    FLAP_LIMIT,
    FLAP_WINDOW_S,
    RESET_CLEARS,
)
from fleetspec.node_side.hostlist import expand

LEADER = "fleetspec-health:"
# A node the mig_geometry role split into MIG instances (playbooks/roles/mig_geometry: the
# mig-parted config it writes and the unit that applies it before slurmd).
MIG_CONFIG = "/etc/fleetspec/mig-parted.yaml"
MIG_UNIT = "fleetspec-mig.service"
STATE_FILE = "/var/lib/fleetspec/health/state.json"
LOCK_FILE = "/var/lib/fleetspec/health/check.lock"
# One deadline for the whole check, tools and scontrol together. slurmd kills a
# HealthCheckProgram that runs past 60 s (slurm.conf(5), HealthCheckProgram; slurmd's
# run_script max_wait), and node-problem-detector kills a custom plugin at its timeout (60 s
# in the rendered config) and reports Unknown, on which nothing acts: a check killed there
# never drains. So the GPU tools get what is left of DEADLINE_S less SLURM_RESERVE_S, and
# each scontrol call SCONTROL_TIMEOUT_S: 45 s at most, well inside 60.
DEADLINE_S = 45.0
SCONTROL_TIMEOUT_S = 7.0
SLURM_RESERVE_S = 2 * SCONTROL_TIMEOUT_S + 1
# Spread in time: slurmctld starts every node's HealthCheckProgram in the same second (without
# HealthCheckNodeState=CYCLE), and each check asks slurmctld about its node (scontrol show node)
# and, before a new drain, about every node. So each node waits its own share of JITTER_MAX_S
# (at most a quarter of the interval) before it talks to slurmctld: fixed per node (from a hash
# of its name, so one node's checks stay evenly spaced), spread evenly over the fleet, and never
# more than the check's deadline has left after reading the node.
JITTER_MAX_S = 10.0
pause = time.sleep  # the spread's wait (tests record it)
# DCGM diagnostic levels 2-4 load the GPUs for minutes to hours (DCGM_TIMEOUT_S): never in
# the periodic check; ``--dcgm-level N`` runs them from a prolog/epilog or a separate timer.
PERIODIC_DCGM_LEVEL = 1
KMSG = "/dev/kmsg"
IB_COUNTERS = ("link_downed", "link_error_recovery", "symbol_error", "port_rcv_errors")


class ConfigError(Exception):
    pass


# ---------------------------------------------------------------- configuration


def load_config(path: str) -> Dict[str, Any]:
    try:
        with open(path) as handle:
            config = json.load(handle)
    except (OSError, ValueError) as exc:
        raise ConfigError("%s: %s" % (path, exc)) from None
    if not isinstance(config, dict) or config.get("schema") != "fleetspec.io/health/v1":
        raise ConfigError("%s: not a fleetspec health config (schema fleetspec.io/health/v1)" % path)
    return config


def expectation(config: Dict[str, Any], node: str) -> Dict[str, Any]:
    """What the fleet says this node has (vendor, model, GPU count, fabric)."""
    for group in config.get("nodes", []):
        if node in expand(group["hosts"]):
            return group
    return {}


def node_name(explicit: Optional[str]) -> str:
    # slurmd sets SLURMD_NODENAME for HealthCheckProgram (several slurmd may share a host).
    return explicit or os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]


# ---------------------------------------------------------------- bounded commands


class BoundedHost(Host):
    """The node, with every command bounded by one deadline for the whole check; a tool
    that timed out once is not called again in this run (a wedged GPU hangs each call of
    nvidia-smi: three 30 s calls outlive slurmd's 60 s kill). ``hung``: {tool: seconds it
    was given}; ``budget_s``: seconds the commands may take in all (``None``: no deadline)."""

    def __init__(self, root: str = "/", budget_s: Optional[float] = None) -> None:
        Host.__init__(self, root)
        self.end = None if budget_s is None else time.monotonic() + budget_s
        self.hung = {}  # type: Dict[str, float]

    def left(self) -> Optional[float]:
        return None if self.end is None else self.end - time.monotonic()

    def run(self, argv: List[str], timeout: float = 30) -> CommandResult:
        tool = os.path.basename(argv[0])
        if tool in self.hung:
            return CommandResult("skipped", rc=-1, stderr="%s timed out earlier in this run: not called again" % tool)
        left = self.left()
        if left is not None and left < 1:
            return CommandResult("skipped", rc=-1, stderr="no time left within the check's %g s deadline" % DEADLINE_S)
        limit = timeout if left is None else min(timeout, left)
        if not self.commands:
            return CommandResult("disabled")
        path = argv[0] if "/" in argv[0] else self.which(argv[0])
        if path is None or not os.path.exists(path):
            return CommandResult("missing")
        result = run_bounded([path] + list(argv[1:]), limit)
        if result.state == "timeout":
            self.hung[tool] = limit
        return result


def run_bounded(argv: List[str], timeout: float) -> CommandResult:
    """Run ``argv`` in its own process group; at ``timeout`` kill the group and return
    without waiting for a child that cannot die (a process in uninterruptible sleep on a
    wedged GPU ignores SIGKILL until the driver lets go)."""
    env = dict(os.environ, LC_ALL="C", LANG="C")
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                env=env, start_new_session=True)
    except OSError as exc:
        return CommandResult("failed", rc=-1, stderr=str(exc))
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        try:
            proc.communicate(timeout=1)
        except subprocess.TimeoutExpired:
            pass  # left behind: the check must end in time, not wait for it
        return CommandResult("timeout", rc=-1, stderr="did not finish within %.0f s (killed)" % timeout)
    stdout = out.decode("utf-8", "replace")
    stderr = err.decode("utf-8", "replace")
    return CommandResult("ok" if proc.returncode == 0 else "failed", proc.returncode, stdout, stderr)


def hung_tool_faults(host: Host) -> List[Fault]:
    """One ``probe-failed`` fault per tool that timed out: a hung GPU tool is a sick GPU."""
    return [{"class": "probe-failed", "scope": "node", "device": tool,
             "detail": "hung: no answer within %.0f s (killed, not called again this run)" % seconds,
             "source": tool} for tool, seconds in sorted(getattr(host, "hung", {}).items())]


# ---------------------------------------------------------------- reading the node


def read_kernel_log(host: Host) -> Tuple[Optional[str], Optional[str]]:
    """(text, error). The real /dev/kmsg is read non-blocking, one record per read."""
    path = host.path(KMSG)
    if host.root != "/":
        text = host.read(KMSG, limit=64 << 20)
        return (text, None) if text is not None else (None, "%s: absent" % KMSG)
    records = []
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        return None, "%s: %s" % (KMSG, exc.strerror)
    try:
        while True:
            try:
                chunk = os.read(fd, 8192)
            except OSError as exc:
                if exc.errno == errno.EPIPE:  # overwritten while we read: continue with the next
                    continue
                if exc.errno == errno.EAGAIN:
                    break
                raise
            if not chunk:
                break
            records.append(chunk.decode("utf-8", "replace").rstrip("\n"))
    finally:
        os.close(fd)
    return "\n".join(records), None


def ib_counters(host: Host) -> Dict[str, Dict[str, int]]:
    out = {}  # type: Dict[str, Dict[str, int]]
    for device in host.listdir("/sys/class/infiniband"):
        for port in host.listdir("/sys/class/infiniband/%s/ports" % device):
            values = {}
            for name in IB_COUNTERS:
                text = host.read("/sys/class/infiniband/%s/ports/%s/counters/%s" % (device, port, name))
                if text is not None and text.strip().isdigit():
                    values[name] = int(text.strip())
            out["%s/%s" % (device, port)] = values
    return out


def gpu_faults(host: Host, expect: Dict[str, Any], errors: List[str],
               seen: Optional[Dict[str, Any]] = None) -> List[Fault]:
    """nvidia-smi / amd-smi faults; ``seen`` gets nvidia-smi's parsed GPUs (UUID -> PCI
    address for the NVLink check)."""
    vendor, want = expect.get("vendor"), expect.get("gpus")
    faults = []  # type: List[Fault]
    if vendor in ("nvidia", None):
        gpus = _vendor_gpus(host, "nvidia", vendor, nvidia_smi_command(host) + ["-q", "-x"],
                            parse_gpu_health_xml, faults, errors)
        if gpus is not None:
            if seen is not None:
                seen["nvidia"] = gpus
            faults += nvidia_gpu_faults(gpus, expect.get("model")) + _gpu_lost("nvidia-smi", gpus, want)
    if vendor in ("amd", None):
        gpus = _vendor_gpus(host, "amd", vendor, ["amd-smi", "metric", "--ecc", "--json"],
                            parse_amd_ecc_json, faults, errors)
        if gpus is not None:
            faults += amd_gpu_faults(gpus) + _gpu_lost("amd-smi", gpus, want)
    return faults


def _gpu_lost(tool: str, gpus: List[Any], want: Optional[int]) -> List[Fault]:
    if want and len(gpus) < want:
        return [{"class": "gpu-lost", "scope": "node", "device": "node",
                 "detail": "%s lists %d of %d GPUs" % (tool, len(gpus), want), "source": tool}]
    return []


def _vendor_gpus(host: Host, tool_vendor: str, vendor: Optional[str], argv: List[str], parse: Any,
                 faults: List[Fault], errors: List[str]) -> Optional[List[Any]]:
    """One vendor tool's parsed GPUs, or None. On a node of that vendor a tool that fails is
    a ``probe-failed`` fault (a timeout is reported by the deadline, a skip by its cause); on
    a node of unknown vendor it is only an error line."""
    tool = "nvidia-smi" if tool_vendor == "nvidia" else "amd-smi"
    result = host.run(argv, timeout=30)
    gpus = parse(result.stdout) if result.ok else None
    if gpus is not None:
        return gpus
    if vendor == tool_vendor and result.state not in ("timeout", "skipped"):
        faults.append({"class": "probe-failed", "scope": "node", "device": tool,
                       "detail": result.describe(argv)[:150], "source": tool})
    elif result.state == "failed":
        errors.append(result.describe(argv)[:200])
    return None


def dcgm_faults(host: Host, level: int, errors: List[str]) -> List[Fault]:
    """``dcgmi diag -r LEVEL -j``: it exits non-zero when a test fails and still prints
    its JSON, so the document decides; no document is an error (the check could not run),
    never a fault."""
    level = level if level in DCGM_TIMEOUT_S else 1
    argv = ["dcgmi", "diag", "-r", str(level), "-j"]
    result = host.run(argv, timeout=DCGM_TIMEOUT_S[level])
    diag = parse_dcgm_diag_json(result.stdout or "")
    if diag is None:
        if result.state != "timeout":  # a hung dcgmi is a probe-failed fault (hung_tool_faults)
            errors.append(result.describe(argv)[:200])
        return []
    faults, problems = dcgm_diag_faults(diag, level)
    if any(f["device"].startswith("GPU ") for f in faults):
        # DCGM names GPUs by its own id: `dcgmi discovery -l` gives each one's PCI bus id.
        found = host.run(["dcgmi", "discovery", "-l"], timeout=30)
        buses = {gpu: info["bus_id"] for gpu, info in parse_dcgmi_discovery(found.stdout or "").items()}
        if buses:
            faults, problems = dcgm_diag_faults(diag, level, buses)
    errors.extend(problems)
    return faults


# ---------------------------------------------------------------- the check


def run_check(config: Dict[str, Any], node: str, host: Host, clear: bool = False,
              persist: bool = True, now: Optional[float] = None, dcgm_level: Optional[int] = None,
              gpu_reset: Optional[str] = None) -> Dict[str, Any]:
    """Read the node, update the state file (kernel-log cursor, latched faults, IB and
    NVLink error counters), and return the verdict. ``dcgm_level``: run that DCGM diagnostic
    level (``--dcgm-level``, outside the periodic check); the periodic check runs level 1 at
    most. ``gpu_reset``: reset that GPU first (``nvidia-smi -r -i BUS``) and, when the reset
    succeeded, end the latched faults a reset ends (RESET_CLEARS) on it. ``persist=False`` (``fleetspec verify --local``)
    looks without writing the state: the scheduled check still sees every new record and
    counter delta, so an onlooker never swallows a fault before the check acts on it."""
    expect = expectation(config, node)
    enabled = set()
    for check in config.get("checks", list(CHECKS)):
        enabled.update(CHECKS.get(check, ()))
    errors = []  # type: List[str]
    state_path = host.path(STATE_FILE)
    state = _load_state(state_path)
    boot_id = (host.read("/proc/sys/kernel/random/boot_id") or "").strip() or None
    if state.get("boot_id") != boot_id:  # a reboot: a fresh kernel log, nothing latched
        state = {"boot_id": boot_id, "kmsg_seq": -1, "latched": [], "ib": {}, "nvlink": {}}
    if clear:  # the operator repaired what was latched; the log cursor stays where it is
        state["latched"] = []
        state["flapping"] = []
        state["held"] = {}

    faults = []  # type: List[Fault]
    seen = {}  # type: Dict[str, Any]
    if "kernel-log" in config.get("checks", list(CHECKS)):
        text, error = read_kernel_log(host)
        if error:
            errors.append(error)
        records = parse_kmsg(text or "")
        new = [msg for seq, msg in records if seq is None or seq > state["kmsg_seq"]]
        seqs = [seq for seq, _ in records if seq is not None]
        if seqs:
            state["kmsg_seq"] = max(seqs)
        counts = {}  # type: Dict[Tuple[str, str, str], int]
        fresh = kernel_log_faults(new, counts)
        now = time.time() if now is None else now
        state["latched"] = latch(superseded(state["latched"], fresh), fresh, counts, now)
    reset = set()  # PCI addresses of the GPUs reset since the last check
    if gpu_reset is not None:  # the prescribed action, done here: nvidia-smi -r -i BUS
        argv = nvidia_smi_command(host) + ["-r", "-i", gpu_reset]
        done = host.run(argv, timeout=60)
        if done.ok:
            reset.add(pci_key(gpu_reset))
            remade = remake_mig(host)
            if remade:
                errors.append(remade)
        else:
            errors.append(done.describe(argv)[:200])
    if "gpu-memory" in config.get("checks", list(CHECKS)) or "gpu-count" in config.get("checks", list(CHECKS)):
        faults += gpu_faults(host, expect, errors, seen)
        reset |= recovery_done(state, seen.get("nvidia") or [])
    reset |= {pci_key(bus) for bus in state.pop("resets", None) or [] if isinstance(bus, str)}  # reset_when_idle
    reset.discard(None)
    state["latched"] = [f for f in state["latched"] if f["class"] not in RESET_CLEARS or pci_key(f["device"]) not in reset]
    # What the GPU says now overrules what the log once said (faults.LIVE_READINGS); the lines
    # stay latched, so where nvidia-smi does not answer next time the log decides again.
    live = (seen.get("nvidia") or []) if "gpu-memory" in config.get("checks", list(CHECKS)) else []
    acting, overruled = supersede(state["latched"], live)
    faults = acting + faults
    if "nvlink" in config.get("checks", list(CHECKS)) and expect.get("vendor") in ("nvidia", None):
        argv = nvidia_smi_command(host) + ["nvlink", "--status"]
        result = host.run(argv, timeout=30)
        links = parse_nvlink_status(result.stdout) if result.ok else None
        bus_by_uuid = {g["uuid"]: g["bus_id"] for g in seen.get("nvidia", []) if g.get("uuid")}
        if links:
            faults += nvlink_faults(links, bus_by_uuid)
        argv = nvidia_smi_command(host) + ["nvlink", "-e"]
        result = host.run(argv, timeout=30)
        counters = parse_nvlink_errors(result.stdout) if result.ok else {}
        if counters:
            now = time.time() if now is None else now
            last = state.get("nvlink") or {}
            seconds = now - last["time"] if isinstance(last.get("time"), (int, float)) else None
            faults += nvlink_counter_faults(counters, last.get("counters") or {}, seconds, bus_by_uuid)
            state["nvlink"] = {"time": now, "counters": nvlink_counter_state(counters)}
    if dcgm_level is None and "dcgm" in config.get("checks", list(CHECKS)) and host.which("dcgmi") is not None:
        faults += dcgm_faults(host, min(int(config.get("dcgm_level", 1)), PERIODIC_DCGM_LEVEL), errors)
    elif dcgm_level is not None:
        faults += dcgm_faults(host, dcgm_level, errors)
    if "infiniband" in config.get("checks", list(CHECKS)):
        base = host.path("/sys/class/infiniband")
        devices = parse_infiniband_sysfs(base) if os.path.isdir(base) else []
        counters = ib_counters(host)
        if expect.get("fabric") == "infiniband" and not devices:
            faults.append({"class": "ib-port-down", "scope": "node", "device": "node",
                           "detail": "no InfiniBand device on a node of an InfiniBand fabric", "source": "sysfs"})
        faults += infiniband_faults(devices, counters, state.get("ib", {}))
        state["ib"] = counters
    now = time.time() if now is None else now
    faults = hysteresis(faults, state, config, now)
    faults = [f for f in faults if f["class"] in enabled] + hung_tool_faults(host)
    if persist:
        _save_state(state_path, state, errors)
    return verdict(node, faults, config.get("actions"), errors, [f for f in overruled if f["class"] in enabled])


# Bounds the latched kernel-log faults: one entry per (class, device, Xid) already bounds them by
# the catalog's size; this bounds a state file a newer driver's unknown codes could grow.
MAX_LATCHED = 512


def latch(latched: List[Fault], fresh: List[Fault], counts: Dict[Tuple[str, str, str], int],
          now: float) -> List[Fault]:
    """The latched kernel-log faults, one per (class, device, Xid) (``latch_key``): a repeat
    adds its lines to ``count`` and moves ``last_seen`` (and takes the latest line's detail),
    never a new entry. Before, each run's application Xids (a new pid, a new address) were
    new entries: about 77 KB a day a node. At most MAX_LATCHED entries, the least recently
    seen dropped first."""
    merged = {}  # type: Dict[Tuple[str, str, str], Fault]
    for fault in latched:  # an older state file may hold repeats: fold them too
        key = latch_key(fault)
        before = merged.get(key)
        item = dict(fault)
        item["count"] = int(fault.get("count", 1)) + (int(before.get("count", 1)) if before else 0)
        merged[key] = item
    for fault in fresh:
        key = latch_key(fault)
        before = merged.pop(key, None)
        item = dict(fault)
        item["count"] = counts.get(key, 1) + (int(before.get("count", 1)) if before else 0)
        item["last_seen"] = int(now)
        merged[key] = item
    items = list(merged.values())
    if len(items) > MAX_LATCHED:
        items = sorted(items, key=lambda f: f.get("last_seen", 0))[len(items) - MAX_LATCHED:]
    return items


def superseded(latched: List[Fault], fresh: List[Fault]) -> List[Fault]:
    """``latched`` less the Xid 154 faults a fresh Xid 154 on the same GPU replaces: the
    recovery action is the GPU's current state, so the latest one is the one to act on (an
    old 'Node Reboot Required' must not outlive the 'GPU Reset Required' that followed it)."""
    renewed = {pci_key(f["device"]) for f in fresh if f["detail"].startswith("Xid 154")}
    return [f for f in latched if not (f["detail"].startswith("Xid 154") and pci_key(f["device"]) in renewed)]


def recovery_done(state: Dict[str, Any], gpus: List[Dict[str, Any]]) -> set:
    """PCI addresses of GPUs whose recovery action (nvidia-smi -q ``gpu_recovery_action``)
    went from an action back to ``None`` since the last check: the driver says the action it
    asked for was done (NVML: "None: no recovery action is needed"). ``state["recovery"]``
    keeps each GPU's last value."""
    last = state.get("recovery") or {}  # type: Dict[str, Any]
    done = set()
    for gpu in gpus:
        bus, now = gpu.get("bus_id"), gpu.get("recovery_action")
        if not bus or now is None:
            continue
        if last.get(bus) not in (None, "None", "N/A") and now == "None":
            done.add(pci_key(bus))
        last[bus] = now
    state["recovery"] = last
    return done


def hysteresis(faults: List[Fault], state: Dict[str, Any], config: Dict[str, Any], now: float) -> List[Fault]:
    """Counter-based faults (COUNTER_CLASSES) held until CLEAR_AFTER clean checks in a row;
    one that comes back FLAP_LIMIT times within FLAP_WINDOW_S adds a latched ``flapping``
    fault (until a reboot or --clear). ``state`` keeps ``held`` {class|device: {fault, clean}},
    ``onsets`` {class|device: [times it came back]} and ``flapping`` [faults]."""
    clear_after = int(config.get("clear_after", CLEAR_AFTER))
    limit = int(config.get("flap_limit", FLAP_LIMIT))
    window = float(config.get("flap_window_s", FLAP_WINDOW_S))
    held = state.get("held") or {}  # type: Dict[str, Any]
    onsets = state.get("onsets") or {}  # type: Dict[str, List[float]]
    flapping = state.get("flapping") or []  # type: List[Fault]
    out = []  # type: List[Fault]
    seen = set()
    for fault in faults:
        out.append(fault)
        if fault["class"] not in COUNTER_CLASSES:
            continue
        key = "%s|%s" % (fault["class"], fault["device"])
        seen.add(key)
        if key not in held:  # a new onset (first, or after it had cleared)
            times = [t for t in onsets.get(key, []) if now - t < window] + [now]
            onsets[key] = times
            if len(times) >= limit and not any(f["device"] == fault["device"] for f in flapping):
                flapping.append({"class": "flapping", "scope": "node", "device": fault["device"],
                                 "detail": "%s came back %d times in %.0f s (%s)" % (
                                     fault["class"], len(times), now - times[0], fault["detail"]),
                                 "source": fault["source"]})
        held[key] = {"fault": fault, "clean": 0}
    for key in sorted(held):
        if key in seen:
            continue
        held[key]["clean"] += 1
        if held[key]["clean"] >= clear_after:
            del held[key]
            continue
        fault = dict(held[key]["fault"])
        fault["detail"] = "%s (held: %d of %d clean checks before it clears)" % (
            fault["detail"], held[key]["clean"], clear_after)
        out.append(fault)
    state["held"], state["onsets"], state["flapping"] = held, onsets, flapping
    return out + [dict(f) for f in flapping]


def _load_state(path: str) -> Dict[str, Any]:
    try:
        with open(path) as handle:
            state = json.load(handle)
        return state if isinstance(state, dict) else {}
    except (OSError, ValueError):
        return {}


def _save_state(path: str, state: Dict[str, Any], errors: List[str]) -> None:
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = path + ".tmp"
        with open(tmp, "w") as handle:
            json.dump(state, handle, sort_keys=True)
        os.replace(tmp, path)
    except OSError as exc:
        errors.append("state %s: %s" % (path, exc.strerror))


# ---------------------------------------------------------------- Slurm


def slurm_node(scontrol: str, node: str) -> Tuple[List[str], str]:
    """(state flags, reason) of ``node`` as slurmctld sees it."""
    done = subprocess.run([scontrol, "-o", "show", "node", node], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          stdin=subprocess.DEVNULL, timeout=SCONTROL_TIMEOUT_S)
    text = done.stdout.decode("utf-8", "replace")
    if done.returncode != 0:
        raise RuntimeError("scontrol show node %s: %s" % (node, done.stderr.decode("utf-8", "replace").strip()))
    state = re.search(r"\bState=(\S+)", text)
    found = re.search(r"\bReason=(.*?)(?: \[[^\]]*\])?\s*$", text)
    return (state.group(1).upper().split("+") if state else []), (found.group(1) if found else "")


# Slurm node state flags of a node that takes no new work (scontrol show node State=).
OUT_OF_SERVICE = frozenset({"DRAIN", "DRAINED", "DRAINING", "DOWN", "FAIL", "FAILING", "NOT_RESPONDING"})


def slurm_nodes(config: Dict[str, Any]) -> List[str]:
    """The Slurm-owned nodes of the policy: the blast radius is counted over them."""
    return sorted({h for group in config.get("nodes", []) if group.get("owner") == "slurm"
                   for h in expand(group["hosts"])})


def slurm_held(node: str, config: Dict[str, Any], scontrol: str) -> Optional[str]:
    """None when draining ``node`` keeps at least ``min_healthy`` of the Slurm nodes in
    service (spec.health.min_healthy, as on Kubernetes: min_healthy.py); else the line that
    says why the drain is held back. One ``scontrol show node`` for all nodes."""
    selected = slurm_nodes(config)
    limit = str(config.get("min_healthy", min_healthy.DEFAULT))
    if node not in selected or min_healthy.needed(limit, len(selected)) == 0:
        return None
    done = subprocess.run([scontrol, "-o", "show", "node"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          stdin=subprocess.DEVNULL, timeout=SCONTROL_TIMEOUT_S)
    if done.returncode != 0:
        raise RuntimeError("scontrol show node: %s" % done.stderr.decode("utf-8", "replace").strip())
    in_service = set()
    for line in done.stdout.decode("utf-8", "replace").splitlines():
        name, state = re.search(r"\bNodeName=(\S+)", line), re.search(r"\bState=(\S+)", line)
        if name and state and not OUT_OF_SERVICE.intersection(state.group(1).upper().split("+")):
            in_service.add(name.group(1))
    healthy = len(in_service.intersection(selected) - {node})
    return min_healthy.hold(limit, len(selected), healthy, len(selected) - healthy)


def jitter_s(node: str, interval: float, bound: float = JITTER_MAX_S) -> float:
    """This node's wait before it talks to slurmctld: in [0, min(bound, interval / 4)),
    the same every run (sha256 of the node name), uniform over node names."""
    top = max(0.0, min(bound, float(interval) / 4.0))
    return top * int.from_bytes(hashlib.sha256(node.encode("utf-8")).digest()[:8], "big") / float(1 << 64)


def spread(node: str, config: Dict[str, Any], host: "BoundedHost") -> float:
    """Wait this node's jitter (clipped to what the deadline leaves); returns the seconds waited."""
    wait = jitter_s(node, float(config.get("interval", 300)), float(config.get("jitter_s", JITTER_MAX_S)))
    left = host.left()
    if left is not None:
        wait = min(wait, max(0.0, left))
    if wait > 0:
        pause(wait)
    return wait


def slurm_act(result: Dict[str, Any], scontrol: str = "scontrol", config: Optional[Dict[str, Any]] = None,
              host: Optional[Host] = None) -> str:
    """Drain or resume the node through slurmctld; returns what was done. A new drain that
    would leave fewer than ``min_healthy`` Slurm nodes in service is held back instead.
    ``reset-when-idle`` (the strongest action) does not drain a busy node: see reset_when_idle."""
    node = result["node"]
    flags, current = slurm_node(scontrol, node)
    drained = any(f in ("DRAIN", "DRAINED", "DRAINING") for f in flags)
    ours = current.startswith(LEADER)
    if result["action"] == "reset-when-idle" and not (drained and not ours):
        return reset_when_idle(result, scontrol, config or {}, host or Host("/"), flags, drained)
    if result["action"] != "none":
        wanted = "%s %s" % (LEADER, reason(result))
        if drained and not ours:
            return "left drained by someone else (%s)" % current
        if drained and current == wanted:
            return "already drained: %s" % wanted
        held = None if drained else slurm_held(node, config or {}, scontrol)
        if held:
            return held
        _scontrol(scontrol, "update", "NodeName=%s" % node, "State=DRAIN", "Reason=%s" % wanted)
        return "drained: %s" % wanted
    if drained and ours:
        _scontrol(scontrol, "update", "NodeName=%s" % node, "State=RESUME")
        return "resumed (was: %s)" % current
    return "nothing to do"


# Slurm node states of a node with work on it (scontrol show node State=, its base state and flags).
BUSY = frozenset({"ALLOCATED", "MIXED", "COMPLETING"})


def reset_when_idle(result: Dict[str, Any], scontrol: str, config: Dict[str, Any], host: Host,
                    flags: List[str], drained: bool) -> str:
    """A pending row remap: NVIDIA says "unaffected applications can continue running ... and
    new workloads can be launched"; the remap happens at the next GPU reset (faults.MEMORY_FLAGS).
    So a busy node keeps taking work; an idle one is drained (nothing lands during the reset),
    seen idle again, and each such GPU reset with ``nvidia-smi -r -i BUS``. The check that then
    reads the GPU healthy resumes the node (it is our drain). Before (#26 item 8) the node was
    drained at once and stayed drained until someone reset the GPU."""
    node = result["node"]
    wanted = "%s %s" % (LEADER, reason(result))
    if BUSY.intersection(flags):
        if drained:
            return "drained: %s (the GPU reset waits for the running jobs)" % wanted
        return ("reset when idle: jobs are running (%s); the node keeps taking work until it is idle "
                "(NVIDIA: new workloads can be launched while a row remap is pending)" % "+".join(flags))
    if not drained:
        held = slurm_held(node, config, scontrol)
        if held:
            return held
        _scontrol(scontrol, "update", "NodeName=%s" % node, "State=DRAIN", "Reason=%s" % wanted)
        flags, _ = slurm_node(scontrol, node)
        if BUSY.intersection(flags):  # a job landed between the two reads: reset after it
            return "drained: %s (a job started meanwhile: the GPU reset waits for it)" % wanted
    buses = sorted({pci_bus_id(f["device"]) for f in result["faults"] if f["action"] == "reset-when-idle"} - {None})
    done, failed = [], []
    for bus in buses:
        argv = nvidia_smi_command(host) + ["-r", "-i", bus]
        out = host.run(argv, timeout=60)
        (done if out.ok else failed).append(bus if out.ok else out.describe(argv)[:150])
    if done:
        _mark_reset(host, done)
        remade = remake_mig(host)
        if remade:
            failed.append(remade)
    if failed or not buses:
        return "drained: %s (GPU reset failed: %s; retried at the next check)" % (
            wanted, "; ".join(failed) or "no GPU address to reset")
    return "drained while idle and reset %s (nvidia-smi -r); the next passing check resumes the node" % ", ".join(done)


def remake_mig(host: Host) -> Optional[str]:
    """After a GPU reset on a node whose GPUs run a fleetspec MIG geometry: make the instances
    again. NVIDIA's MIG user guide (Getting Started): "the created MIG devices are not persistent
    across system reboots. Thus, the user or system administrator needs to recreate the desired
    MIG configurations if the GPU or system is reset". The mig_geometry role's unit does it
    (nvidia-mig-parted apply, idempotent); slurmd, which Requires= it, restarts with it and
    detects the instances anew. The error, or None (also on a node without the role's config)."""
    if not os.path.exists(host.path(MIG_CONFIG)):
        return None
    argv = ["systemctl", "restart", MIG_UNIT]
    done = host.run(argv, timeout=180)
    return None if done.ok else "MIG instances not remade after the GPU reset: %s" % done.describe(argv)[:160]


def pci_bus_id(device: str) -> Optional[str]:
    """nvidia-smi's form of the PCI address a fault names (``GPU 0 00000000:3B:00.0``,
    ``0000:3b:00``): ``00000000:3B:00.0``."""
    key = pci_key((device.split() or [""])[-1])
    return "%08X:%02X:%02X.0" % key if key else None


def _mark_reset(host: Host, buses: List[str]) -> None:
    """Tell the next check these GPUs were reset (state ``resets``): it ends the latched faults
    a reset ends on them, as ``--gpu-reset`` does."""
    path = host.path(STATE_FILE)
    state = _load_state(path)
    state["resets"] = sorted(set(state.get("resets") or []) | set(buses))
    _save_state(path, state, [])


def _scontrol(scontrol: str, *args: str) -> None:
    done = subprocess.run([scontrol] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          stdin=subprocess.DEVNULL, timeout=SCONTROL_TIMEOUT_S)
    if done.returncode != 0:
        raise RuntimeError("scontrol %s: %s" % (" ".join(args), done.stderr.decode("utf-8", "replace").strip()))


# ---------------------------------------------------------------- output


def render_text(result: Dict[str, Any]) -> str:
    lines = ["%s: %s (action: %s)" % (result["node"], result["status"], result["action"])]
    for fault in result["faults"]:
        lines.append("  %-18s %-24s %s: %s [%s]" % (fault["action"], fault["class"], fault["device"],
                                                   fault["detail"], fault["source"]))
    lines += ["  %-18s %-24s %s: %s [%s; %s]" % ("superseded", f["class"], f["device"], f["detail"], f["source"],
                                                f["by"]) for f in result.get("superseded", [])]
    lines += ["  error: %s" % e for e in result["errors"]]
    return "\n".join(lines) + "\n"


def npd_devices(result: Dict[str, Any]) -> str:
    """`` [devices: ADDR=CLASS ...]``: every ``quarantine-device`` fault of a sick verdict by
    its PCI address (``-`` when the fault names none), so the in-cluster remediator can taint
    those GPUs on a DRA pool (parsed by ``fleetspec.node_side.device_taints.npd_faults``)."""
    tokens = []
    for fault in result["faults"]:
        if fault["action"] in DEVICE_ACTIONS:
            address = (fault["device"].split() or ["-"])[-1]
            tokens.append("%s=%s" % (address if ":" in address else "-", fault["class"]))
    return " [devices:%s]" % "".join(" " + t for t in tokens)


def npd_message(result: Dict[str, Any]) -> str:
    """The one line NPD makes the GPUProblem condition's message: when sick, the drain
    reason (what the remediator writes into the node's annotation) and the devices to
    quarantine; else the status."""
    if result["status"] == "sick":
        devices = npd_devices(result)
        return reason(result, max(0, NPD_MAX_OUTPUT - len(devices))) + devices
    if result["faults"]:
        return "degraded: " + "; ".join("%s %s" % (f["class"], f["device"]) for f in result["faults"])[:180]
    return result["status"]


def crash_fault(exc: BaseException) -> Fault:
    """The ``check-crashed`` fault for an exception the check raised: its type and the
    innermost frame of this package (file:line), never the message (it may quote node data
    and a drain reason is short)."""
    where = ""
    tb = exc.__traceback__
    while tb is not None:
        if "fleetspec" in tb.tb_frame.f_code.co_filename:
            where = " at %s:%d" % (os.path.basename(tb.tb_frame.f_code.co_filename), tb.tb_lineno)
        tb = tb.tb_next
    return {"class": "check-crashed", "scope": "node", "device": "node",
            "detail": "check crashed (%s%s)" % (type(exc).__name__, where), "source": "node_check"}


def take_lock(path: str) -> Tuple[Optional[Any], str]:
    """(the open lock file, "") when this run holds it, else (None, who holds it). flock is
    released when the process ends, however it ends."""
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        handle = open(path, "a+")
    except OSError as exc:
        return None, "cannot open the lock %s: %s" % (path, exc.strerror)
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.seek(0)
        holder = handle.read().strip()
        handle.close()
        return None, "pid %s" % (holder or "?")
    handle.seek(0)
    handle.truncate()
    handle.write("%d\n" % os.getpid())
    handle.flush()
    return handle, ""


def main(argv: Optional[List[str]] = None, config: Optional[Dict[str, Any]] = None) -> int:
    """The command line; ``config`` given (``fleetspec health`` ships the policy inside the
    program it runs on a node) stands in for ``--config``."""
    parser = argparse.ArgumentParser(description="Check this GPU node's health and print a verdict.")
    parser.add_argument("--config", default="/etc/fleetspec/health.json")
    parser.add_argument("--root", default="/", help="read the node relative to this directory (fixtures)")
    parser.add_argument("--node", help="the node's name (default: $SLURMD_NODENAME, else the hostname)")
    parser.add_argument("--format", choices=("text", "json", "npd"), default="text",
                        help="npd: one line for node-problem-detector's condition message (the drain reason)")
    parser.add_argument("--slurm", action="store_true", help="drain/resume the node through slurmctld")
    parser.add_argument("--scontrol", default="scontrol")
    parser.add_argument("--clear", action="store_true", help="forget latched kernel-log faults (after a repair)")
    parser.add_argument("--gpu-reset", metavar="PCI_BUS_ID",
                        help="reset this GPU (nvidia-smi -r -i PCI_BUS_ID, the action NVIDIA prescribes for "
                             "RESET_GPU Xids) and, when it succeeded, end the faults a reset ends on it")
    parser.add_argument("--dcgm-level", type=int, choices=sorted(DCGM_TIMEOUT_S),
                        help="run this DCGM diagnostic level (2-4 take minutes to hours: a prolog/epilog or a "
                             "separate timer on idle nodes, never the periodic check) without the check's deadline")
    parser.add_argument("--read-only", action="store_true",
                        help="look without updating the state file (kernel-log cursor, latched faults, IB "
                             "counters), so the scheduled check still sees every new fault")
    args = parser.parse_args(argv)
    if args.read_only and (args.slurm or args.clear or args.gpu_reset):
        sys.stderr.write("fleetspec-health: --read-only cannot be combined with --slurm, --clear or --gpu-reset\n")
        return 2
    if args.gpu_reset is not None and pci_key(args.gpu_reset) is None:
        sys.stderr.write("fleetspec-health: --gpu-reset %r: not a PCI bus id; give it as nvidia-smi prints it "
                         "(e.g. 00000000:3B:00.0)\n" % args.gpu_reset)
        return 2
    if config is None:
        try:
            config = load_config(args.config)
        except ConfigError as exc:
            sys.stderr.write("fleetspec-health: %s\n" % exc)
            return 2
    lock = None
    if not args.read_only:
        lock, holder = take_lock(Host(args.root).path(LOCK_FILE))
        if lock is None and holder.startswith("pid"):  # never two at once: the one running acts
            sys.stderr.write("fleetspec-health: another check is still running (%s): not started\n" % holder)
            if args.format == "npd":
                sys.stdout.write("unknown: another check is still running\n")
            return 2
    budget = None if args.dcgm_level else float(config.get("deadline_s", DEADLINE_S)) - SLURM_RESERVE_S
    host = BoundedHost(args.root, budget)
    try:
        result = run_check(config, node_name(args.node), host, clear=args.clear, persist=not args.read_only,
                           dcgm_level=args.dcgm_level, gpu_reset=args.gpu_reset)
    except Exception as exc:  # exit 2, never 1: NPD reads exit 1 as NonOK and would act on a bug
        why = "the check failed: %s: %s" % (type(exc).__name__, exc)
        sys.stderr.write("fleetspec-health: %s\n" % why)
        if args.format == "npd":
            sys.stdout.write("unknown: %s\n" % why[:NPD_MAX_OUTPUT - 9])
        if args.slurm:  # a crash leaves a signal: its own drain reason (#26 item 8)
            crashed = verdict(node_name(args.node), [crash_fault(exc)], config.get("actions"))
            try:
                spread(crashed["node"], config, host)
                sys.stderr.write("fleetspec-health: %s\n" % slurm_act(crashed, args.scontrol, config))
            except (RuntimeError, OSError, subprocess.TimeoutExpired) as slurm_exc:
                sys.stderr.write("fleetspec-health: slurm: %s\n" % slurm_exc)
        return 2
    if args.slurm:
        try:
            result["spread_s"] = round(spread(result["node"], config, host), 3)
            result["slurm"] = slurm_act(result, args.scontrol, config, host)
            if result["slurm"].startswith(min_healthy.HELD):  # the page: a human must look
                sys.stderr.write("fleetspec-health: %s: %s\n" % (result["node"], result["slurm"]))
        except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
            result["errors"].append("slurm: %s" % exc)
    if args.format == "npd":
        sys.stdout.write(npd_message(result) + "\n")
    elif args.format == "json":
        sys.stdout.write(json.dumps(result, indent=2, sort_keys=True) + "\n")
    else:
        sys.stdout.write(render_text(result) + ("  slurm: %s\n" % result["slurm"] if "slurm" in result else ""))
    return 1 if result["status"] == "sick" else 0


if __name__ == "__main__":
    sys.exit(main())
