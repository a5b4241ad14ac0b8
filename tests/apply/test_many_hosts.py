"""Ansible runs reach the hosts they are given however many there are: the ad-hoc runner
(verify/health --inventory, apply's controller commands) and apply's playbook runs (a
converge run over a new fleet's nodes) give Ansible the host list as ``--limit @FILE``. As
one ``h1:h2:...`` (or ``h1,h2,...``) argument it could not be passed to ``ansible`` at all past
MAX_ARG_STRLEN (128 KiB, about 12,000 hosts): execve failed with E2BIG and ``verify
--inventory`` on a 15,000-node fleet ended in an OSError traceback.

A real ansible through ansible-runner, on a local connection."""

from __future__ import annotations

import pytest

from fleetspec.ansible_adhoc import AdhocError, run_script
from fleetspec.apply.ansible import run_playbook
from tests.apply.local_playbook import local_project

FLEET = [f"node-{i:05d}" for i in range(1, 15001)]  # a fleet's 15,000 nodes


def test_fifteen_thousand_hosts_fit_and_only_they_run(tmp_path):
    _, inventory = local_project(tmp_path, "[]\n", "node-07500")  # holds one of them
    assert len(":".join(FLEET)) > 128 * 1024
    results = run_script(inventory, FLEET, "hello.py", b"print('hello from the node')\n")
    assert {h: (r.status, r.stdout.strip()) for h, r in results.items()} == {
        "node-07500": ("ok", "hello from the node")}


def test_an_empty_host_list_runs_nowhere(tmp_path):
    """An empty --limit file restricts nothing (Ansible would run the script on every host):
    no hosts is an error, as it was when Ansible said so."""
    _, inventory = local_project(tmp_path, "[]\n", "node-00001")
    with pytest.raises(AdhocError, match="no hosts to run on"):
        run_script(inventory, [], "hello.py", b"print('hello')\n")


def test_a_host_not_in_the_inventory_is_not_run_and_the_others_are(tmp_path):
    _, inventory = local_project(tmp_path, "[]\n", "node-00001")
    results = run_script(inventory, ["node-00001", "node-99999"], "hello.py", b"print('hello')\n")
    assert sorted(results) == ["node-00001"] and results["node-00001"].status == "ok"


def test_a_playbook_run_limited_to_fifteen_thousand_hosts_starts(tmp_path):
    play = "- hosts: all\n  gather_facts: false\n  tasks:\n    - ansible.builtin.command: 'true'\n"
    project, inventory = local_project(tmp_path, play, "node-07500")
    result = run_playbook(inventory, project_dir=project, limit=FLEET, work_dir=tmp_path / "runs")
    assert result.ok and sorted(result.hosts) == ["node-07500"], result.status
