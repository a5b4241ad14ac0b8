"""Extra vars (a secret file's path, the slurmdbd password) reach Ansible as data: a
``{{ ... }}`` in one is never evaluated on the control machine (issue 13, item 1).

A real ansible-playbook run through ansible-runner, on a local connection: the play
writes each extra var to a file, and the file holds the text as given."""

from __future__ import annotations

from fleetspec.apply.ansible import run_playbook
from tests.apply.local_playbook import local_project

INJECTED = "pw{{ lookup('pipe', 'touch MARK') }}{{ 'tem' ~ 'plated' }}"

PLAY = """\
- hosts: all
  gather_facts: false
  tasks:
    - name: write the extra vars as Ansible sees them
      ansible.builtin.copy:
        dest: "{{ out_dir }}/{{ item }}"
        content: "{{ lookup('vars', item) }}"
      loop: [fleetspec_slurmdbd_password, fleetspec_munge_key_file]
"""


def test_extra_vars_are_never_templated(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    project, inventory = local_project(tmp_path, PLAY, "localhost", out_dir=out)
    result = run_playbook(inventory, project_dir=project, limit=["localhost"],
                          extravars={"fleetspec_slurmdbd_password": INJECTED,
                                     "fleetspec_munge_key_file": "/etc/munge/" + INJECTED},
                          work_dir=tmp_path / "runs")
    assert result.ok, result
    assert (out / "fleetspec_slurmdbd_password").read_text() == INJECTED
    assert (out / "fleetspec_munge_key_file").read_text() == "/etc/munge/" + INJECTED
    assert not list(tmp_path.rglob("MARK")), "Ansible ran the lookup"
    assert not (tmp_path / "runs").exists() or not list((tmp_path / "runs").iterdir())  # no extravars left
