"""The join step on a real slurmctld and slurmds with real lab hosts: two nodes defined in
the rendered slurm.conf boot after the controller (their slurmd starts late), are held out of
service from the moment they register, and are verified over Ansible on lab hosts. join-2
holds its tuple (the stack's stand-in packages, installed under the rendered apt preferences
and held) and is resumed and takes a job; join-1 is bare and stays drained with the failing
check as the reason."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
import yaml

from fleetspec.apply.control import SlurmControl, local_runner
from fleetspec.baremetal.join import JOIN_REASON, hold, join, registered
from fleetspec.lab import Lab, build_repo
from fleetspec.lab.fleet import repo_packages
from fleetspec.lab.slurm import Cluster
from fleetspec.packages import apt_preferences, packages_for
from fleetspec.pipeline import compile_text
from fleetspec.render.slurm import render_slurm
from fleetspec.verify.compare import compare
from fleetspec.verify.run import collect_inventory
from tests.lab.conftest import lab_base, lab_mode  # noqa: F401  (session fixture)

pytestmark = [pytest.mark.lab, pytest.mark.slurm, pytest.mark.usefixtures("slurm_installed")]

SPEC = """\
apiVersion: fleetspec.io/v1alpha1
kind: Fleet
metadata: {name: join}
spec:
  os: ubuntu-24.04
  stacks:
    hopper: {driver: "580.95.05", cuda: "13.0.2", nccl: "2.28.3"}
  racks:
    - name: r01
      nodes:
        - {hosts: "join-[1-2]", gpu: {model: h100-sxm, count: 1}, stack: hopper, scheduler: slurm, cpus: 2,
           memory_gb: 1}
  slurm: {version: "22.05.8", controllers: ctl-01}
"""
HOSTS = ["join-1", "join-2"]


def ssh(lab: Lab, host: str, *command: str, stdin: str | None = None) -> None:
    done = subprocess.run(lab.ssh.argv(host, *command), input=stdin, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]


def provision(lab: Lab, host: str, fleet) -> None:  # type: ignore[no-untyped-def]
    """What the golden image holds: the stack's pinned packages under its apt preferences, held."""
    stack, gpus = fleet.stacks[0], [fleet.nodes[0].gpu]
    pins = packages_for(stack, fleet.os, gpus)
    ssh(lab, host, "sh", "-c", "cat > /etc/apt/preferences.d/fleetspec-hopper.pref",
        stdin=apt_preferences(stack, fleet.os, gpus))
    ssh(lab, host, "apt-get", "update", "-q")
    ssh(lab, host, "env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "install", "-y", "-q",
        *[f"{p.name}={p.version}" for p in pins])
    ssh(lab, host, "apt-mark", "hold", *[p.name for p in pins])


def test_a_node_joins_slurm_only_after_verify_passes(lab_base: Path, tmp_path: Path) -> None:
    result = compile_text(SPEC)
    assert result.fleet is not None and result.valid, result.located()
    fleet = result.fleet
    build_repo(repo_packages(fleet), tmp_path / "repo")
    lab = Lab(tmp_path / "lab", lab_base, repo_dir=tmp_path / "repo", mode=lab_mode())
    cluster = Cluster(tmp_path / "slurm", render_slurm(fleet))
    try:
        lab.up(HOSTS)
        provision(lab, "join-2", fleet)
        inventory = tmp_path / "inventory.yml"
        inventory.write_text(yaml.safe_dump({"all": {"hosts": lab.ansible_vars()}}))

        def verify(f, hosts):  # type: ignore[no-untyped-def]
            facts, problems = collect_inventory([inventory], hosts, forks=4)
            return compare(f, facts, hosts=hosts, unreachable=problems)

        cluster.start(wait_idle=False, nodes=())  # the controller; the nodes have not booted yet
        control = SlurmControl(local_runner({"SLURM_CONF": str(cluster.conf)}))
        assert not any(registered(state) for state, _ in control.states(HOSTS).values())
        hold(control, HOSTS)  # what baremetal apply does before it powers a node on
        for host in HOSTS:  # the nodes boot: slurmd registers, and the rendered ReturnToService=1
            cluster.start_node(host)  # would put them in service, but the hold keeps them out
        end = time.monotonic() + 30
        while not all(registered(s) for s, _ in control.states(HOSTS).values()) and time.monotonic() < end:
            time.sleep(0.2)
        assert control.states(HOSTS) == {h: ("drained", JOIN_REASON) for h in HOSTS}

        lines: list[str] = []
        joined = join(fleet, HOSTS, control, verify, lines.append, timeout_s=30)
        assert [(j.host, j.in_service) for j in joined] == [("join-1", False), ("join-2", True)]
        # a resume marks the node not responding ("idle*") until slurmctld's next ping answers
        end = time.monotonic() + 30
        while control.states(["join-2"])["join-2"][0] != "idle" and time.monotonic() < end:
            time.sleep(0.2)
        states = control.states(HOSTS)
        assert states["join-2"][0] == "idle", states
        state, reason = states["join-1"]
        assert state == "drained" and reason.startswith("fleetspec: join: verify failed: driver: no NVIDIA driver"), \
            states
        assert lines == [f"join-1: stays drained, {joined[0].reason}", "join-2: verify passed, resumed"]
        job = cluster.sbatch("-p", "nvidia-hopper", "-w", "join-2", "-N1", "--mem=100", script="true\n")
        assert job.returncode == 0, job.stderr
        done = cluster.wait_job(job.stdout.strip(), {"COMPLETED", "FAILED"}, timeout=30)
        assert done.get("JobState") == "COMPLETED", done
    finally:
        cluster.stop()
        lab.down()
