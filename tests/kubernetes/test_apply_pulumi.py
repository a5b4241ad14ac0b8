"""The Automation driver: cheap to import, and one plain line when the CLI is absent."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fleetspec.apply import pulumi as driver

from . import fleets


def test_import_is_cheap() -> None:
    code = ("import sys, fleetspec.apply.pulumi; "
            "print(any(m == 'pulumi' or m.startswith('pulumi.') for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                         text=True, cwd=Path(driver.__file__).resolve().parents[2])
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("operation", [driver.preview, driver.up])
def test_without_cli_says_so_in_one_line(operation, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty PATH: no pulumi on it
    assert shutil.which("pulumi") is None
    lines: list[str] = []
    result = operation(fleets.museum(), driver.PulumiOptions(state_dir=tmp_path),
                       on_output=lines.append)
    assert result.available is False and result.ok is False
    assert "pulumi CLI not found on PATH" in result.summary
    assert "\n" not in result.summary
    assert lines == [] and not (tmp_path / "pulumi").exists()  # nothing attempted


def test_missing_passphrase_is_reported(tmp_path, monkeypatch) -> None:
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "pulumi").write_text("#!/bin/sh\nexit 1\n")
    (fake / "pulumi").chmod(0o755)
    monkeypatch.setenv("PATH", str(fake))
    monkeypatch.delenv(driver.PASSPHRASE_ENV, raising=False)
    options = driver.PulumiOptions(state_dir=tmp_path, kube_context="museum-admin")
    assert driver.unavailable_reason(options).startswith(driver.PASSPHRASE_ENV)
    # Any other backend brings its own secrets story.
    other = driver.PulumiOptions(state_dir=tmp_path, backend_url="s3://bucket/fleet",
                                 kube_context="museum-admin")
    assert driver.unavailable_reason(other) is None
    assert other.backend == "s3://bucket/fleet"
    assert options.backend == (tmp_path / "pulumi").resolve().as_uri()


def test_the_program_file_is_the_stack_folder_program() -> None:
    module = driver.load_program()
    assert module.__file__.endswith("stacks/kubernetes/program.py")
    assert callable(module.program)


def test_without_a_kube_context_nothing_runs(tmp_path, monkeypatch) -> None:
    """The program applies to the context it is given, never the ambient one: no context,
    no run, and the one line says which variable to set."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "pulumi").write_text("#!/bin/sh\nexit 1\n")
    (fake / "pulumi").chmod(0o755)
    monkeypatch.setenv("PATH", str(fake))
    monkeypatch.setenv(driver.PASSPHRASE_ENV, "x")
    monkeypatch.delenv(driver.CONTEXT_ENV, raising=False)
    assert driver.unavailable_reason(driver.PulumiOptions(state_dir=tmp_path)).startswith(driver.CONTEXT_ENV)
    monkeypatch.setenv(driver.CONTEXT_ENV, "museum-admin")
    options = driver.PulumiOptions(state_dir=tmp_path)
    assert options.kube_context == "museum-admin" and driver.unavailable_reason(options) is None


def test_preview_and_up_refresh_so_a_rejoined_nodes_labels_come_back(tmp_path, monkeypatch) -> None:
    """Node labels are NodePatches: a node that rejoins is a new Node without them, and
    Pulumi sees that only when it refreshes. Both operations refresh first. The pulumi CLI
    is not on the test machines, so the Automation API's stack is recorded at its boundary
    (create_or_select_stack) instead of run."""
    from pulumi import automation as auto

    calls: list[tuple[str, dict]] = []

    class Stack:
        def set_config(self, key, value):
            calls.append(("set_config", {"key": key}))

        def preview(self, **kwargs):
            calls.append(("preview", kwargs))
            return type("R", (), {"change_summary": {}})()

        def up(self, **kwargs):
            calls.append(("up", kwargs))
            return type("R", (), {"summary": type("S", (), {"resource_changes": {}})()})()

    monkeypatch.setattr(auto, "create_or_select_stack", lambda **kw: Stack())
    monkeypatch.setattr(driver, "unavailable_reason", lambda options: None)
    options = driver.PulumiOptions(state_dir=tmp_path, kube_context="museum-admin")
    assert driver.preview(fleets.museum(), options).ok
    assert driver.up(fleets.museum(), options).ok
    ops = {name: kwargs for name, kwargs in calls if name in ("preview", "up")}
    assert ops["preview"]["refresh"] is True and ops["up"]["refresh"] is True
    assert ("set_config", {"key": "fleetspec:context"}) in calls
