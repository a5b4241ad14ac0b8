"""A fleet on one machine: stand-in hosts in Linux namespaces and a stand-in package repo.

Real parts, not mocks: each node is a systemd-nspawn container (or an unshare'd sshd)
with its own network namespace, reached over real SSH; packages are real .debs in a real
apt repository. Nothing here can stand in for GPUs, kernel modules or a reboot.
"""

from fleetspec.lab.base import LabUnavailable, base_key, default_cache_dir, ensure_base, ensure_host_packages
from fleetspec.lab.hosts import Lab, LabNode, validate_name
from fleetspec.lab.repo import StandInPackage, build_repo, vendor_standins
from fleetspec.lab.ssh import LabSSH

__all__ = [
    "Lab",
    "LabNode",
    "LabSSH",
    "LabUnavailable",
    "StandInPackage",
    "base_key",
    "build_repo",
    "default_cache_dir",
    "ensure_base",
    "ensure_host_packages",
    "validate_name",
    "vendor_standins",
]
