"""The code base stays ruff-clean under the project's configuration (pyproject.toml)."""

import shutil
import subprocess

from tests.conftest import ROOT


def test_ruff_is_clean():
    ruff = shutil.which("ruff")
    assert ruff, "ruff is required (pip install -e '.[test]')"
    result = subprocess.run([ruff, "check", "--output-format", "concise", "."], cwd=ROOT, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stdout[-3000:]
