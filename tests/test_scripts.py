"""`./scripts/test` from a stock Debian 12 / Ubuntu 24.04 Python (PEP 668): it makes and
uses its own virtual environment, and a failed pip install shows pip's error and stops
the script instead of ending in "No module named pytest".

PIP_NO_INDEX keeps the test off the network: the install must fail, and the test
checks how it fails.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SYSTEM_PYTHON = "/usr/bin/python3"  # Debian's own interpreter, marked EXTERNALLY-MANAGED


def test_scripts_test_uses_a_venv_and_shows_pip_errors(tmp_path: Path) -> None:
    python = SYSTEM_PYTHON if os.path.exists(SYSTEM_PYTHON) else "python3"
    venv = tmp_path / "venv"
    env = {**os.environ, "FLEETSPEC_PYTHON": python, "FLEETSPEC_VENV": str(venv), "PIP_NO_INDEX": "1",
           "PIP_FIND_LINKS": str(tmp_path)}
    env.pop("PYTHONPATH", None)
    done = subprocess.run([str(ROOT / "scripts" / "test"), "--co", "-q"], capture_output=True, text=True, env=env,
                          timeout=600)
    output = done.stdout + done.stderr
    assert done.returncode == 1, output
    assert (venv / "bin" / "python").exists()  # made its own environment
    assert "externally-managed-environment" not in output
    assert "ERROR:" in output and "installing the test dependencies" in output  # pip's own error, shown
    assert "No module named pytest" not in output
