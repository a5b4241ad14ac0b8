"""The node check on stand-in node roots: reads, latches, clears, reports."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import pytest

from fleetspec.node_side import node_check
from fleetspec.pipeline import compile_text
from fleetspec.render.health import node_config

from .nodes import FIXTURES, make_node, set_boot_id, set_ib, set_tool_output

SPEC = """\
apiVersion: fleetspec.io/v1alpha1
kind: Fleet
metadata: {name: sickbay}
spec:
  os: ubuntu-24.04
  stacks:
    hopper: {driver: "580.95.05", cuda: "13.0.2", nccl: "2.28.3"}
    cdna3: {rocm: "7.0.2"}
  fabric: {type: infiniband}
  racks:
    - name: r01
      nodes:
        - {hosts: "h200-[01-02]", gpu: {model: h200, count: 1}, stack: hopper, scheduler: slurm}
        - {hosts: "mi300x-01", gpu: {model: mi300x, count: 2}, stack: cdna3, scheduler: slurm}
  slurm: {version: "25.11.8", controllers: ctl-01}
  health: {interval: 60}
"""


@pytest.fixture
def config(tmp_path: Path) -> Path:
    result = compile_text(SPEC)
    assert result.valid, [f.message for f in result.findings]
    path = tmp_path / "health.json"
    path.write_text(json.dumps(node_config(result.fleet)))
    return path


def check(config: Path, root: Path, node: str, monkeypatch, capsys, *extra: str) -> tuple[int, dict]:
    monkeypatch.setenv("PATH", f"{root / 'bin'}{os.pathsep}{os.environ['PATH']}")
    rc = node_check.main(["--config", str(config), "--root", str(root), "--node", node, "--format", "json", *extra])
    return rc, json.loads(capsys.readouterr().out)


def test_healthy_node(config, tmp_path, monkeypatch, capsys) -> None:
    root = make_node(tmp_path / "h200-01")
    rc, result = check(config, root, "h200-01", monkeypatch, capsys)
    assert (rc, result["status"], result["action"], result["faults"]) == (0, "healthy", "none", [])


def test_xid_faults_latch_until_reboot(config, tmp_path, monkeypatch, capsys) -> None:
    root = make_node(tmp_path / "h200-01", kmsg="kmsg-xids.txt")
    rc, first = check(config, root, "h200-01", monkeypatch, capsys)
    assert rc == 1 and first["status"] == "sick" and first["action"] == "replace"
    assert {f["class"] for f in first["faults"]} >= {"gpu-lost", "xid-informational", "nvlink-error"}
    # The log lines are not printed again; the faults they reported stay.
    rc, again = check(config, root, "h200-01", monkeypatch, capsys)
    assert rc == 1 and again["faults"] == first["faults"]
    # A reboot (new boot id, fresh kernel log) clears them.
    set_boot_id(root, "boot-2")
    (root / "dev" / "kmsg").write_text((FIXTURES / "kmsg-healthy.txt").read_text())
    rc, after = check(config, root, "h200-01", monkeypatch, capsys)
    assert (rc, after["status"]) == (0, "healthy")


def test_xids_on_mig_instances_latch_per_instance(config, tmp_path, monkeypatch, capsys) -> None:
    """#46: the driver's MIG-attributed Xid lines (kmsg-mig-xids.txt) are read, each instance's
    fault latches on its own and keeps naming its instance across checks."""
    root = make_node(tmp_path / "h200-01", kmsg="kmsg-mig-xids.txt")
    rc, first = check(config, root, "h200-01", monkeypatch, capsys)
    assert rc == 1 and first["action"] == "quarantine-device"
    named = {f["detail"].split(":", 1)[0]: f.get("instance") for f in first["faults"] if f["source"] == "kernel-log"}
    assert named["Xid 13 on GPU-I 1 GPU-CI 0"] == {"gi": 1, "ci": 0}
    assert named["Xid 13 on GPU-I 2 GPU-CI 0"] == {"gi": 2, "ci": 0}
    assert named["Xid 109 on GPU-I 3 GPU-CI 0"] == {"gi": 3, "ci": 0}
    rc, again = check(config, root, "h200-01", monkeypatch, capsys)
    assert rc == 1 and again["faults"] == first["faults"]


def test_clear_forgets_latched_faults(config, tmp_path, monkeypatch, capsys) -> None:
    root = make_node(tmp_path / "h200-01", kmsg="kmsg-xids.txt")
    assert check(config, root, "h200-01", monkeypatch, capsys)[0] == 1
    rc, cleared = check(config, root, "h200-01", monkeypatch, capsys, "--clear")
    assert (rc, cleared["status"]) == (0, "healthy")  # the old records are behind the cursor
    assert check(config, root, "h200-01", monkeypatch, capsys)[0] == 0


def test_only_new_kernel_records_count(config, tmp_path, monkeypatch, capsys) -> None:
    root = make_node(tmp_path / "h200-01")
    assert check(config, root, "h200-01", monkeypatch, capsys)[0] == 0
    with open(root / "dev" / "kmsg", "a") as log:
        log.write("4,1029,5121800001,-;NVRM: Xid (PCI:0000:18:00): 79, pid='<unknown>', name=<unknown>, "
                  "GPU has fallen off the bus.\n")
    rc, result = check(config, root, "h200-01", monkeypatch, capsys)
    assert rc == 1 and [f["class"] for f in result["faults"]] == ["gpu-lost"]


def test_ib_port_down_then_up(config, tmp_path, monkeypatch, capsys) -> None:
    root = make_node(tmp_path / "h200-01", ib="down")
    rc, result = check(config, root, "h200-01", monkeypatch, capsys)
    assert (rc, result["action"], result["faults"][0]["class"]) == (1, "drain", "ib-port-down")
    set_ib(root, "active")
    assert check(config, root, "h200-01", monkeypatch, capsys)[1]["status"] == "healthy"
    set_ib(root, "active", link_downed=4)  # the link went down and came back since the last run
    rc, result = check(config, root, "h200-01", monkeypatch, capsys)
    assert [f["class"] for f in result["faults"]] == ["ib-link-errors"]


def test_no_infiniband_on_an_infiniband_fleet_node(config, tmp_path, monkeypatch, capsys) -> None:
    root = make_node(tmp_path / "h200-01", ib=None)
    rc, result = check(config, root, "h200-01", monkeypatch, capsys)
    assert [f["class"] for f in result["faults"]] == ["ib-port-down"]


def test_remap_pending_and_missing_gpu(config, tmp_path, monkeypatch, capsys) -> None:
    root = make_node(tmp_path / "h200-02", nvidia_xml=FIXTURES / "nvidia-smi-q-remap-pending.xml")
    rc, result = check(config, root, "h200-02", monkeypatch, capsys)
    assert result["action"] == "quarantine-device"
    assert {f["class"] for f in result["faults"]} == {"row-remap-pending", "ecc-uncorrectable"}


def test_nvidia_smi_missing_on_a_gpu_node_is_a_fault(config, tmp_path, monkeypatch, capsys) -> None:
    root = make_node(tmp_path / "h200-01", nvidia_xml=None)
    monkeypatch.setenv("PATH", str(root / "bin"))
    rc = node_check.main(["--config", str(config), "--root", str(root), "--node", "h200-01", "--format", "json"])
    result = json.loads(capsys.readouterr().out)
    assert rc == 1 and [f["class"] for f in result["faults"]] == ["probe-failed"]


def test_amd_node(config, tmp_path, monkeypatch, capsys) -> None:
    root = make_node(tmp_path / "mi300x-01", nvidia_xml=None, amd_json=FIXTURES / "amd-smi-metric-ecc.json")
    rc, result = check(config, root, "mi300x-01", monkeypatch, capsys)
    assert [(f["class"], f["device"]) for f in result["faults"]] == [("ecc-uncorrectable", "GPU 1")]
    set_tool_output(root, "amd-smi", FIXTURES / "amd-smi-metric-ecc-healthy.json", "metric --ecc --json")
    assert check(config, root, "mi300x-01", monkeypatch, capsys)[1]["status"] == "healthy"


def test_bad_config_is_a_located_error(tmp_path, capsys) -> None:
    bad = tmp_path / "health.json"
    bad.write_text("{}")
    assert node_check.main(["--config", str(bad)]) == 2
    assert "not a fleetspec health config" in capsys.readouterr().err
    assert node_check.main(["--config", str(tmp_path / "missing.json")]) == 2


def test_npd_format_is_one_line_the_drain_reason(config, tmp_path, monkeypatch, capsys) -> None:
    """NPD makes the plugin's output the GPUProblem condition's message (and the remediator
    the node's drain-reason annotation): one line, the NHC-form reason Slurm gets."""
    root = make_node(tmp_path / "h200-01", kmsg="kmsg-xids.txt")
    monkeypatch.setenv("PATH", f"{root / 'bin'}{os.pathsep}{os.environ['PATH']}")
    args = ["--config", str(config), "--root", str(root), "--node", "h200-01"]
    assert node_check.main(args + ["--format", "npd"]) == 1  # NPD: NonOK
    line = capsys.readouterr().out
    assert line.count("\n") == 1 and line.startswith("replace row-remap-failure: 0000:5d:00 Xid 64")
    healthy = make_node(tmp_path / "h200-02")
    monkeypatch.setenv("PATH", f"{healthy / 'bin'}{os.pathsep}{os.environ['PATH']}")
    assert node_check.main(["--config", str(config), "--root", str(healthy), "--node", "h200-02",
                            "--format", "npd"]) == 0
    assert capsys.readouterr().out == "healthy\n"


def test_read_only_looks_without_touching_the_state(config, tmp_path, monkeypatch, capsys) -> None:
    """What `fleetspec health --inventory/--lab` runs: latched faults show, nothing is written."""
    root = make_node(tmp_path / "h200-01", kmsg="kmsg-xids.txt")
    state = root / node_check.STATE_FILE.lstrip("/")
    rc, looked = check(config, root, "h200-01", monkeypatch, capsys, "--read-only")
    assert rc == 1 and looked["status"] == "sick" and not state.exists()
    rc, first = check(config, root, "h200-01", monkeypatch, capsys)  # the scheduled check still sees them
    assert rc == 1 and first["faults"] == looked["faults"] and state.exists()
    written = state.read_bytes()
    (root / "dev" / "kmsg").write_text((FIXTURES / "kmsg-healthy.txt").read_text())
    rc, again = check(config, root, "h200-01", monkeypatch, capsys, "--read-only")
    assert rc == 1 and again["faults"] == first["faults"]  # latched until reboot, read from the state
    assert state.read_bytes() == written
    for other in ("--slurm", "--clear"):
        assert node_check.main(["--config", str(config), "--read-only", other]) == 2
        assert "--read-only cannot be combined" in capsys.readouterr().err


def test_a_check_that_fails_itself_is_unknown_never_sick(config, tmp_path, monkeypatch, capsys) -> None:
    """NPD reads exit 1 as NonOK (the GPUProblem condition True: the remediator cordons and
    drains the node) and any other non-zero as Unknown (nothing changes): custom_plugin_monitor.md,
    pkg/custompluginmonitor/types (OK 0, NonOK 1, Unknown 2). Python exits 1 on an uncaught
    exception, so a bug in the check (one that hits every node) would drain the whole fleet."""

    def broken(*args, **kwargs):
        raise KeyError("links")  # a bug, or tool output no parser expected

    root = make_node(tmp_path / "h200-01")
    monkeypatch.setattr(node_check, "run_check", broken)
    for fmt in ("npd", "json", "text"):
        rc = node_check.main(["--config", str(config), "--root", str(root), "--node", "h200-01", "--format", fmt])
        out, err = capsys.readouterr()
        assert rc == 2, fmt
        assert "fleetspec-health: the check failed: KeyError: 'links'" in err
        assert out == ("unknown: the check failed: KeyError: 'links'\n" if fmt == "npd" else "")


def hung_tool(root: Path, tool: str) -> Path:
    """A stand-in ``tool`` that logs each call and then hangs (a wedged GPU: nvidia-smi never answers)."""
    calls = root / f"{tool}.calls"
    script = root / "bin" / tool
    script.write_text(f'#!/bin/sh\necho "$*" >> "{calls}"\nexec sleep 600\n')
    script.chmod(0o755)
    return calls


def test_a_hung_nvidia_smi_is_called_once_and_drains_within_the_deadline(config, tmp_path, monkeypatch,
                                                                           capsys) -> None:
    """Before: -q -x, nvlink --status and nvlink -e each waited 30 s (90 s: slurmd kills the
    check at 60 s, nothing drains). Now: one deadline for the check, the tool is called once,
    and its hang is a probe-failed fault (drain), not an error."""
    policy = json.loads(config.read_text())
    policy["deadline_s"] = node_check.SLURM_RESERVE_S + 3  # 3 s for the tools: the default's shape, shorter
    config.write_text(json.dumps(policy))
    root = make_node(tmp_path / "h200-01")
    calls = hung_tool(root, "nvidia-smi")
    started = time.monotonic()
    rc, result = check(config, root, "h200-01", monkeypatch, capsys)
    took = time.monotonic() - started
    assert took < 6, took
    assert calls.read_text().splitlines() == ["-q -x"]  # not called again after it hung
    assert rc == 1 and result["action"] == "drain"
    probe = [f for f in result["faults"] if f["class"] == "probe-failed"]
    assert probe == [{"class": "probe-failed", "scope": "node", "device": "nvidia-smi", "action": "drain",
                      "detail": "hung: no answer within 3 s (killed, not called again this run)",
                      "source": "nvidia-smi"}], result


def test_the_default_deadline_is_well_inside_the_owners_kill() -> None:
    """slurmd kills a HealthCheckProgram at 60 s; NPD's plugin timeout is 60 s."""
    assert node_check.DEADLINE_S <= 45 and node_check.SLURM_RESERVE_S >= 2 * node_check.SCONTROL_TIMEOUT_S


def test_two_checks_never_overlap(config, tmp_path, monkeypatch, capsys) -> None:
    root = make_node(tmp_path / "h200-01")
    held, _ = node_check.take_lock(str(root / node_check.LOCK_FILE.lstrip("/")))
    assert held is not None
    monkeypatch.setenv("PATH", f"{root / 'bin'}{os.pathsep}{os.environ['PATH']}")
    rc = node_check.main(["--config", str(config), "--root", str(root), "--node", "h200-01", "--format", "npd"])
    out, err = capsys.readouterr()
    assert rc == 2 and out == "unknown: another check is still running\n"
    assert f"another check is still running (pid {os.getpid()})" in err
    held.close()
    rc, result = check(config, root, "h200-01", monkeypatch, capsys)
    assert rc == 0 and result["status"] == "healthy"


def test_dcgm_levels_2_and_up_stay_out_of_the_periodic_check(config, tmp_path, monkeypatch, capsys) -> None:
    policy = json.loads(config.read_text())
    policy["checks"] = [*policy.get("checks", []), "dcgm"]
    policy["dcgm_level"] = 3
    config.write_text(json.dumps(policy))
    root = make_node(tmp_path / "h200-01")
    set_tool_output(root, "dcgmi", FIXTURES / "dcgmi-diag-r1-pass.json", "diag -r 1 -j")
    rc, result = check(config, root, "h200-01", monkeypatch, capsys)
    assert rc == 0 and not result["errors"], result  # level 1 ran (the stand-in knows only that)
    rc, result = check(config, root, "h200-01", monkeypatch, capsys, "--dcgm-level", "3")
    assert any("diag -r 3 -j" in e for e in result["errors"]), result  # asked for explicitly, it runs level 3


def test_a_counter_fault_clears_only_after_clean_checks_and_a_flapping_link_stays_drained(
        config, tmp_path, monkeypatch, capsys) -> None:
    """Before: link_downed rose, the node drained; the next check saw no rise and resumed it
    (four cycles in 140 s on the real slurmd). Now the fault holds for clear_after clean
    checks, and a link that comes back flap_limit times in the window stays drained."""
    policy = json.loads(config.read_text())
    policy.update(clear_after=2, flap_limit=2)
    config.write_text(json.dumps(policy))
    root = make_node(tmp_path / "h200-01")

    def run(downed=None, *extra):
        if downed is not None:
            set_ib(root, "active", link_downed=downed)
        rc, result = check(config, root, "h200-01", monkeypatch, capsys, *extra)
        return rc, sorted(f["class"] for f in result["faults"])

    assert run(0) == (0, [])
    assert run(1) == (1, ["ib-link-errors"])  # the link went down once since the last check
    assert run() == (1, ["ib-link-errors"])  # quiet once: still held (1 of 2 clean checks)
    assert run() == (0, [])  # two clean checks in a row: cleared
    assert run(2) == (1, ["flapping", "ib-link-errors"])  # back a second time in the window
    assert run() == (1, ["flapping", "ib-link-errors"])
    assert run() == (1, ["flapping"])  # the counter fault cleared; the flapping node stays drained
    assert run() == (1, ["flapping"])
    assert run(None, "--clear") == (0, [])  # an operator repaired it


# The real H200's bus id is 00000000:00:06.0; the driver names it PCI:0000:00:06 in an Xid line.
H200_XID = "4,{seq},{usec},-;NVRM: Xid (PCI:0000:00:06): {text}\n"


def _log(root: Path, seq: int, text: str) -> None:
    with open(root / "dev" / "kmsg", "a") as log:
        log.write(H200_XID.format(seq=seq, usec=6000000000 + seq, text=text))


def test_a_gpu_reset_ends_what_a_reset_fixes_and_the_old_lines_stay_behind(config, tmp_path, monkeypatch,
                                                                           capsys) -> None:
    """#26 item 6: the driver asks for a GPU reset (Xid 154 and the recovery action in
    nvidia-smi -q); once nvidia-smi reports the action back at None (the real H200's value)
    the latched faults of that GPU end, the old log lines do not fire again, and a fault only
    a reboot ends stays."""
    root = make_node(tmp_path / "h200-01", nvidia_xml=FIXTURES / "nvidia-smi-q-recovery-reset.xml")
    _log(root, 2000, "119, pid=1882, name=nvidia-smi, Timeout after 6s of waiting for RPC response from GPU0 GSP! "
                     "Expected function 76 (GSP_RM_CONTROL) (0x20801348 0x4).")
    _log(root, 2001, "154, GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)")
    rc, first = check(config, root, "h200-01", monkeypatch, capsys)
    assert rc == 1 and {f["class"] for f in first["faults"]} == {"gpu-reset-required"}
    rc, again = check(config, root, "h200-01", monkeypatch, capsys)  # not reset yet: still latched
    assert rc == 1 and again["faults"] == first["faults"]
    set_tool_output(root, "nvidia-smi", node_check_h200(), "-q -x")  # reset: the action reads None again
    rc, after = check(config, root, "h200-01", monkeypatch, capsys)
    assert (rc, after["status"], after["faults"]) == (0, "healthy", [])
    assert check(config, root, "h200-01", monkeypatch, capsys)[1]["faults"] == []  # the old lines stay behind


def test_gpu_reset_option_resets_and_keeps_reboot_faults(config, tmp_path, monkeypatch, capsys) -> None:
    """--gpu-reset runs nvidia-smi -r -i BUS; a reset-class fault of that GPU ends, a newer Xid 154
    replaces an older one on the same GPU, and a node-reboot fault stays until a new boot id."""
    root = make_node(tmp_path / "h200-01", nvidia_xml=h200_xml(tmp_path, "Node Reboot Required"))
    _log(root, 2000, "154, GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)")
    rc, first = check(config, root, "h200-01", monkeypatch, capsys)
    assert rc == 1 and {f["class"] for f in first["faults"]} == {"node-reboot-required"}
    _log(root, 2001, "154, GPU recovery action changed from 0x2 (Node Reboot Required) to 0x1 (GPU Reset Required)")
    _log(root, 2002, "48, pid='<unknown>', name=<unknown>, An uncorrectable double bit error (DBE) has been "
                     "detected on GPU in the framebuffer at partition 6, subpartition 0.")
    set_tool_output(root, "nvidia-smi", h200_xml(tmp_path, "GPU Reset Required", dram_unc=1), "-q -x")
    rc, second = check(config, root, "h200-01", monkeypatch, capsys)
    assert rc == 1 and {f["class"] for f in second["faults"]} == {"gpu-reset-required", "ecc-uncorrectable"}
    _log(root, 2003, "79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.")
    reset_out = tmp_path / "reset.txt"
    reset_out.write_text("GPU 00000000:00:06.0 was successfully reset.\n")
    assert main_rc(config, root, monkeypatch, capsys, "--gpu-reset", "bogus") == 2  # refused, nothing run
    set_tool_output(root, "nvidia-smi", reset_out, "-r -i 00000000:00:06.0", rc=3)  # the reset failed
    rc, failed = check(config, root, "h200-01", monkeypatch, capsys, "--gpu-reset", "00000000:00:06.0")
    assert {f["class"] for f in failed["faults"]} == {"gpu-reset-required", "ecc-uncorrectable", "gpu-lost"}
    assert failed["errors"]
    set_tool_output(root, "nvidia-smi", reset_out, "-r -i 00000000:00:06.0")
    set_tool_output(root, "nvidia-smi", node_check_h200(), "-q -x")  # after the reset: the real H200's state
    rc, reset = check(config, root, "h200-01", monkeypatch, capsys, "--gpu-reset", "00000000:00:06.0")
    assert rc == 1 and [f["class"] for f in reset["faults"]] == ["gpu-lost"]  # Xid 79 needs a reboot
    set_boot_id(root, "boot-2")  # a reboot: a new boot id, a fresh kernel log
    (root / "dev" / "kmsg").write_text((FIXTURES / "kmsg-healthy.txt").read_text())
    assert check(config, root, "h200-01", monkeypatch, capsys)[0] == 0


def test_a_gpu_reset_on_a_mig_node_remakes_its_instances(config, tmp_path, monkeypatch, capsys) -> None:
    """#46: a GPU reset takes a MIG GPU's instances with it (MIG guide: "the user or system
    administrator needs to recreate the desired MIG configurations if the GPU or system is
    reset"). On a node the mig_geometry role set up (its /etc/fleetspec/mig-parted.yaml) the
    check restarts fleetspec-mig.service after the reset; where that fails it says so."""
    root = make_node(tmp_path / "h200-01")
    reset_out = tmp_path / "reset.txt"
    reset_out.write_text("GPU 00000000:00:06.0 was successfully reset.\n")
    set_tool_output(root, "nvidia-smi", reset_out, "-r -i 00000000:00:06.0")
    calls = tmp_path / "systemctl.calls"
    systemctl = root / "bin" / "systemctl"  # a stand-in: records its arguments, exits with the rc file's code
    systemctl.write_text(f'#!/bin/sh\necho "$*" >> "{calls}"\nexit $(cat "{tmp_path / "systemctl.rc"}")\n')
    systemctl.chmod(0o755)
    (tmp_path / "systemctl.rc").write_text("0\n")
    rc, plain = check(config, root, "h200-01", monkeypatch, capsys, "--gpu-reset", "00000000:00:06.0")
    assert (rc, plain["errors"]) == (0, []) and not calls.exists()  # no MIG geometry here: nothing to remake
    (root / "etc" / "fleetspec").mkdir(parents=True)
    (root / "etc" / "fleetspec" / "mig-parted.yaml").write_text("version: v1\n")
    rc, mig = check(config, root, "h200-01", monkeypatch, capsys, "--gpu-reset", "00000000:00:06.0")
    assert (rc, mig["errors"]) == (0, []) and calls.read_text() == "restart fleetspec-mig.service\n"
    (tmp_path / "systemctl.rc").write_text("1\n")
    rc, failed = check(config, root, "h200-01", monkeypatch, capsys, "--gpu-reset", "00000000:00:06.0")
    assert any(e.startswith("MIG instances not remade after the GPU reset") for e in failed["errors"]), failed


def test_reset_when_idle_on_a_mig_node_remakes_the_instances_or_stays_drained(tmp_path, monkeypatch) -> None:
    """The row-remap reset of an idle, drained MIG node (reset_when_idle) remakes the instances
    after nvidia-smi -r; where that fails the node stays drained with the reason."""
    root = make_node(tmp_path / "h200-01")
    reset_out = tmp_path / "reset.txt"
    reset_out.write_text("GPU 00000000:00:06.0 was successfully reset.\n")
    set_tool_output(root, "nvidia-smi", reset_out, "-r -i 00000000:00:06.0")
    (root / "etc" / "fleetspec").mkdir(parents=True)
    (root / "etc" / "fleetspec" / "mig-parted.yaml").write_text("version: v1\n")
    rc_file = tmp_path / "systemctl.rc"
    systemctl = root / "bin" / "systemctl"
    systemctl.write_text(f'#!/bin/sh\nexit $(cat "{rc_file}")\n')
    systemctl.chmod(0o755)
    monkeypatch.setenv("PATH", f"{root / 'bin'}{os.pathsep}{os.environ['PATH']}")
    fault = {"class": "row-remap-pending", "scope": "device", "device": "GPU 0 00000000:00:06.0",
             "detail": "remapped rows pending", "source": "nvidia-smi", "action": "reset-when-idle"}
    result = {"node": "h200-01", "action": "reset-when-idle", "faults": [fault]}
    host = node_check.BoundedHost(str(root))
    rc_file.write_text("0\n")
    said = node_check.reset_when_idle(result, str(tmp_path / "none"), {}, host, ["IDLE", "DRAIN"], True)
    assert said.startswith("drained while idle and reset 00000000:00:06.0"), said
    rc_file.write_text("1\n")
    said = node_check.reset_when_idle(result, str(tmp_path / "none"), {}, host, ["IDLE", "DRAIN"], True)
    assert said.startswith("drained: ") and "MIG instances not remade after the GPU reset" in said, said


def h200_xml(tmp_path: Path, recovery: str, dram_unc: int = 0, remap_unc: int = 0, pending: str = "No") -> Path:
    """``nvidia-smi -q -x`` of the real H200 capture (tests/data/fixtures/h200-node) with its
    recovery action, volatile DRAM uncorrectable count and row-remapper state set: the elements
    and value forms the capture prints (``<gpu_recovery_action>None</gpu_recovery_action>``,
    ``<remapped_row_pending>No</remapped_row_pending>``); the action's words for a pending one
    follow the Xid 154 line, as nvidia-smi-q-recovery-reset.xml does."""
    from .nodes import H200_XML
    text = H200_XML.read_text()
    for element, value in (("gpu_recovery_action", recovery), ("remapped_row_unc", remap_unc),
                           ("remapped_row_pending", pending)):
        assert text.count(f"<{element}>") == 1
        text = re.sub(f"<{element}>[^<]*</{element}>", f"<{element}>{value}</{element}>", text)
    volatile = text.index("<volatile>")
    text = text[:volatile] + text[volatile:].replace("<dram_uncorrectable>0<", f"<dram_uncorrectable>{dram_unc}<", 1)
    path = tmp_path / f"h200-{recovery.replace(' ', '_')}-{dram_unc}-{remap_unc}-{pending}.xml"
    path.write_text(text)
    return path


def node_check_h200() -> Path:
    from .nodes import H200_XML
    return H200_XML


def main_rc(config: Path, root: Path, monkeypatch, capsys, *extra: str) -> int:
    monkeypatch.setenv("PATH", f"{root / 'bin'}{os.pathsep}{os.environ['PATH']}")
    rc = node_check.main(["--config", str(config), "--root", str(root), "--node", "h200-01", *extra])
    capsys.readouterr()
    return rc


def test_application_xids_are_bounded_in_the_state(config, tmp_path, monkeypatch, capsys) -> None:
    """#26 item 8: each run's application Xids (a new pid, a new address: a different line)
    were new latched entries, about 77 KB a day a node. Now one entry per class, GPU and Xid,
    with the number of lines and when the last one came."""
    root = make_node(tmp_path / "h200-01")
    assert check(config, root, "h200-01", monkeypatch, capsys)[0] == 0
    seq = 5000
    for run in range(40):
        with open(root / "dev" / "kmsg", "a") as log:
            for line in range(50):
                seq += 1
                for bus in ("3b", "5d"):
                    log.write(f"4,{seq},{5120341288 + seq},-;NVRM: Xid (PCI:0000:{bus}:00): 13, pid={20000 + run}, "
                              f"name=python3, Graphics SM Warp Exception on (GPC {line % 8}, TPC {run % 4}, SM 0): "
                              f"Out Of Range Address\n")
                    seq += 1
                log.write(f"4,{seq},{5120341288 + seq},-;NVRM: Xid (PCI:0000:3b:00): 31, pid={20000 + run}, "
                          f"name=python3, Ch 0000000{run % 8}, intr 00000000. MMU Fault: ENGINE GRAPHICS "
                          f"faulted @ 0x7f3a_{seq:08x}. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ\n")
        rc, result = check(config, root, "h200-01", monkeypatch, capsys)
        assert (rc, result["status"]) == (0, "degraded")
    state = root / "var" / "lib" / "fleetspec" / "health" / "state.json"
    latched = json.loads(state.read_text())["latched"]
    assert sorted((f["device"], f["detail"].split(":")[0], f["count"]) for f in latched) == [
        ("0000:3b:00", "Xid 13", 2000), ("0000:3b:00", "Xid 31", 2000), ("0000:5d:00", "Xid 13", 2000)]
    assert all("pid=20039" not in f["detail"] and "TPC 3" in f["detail"] for f in latched if "Xid 13" in f["detail"])
    assert all(isinstance(f["last_seen"], int) for f in latched)
    assert state.stat().st_size < 3000, state.stat().st_size  # 6000 lines, a few hundred bytes a fault
    assert len(result["faults"]) == 3


def test_the_latched_faults_have_a_hard_cap(monkeypatch) -> None:
    """Distinct keys (a newer driver's codes) are bounded too: the least recently seen go first."""
    monkeypatch.setattr(node_check, "MAX_LATCHED", 4)
    fresh = [{"class": "xid-unknown", "scope": "device", "device": "0000:3b:00", "detail": f"Xid {200 + i}: x",
              "source": "kernel-log"} for i in range(6)]
    kept = node_check.latch(fresh[:3], [], {}, 100.0)
    kept = node_check.latch(kept, fresh[3:], {}, 200.0)
    assert len(kept) == 4 and [f["detail"] for f in kept][-3:] == ["Xid 203: x", "Xid 204: x", "Xid 205: x"]


def test_checks_are_spread_before_they_talk_to_slurmctld(config, tmp_path, monkeypatch, capsys) -> None:
    """#26 item 8: slurmctld starts every node's check in the same second and each asked it
    at once. Each node now waits its own fixed share of the spread first: deterministic from
    its name, bounded by 10 s and a quarter of the interval, even over the fleet, and never
    past what the deadline leaves."""
    names = [f"gpu-{i:04d}" for i in range(2000)]
    waits = [node_check.jitter_s(n, 300) for n in names]
    assert waits == [node_check.jitter_s(n, 300) for n in names]  # the same every run
    assert all(0 <= w < 10 for w in waits)
    per_second = [sum(1 for w in waits if s <= w < s + 1) for s in range(10)]
    assert max(per_second) < 260 and min(per_second) > 140, per_second  # about 200 a second, not 2000 at once
    assert all(node_check.jitter_s(n, 8) < 2 for n in names[:50])  # a short interval: a quarter of it
    slept = []
    monkeypatch.setattr(node_check, "pause", slept.append)
    root = make_node(tmp_path / "h200-01")
    rc, result = check(config, root, "h200-01", monkeypatch, capsys, "--slurm", "--scontrol", str(tmp_path / "none"))
    assert slept == [pytest.approx(node_check.jitter_s("h200-01", json.loads(config.read_text())["interval"]))]
    assert result["spread_s"] == round(slept[0], 3)
    assert any(e.startswith("slurm: ") for e in result["errors"])  # then it asked slurmctld (absent here)
    # A deadline already spent leaves no wait: the drain is never late for the spread.
    host = node_check.BoundedHost(str(root), 0.0)
    assert node_check.spread("h200-01", {"interval": 300}, host) == 0.0
