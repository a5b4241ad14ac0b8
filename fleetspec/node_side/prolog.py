"""The GPU check before each job: Slurm's ``Prolog`` on a GPU node (spec.health set).

Installed by the ``fleet_health`` role with the node check and run by slurmd as root
before a job's first step on the node::

    python3 -m fleetspec.node_side.prolog --config /etc/fleetspec/health.json

Stdlib only, Python 3.8 syntax. Quick, and read-only on the node check's state: it looks at

- the faults the periodic node check latched (Xid/SXid faults, flapping links) in its state
  file, for this boot only;
- one ``nvidia-smi -q -x`` (or ``amd-smi metric --ecc --json``) call, bounded by
  PROLOG_DEADLINE_S and never repeated (the node check's BoundedHost: a wedged GPU hangs
  the tool, #26 item 1): the GPU count the fleet gives this node and each GPU's memory, PCIe
  and fabric state;
- the job's GPUs (``SLURM_JOB_GPUS``, Slurm's GPU indexes, which with fleetspec's
  ``File=/dev/nvidia[0-N]`` gres.conf are the devices' minor numbers) among those the tool lists.

A fault whose action is stronger than ``reset-when-idle`` (NVIDIA: with a row remap pending
"new workloads can be launched") fails the prolog: it drains the node with the node check's
reason form (``fleetspec-health: <action> <class>: <device> <detail>``, so the periodic check
resumes it once the node reads healthy) and exits 1. slurm.conf(5) Prolog: "If the Prolog
fails (returns a non-zero exit code), this will result in the node being set to a DRAIN state
and the job being requeued in a held state unless nohold_on_prolog_fail is configured in
SchedulerParameters" (render/slurm.py sets it with spec.health: the job goes to another node).
Exit 0 otherwise, also when the check itself could not run (a bad config, a crash): a bug in
the check must not drain the fleet job by job.
"""

import argparse
import os
import subprocess
import sys
from typing import Any, Dict, List, Optional

from fleetspec.node_side.classify import Fault, reason, supersede, verdict
from fleetspec.node_side.faults import action_rank
from fleetspec.node_side.node_check import (
    LEADER,
    SCONTROL_TIMEOUT_S,
    STATE_FILE,
    BoundedHost,
    ConfigError,
    _load_state,
    _scontrol,
    expectation,
    gpu_faults,
    hung_tool_faults,
    load_config,
    node_name,
)

# The whole prolog, the GPU tool and the one scontrol call together: well within the
# rendered PrologEpilogTimeout (render/slurm.py, 600 s), and short, since the job waits.
PROLOG_DEADLINE_S = 30.0
# Weaker actions let the job start (reset-when-idle: NVIDIA says new work may launch).
PASSING = action_rank("reset-when-idle")


def job_gpus(text: Optional[str]) -> List[int]:
    """``SLURM_JOB_GPUS`` ("0,2,3") as indexes; [] for none or anything else."""
    out = []
    for item in (text or "").split(","):
        item = item.strip()
        if item.isdigit():
            out.append(int(item))
    return out


def latched_faults(host: BoundedHost) -> List[Fault]:
    """The faults the node check keeps across runs (latched kernel-log faults, flapping
    links), when its state is of this boot (a reboot ends them, as in the node check)."""
    state = _load_state(host.path(STATE_FILE))
    boot_id = (host.read("/proc/sys/kernel/random/boot_id") or "").strip() or None
    if not state or state.get("boot_id") != boot_id:
        return []
    return [f for f in list(state.get("latched") or []) + list(state.get("flapping") or [])
            if isinstance(f, dict) and {"class", "device", "detail"} <= set(f)]


def missing_job_gpus(gpus: List[Dict[str, Any]], wanted: List[int], job: str) -> List[Fault]:
    """A ``gpu-lost`` fault per GPU of the job that nvidia-smi does not list (by minor number)."""
    listed = {g.get("minor") for g in gpus}
    return [{"class": "gpu-lost", "scope": "device", "device": "GPU /dev/nvidia%d" % n,
             "detail": "allocated to job %s but not listed by nvidia-smi" % job, "source": "nvidia-smi"}
            for n in wanted if n not in listed]


def run_prolog(config: Dict[str, Any], node: str, host: BoundedHost, env: Dict[str, str]) -> Dict[str, Any]:
    expect = expectation(config, node)
    errors = []  # type: List[str]
    seen = {}  # type: Dict[str, Any]
    faults = latched_faults(host)
    overruled = []  # type: List[Fault]
    if expect.get("gpus"):  # a GPU node of the fleet; nothing to check on a CPU node
        live = gpu_faults(host, expect, errors, seen)
        # the GPU's state now overrules a latched line about it, as in the node check (#43)
        faults, overruled = supersede(faults, seen.get("nvidia") or [])
        faults += live
        if seen.get("nvidia") is not None:
            faults += missing_job_gpus(seen["nvidia"], job_gpus(env.get("SLURM_JOB_GPUS")),
                                       env.get("SLURM_JOB_ID", "?"))
    faults += hung_tool_faults(host)
    return verdict(node, faults, config.get("actions"), errors, overruled)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description="Check this node's GPUs before a job starts (Slurm Prolog).")
    parser.add_argument("--config", default="/etc/fleetspec/health.json")
    parser.add_argument("--root", default="/", help="read the node relative to this directory (fixtures)")
    parser.add_argument("--node", help="the node's name (default: $SLURMD_NODENAME, else the hostname)")
    parser.add_argument("--scontrol", default="scontrol")
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        sys.stderr.write("fleetspec-prolog: %s: the job starts unchecked\n" % exc)
        return 0
    host = BoundedHost(args.root, PROLOG_DEADLINE_S - SCONTROL_TIMEOUT_S - 1)
    node = node_name(args.node)
    try:
        result = run_prolog(config, node, host, dict(os.environ))
    except Exception as exc:  # a bug in the check: never a drain
        sys.stderr.write("fleetspec-prolog: the check failed: %s: %s: the job starts unchecked\n"
                         % (type(exc).__name__, exc))
        return 0
    if action_rank(result["action"]) <= PASSING:
        return 0
    why = "%s %s" % (LEADER, reason(result))
    sys.stderr.write("fleetspec-prolog: %s: %s\n" % (node, why))
    for fault in result["faults"]:
        sys.stderr.write("  %s %s %s: %s\n" % (fault["action"], fault["class"], fault["device"], fault["detail"]))
    try:  # the reason the node check reads as its own (it resumes the node once healthy)
        _scontrol(args.scontrol, "update", "NodeName=%s" % node, "State=DRAIN", "Reason=%s" % why)
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
        sys.stderr.write("fleetspec-prolog: scontrol: %s\n" % exc)
    return 1


if __name__ == "__main__":
    sys.exit(main())
