"""A SIGTERM or SIGINT that reaches the process during a playbook run cancels the run
(ansible-runner: status canceled, rc 254, the playbook killed), and after the run the
process's own handlers are back: ansible-runner alone leaves its handler installed, so
every later SIGTERM/SIGINT was swallowed, and a run canceled that way (the lab-site test's
"canceled, rc 254, no host events") did not say why.

A real ansible-playbook through ansible-runner on a local connection; the signal is sent
to this process by a timer while the play sleeps."""

from __future__ import annotations

import os
import shutil
import signal
import sys
import threading

import pytest

from fleetspec.apply.ansible import run_playbook

pytest.importorskip("ansible_runner")

PLAY = """\
- hosts: all
  gather_facts: false
  tasks:
    - name: sleep long enough for the signal to arrive
      ansible.builtin.command: sleep 30
"""


def test_a_signal_cancels_the_run_names_itself_and_the_handlers_come_back(tmp_path, monkeypatch):
    if shutil.which("ansible-playbook") is None:
        pytest.skip("ansible-core is not installed")
    monkeypatch.chdir(tmp_path)
    project = tmp_path / "project"
    project.mkdir()
    (project / "site.yml").write_text(PLAY)
    (project / "ansible.cfg").write_text("[defaults]\nhost_key_checking = False\n")
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("all:\n  hosts:\n    local-node:\n      ansible_connection: local\n"
                         f"      ansible_python_interpreter: {sys.executable}\n")
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    timer = threading.Timer(3.0, os.kill, (os.getpid(), signal.SIGTERM))
    timer.start()
    try:
        result = run_playbook(inventory, project_dir=project, work_dir=tmp_path / "runs")
    finally:
        timer.cancel()
    assert not result.ok
    assert result.rc == 254 and result.status == "canceled (SIGTERM received during the run)"
    assert {s: signal.getsignal(s) for s in before} == before  # not ansible-runner's handler
