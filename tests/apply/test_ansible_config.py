"""Which ansible.cfg apply's playbook runs read (issue #28 item 5): outside the lab the
site's own, in Ansible's order with ``--ansible-config`` ahead of it, and host keys are
checked; fleetspec's own file only where the site has none, and it checks host keys too;
only the lab turns checking off. Read back by the real ``ansible-config dump``, with the
environment apply gives ansible-playbook."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from fleetspec.apply.ansible import PLAYBOOKS, ansible_config_env


def effective(env: dict[str, str], cwd: Path, home: Path) -> str:
    """``ansible-config dump --only-changed`` as ansible-playbook would see it."""
    full = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    full.update(env, HOME=str(home), ANSIBLE_HOME=str(home / ".ansible"))
    done = subprocess.run(["ansible-config", "dump", "--only-changed"], cwd=cwd, env=full, capture_output=True,
                          text=True, timeout=120, check=True)
    return done.stdout


@pytest.fixture
def place(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    cwd, home = tmp_path / "work", tmp_path / "home"
    cwd.mkdir(mode=0o755)
    home.mkdir()
    monkeypatch.chdir(cwd)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("ANSIBLE_CONFIG", raising=False)
    return cwd, home


def test_fleetspecs_own_file_checks_host_keys(place: tuple[Path, Path]) -> None:
    cwd, home = place
    env = ansible_config_env(PLAYBOOKS)
    site = Path("/etc/ansible/ansible.cfg")
    if site.is_file():  # a machine with a site-wide file: that one wins, as Ansible's order says
        assert env == {"ANSIBLE_CONFIG": str(site.resolve())}
        env = {"ANSIBLE_CONFIG": str(PLAYBOOKS / "ansible.cfg")}
    else:
        assert env == {"ANSIBLE_CONFIG": str(PLAYBOOKS / "ansible.cfg")}
    dump = effective(env, cwd, home)
    assert "HOST_KEY_CHECKING" not in dump  # Ansible's default: checked
    assert "StrictHostKeyChecking=no" not in dump and "UserKnownHostsFile=/dev/null" not in dump


def test_only_the_lab_turns_host_key_checking_off(place: tuple[Path, Path]) -> None:
    cwd, home = place
    dump = effective(ansible_config_env(PLAYBOOKS, lab=True), cwd, home)
    assert "HOST_KEY_CHECKING(env: ANSIBLE_HOST_KEY_CHECKING) = False" in dump


def test_the_sites_file_wins_in_ansibles_order(place: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    cwd, home = place
    (home / ".ansible.cfg").write_text("[defaults]\nforks = 7\n")
    assert "DEFAULT_FORKS" in effective(ansible_config_env(PLAYBOOKS), cwd, home)  # ~/.ansible.cfg
    (cwd / "ansible.cfg").write_text("[defaults]\nforks = 9\n[ssh_connection]\nssh_args = -J bastion\n")
    dump = effective(ansible_config_env(PLAYBOOKS), cwd, home)  # ./ansible.cfg before ~/.ansible.cfg
    assert "DEFAULT_FORKS" in dump and "work/ansible.cfg) = 9" in dump
    site = cwd / "site.cfg"
    site.write_text("[defaults]\nforks = 11\n")
    monkeypatch.setenv("ANSIBLE_CONFIG", str(site))
    assert "= 11" in effective(ansible_config_env(PLAYBOOKS), cwd, home)  # $ANSIBLE_CONFIG before both
    other = cwd / "other.cfg"
    other.write_text("[defaults]\nforks = 13\n")
    assert "= 13" in effective(ansible_config_env(PLAYBOOKS, explicit=other), cwd, home)  # --ansible-config first


def test_a_world_writable_directory_is_not_read(place: tuple[Path, Path]) -> None:
    cwd, _ = place
    (cwd / "ansible.cfg").write_text("[defaults]\nforks = 9\n")
    cwd.chmod(0o777)
    try:
        assert ansible_config_env(PLAYBOOKS)["ANSIBLE_CONFIG"] != str(cwd / "ansible.cfg")
    finally:
        cwd.chmod(0o755)


def test_ansible_config_does_not_go_with_the_lab(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from fleetspec.cli import app

    cfg = tmp_path / "ansible.cfg"
    cfg.write_text("[defaults]\n")
    result = CliRunner().invoke(app, ["apply", "fleet.yaml", "--lab", str(tmp_path), "--ansible-config", str(cfg)])
    assert result.exit_code == 64 and "does not go with --lab" in result.output
