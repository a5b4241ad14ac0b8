"""nvidia_driver's nouveau step (tasks/nouveau.yml), run by ansible-playbook on this machine into
a temporary directory: the blacklist written, then the initramfs rebuilt with the node's own
tool, update-initramfs on apt nodes and dracut on EL nodes (#42 item 4). Neither tool may run
here (they rewrite this machine's /boot): each is a recording stand-in on PATH that accepts
only the real tool's arguments the role uses, as their usage texts give them:
- update-initramfs(8), initramfs-tools: ``update-initramfs {-c|-d|-u} [-k version] [-v] [-b directory]``;
- dracut(8): ``dracut [OPTION...] [<image> [<kernel version>]]``, ``-f, --force  overwrite existing
  initramfs file``.
The real rebuild, and what it puts in the image, only a real node shows (docs/packaging.md)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

PLAY = """\
- hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - ansible.builtin.include_role:
        name: nvidia_driver
        tasks_from: nouveau
"""

STANDINS = {
    "update-initramfs": 'case "$*" in -u|"-u -k all") ;; *) echo "Usage: update-initramfs {-c|-d|-u} [-k version] '
                        '[-v] [-b directory]" >&2; exit 2;; esac',
    "dracut": 'case "$*" in -f|--force) ;; *) echo "Usage: dracut [OPTION]... [<initramfs> [<kernel-version>]]" >&2; '
              "exit 1;; esac",
}


def _run(tmp_path: Path, **extra: object) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    playbook = shutil.which("ansible-playbook")
    assert playbook, "ansible-playbook is required (pip install ansible-core)"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    calls = tmp_path / "calls"
    for tool, check in STANDINS.items():
        (bin_dir / tool).write_text(f'#!/bin/sh\n{check}\necho "{tool} $*" >> {calls}\n')
        (bin_dir / tool).chmod(0o755)
    (tmp_path / "play.yml").write_text(PLAY)
    (tmp_path / "vars.json").write_text(json.dumps({"fleetspec_modprobe_dir": str(tmp_path),
                                                    "ansible_python_interpreter": sys.executable, **extra}))
    env = {"ANSIBLE_ROLES_PATH": str(ROOT / "playbooks/roles"), "ANSIBLE_HOME": str(tmp_path / ".ansible"),
           "ANSIBLE_LOCALHOST_WARNING": "false", "ANSIBLE_INVENTORY_UNPARSED_WARNING": "false",
           "PATH": f"{bin_dir}:/usr/bin:/bin:{Path(playbook).parent}"}
    done = subprocess.run([playbook, "-i", "localhost,", str(tmp_path / "play.yml"), "-e", f"@{tmp_path / 'vars.json'}"],
                          capture_output=True, text=True, env=env, timeout=180)
    return done, calls.read_text().splitlines() if calls.exists() else []


@pytest.mark.parametrize(("extra", "tool"), [
    ({"fleetspec_os": "ubuntu-24.04"}, "update-initramfs -u"),
    ({"fleetspec_os": "rocky-9", "fleetspec_el": {"major": 9, "crb_repo": "crb"}}, "dracut --force"),
], ids=["apt", "el"])
def test_the_blacklist_is_written_and_the_initramfs_rebuilt_once_with_the_nodes_own_tool(tmp_path, extra, tool) -> None:
    done, calls = _run(tmp_path, **extra)
    assert done.returncode == 0, done.stdout[-3000:]
    assert (tmp_path / "blacklist-nouveau.conf").read_text().endswith("blacklist nouveau\noptions nouveau modeset=0\n")
    assert calls == [tool]  # the other family's tool never ran
    done, calls = _run(tmp_path, **extra)  # the blacklist unchanged: no rebuild
    assert done.returncode == 0 and calls == [tool], calls
