from __future__ import annotations

import os
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


@pytest.fixture
def kubectl_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """`kubectl` on PATH is tests/health/kubectl_standin.py, over the JSON file returned
    (write the cluster's objects there before running fleetspec)."""
    bin_dir = tmp_path / "kbin"
    bin_dir.mkdir()
    (bin_dir / "kubectl").symlink_to(HERE / "kubectl_standin.py")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    state = tmp_path / "kube.json"
    monkeypatch.setenv("KUBE_STANDIN_STATE", str(state))
    return state
