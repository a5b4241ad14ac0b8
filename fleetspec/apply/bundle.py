"""Sign and publish node bundles (#30 item 2): the controller's half of the Slurm-native path.

A bundle (``fleetspec.render.bundle``) is signed with OpenSSH's ``ssh-keygen -Y sign``
under the namespace ``fleetspec-bundle``: nothing new to install on a Debian/Ubuntu node
(openssh-client), and the node verifies with the documented
``ssh-keygen -Y verify -f allowed_signers -I fleetspec -n fleetspec-bundle -s B.sig < B``
against the allowed_signers file the site pins in its image. The signing key is a secret
reference like every other (``file:``, ``env:``, ``ansible-vault:``, ...); its value lives
only in a 0600 file in a private temporary directory for the length of one ``ssh-keygen``.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from fleetspec.compile.ir import Fleet
from fleetspec.node_side import collector
from fleetspec.render.bundle import bundle_name, render_bundle
from fleetspec.secrets import SecretError, SecretRef, resolve

NAMESPACE = "fleetspec-bundle"
SIGNER = "fleetspec"
SIGN_TIMEOUT_S = 60
_SKIP_DIRS = {"__pycache__", ".git"}


class BundleSignError(Exception):
    """The bundle could not be signed: the message says why, never the key."""


@dataclass(frozen=True)
class Published:
    bundle: Path
    signature: Path
    version: int


def read_sources(playbooks_dir: Path) -> dict[PurePosixPath, bytes]:
    """Every regular file under the playbooks directory (as ``playbooks/...``) and the
    node-side collector the ``fact_collector`` role copies (links refused)."""
    files: dict[PurePosixPath, bytes] = {}
    for root, dirs, names in os.walk(playbooks_dir):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS)
        for name in sorted(names):
            path = Path(root) / name
            if path.is_symlink() or not path.is_file():
                raise BundleSignError(f"{path}: not a regular file; a bundle holds regular files only")
            files[PurePosixPath("playbooks") / path.relative_to(playbooks_dir).as_posix()] = path.read_bytes()
    files[PurePosixPath("fleetspec/node_side/collector.py")] = Path(collector.__file__).read_bytes()
    return files


def sign(data: bytes, key: bytes) -> bytes:
    """The ``ssh-keygen -Y sign`` signature of ``data`` (an armoured SSH SIGNATURE block)."""
    with tempfile.TemporaryDirectory(prefix="fleetspec-sign-") as tmp:
        key_path = Path(tmp) / "key"
        fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(key if key.endswith(b"\n") else key + b"\n")
        data_path = Path(tmp) / "bundle"
        data_path.write_bytes(data)
        try:
            proc = subprocess.run(["ssh-keygen", "-q", "-Y", "sign", "-f", str(key_path), "-n", NAMESPACE,
                                   str(data_path)], capture_output=True, text=True, timeout=SIGN_TIMEOUT_S,
                                  stdin=subprocess.DEVNULL)
        except FileNotFoundError:
            raise BundleSignError("ssh-keygen is not installed (Debian/Ubuntu: apt-get install openssh-client)") from None
        except subprocess.TimeoutExpired:
            raise BundleSignError(f"ssh-keygen -Y sign did not finish in {SIGN_TIMEOUT_S} s "
                                  "(a key with a passphrase? the signing key must have none)") from None
        if proc.returncode != 0:
            raise BundleSignError(f"ssh-keygen -Y sign failed: {proc.stderr.strip() or proc.returncode}")
        return (Path(tmp) / "bundle.sig").read_bytes()


def publish(fleet: Fleet, partition: str, version: int, key_ref: str, base_dir: Path,
            playbooks_dir: Path, out_dir: Path) -> Published:
    """Render, sign and write ``<fleet>-<partition>-<version>.tar.gz`` and its ``.sig``
    into ``out_dir`` (the site's mirror directory), and the same two as
    ``<fleet>-<partition>.tar.gz``: the name a node's converge unit fetches at every boot
    (a node refuses it if it is older than what it ran). Raises `BundleSignError`."""
    try:
        key = resolve(SecretRef.parse("bundle_signing_key", key_ref), base_dir)
    except SecretError as exc:
        raise BundleSignError(str(exc)) from None
    data = render_bundle(fleet, partition, version, read_sources(playbooks_dir))
    signature = sign(data, key)
    out_dir.mkdir(parents=True, exist_ok=True)
    name = bundle_name(fleet, partition, version)
    bundle, sig = out_dir / name, out_dir / (name + ".sig")
    latest = out_dir / f"{fleet.name}-{partition}.tar.gz"
    for path, blob in ((bundle, data), (sig, signature), (latest, data),
                       (latest.with_name(latest.name + ".sig"), signature)):
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(blob)
        os.replace(tmp, path)
    return Published(bundle, sig, version)
