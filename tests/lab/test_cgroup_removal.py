"""Lab teardown racing systemd: the cgroup tree of a node can vanish while `lab down` walks
it. The kernel answers ENOENT for a removed entry and ENODEV for reading a directory whose
cgroup is already dead; both mean "gone", never a failed teardown (a CI run's README loop
once ended `lab down` with "[Errno 19] No such device")."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from fleetspec.lab.hosts import remove_cgroup


def _tree(root: Path) -> Path:
    (root / "init.scope").mkdir(parents=True)
    (root / "system.slice" / "ssh.service").mkdir(parents=True)
    return root


def test_removes_the_tree_deepest_first(tmp_path: Path) -> None:
    root = _tree(tmp_path / "lab-node")
    assert remove_cgroup(root) == []
    assert not root.exists()


@pytest.mark.parametrize("code", [errno.ENODEV, errno.ENOENT])
def test_a_tree_systemd_removes_under_the_walk_is_gone_not_a_failure(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int) -> None:
    root = _tree(tmp_path / "lab-node")
    real_rglob = Path.rglob
    calls = []

    def racing_rglob(self: Path, pattern: str):
        calls.append(self)
        if len(calls) == 1:  # the first walk meets a cgroup systemd just removed
            raise OSError(code, os.strerror(code), str(self / "system.slice"))
        return real_rglob(self, pattern)

    monkeypatch.setattr(Path, "rglob", racing_rglob)
    assert remove_cgroup(root) == []
    assert not root.exists() and len(calls) == 2


def test_an_already_removed_cgroup_is_no_problem(tmp_path: Path) -> None:
    assert remove_cgroup(tmp_path / "gone") == []


def test_other_errors_are_reported_not_swallowed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = _tree(tmp_path / "lab-node")

    def busy(self: Path) -> None:
        raise OSError(errno.EBUSY, os.strerror(errno.EBUSY), str(self))

    monkeypatch.setattr(Path, "rmdir", busy)
    problems = remove_cgroup(root)
    assert len(problems) == 4 and all("Device or resource busy" in p for p in problems)
