"""`fleetspec import slurm --live` against a real slurmctld (Debian's 22.05.8, tests/slurm's
harness): a drained node, a down node and a partition set down with scontrol, and a file
edited after slurmctld read it. What runs wins, each difference a warning at the file's
line; the drained and down nodes keep their State and Reason through the spec and the
render, into a second real slurmctld started on that render."""

from __future__ import annotations

import copy
import re
import sys
from pathlib import Path, PurePosixPath

import pytest
import yaml
from typer.testing import CliRunner

from fleetspec.importer.live import live_state, parse_records
from tests.importer.facts import nvidia_facts, write_facts
from tests.slurm.cluster import Cluster, running

# Written for these tests (not copied): the shape of tests/importer/data/cpu-beside-gpu
# (BioMedIA's CPU-only nodes beside GPU nodes, shared/brownfield/biomedia-imperial-2018),
# small enough for one machine: CPU nodes in a default partition, a typed GPU node in its own.
SITE_CONF = """\
ClusterName=biomed
SlurmctldHost=head01
GresTypes=gpu
MessageTimeout=20
NodeName=cpu0[1-3] CPUs=4 RealMemory=1000
NodeName=gpu01 CPUs=4 RealMemory=1000 Gres=gpu:h100:2
PartitionName=long Nodes=cpu0[1-3] Default=YES MaxTime=7-00:00:00 State=UP
PartitionName=gpus Nodes=gpu01 MaxTime=3-00:00:00 State=UP
"""
SITE_GRES = "NodeName=gpu01 Name=gpu Type=h100 File=/dev/nvidia[0-1]\n"
# The file as someone edited it after slurmctld read it (no scontrol reconfigure since).
EDITED = SITE_CONF.replace("MessageTimeout=20", "MessageTimeout=30").replace(
    "NodeName=cpu0[1-3] CPUs=4 RealMemory=1000", "NodeName=cpu0[1-3] CPUs=4 RealMemory=900")
REASON = "disk replaced: RMA 4711"


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory, slurm_installed: None) -> tuple[object, str, Path]:
    """One slurmctld for the module: cpu02 drained, cpu03 down, partition gpus down, then
    imported with --live (the result, standard error, the edited file)."""
    from fleetspec.cli import app

    base = tmp_path_factory.mktemp("live")
    edited = base / "slurm.conf"
    edited.write_text(EDITED)
    gres = base / "gres.conf"
    gres.write_text(SITE_GRES)
    facts = write_facts(base / "facts", {"gpu01": nvidia_facts("gpu01", "NVIDIA H100 80GB HBM3", 2)})
    files = {PurePosixPath("slurm/slurm.conf"): SITE_CONF, PurePosixPath("slurm/gres.conf"): SITE_GRES}
    with running(base / "cluster", files) as c:
        c.run("scontrol", "update", "nodename=cpu02", "state=drain", f"reason={REASON}")
        c.run("scontrol", "update", "nodename=cpu03", "state=down", "reason=PSU fail")
        c.run("scontrol", "update", "partitionname=gpus", "state=down")
        args = ["import", "slurm", "--live", "--conf", str(edited), "--gres", str(gres), "--facts", str(facts)]
        result = CliRunner().invoke(app, [*args, "--out", str(base / "fleet.yaml")], env={"SLURM_CONF": str(c.conf)})
        # The same through Ansible on the controller the file names (head01: this machine,
        # over Ansible's local connection), as apply and plan --live reach it.
        inventory = base / "hosts.ini"
        inventory.write_text(f"head01 ansible_connection=local ansible_python_interpreter={sys.executable}\n")
        remote = CliRunner().invoke(app, [*args, "--out", str(base / "remote.yaml"), "--slurm-control", "controller",
                                          "-i", str(inventory)], env={"SLURM_CONF": str(c.conf)})
    assert result.exit_code == 0, result.output
    assert remote.exit_code == 0, remote.output
    assert "(scontrol on head01)" in remote.stderr
    assert (base / "remote.yaml").read_text() == (base / "fleet.yaml").read_text()
    return yaml.safe_load((base / "fleet.yaml").read_text()), result.stderr, edited


def _group(spec: dict, host: str) -> dict:
    return next(g for rack in spec["spec"]["racks"] for kind in ("nodes", "cpu_nodes") for g in rack.get(kind, [])
                if g["hosts"] == host)


@pytest.mark.slurm
def test_drained_and_down_nodes_keep_state_and_reason(imported) -> None:
    spec, stderr, edited = imported
    assert "read slurmctld 22.05.8 (scontrol here): 4 node(s), 2 partition(s)" in stderr
    assert _group(spec, "cpu02")["slurm_state"] == {"state": "DRAIN", "reason": REASON}
    assert _group(spec, "cpu03")["slurm_state"] == {"state": "DOWN", "reason": "PSU fail"}
    assert "slurm_state" not in _group(spec, "cpu01") and "slurm_state" not in _group(spec, "gpu01")
    assert f"{edited}:5:10: warning: cpu02: IDLE+DRAIN in the running slurmctld (Reason: {REASON})" in stderr


@pytest.mark.slurm
def test_what_runs_wins_over_the_edited_file_each_at_its_line(imported) -> None:
    spec, stderr, edited = imported
    assert spec["spec"]["slurm"]["settings"]["MessageTimeout"] == 20
    assert f"{edited}:4:16: warning: MessageTimeout=30 in the file, 20 in the running slurmctld" in stderr
    assert all(_group(spec, h)["real_memory_mb"] == 1000 for h in ("cpu01", "cpu02", "cpu03"))
    # one warning for the line's three hosts, not one per host
    assert f"{edited}:5:38: warning: cpu[01-03]: RealMemory=900 in the file, 1000 in the running slurmctld" in stderr
    assert spec["spec"]["slurm"]["partitions"]["gpus"]["state"] == "DOWN"
    assert f"{edited}:8:57: warning: partition gpus: State=UP in the file, DOWN in the running slurmctld" in stderr


@pytest.mark.slurm
def test_the_render_keeps_them_out_of_service_in_a_real_slurmctld(imported, tmp_path: Path) -> None:
    """State=DRAIN/DOWN with a quoted Reason on the rendered NodeName lines: 22.05.8 takes them
    and starts the nodes drained and down (cpu03's slurmd is not started: it has no power)."""
    from fleetspec.pipeline import compile_text
    from fleetspec.render.slurm import render_slurm

    spec, _, _ = imported
    result = compile_text(yaml.safe_dump(spec), "imported.yaml")
    assert result.valid, [f.message for f in result.located()]
    files = render_slurm(result.fleet)
    conf = files[PurePosixPath("slurm/slurm.conf")]
    assert f'NodeName=cpu02 CPUs=4 RealMemory=1000 State=DRAIN Reason="{REASON}"' in conf
    c = Cluster(tmp_path, files)
    try:
        c.start(wait_idle=False, nodes=["cpu01", "cpu02", "gpu01"])
        shown = {n: c.run("scontrol", "show", "node", n).stdout for n in ("cpu02", "cpu03")}
    finally:
        c.stop()
    assert re.search(r"State=\S*DRAIN", shown["cpu02"]) and f"Reason={REASON}\n" in shown["cpu02"]
    assert re.search(r"State=DOWN", shown["cpu03"]) and "Reason=PSU fail\n" in shown["cpu03"]


@pytest.mark.parametrize(("shown", "state"), [
    ("IDLE", None), ("MIXED", None), ("IDLE+DRAIN", "DRAIN"), ("MIXED+DRAIN", "DRAIN"), ("DOWN*", "DOWN"),
    ("DOWN+DRAIN", "DRAIN"), ("IDLE+FAIL", "FAIL"), ("FUTURE", "FUTURE"), ("IDLE+CLOUD+POWERED_DOWN", "CLOUD"),
    ("ALLOCATED*", None)])
def test_scontrol_states_become_nodename_states(shown: str, state: str | None) -> None:
    assert live_state(shown) == state


def test_a_reason_with_blanks_and_equals_signs_is_read_whole() -> None:
    line = ("NodeName=n1 Arch=x86_64 CPUTot=4 OS=Linux 6.1 #1 SMP State=IDLE+DRAIN Weight=1 "
            "Reason=fan=broken, see RMA 12 [root@2026-12-06T05:18:12]")
    ((fields, reason),) = parse_records(line + "\nnot a record\n", "NodeName")
    assert reason == "fan=broken, see RMA 12"
    assert (fields["State"], fields["OS"], fields["Weight"]) == ("IDLE+DRAIN", "Linux 6.1 #1 SMP", "1")
    assert "see" not in fields
    ((fields, reason),) = parse_records("NodeName=n2 State=DOWN Reason=set in slurm.conf, x=1", "NodeName")
    assert (fields["State"], reason) == ("DOWN", "set in slurm.conf, x=1")  # no [user@time]: to the end


@pytest.mark.slurm
def test_adopted_with_its_drained_nodes_the_first_plan_is_empty(imported, tmp_path: Path) -> None:
    from fleetspec.cli import app
    from fleetspec.importer.adopt import adopt
    from fleetspec.pipeline import compile_text
    from fleetspec.state.backend import parse_location

    spec, _, _ = imported
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(spec))
    adopt(compile_text(path.read_text(), str(path)).fleet, parse_location(str(tmp_path / "state")), "test")
    plan = CliRunner().invoke(app, ["plan", str(path), "--state", str(tmp_path / "state"), "--detailed-exitcode"])
    assert plan.exit_code == 0, plan.output
    resumed = copy.deepcopy(spec)
    del _group(resumed, "cpu02")["slurm_state"]
    path.write_text(yaml.safe_dump(resumed))  # the site's edit that returns cpu02 to service: a change plan shows
    plan = CliRunner().invoke(app, ["plan", str(path), "--state", str(tmp_path / "state"), "--detailed-exitcode",
                                    "--diff"])
    assert plan.exit_code == 2, plan.output
    assert 'State=DRAIN Reason="disk replaced: RMA 4711"' in plan.stdout


def test_what_slurmctld_says_is_bounded_and_cleaned(tmp_path: Path) -> None:
    """Its answers are another machine's word: over 64 MB is refused; a Reason a slurm.conf
    line cannot quote is cleaned, with a warning at the node's line."""
    import subprocess

    from fleetspec.importer.conf import Problem
    from fleetspec.importer.live import MAX_OUTPUT, LiveCluster, LiveError, overlay, read_live
    from fleetspec.importer.slurm_files import read_slurm_conf

    def huge(argv):
        return subprocess.CompletedProcess(argv, 0, "x" * (MAX_OUTPUT + 1), "")

    with pytest.raises(LiveError, match="printed 67,108,865 characters"):
        read_live(huge, "test")
    conf = tmp_path / "slurm.conf"
    conf.write_text(SITE_CONF)
    parsed = read_slurm_conf(conf, problems := [])
    assert problems == []
    live = LiveCluster("test", {"SLURM_VERSION": "22.05.8"}, {"cpu01": {"NodeName": "cpu01", "State": "IDLE+DRAIN"}},
                       {"cpu01": 'fan "broken" # see\x1b[31m ticket'}, {})
    warnings: list[Problem] = overlay(parsed, live, conf)
    assert parsed.nodes["cpu01"].attrs["Reason"].value == "fan broken see [31m ticket"
    assert any("cpu01: slurmctld's Reason holds characters" in str(w) for w in warnings)
