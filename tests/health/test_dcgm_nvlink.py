"""DCGM diagnostics (``dcgmi diag -r N -j``) and NVLink link state (``nvidia-smi nvlink
--status``): parsed from output of the real shape, classed by the vendor's own severity,
and run by the node check where the tools are."""

from __future__ import annotations

import json
import os
from pathlib import Path

import jsonschema
import pytest

from fleetspec.node_side import node_check
from fleetspec.node_side.classify import (
    dcgm_diag_faults,
    nvlink_counter_faults,
    nvlink_counter_state,
    nvlink_faults,
    parse_dcgm_diag_json,
    parse_dcgmi_discovery,
    parse_nvlink_errors,
    parse_nvlink_status,
    verdict,
)
from fleetspec.node_side.faults import CLEAR_AFTER
from fleetspec.pipeline import compile_text
from fleetspec.render.health import node_config

from .nodes import FIXTURES, make_node, set_tool_output
from .test_node_check import SPEC

SCHEMA = json.loads((FIXTURES / "dcgm_diag_schema.json").read_text())


@pytest.mark.parametrize("name", ["dcgmi-diag-r1-fail.json", "dcgmi-diag-r1-pass.json"])
def test_diag_fixtures_follow_dcgms_own_schema(name: str) -> None:
    jsonschema.Draft7Validator(SCHEMA).validate(json.loads((FIXTURES / name).read_text()))


def test_a_failed_diagnostic_is_classed_by_its_dcgm_severity() -> None:
    diag = parse_dcgm_diag_json((FIXTURES / "dcgmi-diag-r1-fail.json").read_text())
    faults, errors = dcgm_diag_faults(diag, 1)
    assert errors == []
    (fault,) = faults
    assert (fault["class"], fault["device"], fault["scope"]) == ("dcgm-diag-isolate", "GPU 3", "device")
    assert "row remappings are pending" in fault["detail"] and "(DCGM error 85)" in fault["detail"]
    assert verdict("n", faults)["action"] == "quarantine-device"


def test_severities_reset_and_monitor() -> None:
    doc = json.loads((FIXTURES / "dcgmi-diag-r1-fail.json").read_text())
    result = doc["DCGM Diagnostic"]["test_categories"][0]["tests"][0]["results"][3]
    result["warnings"][0]["error_severity"] = 6  # DCGM_ERROR_RESET: drain and reset GPU
    faults, _ = dcgm_diag_faults(doc["DCGM Diagnostic"], 2)
    assert faults[0]["class"] == "dcgm-diag-reset" and verdict("n", faults)["action"] == "drain"
    result["warnings"][0]["error_severity"] = 1  # DCGM_ERROR_MONITOR: can run work
    faults, _ = dcgm_diag_faults(doc["DCGM Diagnostic"], 2)
    assert faults[0]["class"] == "dcgm-diag-monitor" and verdict("n", faults)["status"] == "degraded"


def test_a_passing_diagnostic_and_a_runtime_error() -> None:
    diag = parse_dcgm_diag_json((FIXTURES / "dcgmi-diag-r1-pass.json").read_text())
    assert dcgm_diag_faults(diag, 1) == ([], [])
    faults, errors = dcgm_diag_faults({"runtime_error": "Couldn't connect to nv-hostengine"}, 3)
    assert faults == [] and errors == ["dcgmi diag -r 3: Couldn't connect to nv-hostengine"]
    assert parse_dcgm_diag_json("Error: unable to establish a connection to the specified host") is None


def test_nvlink_status() -> None:
    healthy = parse_nvlink_status((FIXTURES / "nvidia-smi-nvlink-status.txt").read_text())
    assert len(healthy) == 8 and all(len(g["links"]) == 18 for g in healthy.values())
    assert nvlink_faults(healthy) == []
    down = parse_nvlink_status((FIXTURES / "nvidia-smi-nvlink-status-down.txt").read_text())
    (fault,) = nvlink_faults(down)
    assert (fault["class"], fault["device"]) == ("nvlink-down", "GPU 3")
    assert fault["detail"] == "GPU 3 NVLink 7 inactive (17 of 18 links up)"
    assert verdict("n", [fault])["action"] == "quarantine-device"


def test_a_node_without_nvlink_has_no_nvlink_fault() -> None:
    pcie = "GPU 0: NVIDIA H100 PCIe (UUID: GPU-a)\n\t Link 0: <inactive>\n\t Link 1: <inactive>\n"
    assert nvlink_faults(parse_nvlink_status(pcie)) == []
    assert parse_nvlink_status("") is None


@pytest.fixture
def config(tmp_path: Path) -> Path:
    text = SPEC.replace("health: {interval: 60}", "health: {interval: 60, dcgm_level: 2, checks: "
                        "[kernel-log, gpu-memory, gpu-count, nvlink, dcgm]}")
    compiled = compile_text(text)
    assert compiled.valid, [f.message for f in compiled.findings]
    path = tmp_path / "health.json"
    path.write_text(json.dumps(node_config(compiled.fleet)))
    return path


def test_the_periodic_check_runs_dcgm_level_1_and_reads_nvlink(config, tmp_path, monkeypatch, capsys) -> None:
    """The spec asks for level 2; the periodic check runs level 1 (levels 2+ take minutes:
    ``--dcgm-level 2`` from a prolog/epilog or a timer, tests/health/test_node_check.py)."""
    root = make_node(tmp_path / "h200-01")
    set_tool_output(root, "nvidia-smi", FIXTURES / "nvidia-smi-nvlink-status-down.txt", "nvlink --status")
    # dcgmi exits non-zero when a test fails and still prints its JSON
    set_tool_output(root, "dcgmi", FIXTURES / "dcgmi-diag-r1-fail.json", "diag -r 1 -j", rc=226)
    monkeypatch.setenv("PATH", f"{root / 'bin'}{os.pathsep}{os.environ['PATH']}")
    rc = node_check.main(["--config", str(config), "--root", str(root), "--node", "h200-01", "--format", "json"])
    result = json.loads(capsys.readouterr().out)
    assert rc == 1 and result["action"] == "quarantine-device"
    assert {(f["class"], f["device"]) for f in result["faults"]} == {("nvlink-down", "GPU 3"),
                                                                     ("dcgm-diag-isolate", "GPU 3")}
    assert result["errors"] == []


def test_nvlink_faults_name_the_gpu_by_pci_address_when_nvidia_smi_knows_it(config, tmp_path, monkeypatch,
                                                                            capsys) -> None:
    """The fixture H200 (nvidia-smi -q -x: UUID GPU-00000000-1111-2222-3333-444444444444 at
    00000000:00:06.0) with its link 2 down: the fault names the address, as kernel-log faults
    do, so a DRA pool can taint that one device."""
    root = make_node(tmp_path / "h200-01")
    links = "GPU 0: NVIDIA H200 (UUID: GPU-00000000-1111-2222-3333-444444444444)\n" + "".join(
        f"\t Link {n}: " + ("<inactive>" if n == 2 else "26.562 GB/s") + "\n" for n in range(18))
    status = tmp_path / "nvlink.txt"
    status.write_text(links)
    set_tool_output(root, "nvidia-smi", status, "nvlink --status")
    monkeypatch.setenv("PATH", f"{root / 'bin'}{os.pathsep}{os.environ['PATH']}")
    node_check.main(["--config", str(config), "--root", str(root), "--node", "h200-01", "--format", "json"])
    (fault,) = [f for f in json.loads(capsys.readouterr().out)["faults"] if f["class"] == "nvlink-down"]
    assert fault["device"] == "00000000:00:06.0" and fault["detail"].startswith("GPU 0 NVLink 2 inactive")


def test_no_dcgm_installed_no_diagnostic(config, tmp_path, monkeypatch, capsys) -> None:
    root = make_node(tmp_path / "h200-01")
    set_tool_output(root, "nvidia-smi", FIXTURES / "nvidia-smi-nvlink-status.txt", "nvlink --status")
    monkeypatch.setenv("PATH", f"{root / 'bin'}{os.pathsep}/usr/bin{os.pathsep}/bin")
    if any(Path(d, "dcgmi").exists() for d in ("/usr/bin", "/bin", "/usr/sbin", "/usr/local/bin")):
        pytest.skip("this machine has DCGM installed")
    rc = node_check.main(["--config", str(config), "--root", str(root), "--node", "h200-01", "--format", "json"])
    result = json.loads(capsys.readouterr().out)
    assert (rc, result["status"], result["errors"]) == (0, "healthy", [])


def test_dcgm_level_is_checked_in_the_spec() -> None:
    result = compile_text(SPEC.replace("health: {interval: 60}", "health: {interval: 60, dcgm_level: 5}"))
    assert not result.valid and any("dcgm_level" in ".".join(map(str, f.path)) or "dcgm_level" in f.message
                                    for f in result.findings)


# The DCGM user guide's 2-GPU example (Feature Overview, "Groups"): a 4-digit domain and a
# "+===" rule under the header; then a CPU table (DCGM 4 lists CPUs too) that must not count.
GUIDE_EXAMPLE = """2 GPUs found.
+--------+-------------------------------------------------------------------+
| GPU ID | Device Information                                                |
+========+===================================================================+
| 0      | Name: Tesla K80                                                   |
|        | PCI Bus ID: 0000:07:00.0                                          |
|        | Device UUID: GPU-000000000000000000000000000000000000             |
+--------+-------------------------------------------------------------------+
| 1      | Name: Tesla K80 (last known)                                      |
|        | PCI Bus ID: 0000:08:00.0 (last known)                             |
|        | Status: Detached                                                  |
|        | Device UUID: GPU-111111111111111111111111111111111111             |
+--------+-------------------------------------------------------------------+
1 CPU found.
+--------+-------------------------------------------------------------------+
| CPU ID | Device Information                                                |
+--------+-------------------------------------------------------------------+
| 0      | Name: Grace TH500                                                 |
+--------+-------------------------------------------------------------------+
"""


def test_dcgmi_discovery_gives_each_dcgm_gpu_id_its_pci_bus_id() -> None:
    gpus = parse_dcgmi_discovery((FIXTURES / "dcgmi-discovery-l.txt").read_text())
    assert sorted(gpus) == list(range(8))
    assert gpus[3] == {"name": "NVIDIA H200", "bus_id": "00000000:4E:00.0",
                       "uuid": "GPU-5c1f9a3e-7b2d-4e8a-9f61-0a2b3c4d5e03"}
    assert parse_dcgmi_discovery(GUIDE_EXAMPLE) == {
        0: {"name": "Tesla K80", "bus_id": "0000:07:00.0", "uuid": "GPU-000000000000000000000000000000000000"},
        1: {"name": "Tesla K80", "bus_id": "0000:08:00.0", "uuid": "GPU-111111111111111111111111111111111111"}}
    assert parse_dcgmi_discovery("Error: unable to establish a connection to the specified host engine.") == {}


def test_dcgm_faults_name_the_gpu_by_pci_bus_id(config, tmp_path, monkeypatch, capsys) -> None:
    """DCGM's GPU 3 is the GPU at 00000000:4E:00.0 (dcgmi discovery -l): the fault says so,
    as kernel-log and nvidia-smi faults name their GPU, so a DRA pool taints that one device."""
    root = make_node(tmp_path / "h200-01")
    set_tool_output(root, "dcgmi", FIXTURES / "dcgmi-diag-r1-fail.json", "diag -r 1 -j", rc=226)
    set_tool_output(root, "dcgmi", FIXTURES / "dcgmi-discovery-l.txt", "discovery -l")
    monkeypatch.setenv("PATH", f"{root / 'bin'}{os.pathsep}{os.environ['PATH']}")
    rc = node_check.main(["--config", str(config), "--root", str(root), "--node", "h200-01", "--format", "json"])
    result = json.loads(capsys.readouterr().out)
    (fault,) = [f for f in result["faults"] if f["source"] == "dcgmi diag"]
    assert rc == 1 and (fault["class"], fault["device"], fault["action"]) == (
        "dcgm-diag-isolate", "GPU 3 00000000:4E:00.0", "quarantine-device")
    diag = parse_dcgm_diag_json((FIXTURES / "dcgmi-diag-r1-fail.json").read_text())
    assert dcgm_diag_faults(diag, 1, {3: "00000000:4E:00.0"})[0][0]["device"] == "GPU 3 00000000:4E:00.0"


def test_nvlink_error_counters_are_judged_by_their_rise_with_dcgms_limits() -> None:
    before = parse_nvlink_errors((FIXTURES / "nvidia-smi-nvlink-errors.txt").read_text())
    after = parse_nvlink_errors((FIXTURES / "nvidia-smi-nvlink-errors-rising.txt").read_text())
    assert sorted(before) == list(range(8)) and all(len(g["links"]) == 18 for g in before.values())
    assert before[5]["links"][2] == {"replay": 0, "recovery": 0, "crc": 12}
    assert before[3]["uuid"] == "GPU-5c1f9a3e-7b2d-4e8a-9f61-0a2b3c4d5e03"
    # The first reading has nothing to compare with: old counts are history, not a fault.
    assert nvlink_counter_faults(before, {}, None) == []
    assert nvlink_counter_faults(before, nvlink_counter_state(before), 60.0) == []
    # A minute later: GPU 3 link 7 has 4 new replay and 1 new recovery error (DCGM fails any);
    # GPU 5 link 2 has 40 new CRC errors, 0.7/s (DCGM warns below 100/s).
    faults = nvlink_counter_faults(after, nvlink_counter_state(before), 60.0,
                                   {"GPU-5c1f9a3e-7b2d-4e8a-9f61-0a2b3c4d5e03": "00000000:4E:00.0"})
    assert [(f["class"], f["device"], f["detail"]) for f in faults] == [
        ("nvlink-link-errors", "00000000:4E:00.0", "GPU 3 NVLink 7: 1 new recovery errors, 4 new replay errors"),
        ("nvlink-crc-errors", "GPU 5", "GPU 5 NVLink 2: 40 new CRC errors (0.7/s)")]
    result = verdict("n", faults)
    assert (result["status"], result["action"]) == ("sick", "quarantine-device")
    # The same 40 CRC errors within 0.2 s: 200/s, at DCGM's failing rate.
    (fast,) = [f for f in nvlink_counter_faults(after, nvlink_counter_state(before), 0.2) if "NVLink 2" in f["detail"]]
    assert fast["class"] == "nvlink-link-errors" and "40 new CRC errors (200/s)" in fast["detail"]
    # A counter below its last reading was reset (nvidia-smi nvlink -r): its value is the rise.
    reset = nvlink_counter_faults(before, nvlink_counter_state(after), 60.0)
    assert [(f["class"], f["device"]) for f in reset] == [("nvlink-crc-errors", "GPU 5")]


def test_nvlink5_counters_are_judged_as_dcgm_judges_them_on_blackwell() -> None:
    """A GB200 tray's nvidia-smi prints NVLink 5 counters, no replay/recovery/CRC ones: a new
    failed link recovery fails the link, a new successful one is reported (DCGM's Blackwell
    health watch), FEC bucket 0 (corrected codewords) growing is normal. Every counter keeps
    its own name (`Rx Errors` and `Rx remote Errors` are two counters)."""
    before = parse_nvlink_errors((FIXTURES / "nvidia-smi-nvlink-errors-gb200.txt").read_text())
    after = parse_nvlink_errors((FIXTURES / "nvidia-smi-nvlink-errors-gb200-rising.txt").read_text())
    assert sorted(before) == [0, 1, 2, 3] and all(len(g["links"]) == 18 for g in before.values())
    link = before[0]["links"][0]
    assert len(link) == 28 and link["rx"] == 0 and link["rx-remote"] == 0 and link["rx-general"] == 0
    assert link["link-recovery-failed-events"] == 0 and link["fec-errors-0"] == 9871203455
    assert nvlink_counter_faults(before, nvlink_counter_state(before), 60.0) == []
    faults = nvlink_counter_faults(after, nvlink_counter_state(before), 60.0,
                                   {"GPU-8a3d6e10-4c2b-4f7a-9e15-7b0c1d2e3f02": "00000018:01:00.0"})
    assert [(f["class"], f["device"], f["detail"]) for f in faults] == [
        ("nvlink-link-recovered", "GPU 0", "GPU 0 NVLink 11: 1 link recoveries (the link went down and came back)"),
        ("nvlink-link-errors", "00000018:01:00.0", "GPU 2 NVLink 5: 1 new failed link recoveries")]
    assert verdict("gb-1", faults)["action"] == "quarantine-device"
    assert [f["action"] for f in verdict("gb-1", faults[:1])["faults"]] == ["none"]


def test_the_node_check_reads_nvlink_error_counters_between_runs(config, tmp_path, monkeypatch, capsys) -> None:
    root = make_node(tmp_path / "h200-01")
    set_tool_output(root, "nvidia-smi", FIXTURES / "nvidia-smi-nvlink-status.txt", "nvlink --status")
    set_tool_output(root, "nvidia-smi", FIXTURES / "nvidia-smi-nvlink-errors.txt", "nvlink -e")
    monkeypatch.setenv("PATH", f"{root / 'bin'}{os.pathsep}{os.environ['PATH']}")
    args = ["--config", str(config), "--root", str(root), "--node", "h200-01", "--format", "json"]

    def run(*extra: str) -> tuple[int, dict]:
        rc = node_check.main(args + list(extra))
        return rc, json.loads(capsys.readouterr().out)

    assert run()[1]["status"] == "healthy"  # the first reading is recorded
    state_path = root / node_check.STATE_FILE.lstrip("/")
    state = json.loads(state_path.read_text())
    assert state["nvlink"]["counters"]["5/2/crc"] == 12
    state["nvlink"]["time"] -= 60  # a minute passes
    state_path.write_text(json.dumps(state))
    set_tool_output(root, "nvidia-smi", FIXTURES / "nvidia-smi-nvlink-errors-rising.txt", "nvlink -e")
    rc, looked = run("--read-only")  # fleetspec health's look: sees the rise, keeps the baseline
    assert rc == 1 and {(f["class"], f["device"]) for f in looked["faults"]} == {
        ("nvlink-link-errors", "GPU 3"), ("nvlink-crc-errors", "GPU 5")}
    rc, checked = run()
    assert rc == 1 and checked["faults"] == looked["faults"] and checked["action"] == "quarantine-device"
    rc, again = run()  # no new errors since: held until CLEAR_AFTER clean checks in a row (#26 item 5)
    assert rc == 1 and [f["detail"] for f in again["faults"]] == [
        f"GPU 3 NVLink 7: 1 new recovery errors, 4 new replay errors (held: 1 of {CLEAR_AFTER} clean checks "
        "before it clears)"]
    for _ in range(CLEAR_AFTER - 1):
        rc, again = run()
    assert (rc, again["status"]) == (0, "healthy")


def test_odd_tool_output_is_no_traceback() -> None:
    """Output no parser expected (another DCGM version's JSON, a speed nvidia-smi never
    printed) gives no fault and no exception: an exception ends the node check."""
    assert parse_nvlink_status("GPU 0: NVIDIA H200 (UUID: GPU-x)\n\t Link 0: 26.56. GB/s\n"
                               "\t Link 1: 26.562 GB/s\n") == {0: {"uuid": "GPU-x", "links": {1: "active"}}}
    for doc in ({"test_categories": "x"}, {"test_categories": [{"tests": ["x"]}]},
                {"test_categories": [{"tests": [{"results": [1, None]}]}]},
                {"test_categories": [{"tests": [{"name": "memory", "results": [
                    {"status": "Fail", "entity_id": 0, "warnings": "not a list"}]}]}]}):
        faults, errors = dcgm_diag_faults(doc, 1)
        assert errors == [] and [f["class"] for f in faults] in ([], ["dcgm-diag-monitor"]), doc
