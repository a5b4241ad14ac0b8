"""When a test may skip. scripts/test installs every package the tests need, so a missing
one is a broken machine: `tests.conftest.unavailable` skips it where it cannot be installed
(not root, no apt) and fails under CI. Only what no test machine is expected to have, or
lack, skips outright: a GPU and its driver, DCGM, root for mknod, an older Python."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.conftest import unavailable

TESTS = Path(__file__).resolve().parent
# The reasons a test may skip on any machine, CI included (the machine's hardware or setup).
MACHINE = ("GPU driver loaded", "NVIDIA driver loaded", "has DCGM installed", "needs root", "no libcudart",
           "not a dpkg system", "Python 3.8-3.11", "no C compiler", "no immutable flag (tmpfs)",
           "no working KVM")


def test_unavailable_fails_under_ci_and_skips_elsewhere(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="required under CI: slurmd is missing"):
        unavailable("slurmd is missing")
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception, match="slurmd is missing"):
        unavailable("slurmd is missing")


def _skips(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in ("skip", "skipif", "importorskip"):
            yield node


def test_only_the_machine_may_skip_a_test() -> None:
    """A skip for a package scripts/test installs (libpmix-dev, apt-utils, postgresql...)
    hid behind a green CI run; it must go through `unavailable`."""
    found, bad = 0, []
    for path in sorted(TESTS.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        where = {id(n): f.name for f in ast.walk(tree) if isinstance(f, ast.FunctionDef) for n in ast.walk(f)}
        for call in _skips(tree):
            found += 1
            if path == TESTS / "conftest.py" and where.get(id(call)) == "unavailable":
                continue
            text = ast.unparse(call)
            if not any(reason in text for reason in MACHINE):
                bad.append(f"{path.relative_to(TESTS.parent)}:{call.lineno}: {text}")
    assert found and bad == [], "\n".join(bad)
