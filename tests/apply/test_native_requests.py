"""#41 item 13: the controller writes converge requests only into a directory of its own.

docs/security.md requires the requests directory to be writable by the controller alone
(the nodes read it). An attacker who can write it (a group- or world-writable directory on
the shared filesystem, or a link planted in its place) plants links under the names the
controller writes; the controller must check the directory before it writes and never
write through a link. No Slurm is needed: `NativeSlurm.request` touches files only."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from fleetspec.apply.control import local_runner
from fleetspec.apply.slurm_native import NativeSlurm, RequestsError

HOST = "h200-001"


def _controller(tmp_path: Path, requests: Path) -> NativeSlurm:
    (tmp_path / "results").mkdir(exist_ok=True)
    return NativeSlurm(local_runner(), tmp_path / "results", 4, requests=requests)


def _plant(requests: Path, victim: Path) -> None:
    os.symlink(victim, requests / f".{HOST}.json.tmp")  # the temporary name the controller used
    os.symlink(victim, requests / f"{HOST}.json")


@pytest.mark.parametrize(("mode", "said"), [(0o777, "mode 0777"), (0o775, "mode 0775"), (0o1777, "mode 1777")])
def test_a_requests_directory_others_can_write_is_refused_before_anything_is_written(tmp_path, mode, said) -> None:
    requests, victim = tmp_path / "requests", tmp_path / "victim"
    victim.write_text("root's file\n")
    requests.mkdir()
    _plant(requests, victim)
    os.chmod(requests, mode)
    with pytest.raises(RequestsError, match=f"writable by group or others \\({said}\\).*chmod go-w"):
        _controller(tmp_path, requests).request([HOST])
    assert victim.read_text() == "root's file\n"
    assert sorted(p.name for p in requests.iterdir()) == [f".{HOST}.json.tmp", f"{HOST}.json"]


def test_a_requests_directory_that_is_a_link_or_another_users_is_refused(tmp_path) -> None:
    elsewhere, requests = tmp_path / "elsewhere", tmp_path / "requests"
    elsewhere.mkdir(mode=0o755)
    os.symlink(elsewhere, requests)
    with pytest.raises(RequestsError, match="is a symbolic link, not a directory"):
        _controller(tmp_path, requests).request([HOST])
    assert list(elsewhere.iterdir()) == []
    requests.unlink()
    os.symlink(tmp_path / "nowhere", requests)  # dangling: mkdir would create its target
    with pytest.raises(RequestsError, match="is a symbolic link, not a directory"):
        _controller(tmp_path, requests).request([HOST])
    assert not (tmp_path / "nowhere").exists()
    if os.geteuid() != 0:
        pytest.skip("changing a directory's owner needs root")
    os.chown(elsewhere, 4242, -1)
    with pytest.raises(RequestsError, match="owned by uid 4242"):
        _controller(tmp_path, elsewhere).request([HOST])
    assert list(elsewhere.iterdir()) == []


def test_a_link_left_in_the_controllers_own_directory_is_never_followed(tmp_path) -> None:
    """Even in a directory that passes the check, a link at a request's name (or its old
    temporary name) is never written through: that node is not asked and fails with why."""
    requests, victim = tmp_path / "requests", tmp_path / "victim"
    victim.write_text("root's file\n")
    requests.mkdir(mode=0o755)
    os.chmod(requests, 0o755)
    _plant(requests, victim)
    controller = _controller(tmp_path, requests)
    request = controller.request([HOST, "h200-002"])
    assert victim.read_text() == "root's file\n"
    assert (requests / f"{HOST}.json").is_symlink()  # left as it was
    written = requests / "h200-002.json"
    assert written.is_file() and not written.is_symlink()
    assert json.loads(written.read_text()) == {"format": 1, "request": request, "version": 4}
    assert sorted(p.name for p in requests.iterdir()) == [f".{HOST}.json.tmp", f"{HOST}.json", "h200-002.json"]
    failed = controller.wait([HOST], request=request).failed  # decided without asking Slurm
    assert "its request could not be written" in failed[HOST] and "symbolic link" in failed[HOST]
