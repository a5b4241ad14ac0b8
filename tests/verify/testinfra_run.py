"""Run the shipped testinfra module the way a user does: a separate pytest, --pyargs."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from fleetspec.verify.testinfra_checks import COMPONENTS

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = "fleetspec.verify.pytest_plugin"


def plugin_args() -> list[str]:
    """``-p`` the plugin unless the installed package already registers it (pytest11)."""
    registered = any(ep.value == PLUGIN for ep in importlib.metadata.entry_points(group="pytest11"))
    return [] if registered else ["-p", PLUGIN]


def run_module(tmp_path: Path, *args: str) -> tuple[int, dict[str, ET.Element], str]:
    """Run fleetspec.verify.test_fleet_node; return the exit code, {component: testcase}, output."""
    junit = tmp_path / "module.xml"
    argv = [sys.executable, "-m", "pytest", "--pyargs", "fleetspec.verify.test_fleet_node", *plugin_args(),
            "-p", "no:cacheprovider", "-q", "-rA", f"--junitxml={junit}", *args]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    proc = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
    output = proc.stdout + proc.stderr
    assert junit.exists(), output
    cases = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        param = case.get("name").split("[", 1)[1].rstrip("]")  # "<host>-<component>"
        component = max((c for c in COMPONENTS if param.endswith("-" + c)), key=len)
        cases[component] = case
    return proc.returncode, cases, output


def outcome(case: ET.Element) -> str:
    for tag in ("failure", "error", "skipped"):
        if case.find(tag) is not None:
            return tag
    return "passed"


def message(case: ET.Element) -> str:
    for tag in ("failure", "error", "skipped"):
        element = case.find(tag)
        if element is not None:
            return (element.get("message") or "") + "\n" + (element.text or "")
    return ""
