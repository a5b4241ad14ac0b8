"""The mig_geometry role (#46), run by ansible-playbook on this machine over the rendered
inventory (one MIG Slurm node, local connection, its files under a temporary directory):
the node gets a mig-parted config with its geometry and a unit that applies it before
slurmd, which systemd accepts; without nvidia-mig-parted the role stops and says why.
No GPU here: nvidia-mig-parted is a stand-in that records its arguments (the real one's
CLI: ``nvidia-mig-parted apply -f CONFIG -c NAME``, github.com/NVIDIA/mig-parted README)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from fleetspec.render.ansible import render_ansible
from fleetspec.render.writer import write_tree
from tests.conftest import ROOT
from tests.slurm import fleets

PLAY = """\
- hosts: slurm_node
  gather_facts: false
  roles:
    - role: mig_geometry
      when: fleetspec_mig is defined
"""
HOST = "h200-mig-01"


def run(tmp_path: Path, parted: Path) -> subprocess.CompletedProcess[str]:
    playbook = shutil.which("ansible-playbook")
    assert playbook, "ansible-playbook is required (pip install ansible-core)"
    write_tree(render_ansible(fleets.mig()), tmp_path / "out")
    (tmp_path / "play.yml").write_text(PLAY)
    env = {"ANSIBLE_ROLES_PATH": str(ROOT / "playbooks/roles"), "ANSIBLE_HOME": str(tmp_path / ".ansible"),
           "ANSIBLE_LOCALHOST_WARNING": "false", "PATH": "/usr/bin:/bin:" + str(Path(playbook).parent)}
    return subprocess.run([playbook, "-i", str(tmp_path / "out/ansible/inventory.yml"), str(tmp_path / "play.yml"),
                           "--limit", HOST, "-e", "ansible_connection=local",
                           "-e", f"ansible_python_interpreter={sys.executable}",
                           "-e", f"fleetspec_mig_parted={parted}",
                           "-e", f"fleetspec_mig_config_file={tmp_path}/etc/fleetspec/mig-parted.yaml",
                           "-e", f"fleetspec_mig_unit_dir={tmp_path}/systemd", "-e", "fleetspec_mig_start=false"],
                          capture_output=True, text=True, env=env, timeout=180)


@pytest.fixture(scope="module")
def applied(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("mig-role")
    parted = tmp / "nvidia-mig-parted"
    parted.write_text(f"#!/bin/sh\necho \"$@\" > {tmp}/parted-args\n")
    parted.chmod(0o755)
    done = run(tmp, parted)
    assert done.returncode == 0, done.stdout + done.stderr
    return tmp


def test_the_node_gets_its_geometry_as_a_mig_parted_config(applied: Path):
    config = yaml.safe_load((applied / "etc/fleetspec/mig-parted.yaml").read_text())
    assert config == {"version": "v1", "mig-configs": {"fleetspec-2x1g.18gb-1x2g.35gb-1x3g.71gb": [
        {"devices": "all", "mig-enabled": True, "mig-devices": {"1g.18gb": 2, "2g.35gb": 1, "3g.71gb": 1}}]}}


def test_the_unit_applies_it_before_slurmd_and_systemd_accepts_it(applied: Path):
    unit = applied / "systemd/fleetspec-mig.service"
    text = unit.read_text()
    assert "Before=slurmd.service" in text and "Type=oneshot" in text
    dropin = (applied / "systemd/slurmd.service.d/fleetspec-mig.conf").read_text()
    assert "Requires=fleetspec-mig.service" in dropin and "After=fleetspec-mig.service" in dropin
    exec_start = next(line for line in text.splitlines() if line.startswith("ExecStart="))[len("ExecStart="):]
    subprocess.run(exec_start.split(), check=True)  # the stand-in records what the real one would get
    assert (applied / "parted-args").read_text().split() == [
        "apply", "-f", f"{applied}/etc/fleetspec/mig-parted.yaml", "-c", "fleetspec-2x1g.18gb-1x2g.35gb-1x3g.71gb"]
    # systemd's own parser: a key or value it cannot read is a line on stderr ("Failed to parse
    # service type, ignoring"); the ExecStart binary must exist, which the stand-in does.
    analyze = shutil.which("systemd-analyze")
    assert analyze, "systemd-analyze is required (Debian: systemd)"
    done = subprocess.run([analyze, "verify", str(unit)], capture_output=True, text=True)
    assert done.returncode == 0 and str(unit) not in done.stderr, done.stderr


def test_without_mig_parted_the_role_stops_and_says_what_to_install(tmp_path: Path):
    done = run(tmp_path, tmp_path / "absent/nvidia-mig-parted")
    assert done.returncode != 0
    assert "install NVIDIA's nvidia-mig-manager package" in done.stdout
    assert not (tmp_path / "systemd/fleetspec-mig.service").exists()
