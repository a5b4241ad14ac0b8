"""The README's whole loop on a lab fleet, through the CLI exactly as a user types it:
secrets init, lab up, plan, apply, verify; change a tuple; lab up (new packages), plan
(shows drain), apply (drains, upgrades, verifies, resumes), verify; lab down.

It runs from a virtual environment made exactly as README's quick start makes it
(tests/quickstart_venv.py: its install line, offline, from wheels repacked from this
environment), never from the test environment: a quick start that misses an extra the
loop needs fails here as it would for a user (issue #28 item 1).

Real parts throughout: lab hosts (systemd-nspawn in private network namespaces) with
sshd, the repository of stand-in packages carrying the spec's versions, the real
playbooks through ansible-runner, a real slurmctld and slurmd's for drain/resume, the
collector over Ansible for verify.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from tests.conftest import EXAMPLES
from tests.lab.conftest import lab_base  # noqa: F401 - fixture
from tests.quickstart_venv import make_quickstart_venv, quickstart_env

pytestmark = [pytest.mark.lab, pytest.mark.slurm]


QUICKSTART: dict[str, str] = {}  # the environment of a shell in the quick start's venv


def fleetspec(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    assert QUICKSTART, "the quickstart fixture sets the environment first"
    return subprocess.run(["fleetspec", *args], cwd=cwd, capture_output=True, text=True, timeout=600,
                          env={**QUICKSTART, "COLUMNS": "200"})


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory: pytest.TempPathFactory) -> Path:
    _, bindir = make_quickstart_venv(tmp_path_factory.mktemp("quickstart"))
    QUICKSTART.update(quickstart_env(bindir))
    return bindir


@pytest.fixture
def workdir(tmp_path: Path, lab_base: Path, quickstart: Path):
    (tmp_path / "fleet.yaml").write_text((EXAMPLES / "quickstart.yaml").read_text())
    yield tmp_path
    if (tmp_path / ".fleetspec" / "lab" / "lab.json").exists():
        fleetspec(tmp_path, "lab", "down", "--dir", ".fleetspec/lab")


def test_the_readme_loop(workdir: Path) -> None:
    lab = ".fleetspec/lab"
    assert fleetspec(workdir, "secrets", "init", "fleet.yaml").returncode == 0
    up = fleetspec(workdir, "lab", "up", "fleet.yaml", "--nodes", "2")
    assert up.returncode == 0, up.stderr
    # Progress while it works (#28 item 2); the base image's build steps show only when it is built.
    assert "lab up: starting 3 host(s): h100-001, h100-002, ctl-01" in up.stderr, up.stderr

    plan = fleetspec(workdir, "plan", "fleet.yaml", "--state", f"{lab}/state", "--format", "json",
                     "--detailed-exitcode")
    assert plan.returncode == 2, plan.stderr  # changes: a first apply
    assert json.loads(plan.stdout)["summary"]["max_disruption"] == "restart-daemon"

    first = fleetspec(workdir, "apply", "fleet.yaml", "--lab", lab, "--yes")
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr
    text = " ".join(first.stdout.split())
    assert "Restricted to the lab's hosts" in text and "skipped 6 node(s) outside the lab's hosts" in text
    # Off a terminal: one plain line per host state change, no escape codes.
    assert "\x1b" not in first.stdout
    for node in ("h100-001", "h100-002"):
        assert re.search(rf"^\S.*: {node}: done \(ok \d+, changed [1-9]\d*", first.stdout, re.M), first.stdout[-3000:]
    verify = fleetspec(workdir, "verify", "fleet.yaml", "--lab", lab, "--format", "json")
    assert verify.returncode == 0, verify.stdout[-3000:]
    assert json.loads(verify.stdout)["summary"]["conforming"] == 2

    spec = workdir / "fleet.yaml"
    spec.write_text(spec.read_text().replace('nccl: "2.28.3"', 'nccl: "2.28.9"'))
    assert fleetspec(workdir, "lab", "up", "fleet.yaml", "--nodes", "2").returncode == 0  # repo gets 2.28.9
    plan = fleetspec(workdir, "plan", "fleet.yaml", "--state", f"{lab}/state", "--format", "json")
    assert plan.returncode == 0  # like terraform plan: 0 when planned, changes or not
    planned = json.loads(plan.stdout)
    assert planned["summary"]["max_disruption"] == "drain"
    drains = sorted(c["target"] for c in planned["changes"] if c["disruption"] == "drain")
    assert drains == ["node:h100-001", "node:h100-002"]  # the lab's nodes, recorded by the first apply
    assert planned["waves"][0]["canary"] is True

    second = fleetspec(workdir, "apply", "fleet.yaml", "--lab", lab, "--yes", "--format", "json")
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr
    events = [json.loads(line) for line in second.stdout.splitlines() if line.startswith("{")]
    kinds = [e["event"] for e in events]
    assert kinds.count("wave-done") == 2 and kinds[-1] == "done"
    skipped = [e for e in events if e["event"] == "skipped"]
    assert len(skipped) == 1 and skipped[0]["hosts"] == [f"h100-00{i}" for i in range(3, 9)]
    assert any(e["event"] == "drain" and "NCCL 2.28.3 -> 2.28.9" in e["message"] for e in events)

    verify = fleetspec(workdir, "verify", "fleet.yaml", "--lab", lab, "--format", "json")
    assert verify.returncode == 0, verify.stdout[-3000:]
    report = json.loads(verify.stdout)
    nccl = [c for n in report["nodes"] for c in n["checks"] if c["component"] == "nccl"]
    assert nccl and all(c["found"] == "2.28.9" and c["status"] == "ok" for c in nccl)

    # The lab's nodes converged; the six nodes no apply touched are still shown as changes.
    again = fleetspec(workdir, "plan", "fleet.yaml", "--state", f"{lab}/state", "--format", "json",
                      "--detailed-exitcode")
    assert again.returncode == 2, again.stdout
    left = json.loads(again.stdout)
    assert sorted(c["target"] for c in left["changes"] if c["target"].startswith("node:")) == [
        f"node:h100-00{i}" for i in range(3, 9)]
    # ... and nothing the lab's applies converged on ctl-01 (#28 item 3): not slurm.conf, gres.conf,
    # the partitions or the playbooks' group_vars; only slurmdbd.conf (db-01 is not in the lab).
    assert sorted(c["target"] for c in left["changes"] if not c["target"].startswith("node:")) == [
        "slurm:slurmdbd.conf"]
    shown = fleetspec(workdir, "state", "show", "quickstart", "--state", f"{lab}/state", "--format", "json")
    assert shown.returncode == 0, shown.stderr
    state = json.loads(shown.stdout)
    assert state["in_progress_nodes"] == [] and state["applied_nodes"] == 2
    assert state["limited"]["unapplied"] == [f"h100-00{i}" for i in range(3, 9)]

    down = fleetspec(workdir, "lab", "down", "--dir", lab)
    assert down.returncode == 0 and not (workdir / lab).exists()
