"""`fleetspec facts collect` without lab hosts: what it refuses before any node is reached,
and a run where no node answers (ansible-runner for real, against a closed loopback port)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fleetspec.facts.collect import file_name


def fleetspec(*args: str):
    from fleetspec.cli import app

    return CliRunner().invoke(app, list(args))


def test_neither_inventory_nor_hosts_is_a_usage_error(tmp_path: Path) -> None:
    result = fleetspec("facts", "collect", "--out", str(tmp_path / "f"))
    assert result.exit_code == 64 and "give -i INVENTORY, --hosts HOSTLIST" in result.stderr


def test_a_bad_hostlist_is_a_usage_error(tmp_path: Path) -> None:
    result = fleetspec("facts", "collect", "--hosts", "gpu-[1-200001]", "--out", str(tmp_path / "f"))
    assert result.exit_code == 64 and "--hosts:" in result.stderr


@pytest.mark.parametrize("kind", ["link", "foreign", "file"])
def test_dir_is_refused_as_render_refuses_it(tmp_path: Path, kind: str) -> None:
    """Checked before any node is reached: the hosts here do not exist."""
    target = tmp_path / "facts"
    if kind == "link":
        (tmp_path / "elsewhere").mkdir()
        target.symlink_to(tmp_path / "elsewhere")
    elif kind == "foreign":
        target.mkdir()
        (target / "notes.txt").write_text("someone's work")
    else:
        target.write_text("a file")
    result = fleetspec("facts", "collect", "--hosts", "gpu-[01-02]", "--out", str(target))
    assert result.exit_code == (64 if kind == "file" else 1)  # a file where a directory goes: click's usage error
    assert {"link": "is a symbolic link", "foreign": "not empty and was not written by fleetspec",
            "file": "is a file"}[kind] in result.stderr
    assert kind != "foreign" or (target / "notes.txt").read_text() == "someone's work"


def test_no_node_answering_leaves_dir_as_it_was_with_a_bar_on_a_terminal(tmp_path: Path) -> None:
    """A real process whose standard error Rich takes for a terminal (FORCE_COLOR): the bar,
    not the per-node lines a pipe gets (tests/facts/test_collect_lab.py reads those)."""
    inventory = tmp_path / "hosts.ini"
    inventory.write_text("gpu-01 ansible_connection=ssh ansible_host=127.0.0.1 ansible_port=1 ansible_user=nobody\n")
    out = tmp_path / "facts"
    done = subprocess.run([sys.executable, "-m", "fleetspec.cli", "facts", "collect", "-i", str(inventory), "--out",
                           str(out), "--connect-timeout", "3"], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "FORCE_COLOR": "1", "COLUMNS": "120"})
    assert done.returncode == 1, done.stderr
    assert "collecting facts" in done.stderr and "1/1 gpu-01" not in done.stderr
    assert "no facts" in done.stderr and "gpu-01: unreachable:" in done.stderr
    assert "left as it was" in done.stdout
    assert not out.exists()


def test_only_dns_names_become_file_names() -> None:
    assert file_name("gpu-01") == "gpu-01.json" and file_name("gpu-01.example.org") == "gpu-01.example.org.json"
    for bad in ("../x", ".hidden", "a/b", "a..b", "-a", "x" * 300, "a b", ""):
        assert file_name(bad) is None, bad
