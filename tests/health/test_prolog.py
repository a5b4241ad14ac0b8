"""The GPU prolog (node_side/prolog.py) on stand-in node roots; on a real slurmd in
tests/slurm/test_prolog_real.py."""

from __future__ import annotations

import os
import time
from pathlib import Path

from fleetspec.node_side import node_check, prolog
from fleetspec.node_side.node_check import BoundedHost
from tests.health.nodes import H200_XML, make_node, set_boot_id, set_tool_output

from .test_node_check import check, config  # noqa: F401  (the fixture)


def scontrol_recorder(tmp_path: Path) -> tuple[Path, Path]:
    calls = tmp_path / "scontrol.calls"
    script = tmp_path / "scontrol"
    script.write_text(f'#!/bin/sh\necho "$*" >> "{calls}"\n')
    script.chmod(0o755)
    return script, calls


def run(config: Path, root: Path, monkeypatch, tmp_path: Path, gpus: str = "0") -> tuple[int, str]:
    script, calls = scontrol_recorder(tmp_path)
    monkeypatch.setenv("PATH", f"{root / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("SLURM_JOB_GPUS", gpus)
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    rc = prolog.main(["--config", str(config), "--root", str(root), "--node", "h200-01", "--scontrol", str(script)])
    return rc, calls.read_text() if calls.exists() else ""


def test_a_healthy_node_passes_without_touching_slurm(config, tmp_path, monkeypatch) -> None:
    root = make_node(tmp_path / "h200-01")
    assert run(config, root, monkeypatch, tmp_path) == (0, "")


def test_a_fault_the_node_check_latched_fails_the_prolog_until_a_reboot(config, tmp_path, monkeypatch,
                                                                        capsys) -> None:
    root = make_node(tmp_path / "h200-01", kmsg="kmsg-xids.txt")
    assert check(config, root, "h200-01", monkeypatch, capsys)[0] == 1  # the periodic check latched Xids
    (root / "dev" / "kmsg").write_text("")  # the log lines are gone; the state keeps the faults
    rc, calls = run(config, root, monkeypatch, tmp_path)
    assert rc == 1
    assert calls.startswith("update NodeName=h200-01 State=DRAIN Reason=fleetspec-health: replace "), calls
    set_boot_id(root, "boot-2")  # a reboot ends what was latched, as in the node check
    (tmp_path / "scontrol.calls").unlink()
    assert run(config, root, monkeypatch, tmp_path) == (0, "")


def test_a_job_gpu_the_tool_does_not_list_fails_the_prolog(config, tmp_path, monkeypatch) -> None:
    root = make_node(tmp_path / "h200-01")
    rc, calls = run(config, root, monkeypatch, tmp_path, gpus="3")
    assert rc == 1 and "gpu-lost: GPU /dev/nvidia3 allocated to job 42 but not listed by nvidia-smi" in calls


def test_a_pending_row_remap_lets_the_job_start(config, tmp_path, monkeypatch) -> None:
    """NVIDIA: with a row remap pending "new workloads can be launched" (reset-when-idle)."""
    pending = tmp_path / "pending.xml"
    pending.write_text(H200_XML.read_text().replace("<remapped_row_pending>No<", "<remapped_row_pending>Yes<"))
    root = make_node(tmp_path / "h200-01", nvidia_xml=pending)
    assert run(config, root, monkeypatch, tmp_path) == (0, "")


def test_a_hung_nvidia_smi_is_called_once_and_the_prolog_ends_in_time(config, tmp_path, monkeypatch) -> None:
    root = make_node(tmp_path / "h200-01")
    calls = tmp_path / "nvidia-smi.calls"
    script = root / "bin" / "nvidia-smi"
    script.write_text(f'#!/bin/sh\necho "$*" >> "{calls}"\nexec sleep 60\n')
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{root / 'bin'}{os.pathsep}{os.environ['PATH']}")
    started = time.monotonic()
    result = prolog.run_prolog(node_check.load_config(str(config)), "h200-01", BoundedHost(str(root), 1.5),
                               {"SLURM_JOB_GPUS": "0"})
    assert time.monotonic() - started < 4
    assert calls.read_text().splitlines() == ["-q -x"]
    assert result["status"] == "sick" and [f["class"] for f in result["faults"]] == ["probe-failed"]
    assert prolog.PROLOG_DEADLINE_S < 600 / 10  # the whole prolog: a small part of PrologEpilogTimeout


def test_a_broken_config_lets_the_job_start(tmp_path, monkeypatch, capsys) -> None:
    bad = tmp_path / "health.json"
    bad.write_text("{")
    assert prolog.main(["--config", str(bad), "--root", str(tmp_path)]) == 0
    assert "the job starts unchecked" in capsys.readouterr().err


def test_the_prolog_reads_what_the_gpu_says_now(config, tmp_path, monkeypatch, capsys) -> None:
    """#43: the periodic check latched Xid 154 (Drain and Reset) while nvidia-smi said so too;
    the GPU was then reset and its recovery action reads None (the real H200's value) before the
    next periodic check: the latched line is history and the job starts."""
    from .test_node_check import h200_xml

    root = make_node(tmp_path / "h200-01", nvidia_xml=h200_xml(tmp_path, "Drain and Reset"))
    (root / "dev" / "kmsg").write_text("4,2001,6100412005,-;NVRM: Xid (PCI:0000:00:06): 154, GPU recovery action "
                                       "changed from 0x0 (None) to 0x4 (Drain and Reset)\n")
    rc, result = check(config, root, "h200-01", monkeypatch, capsys)
    assert rc == 1 and {f["class"] for f in result["faults"]} == {"gpu-drain-and-reset"}
    assert run(config, root, monkeypatch, tmp_path)[0] == 1  # still asked for: the job goes elsewhere
    (tmp_path / "scontrol.calls").unlink()
    set_tool_output(root, "nvidia-smi", H200_XML, "-q -x")  # reset: the action reads None, as on the real H200
    assert run(config, root, monkeypatch, tmp_path) == (0, "")
