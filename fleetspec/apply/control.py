"""Taking nodes out of service and back, through their allocation owner.

Slurm: ``scontrol update nodename=... state=drain reason=...``, wait until ``squeue``
shows no job on them (or a deadline passes), ``state=resume``. Kubernetes: ``kubectl
cordon`` + ``kubectl drain``, ``uncordon``. Commands are argv lists (never a shell
string with spec values in it) and run either here (a Slurm client or kubectl on the
control machine, the lab) or on the first Slurm controller through Ansible.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from fleetspec.node_side.contract import DRAIN_REASON
from fleetspec.node_side.hostlist import HostlistError, compress, expand

# Every drain reason apply writes starts so: a node drained with any other reason (an
# operator's "RMA case 4711", the health check's "fleetspec-health: ...") is not apply's to
# resume or to relabel.
APPLY_REASON_PREFIX = "fleetspec: "

Runner = Callable[[Sequence[str]], subprocess.CompletedProcess[str]]


OnBusy = Callable[[list[str]], None]  # the hosts that still hold work, each time that set changes; [] at the end


class ControlError(Exception):
    """A scheduler command failed; the message names the command and its output."""


class NodeControl(Protocol):
    def drain(self, hosts: Sequence[str], reason: str) -> None: ...
    def wait_drained(self, hosts: Sequence[str], deadline_s: float, on_busy: OnBusy | None = None) -> list[str]: ...
    def resume(self, hosts: Sequence[str]) -> None: ...
    def reconfigure(self) -> None: ...
    def states(self, hosts: Sequence[str]) -> dict[str, tuple[str, str]]: ...


def local_runner(env: Mapping[str, str] | None = None, timeout: float = 60) -> Runner:
    """Run commands on this machine (a Slurm client, kubectl), with extra environment."""
    full_env = {**os.environ, **(env or {})}

    def run(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        if shutil.which(argv[0], path=full_env.get("PATH")) is None:
            raise ControlError(f"{argv[0]} is not on PATH here: install the client or run apply where it is")
        try:
            return subprocess.run(list(argv), capture_output=True, text=True, env=full_env, timeout=timeout,
                                  check=False)
        except subprocess.TimeoutExpired:  # killed: a hung client is the caller's error path, not a traceback
            raise ControlError(f"{' '.join(argv[:3])} did not finish within {timeout:g} s (killed)") from None

    return run


def ansible_runner_on(inventories: Sequence[Path], host: str) -> Runner:
    """Run commands on ``host`` (the first Slurm controller) through an ad-hoc Ansible task."""

    def run(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        from fleetspec.ansible_adhoc import AdhocError, run_command

        try:
            res = run_command(inventories, host, argv)
        except AdhocError as exc:
            raise ControlError(str(exc)) from None
        err = res.stderr or res.msg
        rc = res.rc if res.rc is not None else (0 if res.status == "ok" else 1)
        return subprocess.CompletedProcess(list(argv), rc, res.stdout, err)

    return run


def checked(run: Runner, argv: Sequence[str]) -> str:
    """Run ``argv``; its stdout, or a ControlError naming the command and its last output line."""
    result = run(argv)
    if result.returncode != 0:
        detail = (result.stderr or result.stdout or "").strip().splitlines()
        raise ControlError(f"{' '.join(argv[:3])} failed: {detail[-1] if detail else 'rc ' + str(result.returncode)}")
    return result.stdout


@dataclass
class SlurmControl:
    run: Runner
    poll_s: float = 1.0
    sleep: Callable[[float], None] = field(default=time.sleep, repr=False)

    def _ok(self, argv: Sequence[str]) -> str:
        return checked(self.run, argv)

    def drain(self, hosts: Sequence[str], reason: str) -> None:
        self._ok(["scontrol", "update", f"nodename={compress(hosts)}", "state=drain", f"reason={reason}"])

    def wait_drained(self, hosts: Sequence[str], deadline_s: float, on_busy: OnBusy | None = None) -> list[str]:
        """Wait until no job runs on ``hosts``; return the hosts still busy at the deadline.
        ``on_busy``: told the hosts with jobs whenever that set changes (not at all when
        none had any)."""
        end = time.monotonic() + deadline_s
        told: list[str] = []
        while True:
            out = self._ok(["squeue", "-h", "-w", compress(hosts), "-t", "RUNNING,COMPLETING,SUSPENDED", "-o", "%N"])
            busy = sorted({h for line in out.split() for h in _expand_quiet(line)} & set(hosts))
            if on_busy is not None and busy != told:
                on_busy(busy)
                told = busy
            if not busy or time.monotonic() >= end:
                return busy
            self.sleep(self.poll_s)

    def resume(self, hosts: Sequence[str]) -> None:
        self._ok(["scontrol", "update", f"nodename={compress(hosts)}", "state=resume"])

    def queue(self) -> list[str]:
        """Every job slurmctld holds, in any state (``squeue -h``): "JOBID STATE" per job."""
        out = self._ok(["squeue", "-h", "-o", "%i %T"])
        return [line.strip() for line in out.splitlines() if line.strip()]

    def reconfigure(self) -> None:
        self._ok(["scontrol", "reconfigure"])

    def known(self, hosts: Sequence[str]) -> dict[str, str]:
        """The ``hosts`` that Slurm already has as nodes: {node: its state} (every node is
        listed and filtered here: sinfo -n refuses a name slurm.conf does not have)."""
        wanted = set(hosts)
        out = self._ok(["sinfo", "-h", "-N", "-o", "%N|%T"])
        found: dict[str, str] = {}
        for line in out.splitlines():
            node, _, state = line.partition("|")
            if node.strip() in wanted:
                found[node.strip()] = state.strip()
        return found

    def states(self, hosts: Sequence[str]) -> dict[str, tuple[str, str]]:
        out = self._ok(["sinfo", "-h", "-N", "-n", compress(hosts), "-o", "%N|%T|%E"])
        states: dict[str, tuple[str, str]] = {}
        for line in out.splitlines():
            node, _, rest = line.partition("|")
            state, _, reason = rest.partition("|")
            states[node.strip()] = (state.strip(), reason.strip())
        return states


@dataclass
class KubernetesControl:
    run: Runner
    drain_timeout: str = "30m"

    def _ok(self, argv: Sequence[str]) -> str:
        return checked(self.run, argv)

    def drain(self, hosts: Sequence[str], reason: str) -> None:
        for host in hosts:
            self._ok(["kubectl", "cordon", host])
            self._ok(["kubectl", "annotate", "--overwrite", "node", host, f"{DRAIN_REASON}={reason}"])

    def wait_drained(self, hosts: Sequence[str], deadline_s: float, on_busy: OnBusy | None = None) -> list[str]:
        """``kubectl drain`` (evictions) node by node; ``on_busy`` is told the node being
        drained, then the nodes left busy."""
        busy = []
        for host in hosts:
            if on_busy is not None:
                on_busy(sorted({*busy, host}))
            result = self.run(["kubectl", "drain", host, "--ignore-daemonsets", "--delete-emptydir-data",
                               f"--timeout={int(deadline_s)}s"])
            if result.returncode != 0:
                busy.append(host)
        if on_busy is not None:
            on_busy(busy)
        return busy

    def resume(self, hosts: Sequence[str]) -> None:
        for host in hosts:
            self._ok(["kubectl", "uncordon", host])
            self._ok(["kubectl", "annotate", "node", host, f"{DRAIN_REASON}-"])

    def reconfigure(self) -> None:
        """Nothing to reload: the Kubernetes layer is applied through Pulumi."""

    def states(self, hosts: Sequence[str]) -> dict[str, tuple[str, str]]:
        """Per node ("cordoned" or "schedulable", the drain-reason annotation): a cordon with
        no annotation is someone else's, named so."""
        import json

        states: dict[str, tuple[str, str]] = {}
        for host in hosts:
            try:
                node = json.loads(self._ok(["kubectl", "get", "node", host, "-o", "json"]))
            except ValueError:
                raise ControlError(f"kubectl get node {host}: not JSON") from None
            cordoned = bool((node.get("spec") or {}).get("unschedulable"))
            why = ((node.get("metadata") or {}).get("annotations") or {}).get(DRAIN_REASON, "")
            states[host] = ("cordoned" if cordoned else "schedulable",
                            why or ("cordoned, no " + DRAIN_REASON if cordoned else ""))
        return states


@dataclass
class OwnedOnly:
    """A control that leaves out the ``unowned`` nodes (adopted because they answer SSH,
    though their scheduler does not have them: nothing of it runs there to drain). Without
    a scheduler (``owner`` None) every node of its waves must be unowned."""

    owner: NodeControl | None
    unowned: frozenset[str]

    def _mine(self, hosts: Sequence[str]) -> list[str]:
        mine = [h for h in hosts if h not in self.unowned]
        if mine and self.owner is None:
            raise ControlError(f"no scheduler control to drain {compress(mine)} with")
        return mine

    def drain(self, hosts: Sequence[str], reason: str) -> None:
        if mine := self._mine(hosts):
            assert self.owner is not None
            self.owner.drain(mine, reason)

    def wait_drained(self, hosts: Sequence[str], deadline_s: float, on_busy: OnBusy | None = None) -> list[str]:
        if mine := self._mine(hosts):
            assert self.owner is not None
            return self.owner.wait_drained(mine, deadline_s, on_busy)
        return []

    def resume(self, hosts: Sequence[str]) -> None:
        if mine := self._mine(hosts):
            assert self.owner is not None
            self.owner.resume(mine)

    def reconfigure(self) -> None:
        if self.owner is not None:
            self.owner.reconfigure()

    def states(self, hosts: Sequence[str]) -> dict[str, tuple[str, str]]:
        if mine := self._mine(hosts):
            assert self.owner is not None
            return self.owner.states(mine)
        return {}


def foreign_drains(states: Mapping[str, tuple[str, str]]) -> dict[str, str]:
    """The nodes of ``states`` ({node: (sinfo state, reason)}) that are drained, down or
    failed with a reason apply did not write: {node: the reason as found}."""
    out = {}
    for host, (state, reason) in states.items():
        taken_out = any(word in state.lower() for word in ("drain", "down", "fail", "cordon"))
        if taken_out and reason and reason.lower() != "none" and not reason.startswith(APPLY_REASON_PREFIX):
            out[host] = reason
    return out


def _expand_quiet(text: str) -> list[str]:
    try:
        return expand(text)
    except HostlistError:
        return [text]
