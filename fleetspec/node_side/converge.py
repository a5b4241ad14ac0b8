"""Converge this node from a signed bundle, before slurmd starts (#30 item 2).

The Slurm-native rollout path: the controller hands a wave to Slurm
(``scontrol reboot ASAP nextstate=RESUME reason="fleetspec: ..."``); at boot this entry
(the ``fleetspec-converge.service`` unit, ordered ``Before=slurmd.service``) runs:

1. read the bundle and its ``.sig`` (a path, or ``file://`` / ``https://`` URL: the mirror);
2. verify the signature with ``ssh-keygen -Y verify -f ALLOWED_SIGNERS -I fleetspec
   -n fleetspec-bundle`` (the allowed_signers file the site pins in the image) BEFORE the
   tarball is opened: an unsigned, tampered or foreign-key bundle is refused;
3. extract it into a fresh private directory, refusing any member that is not a regular
   file with a plain relative name, and check every file against the signed manifest's
   sha256 (no file missing, none extra);
4. refuse a bundle of another fleet or partition than this node's own (``--fleet``,
   ``--partition``: fleets may share a signing key), a version older than the last one
   this node ran in that fleet (a replayed old bundle), and a bundle whose hosts do not
   include this node;
5. run ``ansible-playbook -i ansible/inventory.yml -c local --limit HOST playbooks/local.yml``
   (the fleet's own roles, on itself), with ``fleetspec_converge_run=true``: the slurm role
   then keeps the munge key the node has (a bundle carries no secret) and leaves slurmd to
   systemd (starting it from here would wait on this very unit);
6. write ``RESULT_DIR/HOST.json``: version, spec digest, ok, the error, and the facts of
   ``collector.py`` (what verify compares), and exit non-zero on any failure. Slurmd does
   not start after a failed converge (the unit is ``Requires=``'d by slurmd's drop-in), so
   the node stays out of service and the controller reads why.

Standard library only, Python 3.8+, like the rest of ``fleetspec.node_side``.
"""

from __future__ import annotations

import argparse
import binascii
import datetime
import hashlib
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import tarfile
import tempfile
import urllib.request
from typing import Any, Dict, List, Optional

from fleetspec.node_side import collector

NAMESPACE = "fleetspec-bundle"
SIGNER = "fleetspec"
FORMAT = 1
MAX_BUNDLE_BYTES = 256 * 1024 * 1024
MAX_SIG_BYTES = 64 * 1024
FETCH_TIMEOUT_S = 120
VERIFY_TIMEOUT_S = 60
STATE_FILE = "last-version.json"


class ConvergeError(Exception):
    """Why this node did not converge; written to the result and to stderr."""


def fetch(source: str, limit: int) -> bytes:
    """The bytes at ``source``: a local path, ``file://`` or ``https://`` URL (never plain http)."""
    if source.startswith("https://") or source.startswith("file://"):
        try:
            with urllib.request.urlopen(source, timeout=FETCH_TIMEOUT_S) as response:
                data = response.read(limit + 1)
        except (OSError, ValueError) as exc:
            raise ConvergeError("cannot fetch %s: %s" % (source, exc)) from None
    elif "://" in source:
        raise ConvergeError("%s: only a path, file:// or https:// is fetched" % source)
    else:
        try:
            with open(source, "rb") as handle:
                data = handle.read(limit + 1)
        except OSError as exc:
            raise ConvergeError("cannot read %s: %s" % (source, exc.strerror or exc)) from None
    if len(data) > limit:
        raise ConvergeError("%s is larger than %d bytes" % (source, limit))
    return data


def verify_signature(data: bytes, signature: bytes, allowed_signers: str) -> None:
    """``ssh-keygen -Y verify`` of ``data``; raises `ConvergeError` unless the fleetspec
    signer of ``allowed_signers`` signed exactly these bytes under our namespace."""
    if not signature.strip():
        raise ConvergeError("the bundle is not signed (empty signature)")
    with tempfile.TemporaryDirectory(prefix="fleetspec-verify-") as tmp:
        sig_path = os.path.join(tmp, "bundle.sig")
        with open(sig_path, "wb") as handle:
            handle.write(signature)
        try:
            proc = subprocess.run(["ssh-keygen", "-Y", "verify", "-f", allowed_signers, "-I", SIGNER,
                                   "-n", NAMESPACE, "-s", sig_path], input=data, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, timeout=VERIFY_TIMEOUT_S)
        except FileNotFoundError:
            raise ConvergeError("ssh-keygen is not installed (openssh-client): cannot verify the bundle") from None
        except subprocess.TimeoutExpired:
            raise ConvergeError("ssh-keygen -Y verify did not finish in %d s" % VERIFY_TIMEOUT_S) from None
    if proc.returncode != 0:
        why = (proc.stderr or proc.stdout).decode("utf-8", "replace").strip()
        raise ConvergeError("bad bundle signature (allowed signers %s): %s" % (allowed_signers, why))


def extract(data: bytes, dest: str) -> Dict[str, Any]:
    """Unpack the (already verified) bundle into ``dest``; return its checked manifest."""
    import io

    try:
        tar = tarfile.open(fileobj=io.BytesIO(data), mode="r:gz")
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise ConvergeError("the bundle is not a gzip'd tarball: %s" % exc) from None
    contents = {}  # type: Dict[str, bytes]
    with tar:
        for member in tar:
            name = member.name
            parts = name.split("/")
            if (not member.isfile() or name.startswith("/") or ".." in parts or "" in parts
                    or "." in parts or name in contents):
                raise ConvergeError("bundle member %r is not a regular file with a plain relative name" % name)
            handle = tar.extractfile(member)
            contents[name] = handle.read() if handle is not None else b""
    raw = contents.pop("manifest.json", None)
    if raw is None:
        raise ConvergeError("the bundle has no manifest.json")
    try:
        manifest = json.loads(raw.decode("utf-8"))
    except ValueError as exc:
        raise ConvergeError("manifest.json is not JSON: %s" % exc) from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ConvergeError("manifest.json: format %r is not %d" % (
            manifest.get("format") if isinstance(manifest, dict) else None, FORMAT))
    version = manifest.get("version")
    files = manifest.get("files")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1 or not isinstance(files, dict):
        raise ConvergeError("manifest.json: version or files missing")
    if sorted(files) != sorted(contents):
        extra = sorted(set(contents) - set(files))
        missing = sorted(set(files) - set(contents))
        raise ConvergeError("bundle files differ from the manifest: extra %s, missing %s" % (extra, missing))
    for name, blob in sorted(contents.items()):
        if hashlib.sha256(blob).hexdigest() != files[name]:
            raise ConvergeError("%s: sha256 does not match the manifest" % name)
        path = os.path.join(dest, *name.split("/"))
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        with open(path, "wb") as out:
            out.write(blob)
    return manifest


def check_fleet(manifest: Dict[str, Any], fleet: str, partition: str) -> None:
    """Refuse a bundle of another fleet or partition (#41 item 14): the first check after
    the signature. Fleets may share a signing key (one site, staging and prod), so the
    signature says only that the site made the bundle, not that it is this node's."""
    if not fleet or not partition:
        raise ConvergeError("this node does not know its fleet and partition (FLEETSPEC_FLEET, FLEETSPEC_PARTITION "
                            "in /etc/fleetspec/converge.env): re-run the fleetspec_converge role; no bundle is run")
    theirs = (manifest.get("fleet"), manifest.get("partition"))
    if theirs != (fleet, partition):
        raise ConvergeError("this bundle is for fleet %r, partition %r; this node is in fleet %r, partition %r: "
                            "refused (a bundle signed for another fleet or partition never runs here)"
                            % (theirs[0], theirs[1], fleet, partition))


def check_version(manifest: Dict[str, Any], state_dir: str) -> None:
    """Refuse a bundle older than the last one this node converged to, in the bundle's
    fleet (each fleet counts its own versions)."""
    last = last_version(state_dir, manifest["fleet"])
    if last is not None and manifest["version"] < last:
        raise ConvergeError("bundle version %d is older than version %d this node already ran (replay refused)"
                            % (manifest["version"], last))


def _read_versions(state_dir: str) -> Dict[str, Any]:
    try:
        with open(os.path.join(state_dir, STATE_FILE), encoding="utf-8") as handle:
            doc = json.load(handle)
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise ConvergeError("cannot read %s: %s (remove it only if you know which version ran)"
                            % (os.path.join(state_dir, STATE_FILE), exc)) from None
    if not isinstance(doc, dict):
        raise ConvergeError("%s is not a JSON object (remove it only if you know which version ran)"
                            % os.path.join(state_dir, STATE_FILE))
    return doc


def last_version(state_dir: str, fleet: str) -> Optional[int]:
    """The last bundle version of ``fleet`` this node ran. A file of the form before #41
    (``{"version": N}``, one counter for any fleet) counts for every fleet: it cannot say
    whose version it was, so it stays a floor until this node records its fleet's own."""
    doc = _read_versions(state_dir)
    fleets = doc.get("fleets")
    value = fleets.get(fleet) if isinstance(fleets, dict) and fleet in fleets else doc.get("version")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def record_version(state_dir: str, fleet: str, version: int) -> None:
    doc = _read_versions(state_dir)
    fleets = doc.get("fleets") if isinstance(doc.get("fleets"), dict) else {}
    fleets[fleet] = version
    _write_json(os.path.join(state_dir, STATE_FILE), {"fleets": fleets}, 0o600)


def _kind(mode: int) -> str:
    for test, word in ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device")):
        if test(mode):
            return word
    return "not a regular file"


def write_file(path: str, data: bytes, mode: int = 0o644) -> None:
    """Put ``data`` at ``path`` as a new file, never writing through what is there (#41 item 2).

    The results directory is shared by every node, so any node's root can plant a link, a
    FIFO or a device under another node's names. The bytes go to a random temporary name
    created exclusively and without following links (``O_CREAT|O_EXCL|O_NOFOLLOW``: a
    planted ``HOST.json.tmp -> victim`` is never opened), are fsync'd, and the temporary file
    is renamed over ``path`` (rename replaces a directory entry, it never writes into the
    file an entry names); all relative to one open descriptor of the directory. A ``path``
    that exists and is not a regular file is refused: something was planted there. Raises
    `ConvergeError` saying which file and why."""
    directory, name = os.path.split(path)
    directory = directory or "."
    try:
        os.makedirs(directory, exist_ok=True)
        dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise ConvergeError("cannot open the directory %s: %s" % (directory, exc.strerror or exc)) from None
    tmp = None  # type: Optional[str]
    try:
        try:
            there = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            there = None
        if there is not None and not stat.S_ISREG(there.st_mode):
            raise ConvergeError("%s is %s, not a regular file: something other than this node put it there; "
                                "refusing to write through it (remove it)" % (path, _kind(there.st_mode)))
        tmp = ".%s.%s.tmp" % (name, binascii.hexlify(os.urandom(8)).decode())
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=dir_fd)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        tmp = None
        os.fsync(dir_fd)
    except OSError as exc:
        raise ConvergeError("cannot write %s: %s" % (path, exc.strerror or exc)) from None
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp, dir_fd=dir_fd)
            except OSError:
                pass
        os.close(dir_fd)


def _write_json(path: str, doc: Dict[str, Any], mode: int = 0o644) -> None:
    write_file(path, (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode("utf-8"), mode)


def open_private(path: str, flags: int) -> int:
    """A descriptor of ``path`` (this node's own state directory) opened without following a
    link, created 0600; refused when it is not a regular file (a FIFO would block)."""
    try:
        fd = os.open(path, flags | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise ConvergeError("cannot open %s: %s" % (path, exc.strerror or exc)) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ConvergeError("%s is not a regular file: refusing to use it (remove it)" % path)
    os.set_blocking(fd, True)
    return fd


def run_playbook(workdir: str, host: str, ansible_playbook: str, log_path: str) -> None:
    command = [ansible_playbook, "-i", os.path.join(workdir, "ansible", "inventory.yml"), "-c", "local",
               "-e", "ansible_connection=local", "-e", "fleetspec_converge_run=true", "--limit", host,
               os.path.join(workdir, "playbooks", "local.yml")]
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(workdir, "playbooks", "ansible.cfg"))
    with os.fdopen(open_private(log_path, os.O_WRONLY | os.O_TRUNC), "wb") as log:
        try:
            rc = subprocess.call(command, cwd=workdir, stdout=log, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL, env=env)
        except OSError as exc:
            raise ConvergeError("cannot run %s: %s" % (ansible_playbook, exc)) from None
    if rc != 0:
        raise ConvergeError("ansible-playbook exited %d (log: %s)" % (rc, log_path))


def converge(host: str, bundle: str, signature: Optional[str], allowed_signers: str, state_dir: str,
             result_dir: str, ansible_playbook: str = "ansible-playbook",
             collect_root: str = "/", extra: Optional[Dict[str, Any]] = None, *, fleet: str,
             partition: str) -> Dict[str, Any]:
    """Verify, unpack and run the bundle for ``host`` of ``fleet``'s ``partition``; always
    write the result, return it. ``extra``: keys the result carries besides
    (``converge_request``: the request's ID)."""
    result = {"host": host, "bundle": bundle, "ok": False, "error": None, "version": None,
              "spec_digest": None}  # type: Dict[str, Any]
    result.update(extra or {})
    workdir = tempfile.mkdtemp(prefix="fleetspec-converge-")
    try:
        data = fetch(bundle, MAX_BUNDLE_BYTES)
        verify_signature(data, fetch(signature or bundle + ".sig", MAX_SIG_BYTES), allowed_signers)
        manifest = extract(data, workdir)
        check_fleet(manifest, fleet, partition)
        result["version"], result["spec_digest"] = manifest["version"], manifest.get("spec_digest")
        if host not in (manifest.get("hosts") or []):
            raise ConvergeError("this bundle (partition %s) is not for host %s" % (manifest.get("partition"), host))
        check_version(manifest, state_dir)
        os.makedirs(state_dir, mode=0o700, exist_ok=True)
        run_playbook(workdir, host, ansible_playbook, os.path.join(state_dir, "converge.log"))
        record_version(state_dir, fleet, manifest["version"])
        result["ok"] = True
    except ConvergeError as exc:
        result["error"] = str(exc)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    try:
        result["facts"] = collector.collect(collector.Host(collect_root))
    except Exception as exc:  # the facts are evidence, never the reason a result is not written
        result["facts"] = {"schema": collector.SCHEMA, "errors": ["collector failed: %s: %s" % (type(exc).__name__, exc)]}
    result["finished_at"] = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat()
    write_result(result_dir, host, result)
    return result


def write_result(result_dir: str, host: str, result: Dict[str, Any]) -> None:
    """``RESULT_DIR/HOST.json``; when it cannot be written (something planted there), the
    result says so and is not ok: the node stays out of service and its journal says why."""
    try:
        _write_json(os.path.join(result_dir, host + ".json"), result)
    except ConvergeError as exc:
        result["ok"] = False
        result["error"] = "%s; and the result was not written: %s" % (result["error"], exc) if result["error"] \
            else "the result was not written: %s" % exc


def add_bundle_arguments(parser: argparse.ArgumentParser) -> None:
    """The options both entry points take (this one at boot, converge_request on a request)."""
    parser.add_argument("--bundle", required=True, help="path, file:// or https:// URL of this node's bundle "
                        "(the units pass $FLEETSPEC_BUNDLE from /etc/fleetspec/converge.env, which the "
                        "fleetspec_converge role writes)")
    parser.add_argument("--fleet", required=True, help="this node's fleet (metadata.name; the units pass "
                        "$FLEETSPEC_FLEET): a bundle of another fleet is refused")
    parser.add_argument("--partition", required=True, help="this node's partition (the units pass "
                        "$FLEETSPEC_PARTITION): a bundle of another partition is refused")
    parser.add_argument("--signature", help="its .sig (default: the bundle's location + .sig)")
    parser.add_argument("--allowed-signers", default="/etc/fleetspec/allowed_signers")
    parser.add_argument("--host", default=socket.gethostname().split(".")[0], help="this node's inventory name")
    parser.add_argument("--state-dir", default="/var/lib/fleetspec")
    parser.add_argument("--result-dir", default="/var/lib/fleetspec/results")
    parser.add_argument("--ansible-playbook", default="ansible-playbook")
    parser.add_argument("--collect-root", default="/")


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description="Converge this node from a signed fleetspec bundle.")
    add_bundle_arguments(parser)
    args = parser.parse_args(argv)
    result = converge(args.host, args.bundle, args.signature, args.allowed_signers, args.state_dir,
                      args.result_dir, args.ansible_playbook, args.collect_root, fleet=args.fleet,
                      partition=args.partition)
    if not result["ok"]:
        sys.stderr.write("fleetspec-converge: %s\n" % result["error"])
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
