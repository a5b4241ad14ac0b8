"""The classifier on tool output of real shape: each fault class gives its action."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetspec.node_side import faults as catalog
from fleetspec.node_side.classify import (
    amd_gpu_faults,
    infiniband_faults,
    kernel_log_faults,
    nvidia_gpu_faults,
    parse_amd_ecc_json,
    parse_gpu_health_xml,
    parse_kmsg,
    reason,
    verdict,
)

from .nodes import FIXTURES, H200_XML

ROOT = Path(__file__).resolve().parents[2]


def _messages(name: str) -> list[str]:
    return [msg for _, msg in parse_kmsg((FIXTURES / name).read_text())]


def _line(xid: int) -> str:
    found = next((m for m in _messages("kmsg-xids.txt") if f"): {xid}," in m and "NVRM: Xid" in m), None)
    # An Xid the captured log lacks: a line of the driver's form (nv-msg: "NVRM: Xid (PCI:...): N, ...").
    return found or f"NVRM: Xid (PCI:0000:4e:00): {xid}, pid=2187, name=python3, catalog test"


@pytest.mark.parametrize(
    ("xid", "fault_class", "action"),
    [
        (13, "xid-application", "none"),
        (31, "xid-application", "none"),
        (43, "xid-informational", "none"),  # the catalog: IGNORE
        (48, "ecc-uncorrectable", "quarantine-device"),
        (63, "row-remap-pending", "reset-when-idle"),  # NVIDIA: new work may run until the reset
        (64, "row-remap-failure", "replace"),
        (74, "nvlink-error", "drain-reboot"),
        (79, "gpu-lost", "drain-reboot"),
        (92, "ecc-correctable-rate", "none"),
        (94, "ecc-contained", "none"),
        (95, "ecc-uncorrectable", "quarantine-device"),
        (119, "gpu-reset-required", "quarantine-device"),
        (120, "gpu-reset-required", "quarantine-device"),
        (154, "node-reboot-required", "drain-reboot"),
        (8, "xid-application", "none"),
        (11, "xid-application", "none"),
        (140, "gpu-reset-required", "quarantine-device"),
        (143, "gpu-reset-required", "quarantine-device"),
        (158, "gpu-reset-required", "quarantine-device"),
        (109, "gpu-reset-required", "quarantine-device"),  # RESET_GPU: no longer an application fault
        (144, "gpu-reset-required", "quarantine-device"),  # GB200 NVLink 5 144-150: WORKFLOW_NVLINK5_ERR
        (149, "gpu-reset-required", "quarantine-device"),
        (150, "gpu-reset-required", "quarantine-device"),
        (46, "gpu-reset-required", "quarantine-device"),
        (121, "xid-informational", "none"),  # IGNORE: a corrected C2C error
        (2, "xid-unknown", "drain"),  # the catalog: unused, CONTACT_SUPPORT
        (54, "xid-unknown", "drain"),  # CHECK_MECHANICALS
        (167, "xid-unknown", "drain"),  # no immediate action named
        (200, "xid-unknown", "drain"),  # not in the catalog
    ],
)
def test_each_xid_gives_its_class_and_default_action(xid: int, fault_class: str, action: str) -> None:
    faults = kernel_log_faults([_line(xid)])
    assert [f["class"] for f in faults] == [fault_class]
    result = verdict("n1", faults)
    assert result["action"] == action
    assert f"Xid {xid}" in faults[0]["detail"]


def test_an_xid_the_catalog_does_not_map_drains_with_its_number_and_text() -> None:
    result = verdict("n1", kernel_log_faults([_line(200)]))
    assert result["status"] == "sick" and result["action"] == "drain"  # drained, never silently reported
    assert result["faults"][0]["detail"] == "Xid 200: catalog test"
    assert result["faults"][0]["device"] == "0000:4e:00"


def test_nvswitch_sxids_fatal_and_nonfatal() -> None:
    faults = kernel_log_faults(_messages("kmsg-xids.txt"))
    sxids = {f["class"]: f for f in faults if f["class"].startswith("nvswitch")}
    assert set(sxids) == {"nvswitch-fatal", "nvswitch-nonfatal"}
    assert sxids["nvswitch-fatal"]["device"] == "nvidia-nvswitch0 0000:05:00.0"
    assert "24007" in sxids["nvswitch-fatal"]["detail"]


def test_the_whole_log_drains_for_reboot_and_names_the_worst_fault() -> None:
    result = verdict("gpu-07", kernel_log_faults(_messages("kmsg-xids.txt")))
    assert result["status"] == "sick"
    assert result["action"] == "replace"  # Xid 64: the row remapper ran out of rows
    assert reason(result).startswith("replace row-remap-failure: 0000:5d:00 Xid 64: Row Remapper")


def test_healthy_kernel_log_and_healthy_h200_give_nothing() -> None:
    assert kernel_log_faults(_messages("kmsg-healthy.txt")) == []
    gpus = parse_gpu_health_xml(H200_XML.read_text())
    assert gpus is not None and len(gpus) == 1
    assert nvidia_gpu_faults(gpus, "h200") == []
    assert verdict("h200-01", []) == {"node": "h200-01", "status": "healthy", "action": "none", "faults": [],
                                      "errors": [], "superseded": []}


@pytest.mark.parametrize(
    ("fixture", "expected"),
    [
        ("nvidia-smi-q-remap-pending.xml", {("row-remap-pending", "reset-when-idle"),
                                            ("ecc-uncorrectable", "quarantine-device")}),
        ("nvidia-smi-q-remap-failure.xml", {("row-remap-failure", "replace")}),
        ("nvidia-smi-q-retired-pages.xml", {("page-retirement-pending", "drain-reboot")}),
        ("nvidia-smi-q-pcie-x8.xml", {("pcie-degraded", "drain")}),
    ],
)
def test_nvidia_smi_states(fixture: str, expected: set[tuple[str, str]]) -> None:
    gpus = parse_gpu_health_xml((FIXTURES / fixture).read_text())
    result = verdict("h200-01", nvidia_gpu_faults(gpus, "h200"))
    assert {(f["class"], f["action"]) for f in result["faults"]} == expected
    assert all(f["device"] == "GPU 0 00000000:00:06.0" for f in result["faults"])


def test_retired_pages_detail_counts_pages() -> None:
    gpus = parse_gpu_health_xml((FIXTURES / "nvidia-smi-q-retired-pages.xml").read_text())
    assert gpus[0]["retired_sbe"] == 3 and gpus[0]["retired_dbe"] == 1
    assert "4 retired" in nvidia_gpu_faults(gpus)[0]["detail"]


def test_pcie_generation_below_the_models() -> None:
    gpus = parse_gpu_health_xml(H200_XML.read_text())
    gpus[0]["pcie_gen_max"] = 4
    faults = nvidia_gpu_faults(gpus, "h200")
    assert [f["class"] for f in faults] == ["pcie-degraded"]
    assert "Gen4" in faults[0]["detail"] and "Gen5" in faults[0]["detail"]


def test_fabric_state_on_nvlink_fabric_gpus() -> None:
    gpus = parse_gpu_health_xml(H200_XML.read_text())
    assert gpus[0]["fabric_state"] is None  # N/A: not an NVLink-fabric GPU, not a fault
    gpus[0].update(fabric_state="In Progress", fabric_status="N/A")
    assert [f["class"] for f in nvidia_gpu_faults(gpus)] == ["fabric-unhealthy"]
    gpus[0].update(fabric_state="Completed", fabric_status="Success")
    assert nvidia_gpu_faults(gpus) == []


def test_not_nvidia_smi_xml_is_none() -> None:
    assert parse_gpu_health_xml("<html/>") is None
    assert parse_gpu_health_xml("garbage <") is None


def test_amd_smi_ecc() -> None:
    sick = parse_amd_ecc_json((FIXTURES / "amd-smi-metric-ecc.json").read_text())
    faults = amd_gpu_faults(sick)
    assert [(f["class"], f["device"]) for f in faults] == [("ecc-uncorrectable", "GPU 1")]
    assert verdict("mi300x-01", faults)["action"] == "quarantine-device"
    healthy = parse_amd_ecc_json((FIXTURES / "amd-smi-metric-ecc-healthy.json").read_text())
    assert len(healthy) == 2 and amd_gpu_faults(healthy) == []
    assert parse_amd_ecc_json("not json") is None


def _ib(state: str, phys: str, layer: str = "InfiniBand") -> list[dict]:
    return [{"device": "mlx5_0", "ports": [{"port": 1, "state": state, "phys_state": phys, "link_layer": layer}]}]


def test_infiniband_port_down_and_flapping() -> None:
    assert infiniband_faults(_ib("ACTIVE", "LinkUp"), {}, {}) == []
    down = infiniband_faults(_ib("DOWN", "Disabled"), {}, {})
    assert [(f["class"], f["device"]) for f in down] == [("ib-port-down", "mlx5_0/1")]
    assert verdict("n", down)["action"] == "drain"
    assert infiniband_faults(_ib("DOWN", "Disabled", "Ethernet"), {}, {}) == []  # RoCE: not ours
    flap = infiniband_faults(_ib("ACTIVE", "LinkUp"), {"mlx5_0/1": {"link_downed": 3}}, {"mlx5_0/1": {"link_downed": 1}})
    assert [(f["class"], f["detail"]) for f in flap] == [("ib-link-errors", "link_downed +2")]


def test_policy_overrides_the_default() -> None:
    faults = kernel_log_faults([_line(200)])
    assert verdict("n", faults)["action"] == "drain"  # an Xid the catalog does not map drains
    assert verdict("n", faults, {"xid-unknown": "none"})["action"] == "none"  # the policy may lower it


def test_the_xid_catalog_is_sourced_data() -> None:
    import datetime

    datetime.date.fromisoformat(catalog.XID_CATALOG_RETRIEVED)
    assert catalog.FAULTS["xid-unknown"].source == catalog.XID_CATALOG
    assert sorted(catalog.XID_CATALOG_ROWS) == list(range(1, 172))  # the page's rows, none skipped
    specific = {48, 63, 64, 79, 92, 94, 95}  # a more specific class, named in faults.py
    for xid, (mnemonic, bucket) in catalog.XID_CATALOG_ROWS.items():
        assert mnemonic.isupper() and (bucket == "" or bucket.isupper()), xid
        if xid not in specific:
            assert catalog.XID_CLASSES.get(xid) == catalog.XID_BUCKET_CLASSES.get(bucket), xid


def test_every_fault_class_has_a_known_default_and_a_source() -> None:
    for fault in catalog.FAULT_CLASSES:
        assert fault.default in catalog.ACTIONS
        assert fault.scope in ("device", "node")
        assert fault.source.startswith("https://")
    for cls in catalog.XID_CLASSES.values():
        assert cls in catalog.FAULTS
    produced = {c for classes in catalog.CHECKS.values() for c in classes}
    assert produced | set(catalog.CHECK_ITSELF) == set(catalog.FAULTS)  # every class comes from some check


def test_docs_list_every_fault_class_with_its_default_and_source() -> None:
    doc = (ROOT / "docs" / "health.md").read_text()
    rows = {line.split("|")[1].strip(" `"): line for line in doc.splitlines() if line.startswith("| `")}
    for fault in catalog.FAULT_CLASSES:
        row = rows.get(fault.id)
        assert row is not None, f"docs/health.md does not list {fault.id}"
        assert f"`{fault.default}`" in row
        for source in fault.source.split(" ; "):
            assert source in row


def test_xid_matching_is_anchored_to_the_driver_record() -> None:
    """Only the kernel's NVRM record counts: not a program's log line that quotes one, not a
    record a program wrote to /dev/kmsg (facility user), not an Xid inside another message."""
    record = "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
    kmsg = "\n".join([
        f"4,2001,5120341288,-;trainer: saw {record}",  # quoted by a kernel message about something else
        f"14,2002,5120341289,-;{record}",  # written by a program (LOG_USER)
        "12,2003,5120341290,-;nvidia-nvswitch0: SXid (PCI:0000:c3:00.0): 12028, Fatal, x",  # LOG_USER too
        "4,2004,5120341291,-;" + "9" * 5000 + " " + record,
    ])
    records = parse_kmsg(kmsg)
    assert [seq for seq, _ in records] == [2001, 2002, 2003, 2004]  # the cursor moves past them all
    assert kernel_log_faults(msg for _, msg in records) == []
    assert kernel_log_faults([f"[ 5120.341288] {record}", f"4,2005,5120341292,-;{record}".split(";", 1)[1]])
    assert kernel_log_faults([msg for _, msg in parse_kmsg(f"4,2006,1,-;{record}")])[0]["class"] == "gpu-lost"


@pytest.mark.parametrize(("fixture", "expected"), [
    ("nvidia-smi-q-gb200-fabric-healthy.xml", []),
    ("nvidia-smi-q-gb200-fabric-unhealthy.xml",
     [("fabric-unhealthy", "fabric summary: Unhealthy; fabric route unhealthy: True; fabric bandwidth: Degraded")]),
    ("nvidia-smi-q-gb200-fabric-limited.xml",
     [("fabric-degraded", "fabric summary: Limited Capacity; fabric bandwidth: Degraded")]),
])
def test_gb200_fabric_health_is_read(fixture: str, expected: list) -> None:
    """#26 item 8: the Fabric > Health block (R570+, GB200/GB300) was not read: a GPU whose
    routes were unhealthy in a Completed/Success fabric passed."""
    gpus = parse_gpu_health_xml((FIXTURES / fixture).read_text())
    faults = nvidia_gpu_faults(gpus, "gb200")
    assert [(f["class"], f["detail"]) for f in faults] == expected
    if expected:
        action = verdict("gb-1", faults)["action"]
        assert action == ("drain" if expected[0][0] == "fabric-unhealthy" else "none")


def test_fabric_health_values_nvidia_smi_does_not_report_are_not_faults() -> None:
    from fleetspec.node_side.classify import fabric_health

    assert fabric_health({k: "N/A" for k in ("summary", "bandwidth", "route_unhealthy")}) == ([], [])
    assert fabric_health({"summary": "Not Supported", "route_recovery_in_progress": "Not Supported"}) == ([], [])
    assert fabric_health({"incorrect_configuration": "Insufficient Nvlinks"}) == (
        ["fabric incorrect configuration: Insufficient Nvlinks"], [])
    assert fabric_health({"route_recovery_in_progress": "True"}) == ([], ["fabric route recovery in progress: True"])
    assert fabric_health({"summary": "Something New"}) == (["fabric summary: Something New"], [])  # refused


# --- MIG (#46): the driver attributes an Xid to a GPU instance (and compute instance) ---


def test_xids_on_mig_instances_are_read_and_name_their_instance() -> None:
    """Before #46 a line with GPU-I in its parenthesis was not read at all: an Xid 109 on a MIG
    GPU went unseen. Each instance's Xid is its own fault; its class is the Xid's."""
    counts: dict = {}
    faults = kernel_log_faults(_messages("kmsg-mig-xids.txt"), counts)
    by = {(f["device"], f["detail"].split(":", 1)[0]): f for f in faults}
    assert set(by) == {("0000:3b:00", "Xid 13 on GPU-I 1 GPU-CI 0"), ("0000:3b:00", "Xid 13 on GPU-I 2 GPU-CI 0"),
                       ("0000:3b:00", "Xid 94 on GPU-I 5"), ("0000:5d:00", "Xid 109 on GPU-I 3 GPU-CI 0"),
                       ("0000:5d:00", "Xid 95")}
    assert by[("0000:3b:00", "Xid 13 on GPU-I 1 GPU-CI 0")]["instance"] == {"gi": 1, "ci": 0}
    assert by[("0000:3b:00", "Xid 94 on GPU-I 5")]["instance"] == {"gi": 5}  # the driver named no compute instance
    assert "instance" not in by[("0000:5d:00", "Xid 95")]
    assert by[("0000:3b:00", "Xid 94 on GPU-I 5")]["detail"].endswith("Contained: CE User Channel (0x9). RST: No, D-RST: No")
    assert counts[("xid-application", "0000:3b:00", "Xid 13 on GPU-I 1 GPU-CI 0")] == 2  # two lines, one fault
    classes = {key: f["class"] for key, f in by.items()}
    assert classes[("0000:3b:00", "Xid 94 on GPU-I 5")] == "ecc-contained"
    assert classes[("0000:5d:00", "Xid 109 on GPU-I 3 GPU-CI 0")] == "gpu-reset-required"


def test_an_instance_xid_takes_its_classes_action_and_the_reason_names_the_instance() -> None:
    """NVIDIA documents no recovery narrower than the GPU: nvidia-smi -r resets the whole GPU,
    and its instances must be made again after it (MIG guide, Getting Started). So an Xid on one
    instance asks what it asks on a whole GPU: an application Xid or a contained ECC error
    nothing, a context-switch timeout (109, RESET_GPU) the GPU's quarantine, not a node drain."""
    result = verdict("h100-mig-01", kernel_log_faults(_messages("kmsg-mig-xids.txt")))
    actions = {f["detail"].split(":", 1)[0]: f["action"] for f in result["faults"]}
    assert actions["Xid 13 on GPU-I 1 GPU-CI 0"] == actions["Xid 13 on GPU-I 2 GPU-CI 0"] == "none"
    assert actions["Xid 94 on GPU-I 5"] == "none"
    assert actions["Xid 109 on GPU-I 3 GPU-CI 0"] == actions["Xid 95"] == "quarantine-device"
    assert result["action"] == "quarantine-device"
    assert reason(result).startswith("quarantine-device ecc-uncorrectable: 0000:5d:00 Xid 95")
    assert reason(result).endswith("(+1 more)")  # the Xid 109 on GPU-I 3
    alone = verdict("h100-mig-01", [f for f in kernel_log_faults(_messages("kmsg-mig-xids.txt"))
                                    if f["detail"].startswith("Xid 109")])
    assert reason(alone).startswith("quarantine-device gpu-reset-required: 0000:5d:00 Xid 109 on GPU-I 3 GPU-CI 0: "
                                    "Ch 00000008, errorString CTX SWITCH TIMEOUT")


def test_a_line_that_only_looks_like_an_attributed_xid_is_not_one() -> None:
    assert kernel_log_faults(["NVRM: Xid (PCI:0000:3b:00 GPU-I:xx): 13, x"]) == []
    assert kernel_log_faults(["NVRM: Xid (PCI:0000:3b:00 GPU-CI:00): 13, x"]) == []
    assert kernel_log_faults(["job said: NVRM: Xid (PCI:0000:3b:00 GPU-I:01): 79, x"]) == []
