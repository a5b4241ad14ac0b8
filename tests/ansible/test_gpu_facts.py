"""The gpu_facts role, run by ansible-playbook on this machine against sysfs trees of real
node layouts (tests/data/fixtures/sysfs): it must see the NVSwitches of an HGX board, and
no NVSwitch where there is none, or the fabric manager never starts (CUDA cannot
initialise on an NVSwitch board without it)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

FIXTURES = ROOT / "tests/data/fixtures/sysfs"

PLAY = """\
- hosts: localhost
  connection: local
  gather_facts: true
  gather_subset: [min, virtual]
  roles:
    - role: gpu_facts
  tasks:
    - name: Write the facts where the test reads them
      ansible.builtin.copy:
        content: "{{{{ fleetspec_gpu | to_json }}}}"
        dest: {out}
        mode: "0644"
"""


def gpu_facts(tree: str, tmp_path: Path) -> dict:
    playbook = shutil.which("ansible-playbook")
    assert playbook, "ansible-playbook is required (pip install ansible-core)"
    out = tmp_path / "facts.json"
    play = tmp_path / "play.yml"
    play.write_text(PLAY.format(out=out))
    env = {"ANSIBLE_ROLES_PATH": str(ROOT / "playbooks/roles"), "ANSIBLE_HOME": str(tmp_path / ".ansible"),
           "ANSIBLE_LOCALHOST_WARNING": "false", "ANSIBLE_INVENTORY_UNPARSED_WARNING": "false",
           "PATH": "/usr/bin:/bin:" + str(Path(playbook).parent)}  # fmt: skip
    proc = subprocess.run([playbook, "-i", "localhost,", str(play), "-e", f"ansible_python_interpreter={sys.executable}", "-e",
                           f"fleetspec_sysfs_root={FIXTURES / tree / 'sys'}"],
                          capture_output=True, text=True, env=env, timeout=180)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    return json.loads(out.read_text())


@pytest.mark.parametrize(("tree", "nvswitch"), [("hgx-h100", True), ("pcie-h100", False), ("gb200-tray", False),
                                                ("hgx-b200", False)])
def test_nvswitch_boards_are_recognised_by_their_own_pci_class(tree: str, nvswitch: bool, tmp_path: Path) -> None:
    facts = gpu_facts(tree, tmp_path)
    assert facts["nvidia_pci"] is True and facts["amd_pci"] is False
    assert facts["nvswitch_pci"] is nvswitch


@pytest.mark.parametrize(("tree", "bridges"), [("hgx-b200", ["mlx5_1", "mlx5_3"]), ("hgx-h100", []),
                                               ("gb200-tray", [])])
def test_nvlink5_boards_are_recognised_by_their_switch_management_bridges(tree: str, bridges: list[str],
                                                                         tmp_path: Path) -> None:
    """HGX B200: no NVSwitch on the PCI bus; the ConnectX-7 bridge's limited PFs (VPD
    SMDL=SW_MNG) are found, and the board's compute-fabric ConnectX-7 NICs (same PCI id, no
    SW_MNG) are not. Without these the fabric manager would be started for nothing."""
    assert gpu_facts(tree, tmp_path)["nvlink5_bridges"] == bridges
