"""A fleet on one machine: stand-in hosts in Linux namespaces and a stand-in package repo.

Real parts, not mocks: each node is a systemd-nspawn container (or an unshare'd sshd)
with its own network namespace, reached over real SSH; packages are real .debs in a real
apt repository. Nothing here can stand in for GPUs, kernel modules or a reboot.
"""

from __future__ import annotations

import importlib
from typing import Any

DEFAULT_PER_PARTITION = 2  # lab nodes per partition
STATE_FILE = "lab.json"  # in the lab directory: what `lab up` made

# Loaded on first use (PEP 562), so `fleetspec lab --help` does not import the lab.
_EXPORTS = {
    "LabUnavailable": "base", "base_key": "base", "default_cache_dir": "base", "ensure_base": "base",
    "ensure_host_packages": "base", "Lab": "hosts", "LabNode": "hosts", "validate_name": "hosts",
    "StandInPackage": "repo", "build_repo": "repo", "vendor_standins": "repo", "LabSSH": "ssh",
}


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'fleetspec.lab' has no attribute {name!r}")
    return getattr(importlib.import_module(f"fleetspec.lab.{_EXPORTS[name]}"), name)


__all__ = [
    "DEFAULT_PER_PARTITION",
    "STATE_FILE",
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
