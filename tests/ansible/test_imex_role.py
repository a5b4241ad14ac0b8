"""IMEX configuration written by the nvidia_driver role (run by ansible-playbook on this
machine into a temporary directory): the peers file lists every node of the NVLink
domain, channel 0 is made permanent through the driver's module option unless Slurm
creates channels per job."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from tests.conftest import ROOT

PLAY = """\
- hosts: localhost
  connection: local
  gather_facts: false
  vars:
    fleetspec_gpu: {nvidia_module: false}
  tasks:
    - name: IMEX tasks of the driver role
      ansible.builtin.include_role:
        name: nvidia_driver
        tasks_from: imex
"""


def run(tmp_path: Path, **extra) -> subprocess.CompletedProcess[str]:
    playbook = shutil.which("ansible-playbook")
    assert playbook, "ansible-playbook is required (pip install ansible-core)"
    (tmp_path / "play.yml").write_text(PLAY)
    (tmp_path / "vars.yml").write_text(yaml.safe_dump({"fleetspec_imex_dir": str(tmp_path / "imex"),
                                                       "fleetspec_modprobe_dir": str(tmp_path), **extra}))
    env = {"ANSIBLE_ROLES_PATH": str(ROOT / "playbooks/roles"), "ANSIBLE_HOME": str(tmp_path / ".ansible"),
           "ANSIBLE_LOCALHOST_WARNING": "false", "ANSIBLE_INVENTORY_UNPARSED_WARNING": "false",
           "PATH": "/usr/bin:/bin:" + str(Path(playbook).parent)}  # fmt: skip
    return subprocess.run([playbook, "-i", "localhost,", str(tmp_path / "play.yml"), "-e", f"@{tmp_path / 'vars.yml'}",
                           "-e", f"ansible_python_interpreter={sys.executable}"],
                          capture_output=True, text=True, env=env, timeout=180)


def test_peers_file_lists_every_node_of_the_domain_and_channel0_survives_reboots(tmp_path: Path) -> None:
    done = run(tmp_path, fleetspec_imex_domain={"name": "r07", "members": ["localhost", "localhost"]},
               fleetspec_imex_channel0=True)
    assert done.returncode == 0, done.stdout[-3000:]
    assert (tmp_path / "imex/nodes_config.cfg").read_text() == "127.0.0.1\n127.0.0.1\n"
    assert (tmp_path / "fleetspec-imex.conf").read_text() == "options nvidia NVreg_CreateImexChannel0=1\n"


def test_given_addresses_win_and_slurm_owned_racks_get_no_shared_channel(tmp_path: Path) -> None:
    done = run(tmp_path, fleetspec_imex_domain={"name": "r07", "members": ["gb200-r07-01", "gb200-r07-02"]},
               fleetspec_imex_addresses=["10.7.0.1", "10.7.0.2"], fleetspec_imex_channel0=False)
    assert done.returncode == 0, done.stdout[-3000:]
    assert (tmp_path / "imex/nodes_config.cfg").read_text() == "10.7.0.1\n10.7.0.2\n"
    assert not (tmp_path / "fleetspec-imex.conf").exists()
