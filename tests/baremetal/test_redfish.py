"""Against a real sushy-emulator on 127.0.0.1: read inventory, power, boot, BIOS with its
attribute registry and firmware through sushy; plan the BMC changes with their disruption;
apply them. The emulator's systems: gpu-01 on, gpu-02 off, spare-01 on (tests/baremetal/emulator.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetspec.baremetal.redfish import BmcError, Session
from fleetspec.baremetal.run import apply_bmcs, observe, plan_bmcs
from fleetspec.plan.model import Disruption
from tests.conftest import ROOT

from .emulator import PASSWORD
from .fleets import compiled, spec


@pytest.fixture(autouse=True)
def _password(monkeypatch):
    monkeypatch.setenv("FLEETSPEC_TEST_BMC_PASSWORD", PASSWORD)


def fleet_for(bmc, **kw):
    result = compiled(spec(bmc.endpoint, **kw))
    assert result.valid, result.located()
    return result.fleet


def test_read_reports_inventory_power_boot_bios_registry_and_firmware(bmc, tmp_path) -> None:
    fleet = fleet_for(bmc)
    with Session(fleet.baremetal.bmc("gpu-01"), tmp_path) as session:
        seen = session.read()
    # sockets, cores and threads from the CPU Processors (2 x 56 cores, 2 threads a core), never
    # from ProcessorSummary's logical processors
    assert (seen.host, seen.power, seen.memory_gib, seen.sockets, seen.cores, seen.threads) == (
        "gpu-01", "On", 2048, 2, 112, 224)
    assert seen.nics == ("52:54:00:aa:00:01",)
    assert seen.bios["ProcTurboMode"] == "Disabled"
    assert seen.registry["ProcTurboMode"].values == ("Enabled", "Disabled")
    # the BMC's version is its Manager's FirmwareVersion (sushy-emulator's Manager says 1.00)
    manager = "Manager 6f0d5e2a-0000-4000-8000-000000000001"
    assert seen.firmware == {"bios": {"BiosVersion": "2.4.1"}, "bmc": {manager: "1.00"}}
    # the running BIOS image, as the Bios resource's Links.ActiveSoftwareImage names it
    assert seen.targets == {"bios": ("/redfish/v1/UpdateService/FirmwareInventory/BIOS_0001",)}
    # what the emulator does not serve is said, not invented: no GPU for a system without an
    # inventory (tests/baremetal/test_firmware_push.py)
    assert seen.gpus is None
    assert seen.notes == ("no GPU Processors or GPU PCIe devices: GPU count and model not checked over Redfish",)
    assert not seen.push


def test_a_wrong_password_is_an_error_that_never_shows_it(bmc, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("FLEETSPEC_TEST_BMC_PASSWORD", "not-the-password-9z")
    fleet = fleet_for(bmc)
    with pytest.raises(BmcError) as caught, Session(fleet.baremetal.bmc("gpu-01"), tmp_path):
        pass
    assert "gpu-01: cannot open a Redfish session" in str(caught.value)
    assert "not-the-password-9z" not in str(caught.value)


def test_an_unset_credential_says_which_variable(bmc, tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("FLEETSPEC_TEST_BMC_PASSWORD")
    observation = observe(fleet_for(bmc), tmp_path)
    assert not observation.seen
    assert "FLEETSPEC_TEST_BMC_PASSWORD is not set" in observation.unreachable["gpu-01"]


def test_plan_shows_power_on_and_a_bios_change_as_drain_reboot(bmc, tmp_path) -> None:
    fleet = fleet_for(bmc)
    plan, findings = plan_bmcs(fleet, observe(fleet, tmp_path))
    assert not findings, findings
    by_host = {c.host: c for c in plan.changes}
    assert set(by_host) == {"gpu-01", "gpu-02"}  # spare-01 pins nothing and is on
    assert by_host["gpu-01"].disruption is Disruption.DRAIN_REBOOT
    assert by_host["gpu-01"].reason == "BMC: BIOS ProcTurboMode 'Disabled' -> 'Enabled' (takes effect at the reboot)"
    assert by_host["gpu-02"].disruption is Disruption.NONE  # off: no work to drain
    assert by_host["gpu-02"].reason.startswith("BMC: power Off -> On, booting once from the network (PXE); BIOS")
    assert [w.hosts for w in plan.waves] == [("gpu-01",)]


def test_bios_pins_are_checked_against_the_attribute_registry_and_located(bmc, tmp_path) -> None:
    text = spec(bmc.endpoint, bios="{ProcTurboMod: Enabled, BootMode: Legacy}")
    result = compiled(text)
    _, findings = plan_bmcs(result.fleet, observe(result.fleet, tmp_path, hosts=["gpu-01"]))
    from fleetspec.findings import locate

    located = sorted({(f.line, f.message) for f in (locate(f, result.source) for f in findings)})
    assert located == [
        (23, "gpu-01: BIOS attribute BootMode cannot be 'Legacy'; the registry allows Bios, Uefi"),
        (23, "gpu-01: BIOS attribute ProcTurboMod is not in the BMC's attribute registry (10 attributes). Did you "
             "mean 'ProcTurboMode'? Vendors name attributes differently: use the name this BMC's registry gives"),
    ], located


def test_inventory_and_firmware_that_disagree_with_the_spec_are_findings(bmc, tmp_path) -> None:
    text = spec(bmc.endpoint, stack_extra=', firmware: {bios: "2.5.0"}').replace("memory_gb: 1024", "memory_gb: 4096")
    fleet = compiled(text).fleet
    _, findings = plan_bmcs(fleet, observe(fleet, tmp_path, hosts=["gpu-01"]))
    messages = sorted(f.message for f in findings)
    assert messages == [
        "gpu-01: bios firmware is 2.4.1; the stack pins 2.5.0. Give the image in baremetal.firmware_images.bios "
        "(\"2.5.0\": URI) for apply to update it through Redfish, or update it with the vendor's tool, then plan again",
        "gpu-01: the BMC reports 2048 GiB of memory; the spec says memory_gb: 4096. Check the hardware or fix the spec",
    ]


def test_apply_powers_on_through_pxe_once_and_refuses_a_reboot_without_a_scheduler(bmc, tmp_path: Path) -> None:
    fleet = fleet_for(bmc)
    plan, _ = plan_bmcs(fleet, observe(fleet, tmp_path))
    lines: list[str] = []
    result = apply_bmcs(plan, tmp_path, control=None, on_line=lines.append)
    # gpu-02 was off: its BIOS staged, one network boot, on; gpu-01's reboot needs a drain first
    # the boot override (Pxe, Once), the power and the BIOS setting read back, not assumed
    assert lines == ["gpu-02: BIOS staged: ProcTurboMode=Enabled",
                     "gpu-02: boot once from the network (PXE), powered on",
                     "gpu-02: BIOS read back: ProcTurboMode=Enabled"]
    assert "needs a drain and a reboot" in result.failed["gpu-01"]
    state = bmc.system("gpu-02")
    assert state["power_state"] == "On" and state["boots"] == ["Pxe"] and state["boot_device"] == "Hdd"
    assert state["bios"]["ProcTurboMode"] == "Enabled"
    assert bmc.system("gpu-01")["bios"]["ProcTurboMode"] == "Disabled"  # untouched
    again, _ = plan_bmcs(fleet, observe(fleet, tmp_path))
    assert [c.host for c in again.changes] == ["gpu-01"]  # gpu-02 converged


def test_the_cli_plans_from_the_bmcs_and_exits_1_on_a_bad_pin(bmc, tmp_path) -> None:
    from typer.testing import CliRunner

    from fleetspec.cli import app

    path = tmp_path / "fleet.yaml"
    path.write_text(spec(bmc.endpoint, bios="{ProcTurboMode: Enabled}"))
    done = CliRunner().invoke(app, ["baremetal", "plan", str(path), "--hosts", "gpu-01", "--format", "json"])
    assert done.exit_code == 0, done.output
    import json

    data = json.loads(done.stdout)
    assert [(c["target"], c["disruption"]) for c in data["changes"]] == [("node:gpu-01", "drain-reboot")]
    assert data["observed"]["gpu-01"]["firmware"] == {"bios": {"BiosVersion": "2.4.1"},
                                                      "bmc": {"Manager 6f0d5e2a-0000-4000-8000-000000000001": "1.00"}}
    assert PASSWORD not in done.output
    path.write_text(spec(bmc.endpoint, bios="{ProcTurboMode: Sometimes}"))
    done = CliRunner().invoke(app, ["baremetal", "plan", str(path), "--hosts", "gpu-01"])
    assert done.exit_code == 1
    assert f"{path}:23:" in done.stderr and "ProcTurboMode cannot be 'Sometimes'" in done.stderr

    # the console script's own process: the located error, exit 1, nothing but findings on stderr
    import os
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "fleetspec.cli", "baremetal", "plan", str(path), "--hosts", "gpu-01"],
                          capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [f"{path}:23:20: error [baremetal] gpu-01: BIOS attribute ProcTurboMode cannot "
                                        "be 'Sometimes'; the registry allows Enabled, Disabled"], proc.stderr
