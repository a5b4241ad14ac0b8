"""Converge this drained node in place when the controller asks: no reboot (#30 item 2).

The Slurm-native rollout of a change that needs no reboot (CUDA toolkit, NCCL): the
controller drains the wave through Slurm with fleetspec's reason, waits until Slurm shows
the nodes DRAINED (their jobs ended), and writes one small request per node,
``REQUESTS/HOST.json`` = ``{"format": 1, "request": "<version>-<16 hex>", "version": N}``,
into a directory only it writes and the nodes read (next to the bundles it publishes).
``fleetspec-converge-request.timer`` runs this entry every 30 s; it:

1. takes a lock (one run at a time: never two converges at once on a node);
2. reads its own request; none, or the one it already handled: nothing to do (the steady
   state: one small read on shared storage, no Slurm call);
3. records the request as handled *before* acting on it (a request runs at most once);
4. asks Slurm (``sinfo -N -n HOST -o %T|%E``) whether this node is ``drained`` with a reason
   starting ``fleetspec: ``; otherwise it refuses and says so in its result: a request never
   converges a node under running jobs, whoever wrote it;
5. runs ``fleetspec.node_side.converge`` with the node's own configured bundle (its
   ``/etc/fleetspec/converge.env``: the request names no bundle, no command, no path) and
   the allowed_signers the site pinned: signature, manifest and replay checks as at boot;
6. the result (``RESULT_DIR/HOST.json``) carries the request's ID; the controller reads it,
   verifies the facts and resumes the node. A failed converge leaves it drained.

Why a timer and not a ``.path`` unit: systemd.path(5) says path units use inotify and
"cannot be used to monitor files or directories changed by other machines on remote NFS
file systems" (freedesktop.org/software/systemd/man/devel/systemd.path.html): the
controller's write would never fire it on the shared filesystems a fleet uses. Why not SSH: the controller would hold an SSH
connection (and a key that reaches every node) per node; here it writes a file.

Standard library only, Python 3.8+, like the rest of ``fleetspec.node_side``.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import re
import stat
import subprocess
import sys
import urllib.error
import urllib.request
from typing import Any, Dict, List, Optional, Tuple

from fleetspec.node_side import converge

REQUEST_FORMAT = 1
REASON_PREFIX = "fleetspec: "  # fleetspec.apply.control.APPLY_REASON_PREFIX, the drain reason apply sets
HANDLED_FILE = "last-request.json"
LOCK_FILE = "converge.lock"
MAX_REQUEST_BYTES = 4096
SINFO_TIMEOUT_S = 60
_REQUEST_ID = re.compile(r"[0-9]{1,12}-[0-9a-f]{16}")


class Refused(Exception):
    """Why this node will not act on its request; written to the result."""


def read_request(location: str) -> Optional[bytes]:
    """The request's bytes at a path, ``file://`` or ``https://`` URL; None when there is none."""
    try:
        if location.startswith("https://") or location.startswith("file://"):
            with urllib.request.urlopen(location, timeout=converge.FETCH_TIMEOUT_S) as response:
                data = response.read(MAX_REQUEST_BYTES + 1)
        elif "://" in location:
            raise Refused("%s: only a path, file:// or https:// is read" % location)
        else:
            fd = os.open(location, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
            with os.fdopen(fd, "rb") as handle:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    raise Refused("%s is not a regular file" % location)
                data = handle.read(MAX_REQUEST_BYTES + 1)
    except FileNotFoundError:
        return None
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        raise Refused("cannot read %s: %s" % (location, exc)) from None
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, FileNotFoundError):  # file:// of a missing file
            return None
        raise Refused("cannot read %s: %s" % (location, exc)) from None
    except OSError as exc:
        raise Refused("cannot read %s: %s" % (location, exc.strerror or exc)) from None
    return data


def parse_request(raw: bytes) -> Tuple[str, int]:
    """(request ID, bundle version) of a well-formed request; `Refused` otherwise."""
    if len(raw) > MAX_REQUEST_BYTES:
        raise Refused("the request is larger than %d bytes" % MAX_REQUEST_BYTES)
    try:
        doc = json.loads(raw.decode("utf-8"))
    except ValueError:
        raise Refused("the request is not JSON") from None
    if not isinstance(doc, dict) or set(doc) != {"format", "request", "version"} or doc["format"] != REQUEST_FORMAT:
        raise Refused("the request is not {format: %d, request, version}" % REQUEST_FORMAT)
    request, version = doc["request"], doc["version"]
    if not isinstance(request, str) or not _REQUEST_ID.fullmatch(request):
        raise Refused("the request's ID is not <version>-<16 hex digits>")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise Refused("the request's version is not a positive integer")
    return request, version


def slurm_state(host: str, sinfo: str = "sinfo") -> Tuple[str, str]:
    """(state, reason) Slurm shows for this node."""
    try:
        proc = subprocess.run([sinfo, "-h", "-N", "-n", host, "-o", "%T|%E"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, timeout=SINFO_TIMEOUT_S)
    except FileNotFoundError:
        raise Refused("sinfo is not installed: cannot check that Slurm drained this node") from None
    except subprocess.TimeoutExpired:
        raise Refused("sinfo did not answer in %d s" % SINFO_TIMEOUT_S) from None
    if proc.returncode != 0:
        raise Refused("sinfo failed: %s" % proc.stderr.decode("utf-8", "replace").strip())
    for line in proc.stdout.decode("utf-8", "replace").splitlines():
        state, _, reason = line.partition("|")
        return state.strip().lower(), reason.strip()
    raise Refused("Slurm does not know node %s" % host)


def check_drained(host: str, sinfo: str = "sinfo") -> None:
    state, reason = slurm_state(host, sinfo)
    if state != "drained" or not reason.startswith(REASON_PREFIX):
        raise Refused("Slurm shows %s %s (reason: %s), not drained by fleetspec: refusing to converge in place "
                      "(jobs may run here)" % (host, state, reason or "none"))


def _handled(state_dir: str) -> Optional[str]:
    try:
        with open(os.path.join(state_dir, HANDLED_FILE), encoding="utf-8") as handle:
            value = json.load(handle).get("request")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, str) else None


def handle(host: str, requests: str, bundle: str, signature: Optional[str], allowed_signers: str, state_dir: str,
           result_dir: str, ansible_playbook: str = "ansible-playbook", collect_root: str = "/",
           sinfo: str = "sinfo", *, fleet: str, partition: str) -> Optional[Dict[str, Any]]:
    """Act on this node's request, at most once; the result written, or None (nothing to do)."""
    os.makedirs(state_dir, mode=0o700, exist_ok=True)
    try:
        lock_fd = converge.open_private(os.path.join(state_dir, LOCK_FILE), os.O_WRONLY | os.O_APPEND)
    except converge.ConvergeError as exc:
        sys.stderr.write("fleetspec-converge-request: %s\n" % exc)
        return None
    with os.fdopen(lock_fd, "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return None  # a converge runs now; the next tick looks again
        location = requests.rstrip("/") + "/" + host + ".json"
        try:
            raw = read_request(location)
        except Refused as exc:
            sys.stderr.write("fleetspec-converge-request: %s\n" % exc)
            return None  # storage trouble: no request was read, none is marked handled
        if raw is None:
            return None
        try:
            request, version = parse_request(raw)
            problem = None  # type: Optional[str]
        except Refused as exc:
            request, version, problem = "invalid:sha256:" + hashlib.sha256(raw).hexdigest(), 0, str(exc)
        if request == _handled(state_dir):
            return None
        try:
            converge._write_json(os.path.join(state_dir, HANDLED_FILE), {"request": request}, 0o600)
        except converge.ConvergeError as exc:  # not recorded as handled: not acted on
            sys.stderr.write("fleetspec-converge-request: %s\n" % exc)
            return None
        try:
            if problem is not None:
                raise Refused("%s: %s" % (location, problem))
            check_drained(host, sinfo)
        except Refused as exc:
            result = {"host": host, "bundle": bundle, "ok": False, "error": str(exc), "version": None,
                      "request": None if problem else request, "requested_version": version or None}
            converge.write_result(result_dir, host, result)
            return result
        return converge.converge(host, bundle, signature, allowed_signers, state_dir, result_dir, ansible_playbook,
                                 collect_root, extra={"request": request, "requested_version": version},
                                 fleet=fleet, partition=partition)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description="Converge this drained node in place when fleetspec asks.")
    parser.add_argument("--requests", required=True, help="directory (path, file:// or https:// URL) the "
                        "controller writes HOST.json requests to (the unit passes $FLEETSPEC_REQUESTS)")
    converge.add_bundle_arguments(parser)
    parser.add_argument("--sinfo", default="sinfo")
    args = parser.parse_args(argv)
    result = handle(args.host, args.requests, args.bundle, args.signature, args.allowed_signers, args.state_dir,
                    args.result_dir, args.ansible_playbook, args.collect_root, args.sinfo, fleet=args.fleet,
                    partition=args.partition)
    if result is not None and not result["ok"]:
        sys.stderr.write("fleetspec-converge-request: %s\n" % result["error"])
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
