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

Both directories face the nodes (#41 items 5 and 13). The results directory is written by
every node, so a node's root can plant anything under another node's name: a result is
read only when it is a regular file (opened without following a link, without blocking, its
size bounded) and anything else is that node's failure with the reason, never a hang or a
traceback; a stale result that cannot be cleared keeps its node out of the wave (it is not
handed to Slurm nor asked) and fails it. The requests directory must be the controller's
own: not a link, owned by this user or root, writable by nobody else; it is checked before
every write, and requests go to a random exclusive temporary name renamed into place.
"""

from __future__ import annotations

import errno
import json
import os
import secrets
import stat
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fleetspec.apply.control import Runner, checked
from fleetspec.compile.ir import Fleet
from fleetspec.node_side.hostlist import compress
from fleetspec.safe_io import UnsafePathError, atomic_write, kind_of, loads_json
from fleetspec.verify.compare import VerifyReport, compare

MAX_RESULT_BYTES = 4 * 1024 * 1024
REQUEST_FORMAT = 1  # fleetspec.node_side.converge_request reads it
FactsVerifier = Callable[[Fleet, Mapping[str, Mapping[str, Any]], list[str]], VerifyReport]


def _compare(fleet: Fleet, facts: Mapping[str, Mapping[str, Any]], hosts: list[str]) -> VerifyReport:
    return compare(fleet, facts, hosts=hosts)


class RequestsError(Exception):
    """The requests directory is not the controller's own: the message says what to fix."""


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
    _uncleared: dict[str, str] = field(default_factory=dict, init=False, repr=False)  # host -> why

    def request(self, hosts: Sequence[str]) -> str:
        """Ask each (drained) node of ``hosts`` to converge in place, without a reboot:
        clear its earlier result, write its request; returns the request's ID. A node whose
        earlier result cannot be cleared, or whose request cannot be written (a link at its
        name is refused, not followed), is not asked (`wait` fails it). Raises
        `RequestsError` when the requests directory is not the controller's own."""
        if self.requests is None:
            raise ValueError("no requests directory: in-place waves need one")
        _check_requests_dir(self.requests)
        request = f"{self.version}-{secrets.token_hex(8)}"
        body = (json.dumps({"format": REQUEST_FORMAT, "request": request, "version": self.version}) + "\n").encode()
        for host in self._clear(hosts):
            path = self.requests / f"{host}.json"
            try:
                atomic_write(path, body)  # an O_EXCL|O_NOFOLLOW temporary file renamed: never half read
            except (OSError, UnsafePathError) as exc:  # e.g. a link at its name: refused, left as it is
                self._uncleared[host] = f"its request could not be written: {getattr(exc, 'strerror', None) or exc}"
        return request

    def _clear(self, hosts: Sequence[str]) -> list[str]:
        """Remove the nodes' earlier results (any result after this is this wave's); the
        nodes whose result could not be removed are remembered with why, and left out."""
        cleared = []
        for host in hosts:
            path = self.results / f"{host}.json"
            try:
                path.unlink(missing_ok=True)
            except OSError as exc:
                try:
                    what = kind_of(os.lstat(path).st_mode)
                except OSError:
                    what = "there"
                self._uncleared[host] = (f"its earlier result {path} ({what}) cannot be removed: "
                                         f"{exc.strerror or exc}; remove it, then apply again")
                continue
            self._uncleared.pop(host, None)
            cleared.append(host)
        return cleared

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
                try:
                    (self.requests / f"{host}.json").unlink(missing_ok=True)
                except OSError:
                    pass  # not a file it wrote (the directory was checked): the node's parse refuses it

    def reboot(self, hosts: Sequence[str], reason: str) -> None:
        """Clear the nodes' earlier results (any result after this is this wave's), then
        hand the nodes to Slurm; a node whose result cannot be cleared is not handed over
        (`wait` fails it with why)."""
        cleared = self._clear(hosts)
        if cleared:
            checked(self.run, ["scontrol", "reboot", "ASAP", "nextstate=RESUME", f"reason={reason}", compress(cleared)])

    def wait(self, hosts: Sequence[str], on_progress: Callable[[list[str]], None] | None = None,
             request: str | None = None) -> WaveOutcome:
        """Poll until every node of ``hosts`` converged or failed, or the deadline. With
        ``request`` (an in-place wave): a node is done when its result answers that
        request; it stays drained (the rollout resumes it after the gates). A node that
        `reboot` or `request` left out (its old result could not be cleared, its request not
        written) fails at once with why."""
        end = time.monotonic() + self.timeout_s
        failed: dict[str, str] = {h: self._uncleared.pop(h) for h in hosts if h in self._uncleared}
        pending = set(hosts) - set(failed)
        facts: dict[str, dict[str, Any]] = {}
        states: dict[str, tuple[str, str]] = {}
        while True:
            results = {host: self._result(host) for host in sorted(pending)}
            # A result decides alone when it failed or answers this wave's request; else Slurm's word counts.
            undecided = sorted(h for h, r in results.items()
                               if r is None or r.get("ok") and request is None)
            states = self._states(undecided) if undecided else {}
            for host in sorted(pending):
                state, reason = states.get(host, ("", ""))
                result = results[host]
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
        """The node's result for this rollout's bundle version; None while there is none.
        Anything but a regular file of at most MAX_RESULT_BYTES (a link, FIFO, directory,
        device another node planted) is a failed result that says why: read without
        following a link and without blocking, so it can neither hang nor crash the wave."""
        path = self.results / f"{host}.json"
        raw, problem = _read_result(path)
        if problem is not None:
            return {"ok": False, "error": problem, "version": self.version}
        if raw is None:
            return None
        try:
            doc = loads_json(raw)
        except ValueError:
            doc = None
        if not isinstance(doc, dict):
            return {"ok": False, "error": f"{path} is not a result document", "version": self.version}
        if doc.get("ok") and doc.get("version") != self.version:
            return {"ok": False, "version": doc.get("version"),
                    "error": f"converged to bundle version {doc.get('version')}, not {self.version}"}
        return doc


def _check_requests_dir(path: Path) -> None:
    """The requests directory must be written by the controller alone (docs/security.md):
    a real directory, not a link, owned by this user or root, not writable by group or
    others. Anyone else who can write it can forge requests and plant links."""
    try:
        path.mkdir(mode=0o755, parents=True, exist_ok=True)
    except FileExistsError:
        pass  # a dangling link or a file: the open below says which
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise RequestsError(f"the requests directory {path} is {kind_of(os.lstat(path).st_mode)}, not a "
                                "directory: requests go only into a directory of the controller's own. "
                                f"Remove it (fleetspec creates it, mode 0755)") from None
        raise RequestsError(f"cannot open the requests directory {path}: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
    finally:
        os.close(fd)
    if st.st_uid not in (os.geteuid(), 0):
        raise RequestsError(f"the requests directory {path} is owned by uid {st.st_uid}, not by this user "
                            f"(uid {os.geteuid()}) or root: whoever owns it can forge requests. "
                            f"chown {os.geteuid()} {path}")
    if st.st_mode & 0o022:
        raise RequestsError(f"the requests directory {path} is writable by group or others (mode "
                            f"{stat.S_IMODE(st.st_mode):04o}): anyone who can write it can forge requests "
                            f"and plant links. chmod go-w {path}")


def _read_result(path: Path) -> tuple[bytes | None, str | None]:
    """(the bytes, None), (None, None) when there is no file, or (None, why it is refused)."""
    try:
        there = os.lstat(path)
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        return None, f"cannot read {path}: {exc.strerror or exc}"
    if not stat.S_ISREG(there.st_mode):  # refused before it is opened: opening a device may act
        return None, f"{path} is {kind_of(there.st_mode)}, not a regular file: not a result this node wrote"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        return None, f"cannot read {path}: {exc.strerror or exc}"
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):  # swapped since the lstat
            return None, f"{path} is {kind_of(st.st_mode)}, not a regular file: not a result this node wrote"
        if st.st_size > MAX_RESULT_BYTES:
            return None, f"{path} is {st.st_size:,} bytes; a result is at most {MAX_RESULT_BYTES:,}"
        chunks, total = [], 0
        while total <= MAX_RESULT_BYTES:
            chunk = os.read(fd, MAX_RESULT_BYTES + 1 - total)
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        raw = b"".join(chunks)
    except OSError as exc:
        return None, f"cannot read {path}: {exc.strerror or exc}"
    finally:
        os.close(fd)
    if len(raw) > MAX_RESULT_BYTES:
        return None, f"{path} holds more than {MAX_RESULT_BYTES:,} bytes; a result is at most that"
    return raw, None


def _reboot_pending(state: str) -> bool:
    return "reboot" in state


def _in_service(state: str) -> bool:
    return not any(word in state for word in ("down", "drain", "fail", "not_responding")) and not state.endswith("*")
