"""A one-play Ansible project and an inventory of one host on the local connection, for the
tests that run fleetspec's `run_playbook` for real without lab hosts."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest


def local_project(tmp_path: Path, play: str, host: str, **hostvars: object) -> tuple[Path, Path]:
    """(project dir with site.yml, inventory file). The host runs with this test's own
    interpreter: interpreter discovery can find a pyenv shim that cannot run under CI's PATH."""
    if shutil.which("ansible-playbook") is None:
        pytest.fail("ansible-playbook is missing: ansible-core comes with the test extra (pip install -e '.[test]')")
    project = tmp_path / "project"
    project.mkdir()
    (project / "site.yml").write_text(play)
    (project / "ansible.cfg").write_text("[defaults]\nhost_key_checking = False\n")
    inventory = tmp_path / "hosts.yml"
    lines = [f"all:\n  hosts:\n    {host}:\n      ansible_connection: local\n",
             f"      ansible_python_interpreter: {sys.executable}\n"]
    lines += [f"      {key}: {value}\n" for key, value in hostvars.items()]
    inventory.write_text("".join(lines))
    return project, inventory
