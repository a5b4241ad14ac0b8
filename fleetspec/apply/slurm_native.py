"""The Slurm-native wave (#30 item 2): Slurm reboots the nodes, each node converges itself.

The controller's work per wave is one ``scontrol reboot ASAP nextstate=RESUME
reason="fleetspec: ..." <hostlist>``, then one ``sinfo`` per poll and one small JSON file per
node: no Ansible fork per host. Each node drains as its jobs end (ASAP: no drain timeout,
no carry round), reboots, runs ``fleetspec.node_side.converge`` from its partition's signed
bundle before slurmd starts, writes ``<results>/<host>.json`` (ok, bundle version, the
collector's facts) and, when it converged, starts slurmd; Slurm then resumes it. The
results directory is shared storage the nodes write (NFS, the site's parallel filesystem).

A node is done when its result carries this rollout's bundle version and Slurm no longer
shows a reboot pending for it; failed when its result says so, when Slurm marks it down or
failed, or when the deadline passes. Verify then compares the results' facts with the
fleet, as the SSH path compares what it collected.

A wave whose change needs no reboot (CUDA toolkit, NCCL: ``plan/engines.py`` ``in-place``)
is drained by the rollout through Slurm (its drain timeout and carry round hold), then
`request` writes ``<requests>/<host>.json`` (``{"format": 1, "request": ID, "version":
V}``) for each drained node: the node's ``fleetspec-converge-request.timer`` finds it,
checks that Slurm shows it drained with fleetspec's reason, runs the same converge from
its own configured bundle and writes its result with the request's ID; `wait` with
``request=ID`` reads those, and the rollout resumes the nodes. The requests directory is
written only by the controller and read by the nodes (docs/security.md).
"""

from __future__ import annotations

import json
import os
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fleetspec.apply.control import Runner, checked
from fleetspec.compile.ir import Fleet
from fleetspec.node_side.hostlist import compress
from fleetspec.verify.compare import VerifyReport, compare

MAX_RESULT_BYTES = 4 * 1024 * 1024
REQUEST_FORMAT = 1  # fleetspec.node_side.converge_request reads it
FactsVerifier = Callable[[Fleet, Mapping[str, Mapping[str, Any]], list[str]], VerifyReport]


def _compare(fleet: Fleet, facts: Mapping[str, Mapping[str, Any]], hosts: list[str]) -> VerifyReport:
    return compare(fleet, facts, hosts=hosts)


@dataclass(frozen=True)
class WaveOutcome:
    facts: dict[str, dict[str, Any]]  # the converged nodes' facts, from their results
    failed: dict[str, str]  # node -> why


@dataclass
class NativeSlurm:
    run: Runner  # Slurm clients, as SlurmControl's
    results: Path  # where nodes write <host>.json
    version: int  # the bundle version this rollout published
    timeout_s: float = 4 * 3600.0  # jobs ending + reboot + converge, per wave
    poll_s: float = 5.0
    verify: FactsVerifier = _compare
    sleep: Callable[[float], None] = field(default=time.sleep, repr=False)
    requests: Path | None = None  # in-place waves: where the converge requests go (the nodes read it)

    def request(self, hosts: Sequence[str]) -> str:
        """Ask each (drained) node of ``hosts`` to converge in place, without a reboot:
        clear its earlier result, write its request; returns the request's ID."""
        if self.requests is None:
            raise ValueError("no requests directory: in-place waves need one")
        request = f"{self.version}-{secrets.token_hex(8)}"
        self.requests.mkdir(parents=True, exist_ok=True)
        body = json.dumps({"format": REQUEST_FORMAT, "request": request, "version": self.version}) + "\n"
        for host in hosts:
            (self.results / f"{host}.json").unlink(missing_ok=True)
            tmp = self.requests / f".{host}.json.tmp"
            tmp.write_text(body)
            os.replace(tmp, self.requests / f"{host}.json")  # a node never reads half a request
        return request

    def settled(self, hosts: Sequence[str], timeout_s: float = 120.0) -> list[str]:
        """Wait until Slurm shows every node of ``hosts`` DRAINED (its jobs gone, the drain
        done: what the node itself checks before it acts on a request); the nodes that are
        not by ``timeout_s``."""
        end = time.monotonic() + timeout_s
        while True:
            states = self._states(hosts)
            late = [h for h in hosts if states.get(h, ("", ""))[0] != "drained"]
            if not late or time.monotonic() >= end:
                return late
            self.sleep(self.poll_s)

    def withdraw(self, hosts: Sequence[str]) -> None:
        """Remove the nodes' requests once the wave is over (done or stopped)."""
        if self.requests is not None:
            for host in hosts:
                (self.requests / f"{host}.json").unlink(missing_ok=True)

    def reboot(self, hosts: Sequence[str], reason: str) -> None:
        """Clear the nodes' earlier results (any result after this is this wave's), then
        hand the nodes to Slurm."""
        for host in hosts:
            (self.results / f"{host}.json").unlink(missing_ok=True)
        checked(self.run, ["scontrol", "reboot", "ASAP", "nextstate=RESUME", f"reason={reason}", compress(hosts)])

    def wait(self, hosts: Sequence[str], on_progress: Callable[[list[str]], None] | None = None,
             request: str | None = None) -> WaveOutcome:
        """Poll until every node of ``hosts`` converged or failed, or the deadline. With
        ``request`` (an in-place wave): a node is done when its result answers that
        request; it stays drained (the rollout resumes it after the gates)."""
        end = time.monotonic() + self.timeout_s
        pending = set(hosts)
        facts: dict[str, dict[str, Any]] = {}
        failed: dict[str, str] = {}
        while True:
            states = self._states(sorted(pending)) if pending else {}
            for host in sorted(pending):
                state, reason = states.get(host, ("", ""))
                result = self._result(host)
                if result is not None and request is not None and result.get("request") != request:
                    failed[host] = (f"its result answers request {result.get('request')!r}, not this wave's "
                                    f"{request!r}: {result.get('error') or 'another run wrote it'}")
                elif result is not None and not result.get("ok"):
                    failed[host] = f"converge failed: {result.get('error') or 'no reason given'}"
                elif result is not None and request is not None or result is not None and not _reboot_pending(state) and _in_service(state):
                    facts[host] = result.get("facts") or {}
                elif any(word in state for word in ("down", "fail")) and not _reboot_pending(state):
                    failed[host] = f"Slurm shows {state}: {reason or 'no reason'}"
                else:
                    continue
                pending.discard(host)
            if on_progress is not None:
                on_progress(sorted(pending))
            if not pending:
                return WaveOutcome(facts, failed)
            if time.monotonic() >= end:
                failed.update({h: f"did not come back converged to bundle version {self.version} within "
                                  f"{self.timeout_s:.0f}s (Slurm: {' '.join(states.get(h, ('unknown', '')))})"
                               for h in pending})
                return WaveOutcome(facts, failed)
            self.sleep(self.poll_s)

    def _states(self, hosts: Sequence[str]) -> dict[str, tuple[str, str]]:
        out = checked(self.run, ["sinfo", "-h", "-N", "-n", compress(hosts), "-o", "%N|%T|%E"])
        states: dict[str, tuple[str, str]] = {}
        for line in out.splitlines():
            node, _, rest = line.partition("|")
            state, _, reason = rest.partition("|")
            states[node.strip()] = (state.strip().lower(), reason.strip())
        return states

    def _result(self, host: str) -> dict[str, Any] | None:
        """The node's result for this rollout's bundle version; None while there is none."""
        path = self.results / f"{host}.json"
        try:
            with open(path, "rb") as handle:
                raw = handle.read(MAX_RESULT_BYTES + 1)
        except FileNotFoundError:
            return None
        except OSError as exc:
            return {"ok": False, "error": f"cannot read {path}: {exc.strerror or exc}", "version": self.version}
        try:
            doc = json.loads(raw) if len(raw) <= MAX_RESULT_BYTES else None
        except ValueError:
            doc = None
        if not isinstance(doc, dict):
            return {"ok": False, "error": f"{path} is not a result document", "version": self.version}
        if doc.get("ok") and doc.get("version") != self.version:
            return {"ok": False, "version": doc.get("version"),
                    "error": f"converged to bundle version {doc.get('version')}, not {self.version}"}
        return doc


def _reboot_pending(state: str) -> bool:
    return "reboot" in state


def _in_service(state: str) -> bool:
    return not any(word in state for word in ("down", "drain", "fail", "not_responding")) and not state.endswith("*")
