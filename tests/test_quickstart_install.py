"""README's quick start installs what its lab loop runs, and a command that runs Ansible
without the ``ansible`` extra stops before it does anything, naming the exact install
command (issue #28 item 1). The loop itself runs from the quick start's venv in
tests/test_readme_loop.py (a lab test); this one is fast."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.conftest import EXAMPLES
from tests.quickstart_venv import make_quickstart_venv, quickstart_env, quickstart_install_line


def test_the_quick_start_installs_the_ansible_extra() -> None:
    line = quickstart_install_line()
    assert "[ansible]" in line.rsplit("pip install", 1)[1], line


@pytest.fixture(scope="module")
def bare(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """The quick start's venv without the extra: what the README installed before #28."""
    clone, bindir = make_quickstart_venv(tmp_path_factory.mktemp("bare"),
                                         "python3 -m venv .venv && . .venv/bin/activate && pip install -e .")
    return clone, quickstart_env(bindir)


@pytest.mark.parametrize("args", [
    ["apply", "fleet.yaml", "--lab", ".fleetspec/lab", "--yes"],
    ["apply", "fleet.yaml", "--yes"],
    ["verify", "fleet.yaml", "--lab", ".fleetspec/lab"],
    ["health", "fleet.yaml", "--inventory", "inventory.yml"],
])
def test_ansible_commands_stop_first_and_name_the_install(bare: tuple[Path, dict[str, str]], tmp_path: Path,
                                                          args: list[str]) -> None:
    clone, env = bare
    (tmp_path / "fleet.yaml").write_text((EXAMPLES / "quickstart.yaml").read_text())
    done = subprocess.run([str(clone / ".venv" / "bin" / "fleetspec"), *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done
    assert f"-m pip install -e '{clone}[ansible]'" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""  # no plan shown, nothing done
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fleet.yaml"]  # no state, no lock, no build tree


def test_commands_without_ansible_still_work(bare: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    clone, env = bare
    done = subprocess.run([str(clone / ".venv" / "bin" / "fleetspec"), "plan", str(EXAMPLES / "quickstart.yaml"),
                           "--state", str(tmp_path / "state")], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
