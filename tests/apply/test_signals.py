"""A SIGTERM or SIGINT that reaches the process during a playbook run cancels the run
(ansible-runner: status canceled, rc 254, the playbook killed), and after the run the
process's own handlers are back: ansible-runner alone leaves its handler installed, so
every later SIGTERM/SIGINT was swallowed, and a run canceled that way (the lab-site test's
"canceled, rc 254, no host events") did not say why.

A real ansible-playbook through ansible-runner on a local connection; the signal is sent
to this process by a timer while the play sleeps."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from fleetspec.ansible_adhoc import AdhocError, run_command
from fleetspec.apply.ansible import run_playbook
from tests.apply.local_playbook import local_project

PLAY = """\
- hosts: all
  gather_facts: false
  tasks:
    - name: sleep long enough for the signal to arrive
      ansible.builtin.command: sleep 30
"""


def test_a_signal_cancels_the_run_names_itself_and_the_handlers_come_back(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    project, inventory = local_project(tmp_path, PLAY, "local-node")
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


def test_an_adhoc_run_puts_the_handlers_back(tmp_path):
    """verify/health --inventory and apply's controller commands run ad hoc: ansible-runner
    must not leave its handler installed after them either."""
    _, inventory = local_project(tmp_path, PLAY, "local-node")
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    result = run_command(inventory, "local-node", ["true"])
    assert (result.status, result.rc) == ("ok", 0)
    assert {s: signal.getsignal(s) for s in before} == before


def test_a_signal_during_an_adhoc_run_cancels_it_and_reaches_the_process(tmp_path):
    """A SIGTERM while a node command runs ends the run early and is then delivered to the
    process's own handler (here the test's), not swallowed."""
    _, inventory = local_project(tmp_path, PLAY, "local-node")
    delivered: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda signum, _frame: delivered.append(signum))
    timer = threading.Timer(3.0, os.kill, (os.getpid(), signal.SIGTERM))
    started = time.monotonic()
    timer.start()
    try:
        with pytest.raises(AdhocError, match="canceled: SIGTERM received during the run"):
            run_command(inventory, "local-node", ["sleep", "30"])
    finally:
        timer.cancel()
        signal.signal(signal.SIGTERM, previous)
    assert delivered == [signal.SIGTERM]
    assert time.monotonic() - started < 25  # canceled, not waited out
