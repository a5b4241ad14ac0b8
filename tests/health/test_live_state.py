"""#43: what the GPU says now overrules the worst thing the kernel log ever said.

Each case is a log of the driver's own line formats (fixtures/health/kmsg-*.txt) and, where the
GPU's state moved on, an ``nvidia-smi -q -x`` document modelled on the real H200 capture."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetspec.node_side import faults as catalog
from fleetspec.node_side.classify import (
    kernel_log_faults,
    nvidia_gpu_faults,
    parse_gpu_health_xml,
    parse_kmsg,
    reason,
    supersede,
    verdict,
)

from .nodes import FIXTURES, H200_XML, make_node
from .test_node_check import check, config, h200_xml  # noqa: F401  (config: the fixture)


def _faults(name: str) -> list[dict]:
    return kernel_log_faults([msg for _, msg in parse_kmsg((FIXTURES / name).read_text())])


# ---------------------------------------------------------------- (1) NVLink 5: the unit and severity decide


def test_a_nonfatal_nvlink5_event_is_reported_and_a_fatal_one_still_resets_the_gpu() -> None:
    """Xid 149 NETIR_BER_EVENT Nonfatal (both IntrInfo forms, before and after R575) and Xid 148
    NVLPW Nonfatal: the catalog's NVLink 5 table says IGNORE (investigate the link); the
    NETIR_LINK_EVT Fatal beside them is RESET_GPU: only that GPU is quarantined."""
    by_bus = {f["device"]: f["class"] for f in _faults("kmsg-nvlink5-gb200.txt")}
    assert by_bus == {"0008:01:00": "nvlink5-nonfatal", "0018:01:00": "nvlink5-nonfatal",
                      "0019:01:00": "nvlink5-nonfatal", "0009:01:00": "gpu-reset-required"}
    result = verdict("gb200-07", _faults("kmsg-nvlink5-gb200.txt"))
    assert result["action"] == "quarantine-device"
    assert [f["device"] for f in result["faults"] if f["action"] != "none"] == ["0009:01:00"]
    assert reason(result).startswith("quarantine-device gpu-reset-required: 0009:01:00 Xid 149: NETIR_LINK_EVT Fatal")


@pytest.mark.parametrize(
    ("line", "fault_class"),
    [
        ("149, NETIR_BER_EVENT Nonfatal XC0 i0 Link 07 (0x00000013 0x00000000 0x00000000 0x00000000)",
         "nvlink5-nonfatal"),
        ("149, NETIR_LINK_EVT Fatal XC0 i0 Link 07 (0x00000011 0x00000000 0x00000000 0x00000000)",
         "gpu-reset-required"),
        ("149, NETIR/NETIR_INT Fatal XC0 i0 Link 00 (0x00000018 0x00000000 0x00000000 0x00000000)",
         "gpu-reset-required"),
        ("149, NETIR_MFDE_EVENT Fatal XC0 i0 Link 00 (0x00000014 0x00000001 0x00000000 0x00000000)",
         "gpu-reset-required"),
        ("145, RLW_RXPIPE Nonfatal XC0 i0 Link 02 (0x00000006 0x00000001 0x00000000 0x00000000)",
         "gpu-reset-required"),  # a Non-fatal* row whose second decode is RESET_GPU: the stronger
        ("145, RLW_REMAP Nonfatal XC0 i0 Link 02 (0x00000004 0x00000001 0x00000000 0x00000000)",
         "xid-informational"),  # XID_154_EVAL: the Xid 154 beside it carries the action
        ("149, NETIR_NEW_UNIT Nonfatal XC0 i0 Link 07 (0x0000007f 0x00000000 0x00000000 0x00000000)",
         "gpu-reset-required"),  # a unit the table does not name: refused, the family's reset
        ("149, pid='<unknown>', name=<unknown>, NETIR Link Event: link 3 (0x0)",
         "gpu-reset-required"),  # no unit and severity to decode by
    ],
)
def test_each_nvlink5_line_is_decoded_by_the_catalogs_table(line: str, fault_class: str) -> None:
    faults = kernel_log_faults([f"NVRM: Xid (PCI:0008:01:00): {line}"])
    assert [f["class"] for f in faults] == [fault_class]


def test_the_nvlink5_units_are_data_with_their_source() -> None:
    assert sorted(catalog.NVLINK5_UNITS) == list(range(144, 151))
    assert all(catalog.XID_CATALOG_ROWS[x][1] == "WORKFLOW_NVLINK5_ERR" for x in catalog.NVLINK5_UNITS)
    assert "NETIR_BER_EVENT" in catalog.NVLINK5_UNITS[149]
    assert set(catalog.NVLINK5_BUCKET_CLASSES.values()) <= set(catalog.FAULTS)
    assert catalog.FAULTS["nvlink5-nonfatal"].default == "none"
    assert catalog.FAULTS["nvlink5-nonfatal"].source == catalog.XID_CATALOG


# ---------------------------------------------------------------- (2) Xid 154: the newest transition wins


def test_the_newest_recovery_action_per_gpu_is_the_one_acted_on() -> None:
    """0x0 -> 0x4 (Drain and Reset) -> 0x1 (GPU Reset Required) on one GPU: GPU_RESET, a GPU
    quarantine (NVML: terminate the GPU's processes, nvidia-smi -r); 0x0 -> 0x4 on another:
    DRAIN_AND_RESET ("Drain P2P and Reset Gpu"). Neither is a node reboot."""
    faults = _faults("kmsg-xid154-sequence.txt")
    assert {(f["device"], f["class"]) for f in faults} == {("0000:00:06", "gpu-reset-required"),
                                                          ("0000:9a:00", "gpu-drain-and-reset")}
    assert "to 0x1 (GPU Reset Required)" in next(f["detail"] for f in faults if f["device"] == "0000:00:06")
    result = verdict("h200-01", faults)
    assert result["action"] == "quarantine-device"
    assert {f["action"] for f in result["faults"]} == {"quarantine-device"}


@pytest.mark.parametrize(
    ("to", "fault_class", "action"),
    [
        ("0x0 (None)", "xid-informational", "none"),
        ("0x1 (GPU Reset Required)", "gpu-reset-required", "quarantine-device"),
        ("0x2 (Node Reboot Required)", "node-reboot-required", "drain-reboot"),
        ("0x3 (Drain P2P)", "gpu-drain-p2p", "drain"),
        ("0x4 (Drain and Reset)", "gpu-drain-and-reset", "quarantine-device"),
        ("0x5 (Recover IMEX Domain)", "xid-unknown", "drain"),  # NVML releases disagree on 5 and up
    ],
)
def test_each_recovery_action_gives_what_nvml_says_it_means(to: str, fault_class: str, action: str) -> None:
    faults = kernel_log_faults([f"NVRM: Xid (PCI:0000:00:06): 154, GPU recovery action changed from 0x0 (None) to {to}"])
    assert [f["class"] for f in faults] == [fault_class]
    assert verdict("n1", faults)["action"] == action


def test_the_live_recovery_action_overrules_the_log(config, tmp_path, monkeypatch, capsys) -> None:
    """The log's newest Xid 154 says Drain and Reset, nvidia-smi's gpu_recovery_action says GPU
    Reset Required now: the live action acts, the line is kept as evidence; where nvidia-smi says
    None the line is history."""
    root = make_node(tmp_path / "h200-01", kmsg="kmsg-xid154-sequence.txt",
                     nvidia_xml=h200_xml(tmp_path, "GPU Reset Required"))
    (root / "dev" / "kmsg").write_text("\n".join((FIXTURES / "kmsg-xid154-sequence.txt").read_text()
                                                 .splitlines()[:2]) + "\n")  # 0x0 -> 0x4 only
    rc, result = check(config, root, "h200-01", monkeypatch, capsys)
    assert rc == 1 and result["action"] == "quarantine-device"
    assert [(f["class"], f["source"]) for f in result["faults"]] == [("gpu-reset-required", "nvidia-smi")]
    assert [f["class"] for f in result["superseded"]] == ["gpu-drain-and-reset"]
    assert "GPU Reset Required" in result["superseded"][0]["by"]


# ---------------------------------------------------------------- (3) a remap that already happened


def test_a_row_remap_the_gpu_already_applied_is_history(config, tmp_path, monkeypatch, capsys) -> None:
    """Xid 63 'marked for remapping, reset gpu to activate' earlier in this boot; nvidia-smi now
    says pending No with one uncorrectable remap active (the GPU was reset): healthy, the line
    kept as evidence with the reading that overrules it."""
    root = make_node(tmp_path / "h200-01", kmsg="kmsg-row-remap-reset.txt",
                     nvidia_xml=FIXTURES / "nvidia-smi-q-remap-after-reset.xml")
    rc, result = check(config, root, "h200-01", monkeypatch, capsys)
    assert (rc, result["status"], result["action"], result["faults"]) == (0, "healthy", "none", [])
    [evidence] = result["superseded"]
    assert evidence["class"] == "row-remap-pending" and evidence["detail"].startswith("Xid 63: Row Remapper")
    assert "pending No" in evidence["by"] and "1 uncorrectable remap(s) active" in evidence["by"]


def test_a_remap_still_pending_acts_once_through_the_live_reading(config, tmp_path, monkeypatch,
                                                                   capsys) -> None:
    root = make_node(tmp_path / "h200-01", kmsg="kmsg-row-remap-reset.txt",
                     nvidia_xml=h200_xml(tmp_path, "None", remap_unc=1, pending="Yes"))
    rc, result = check(config, root, "h200-01", monkeypatch, capsys)
    assert result["action"] == "reset-when-idle"
    assert [(f["class"], f["source"]) for f in result["faults"]] == [("row-remap-pending", "nvidia-smi")]
    assert [f["detail"][:6] for f in result["superseded"]] == ["Xid 63"]


def test_where_nvidia_smi_does_not_answer_the_log_decides(config, tmp_path, monkeypatch, capsys) -> None:
    root = make_node(tmp_path / "h200-01", kmsg="kmsg-row-remap-reset.txt", nvidia_xml=None)
    rc, result = check(config, root, "h200-01", monkeypatch, capsys)
    assert {(f["class"], f["source"]) for f in result["faults"]} == {("row-remap-pending", "kernel-log"),
                                                                     ("probe-failed", "nvidia-smi")}
    assert result["superseded"] == []


# ---------------------------------------------------------------- the rule, pure


def test_only_a_reading_of_the_same_gpu_supersedes() -> None:
    gpus = parse_gpu_health_xml((FIXTURES / "nvidia-smi-q-remap-after-reset.xml").read_text())
    log = _faults("kmsg-row-remap-reset.txt") + kernel_log_faults(
        ["NVRM: Xid (PCI:0000:5d:00): 63, pid='<unknown>', name=<unknown>, Row Remapper: New row "
         "(0x00000000000b2f40) marked for remapping, reset gpu to activate.",
         "NVRM: Xid (PCI:0000:00:06): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."])
    acting, superseded = supersede(log, gpus)
    assert [(f["device"], f["detail"][:6]) for f in acting] == [("0000:5d:00", "Xid 63"), ("0000:00:06", "Xid 79")]
    assert [(f["device"], f["detail"][:6]) for f in superseded] == [("0000:00:06", "Xid 63")]
    assert supersede(log, []) == (log, [])  # nvidia-smi did not answer: the log decides


def test_an_uncorrectable_ecc_line_before_the_running_driver_is_history() -> None:
    """Xid 48 latched, nvidia-smi's volatile uncorrectable counts (since the driver loaded) are 0."""
    dbe = kernel_log_faults(["NVRM: Xid (PCI:0000:00:06): 48, pid='<unknown>', name=<unknown>, An uncorrectable "
                             "double bit error (DBE) has been detected on GPU in the framebuffer at partition 6, "
                             "subpartition 0."])
    healthy = parse_gpu_health_xml(H200_XML.read_text())
    assert supersede(dbe, healthy)[0] == []
    counted = parse_gpu_health_xml((FIXTURES / "nvidia-smi-q-remap-pending.xml").read_text())
    assert supersede(dbe, counted)[0] == dbe  # counted now: the line and the live count both stand
    assert {f["class"] for f in nvidia_gpu_faults(counted)} >= {"ecc-uncorrectable"}


def test_every_live_reading_is_for_an_xid_the_check_latches(tmp_path: Path) -> None:
    for xid, reading in catalog.LIVE_READINGS.items():
        assert reading in ("row-remapper", "recovery-action", "volatile-ecc"), xid
        assert xid in catalog.XID_CATALOG_ROWS
