"""SSH access to lab nodes: one key pair per lab, an ssh_config, Ansible connection vars.

Why ProxyCommand through `ip netns exec`: node addresses exist only inside namespaces
the lab made, so the host reaches each sshd on the node's own loopback and nothing is
ever bound or routed on the host's interfaces.
"""

from __future__ import annotations

import hashlib
import shlex
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

SSH_OPTIONS: dict[str, str] = {
    "User": "root",
    "StrictHostKeyChecking": "no",
    "UserKnownHostsFile": "/dev/null",
    "LogLevel": "ERROR",
    "ControlMaster": "auto",
    "ControlPersist": "120s",
    "IdentitiesOnly": "yes",
    "BatchMode": "yes",
}


def proxy_command(ns: str) -> str:
    """The ProxyCommand reaching sshd on the loopback of network namespace `ns`."""
    return shlex.join(["ip", "netns", "exec", ns, "nc", "127.0.0.1", "22"])


@dataclass(frozen=True)
class LabSSH:
    """Key, config and control sockets of one lab, all under `work_dir/ssh` (plus a short
    control-socket dir in /tmp: unix socket paths are limited to 108 bytes)."""

    work_dir: Path

    @property
    def dir(self) -> Path:
        return Path(self.work_dir) / "ssh"

    @property
    def key(self) -> Path:
        return self.dir / "id_ed25519"

    @property
    def config(self) -> Path:
        return self.dir / "ssh_config"

    @property
    def control_dir(self) -> Path:
        tag = hashlib.sha256(str(Path(self.work_dir).resolve()).encode()).hexdigest()[:10]
        return Path(tempfile.gettempdir()) / f"fsl-cp-{tag}"

    def ensure_key(self) -> str:
        """Create the ed25519 key pair once; return the public key line."""
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        if not self.key.exists():
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "fleetspec-lab", "-f", str(self.key)],
                           check=True, capture_output=True)
        return self.key.with_suffix(".pub").read_text()

    def options(self, ns: str) -> dict[str, str]:
        """ssh -o options for a node in network namespace `ns`."""
        return {
            **SSH_OPTIONS,
            "ProxyCommand": proxy_command(ns),
            "IdentityFile": str(self.key),
            "ControlPath": str(self.control_dir / "%C"),
        }

    def write_config(self, nodes: dict[str, str]) -> Path:
        """Write ssh_config for {node name: netns}; the ControlPath dir is made up front
        (testinfra and Ansible only reuse connections when it already exists)."""
        self.control_dir.mkdir(mode=0o700, exist_ok=True)
        blocks = []
        for name, ns in sorted(nodes.items()):
            opts = "".join(f"    {k} {v}\n" for k, v in self.options(ns).items())
            blocks.append(f"Host {name}\n    HostName {name}\n{opts}")
        self.config.write_text("\n".join(blocks))
        return self.config

    def argv(self, name: str, *command: str) -> list[str]:
        """ssh argv running `command` on node `name` through this lab's ssh_config.

        ssh hands the remote shell one string, so the words are quoted here, never joined raw.
        """
        return ["ssh", "-F", str(self.config), name, "--", shlex.join(command)]

    def ansible_vars(self, name: str, ns: str) -> dict[str, str]:
        """Inventory host vars that let Ansible reach node `name` without the ssh_config.

        ControlPath is this lab's own: Ansible's default (~/.ansible/cp, keyed on host name,
        port and user) would let a ControlPersist master left by another lab's node of the
        same name (another namespace, behind another ProxyCommand) carry this run there."""
        opts = self.options(ns)
        common = " ".join(
            f"-o {k}={shlex.quote(opts[k])}"
            for k in ("ProxyCommand", "StrictHostKeyChecking", "UserKnownHostsFile", "LogLevel", "IdentitiesOnly",
                      "ControlPath")
        )
        return {
            "ansible_host": name,
            "ansible_user": "root",
            "ansible_ssh_common_args": common,
            "ansible_ssh_private_key_file": str(self.key),
            "ansible_python_interpreter": "/usr/bin/python3",
        }

    def close(self, names: list[str]) -> None:
        """Stop the ControlMaster processes our ssh_config started, then drop the socket dir."""
        if self.config.exists():
            for name in names:
                subprocess.run(["ssh", "-F", str(self.config), "-O", "exit", name],
                               capture_output=True, timeout=10, check=False)
        if self.control_dir.exists():
            for sock in self.control_dir.iterdir():
                sock.unlink(missing_ok=True)
            self.control_dir.rmdir()
