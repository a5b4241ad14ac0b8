"""stack_packages' Secure Boot steps (#24 item 9), run by ansible-playbook on this machine
before anything is installed: the site's key files checked, the enrollment asked of
mokutil (absent here: no answer is no enrollment), DKMS's setting written. The signing
itself, with a real DKMS: tests/lab/test_dkms_signing.py."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT

PLAY = """\
- hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - ansible.builtin.include_role:
        name: stack_packages
        tasks_from: secure_boot.yml
"""


def _run(tmp_path: Path, secure_boot: bool, mok: Path | None) -> subprocess.CompletedProcess[str]:
    playbook = shutil.which("ansible-playbook")
    assert playbook, "ansible-playbook is required (pip install ansible-core)"
    extra = {
        "fleetspec_gpu": {"kernel_modules": True, "secure_boot": secure_boot},
        "fleetspec_packages": [{"name": "nvidia-dkms-580-open", "version": "580.95.05-0ubuntu1",
                                "role": "nvidia_driver", "condition": None}],
        "fleetspec_components": ["nvidia_driver"], "fleetspec_stack": {"name": "hopper"},
        "fleetspec_os": "ubuntu-24.04", "fleetspec_dkms_framework_dir": str(tmp_path / "framework.conf.d"),
        "ansible_python_interpreter": sys.executable,
    }
    if mok is not None:
        extra |= {"fleetspec_dkms_mok_certificate": str(mok / "MOK.der"),
                  "fleetspec_dkms_mok_signing_key": str(mok / "MOK.priv")}
    (tmp_path / "play.yml").write_text(PLAY)
    (tmp_path / "extra.json").write_text(json.dumps(extra))
    env = {"ANSIBLE_ROLES_PATH": str(ROOT / "playbooks/roles"), "ANSIBLE_HOME": str(tmp_path / ".ansible"),
           "ANSIBLE_LOCALHOST_WARNING": "false", "ANSIBLE_INVENTORY_UNPARSED_WARNING": "false",
           "PATH": "/usr/bin:/bin:" + str(Path(playbook).parent)}
    return subprocess.run([playbook, "-i", "localhost,", str(tmp_path / "play.yml"), "-e", f"@{tmp_path / 'extra.json'}"],
                          capture_output=True, text=True, env=env, timeout=300)


def _mok(directory: Path, mode: int = 0o600) -> Path:
    directory.mkdir()
    (directory / "MOK.priv").write_text("not read by fleetspec\n")
    (directory / "MOK.priv").chmod(mode)
    (directory / "MOK.der").write_bytes(b"0")
    return directory


def test_the_site_key_is_checked_and_dkms_pointed_at_it_without_secure_boot(tmp_path: Path) -> None:
    mok = _mok(tmp_path / "mok")
    proc = _run(tmp_path, secure_boot=False, mok=mok)
    assert proc.returncode == 0, proc.stdout[-3000:]
    conf = (tmp_path / "framework.conf.d/fleetspec-mok.conf").read_text()
    assert f'mok_signing_key="{mok}/MOK.priv"\nmok_certificate="{mok}/MOK.der"' in conf
    assert "not read by fleetspec" not in proc.stdout + proc.stderr


def test_a_missing_or_open_key_stops_before_anything_is_installed(tmp_path: Path) -> None:
    proc = _run(tmp_path, secure_boot=False, mok=tmp_path / "nowhere")
    assert proc.returncode != 0
    assert "is not a file on the node: DKMS would make a new key there" in proc.stdout and "Nothing was installed" in proc.stdout
    assert not (tmp_path / "framework.conf.d").exists()
    loose = _mok(tmp_path / "loose", 0o640)
    proc = _run(tmp_path, secure_boot=False, mok=loose)
    assert proc.returncode != 0 and "readable by group or others (mode 0640): chmod 600 it" in proc.stdout, proc.stdout[-3000:]


def test_secure_boot_without_an_enrolled_key_says_how_to_enroll_it(tmp_path: Path) -> None:
    proc = _run(tmp_path, secure_boot=True, mok=_mok(tmp_path / "mok"))
    out = proc.stdout
    assert proc.returncode != 0 and "Secure Boot is enabled" in out and "Nothing was installed" in out, out[-3000:]
    assert f"mokutil --import {tmp_path}/mok/MOK.der" in out and "MokManager" in out
    assert not (tmp_path / "framework.conf.d").exists()
    proc = _run(tmp_path, secure_boot=True, mok=None)  # no MOK declared: DKMS's own key, Ubuntu's path
    out = proc.stdout
    assert proc.returncode != 0 and "mokutil --import /var/lib/shim-signed/mok/MOK.der" in out
    assert "declare the site's own MOK in the spec (stacks.hopper.secure_boot" in out
