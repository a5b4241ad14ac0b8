"""Static checks of playbooks/: ansible-lint clean, site.yml parses against a rendered inventory."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from fleetspec.pipeline import compile_file
from fleetspec.render.ansible import render_ansible
from tests.conftest import EXAMPLES, ROOT


def tool(name: str) -> str:
    exe = shutil.which(name)
    assert exe, f"{name} is required (pip install ansible-core ansible-lint)"
    return exe


def test_ansible_lint_is_clean() -> None:
    proc = subprocess.run([tool("ansible-lint"), "--offline", "--nocolor", "playbooks/"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]


def test_site_yml_passes_syntax_check_with_a_rendered_inventory(tmp_path: Path) -> None:
    for rel, text in render_ansible(compile_file(EXAMPLES / "museum.yaml").fleet).items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    env = {"ANSIBLE_CONFIG": str(ROOT / "playbooks/ansible.cfg"), "ANSIBLE_HOME": str(tmp_path / ".ansible"),
           "PATH": "/usr/bin:/bin:" + str(Path(tool("ansible-playbook")).parent)}  # fmt: skip
    proc = subprocess.run([tool("ansible-playbook"), "--syntax-check", "-i", str(tmp_path / "ansible/inventory.yml"),
                           str(ROOT / "playbooks/site.yml")], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
