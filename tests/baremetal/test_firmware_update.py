"""Firmware updates through Redfish UpdateService against a sushy-emulator on 127.0.0.1, the
image served by an HTTP server on 127.0.0.1.

What the emulator does and what it proves: its ``SimpleUpdate`` updates the System's BIOS
only (a Manager target is refused) and raises ``BiosVersion``'s minor number by one whatever
the image holds; tests/baremetal/bmc_emulator.py makes it fetch the ``ImageURI`` first and run
a task that is ``Running`` for two polls. So these tests prove fleetspec's side: plan shows
the update as drain-reboot, the action carries the image's URI and the right target, the
task monitor is followed to its end, a task that fails is an error with the BMC's message,
and the version is read back and compared with the stack's pin. They do not prove that a
vendor's image flashes (docs/bare-metal.md)."""

from __future__ import annotations

import hashlib

import pytest

from fleetspec.baremetal.redfish import BmcError, Session
from fleetspec.baremetal.run import apply_bmcs, observe, plan_bmcs
from fleetspec.plan.model import Disruption

from .emulator import PASSWORD, running, system
from .fleets import compiled, spec
from .images import serving

IMAGE = b"\x7fFIRMWARE bios 2.5.1\n" * 64


@pytest.fixture(autouse=True)
def _password(monkeypatch):
    monkeypatch.setenv("FLEETSPEC_TEST_BMC_PASSWORD", PASSWORD)


@pytest.fixture
def lab(tmp_path):
    """An emulator of its own (these tests change firmware versions) and the image server."""
    systems = [system("gpu-01", 21, "52:54:00:cc:00:01"), system("gpu-02", 22, "52:54:00:cc:00:02", power="Off"),
               system("spare-01", 23, "52:54:00:cc:00:03")]
    (tmp_path / "images").mkdir()
    (tmp_path / "images" / "bios-2.5.1.bin").write_bytes(IMAGE)
    with serving(tmp_path / "images") as images, running(tmp_path / "bmc", systems) as bmc:
        yield bmc, images


def fleet_with(bmc, images, pin: str = "2.5.1", image: str | None = "bios-2.5.1.bin"):
    extra = f'  baremetal:\n    firmware_images: {{bios: {{"{pin}": "{images.url(image)}"}}}}\n' if image else ""
    result = compiled(spec(bmc.endpoint, bios="{ProcTurboMode: Disabled}", stack_extra=f', firmware: {{bios: "{pin}"}}',
                           extra=extra))
    assert result.valid, result.located()
    return result.fleet


def test_plan_shows_a_firmware_update_as_drain_reboot_with_its_image(lab, tmp_path) -> None:
    bmc, images = lab
    fleet = fleet_with(bmc, images)
    plan, findings = plan_bmcs(fleet, observe(fleet, tmp_path), canary=1, max_unavailable=1)
    assert not findings, findings
    by_host = {c.host: c for c in plan.changes}
    assert by_host["gpu-01"].disruption is Disruption.DRAIN_REBOOT
    # the target: the running BIOS image the Bios resource names (Links.ActiveSoftwareImage)
    target = "/redfish/v1/UpdateService/FirmwareInventory/BIOS_0021"
    assert by_host["gpu-01"].reason == (f"BMC: firmware bios 2.4.1 -> 2.5.1 (Redfish UpdateService: {target}) (takes "
                                        "effect at the reboot)")
    assert by_host["gpu-01"].before == {"firmware": {"bios": "2.4.1"}}
    assert by_host["gpu-01"].after == {"firmware": {"bios": {"version": "2.5.1", "image": images.url("bios-2.5.1.bin"),
                                                             "targets": [target]}}}
    assert by_host["gpu-02"].disruption is Disruption.NONE  # off: updated before it is powered on
    assert [w.hosts for w in plan.waves] == [("gpu-01",), ("spare-01",)]
    assert images.fetched == []  # planning fetches nothing


def test_a_pin_without_an_image_stays_a_finding_that_says_where_to_give_one(lab, tmp_path) -> None:
    bmc, images = lab
    fleet = fleet_with(bmc, images, pin="2.6.0", image=None)
    plan, findings = plan_bmcs(fleet, observe(fleet, tmp_path, hosts=["gpu-01"]))
    assert plan.changes == ()
    assert [f.message for f in findings] == [
        "gpu-01: bios firmware is 2.4.1; the stack pins 2.6.0. Give the image in baremetal.firmware_images.bios "
        "(\"2.6.0\": URI) for apply to update it through Redfish, or update it with the vendor's tool, then plan again"]


def test_the_bmc_fetches_the_image_and_the_task_is_followed_to_its_end(lab, tmp_path) -> None:
    bmc, images = lab
    fleet = fleet_with(bmc, images)
    with Session(fleet.baremetal.bmc("gpu-01"), tmp_path) as session:
        assert session.update_firmware("bios", images.url("bios-2.5.1.bin")).task == "task Completed/OK"
        assert session.read().firmware["bios"] == {"BiosVersion": "2.5.1"}
    state = bmc.system("gpu-01")
    assert state["firmware_images"] == [{"uri": images.url("bios-2.5.1.bin"), "size": len(IMAGE),
                                         "sha256": hashlib.sha256(IMAGE).hexdigest(), "protocol": "HTTP"}]
    assert images.fetched == ["/bios-2.5.1.bin"]
    # the harness's task monitor answered 202 Running twice before the task ended
    assert bmc.log().count("GET /redfish/v1/TaskService/TaskMonitors/") >= 3


def test_a_task_that_fails_is_an_error_with_the_bmcs_message(lab, tmp_path) -> None:
    bmc, images = lab
    fleet = fleet_with(bmc, images)
    with pytest.raises(BmcError) as caught, Session(fleet.baremetal.bmc("gpu-01"), tmp_path) as session:
        session.update_firmware("bios", images.url("missing.bin"))
    assert str(caught.value).startswith("gpu-01: the bios firmware update ended Exception/Critical: image download "
                                        f"from {images.url('missing.bin')} failed: HTTP Error 404")
    assert bmc.system("gpu-01")["versions"] == {"BiosVersion": "2.4.1"}  # nothing changed


def test_apply_updates_a_node_that_is_off_before_powering_it_on(lab, tmp_path) -> None:
    bmc, images = lab
    fleet = fleet_with(bmc, images)
    plan, _ = plan_bmcs(fleet, observe(fleet, tmp_path))
    lines: list[str] = []
    result = apply_bmcs(plan, tmp_path, control=None, on_line=lines.append, readback_s=0)
    assert [line for line in lines if line.startswith("gpu-02")] == [
        f"gpu-02: bios firmware 2.5.1: UpdateService from {images.url('bios-2.5.1.bin')}",
        "gpu-02: bios firmware update task Completed/OK (SimpleUpdate: fetched by the BMC)",
        "gpu-02: boot once from the network (PXE), powered on",
        "gpu-02: firmware read back: bios 2.5.1"]
    # the nodes that are on need a drain first: refused without a scheduler, untouched
    assert "needs a drain and a reboot" in result.failed["gpu-01"]
    assert bmc.system("gpu-01")["versions"] == {"BiosVersion": "2.4.1"}


def test_a_version_read_back_other_than_the_pin_fails_the_node(lab, tmp_path) -> None:
    bmc, images = lab
    # the image is offered as 2.6.1, but the update leaves the BIOS at 2.5.1: read back, not trusted
    fleet = fleet_with(bmc, images, pin="2.6.1", image="bios-2.5.1.bin")
    plan, _ = plan_bmcs(fleet, observe(fleet, tmp_path, hosts=["gpu-02"]))
    result = apply_bmcs(plan, tmp_path, control=None, readback_s=0)
    assert result.failed == {"gpu-02": "gpu-02: after the update and the reboot the BMC reports bios 2.5.1 (the "
                                       "stack pins 2.6.1): the image did not carry the pinned version, or the update "
                                       "did not take. Left drained"}


def test_one_member_behind_is_reported_so_plan_updates_the_component() -> None:
    """Eight GPUs, one on an older VBIOS: the component does not hold its pin (the first
    member alone said it did, and plan left the node as it was)."""
    from fleetspec.baremetal.drift import firmware_reported

    gpus = {f"GPU_SXM_{i}_0001": "96.00.9F.00.01" for i in range(1, 9)}
    firmware = {"vbios": gpus, "bmc": {"BMC_0001": "1.2"}}
    assert firmware_reported("vbios", firmware) == "96.00.9F.00.01"
    gpus["GPU_SXM_7_0001"] = "96.00.74.00.01"
    assert firmware_reported("vbios", firmware) == "96.00.9F.00.01, 96.00.74.00.01"
    assert firmware_reported("nvswitch", firmware) is None
