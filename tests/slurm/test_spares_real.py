"""Hot spares on a real slurmctld: a ``replace`` verdict brings a spare of the same model and
tuple into the sick node's partition (scontrol update of the partition's Nodes) and posts a
ticket to a webhook on 127.0.0.1."""

from __future__ import annotations

from pathlib import PurePosixPath

import pytest

from fleetspec.apply.control import local_runner
from fleetspec.baremetal.spares import partition_nodes, replace_nodes
from fleetspec.pipeline import compile_text
from fleetspec.render.slurm import render_slurm
from tests.baremetal.webhook import serving

from .cluster import running

pytestmark = [pytest.mark.slurm, pytest.mark.usefixtures("slurm_installed")]

SPEC = """\
apiVersion: fleetspec.io/v1alpha1
kind: Fleet
metadata: {{name: spares}}
spec:
  os: ubuntu-24.04
  stacks:
    hopper: {{driver: "580.95.05", cuda: "13.0.2", nccl: "2.28.3"}}
  racks:
    - name: r01
      nodes:
        - hosts: "h200-[01-02]"
          gpu: {{model: h200, count: 1}}
          stack: hopper
          scheduler: slurm
          cpus: 2
          memory_gb: 1
        - hosts: "spare-[01-02]"
          gpu: {{model: h200, count: 1}}
          stack: hopper
          scheduler: slurm
          partition: pool
          cpus: 2
          memory_gb: 1
  slurm: {{version: "22.05.8", controllers: ctl-01}}
  baremetal:
    spares: {{nvidia-hopper: "spare-[01-02]"}}
    tickets: {{url: "{url}"}}
"""
VERDICT = {"status": "sick", "action": "replace", "faults": [
    {"class": "row-remap-failure", "scope": "device", "device": "0000:18:00.0", "action": "replace",
     "detail": "Xid 64: row remapping failure", "source": "kernel-log"}]}


def test_a_replace_verdict_brings_a_spare_into_the_partition_and_posts_a_ticket(tmp_path) -> None:
    with serving() as hook:
        result = compile_text(SPEC.format(url=hook.url))
        assert result.valid, result.located()
        fleet = result.fleet
        files = render_slurm(fleet)
        assert "PartitionName=nvidia-hopper" in files[PurePosixPath("slurm/slurm.conf")]
        with running(tmp_path / "slurm", files) as cluster:
            run = local_runner({"SLURM_CONF": str(cluster.conf)})
            assert partition_nodes(run, "nvidia-hopper") == ["h200-01", "h200-02"]
            lines: list[str] = []
            done = replace_nodes(fleet, {"h200-01": VERDICT, "h200-02": {"action": "none"}}, run, tmp_path,
                                 lines.append)
            assert [(r.node, r.spare, r.ticket, r.problems) for r in done] == [("h200-01", "spare-01", 201, [])]
            assert partition_nodes(run, "nvidia-hopper") == ["h200-01", "h200-02", "spare-01"]
            # a job may now land on the spare through the partition
            job = cluster.sbatch("-p", "nvidia-hopper", "-w", "spare-01", "-N1", "--mem=100", script="true\n")
            assert job.stdout.strip(), job.stderr
            # the next replacement takes the next idle spare, and keeps what is there
            again = replace_nodes(fleet, {"h200-02": VERDICT}, run, tmp_path)
            assert again[0].spare == "spare-02"
            assert partition_nodes(run, "nvidia-hopper") == ["h200-01", "h200-02", "spare-01", "spare-02"]
            # the pool is used up: said, and the ticket still goes out
            last = replace_nodes(fleet, {"h200-01": VERDICT}, run, tmp_path)
            assert last[0].spare is None and last[0].ticket == 201
            assert last[0].problems == ["no idle spare left in the pool of nvidia-hopper (spare-[01-02])"]
    assert [r["body"]["node"] for r in hook.requests] == ["h200-01", "h200-02", "h200-01"]
    assert hook.requests[0]["body"]["fault_class"] == "row-remap-failure"
    assert hook.requests[0]["body"]["spare"] == "spare-01"
    assert lines == ["h200-01: spare spare-01 joined partition nvidia-hopper", "h200-01: ticket posted (201)"]


BIOS_SPEC = """\
apiVersion: fleetspec.io/v1alpha1
kind: Fleet
metadata: {{name: bios}}
spec:
  os: ubuntu-24.04
  stacks:
    hopper: {{driver: "580.95.05", cuda: "13.0.2", nccl: "2.28.3", firmware: {{bios: "2.5.1"}}}}
  racks:
    - name: r01
      bmc: {{endpoint: "{endpoint}", system: "{{host}}", username: admin, password: env:FLEETSPEC_TEST_BMC_PASSWORD,
            bios: {{ProcTurboMode: Enabled}}}}
      nodes:
        - hosts: "h200-[01-02]"
          gpu: {{model: h200, count: 1}}
          stack: hopper
          scheduler: slurm
          cpus: 2
          memory_gb: 1
  slurm: {{version: "22.05.8", controllers: ctl-01}}
  baremetal:
    firmware_images: {{bios: {{"2.5.1": "{image}"}}}}
"""


def test_a_bios_change_drains_restarts_and_resumes_each_wave_through_slurm(tmp_path, monkeypatch) -> None:
    """BIOS attributes and a BIOS firmware update (Redfish SimpleUpdate, image served on
    127.0.0.1) in the same drain-reboot waves: each node is drained while its BMC updates and
    restarts it, the new version is read back, and only then is the node resumed."""
    from fleetspec.apply.control import SlurmControl
    from fleetspec.baremetal.run import DRAIN_REASON, apply_bmcs, observe, plan_bmcs
    from tests.baremetal.emulator import PASSWORD, system
    from tests.baremetal.emulator import running as bmc_running
    from tests.baremetal.images import serving as images_serving

    monkeypatch.setenv("FLEETSPEC_TEST_BMC_PASSWORD", PASSWORD)
    systems = [system("h200-01", 11, "52:54:00:bb:00:01"), system("h200-02", 12, "52:54:00:bb:00:02")]
    (tmp_path / "images").mkdir()
    (tmp_path / "images" / "bios-2.5.1.bin").write_bytes(b"bios 2.5.1\n" * 100)
    with images_serving(tmp_path / "images") as images, bmc_running(tmp_path / "bmc", systems) as bmc:
        fleet = compile_text(BIOS_SPEC.format(endpoint=bmc.endpoint, image=images.url("bios-2.5.1.bin"))).fleet
        assert fleet is not None
        plan, findings = plan_bmcs(fleet, observe(fleet, tmp_path), canary=1, max_unavailable=1)
        assert not findings and [w.hosts for w in plan.waves] == [("h200-01",), ("h200-02",)]
        with running(tmp_path / "slurm", render_slurm(fleet)) as cluster:
            run = local_runner({"SLURM_CONF": str(cluster.conf)})
            control = SlurmControl(run)
            drained_during: list[tuple[str, str]] = []
            lines: list[str] = []

            def on_line(line: str) -> None:
                lines.append(line)
                host = line.split(":", 1)[0]
                if "restarted" in line or "firmware update task" in line:  # out of service meanwhile
                    drained_during.append(control.states([host])[host])

            result = apply_bmcs(plan, tmp_path, control, on_line)
            assert result.ok, result.failed
            assert [s[0].upper().startswith("DRAIN") for s in drained_during] == [True] * 4, drained_during
            assert all(reason == DRAIN_REASON for _, reason in drained_during)
            states = control.states(["h200-01", "h200-02"])
            assert all(state.upper().startswith("IDLE") for state, _ in states.values()), states
        for name in ("h200-01", "h200-02"):
            assert bmc.system(name)["bios"]["ProcTurboMode"] == "Enabled"
            assert bmc.system(name)["versions"] == {"BiosVersion": "2.5.1"}
            assert [i["uri"] for i in bmc.system(name)["firmware_images"]] == [images.url("bios-2.5.1.bin")]
            assert bmc.system(name)["boots"] == ["Hdd"]  # one restart, from disk
        assert [line for line in lines if line.startswith("h200-01")][-2:] == [
            "h200-01: firmware read back: bios 2.5.1", "h200-01: resumed"]
        assert not plan_bmcs(fleet, observe(fleet, tmp_path))[0].changes
