"""Firmware pushed to a BMC that takes pushed images (Redfish ``MultipartHttpPushUri``),
against sushy-emulator extended by tests/baremetal/bmc_emulator.py (``FLEETSPEC_PUSH``): a
FirmwareInventory with a BMC, two GPUs and an NVSwitch per node, OnReset staging, a 413 for
an oversize body, a task that fails for an image of the wrong component, and a BMC that
re-executes itself (its port closed for a while) after its own update.

What this proves is fleetspec's side: the route chosen from what the BMC advertises, the
image fetched from the image store, bounded and checked against the spec's SHA-256 before
anything is sent, the multipart body (UpdateParameters with Targets chosen from the
inventory and @Redfish.OperationApplyTime), the task followed, the BMC's reset waited out
(bounded), staged updates read back only after the reboot, and each failure leaving the node
failed with the BMC's own message. Not that a vendor's image flashes (docs/bare-metal.md)."""

from __future__ import annotations

import hashlib

import pytest

from fleetspec.baremetal.redfish import BmcError, Session
from fleetspec.baremetal.run import apply_bmcs, observe, plan_bmcs
from fleetspec.plan.model import Disruption

from .emulator import PASSWORD, USER, running, system
from .fleets import compiled, spec
from .images import serving

BMC_IMAGE = b"FIRMWARE bmc 1.20\n" + b"\x00bmc-payload" * 100
GPU_IMAGE = b"FIRMWARE vbios 96.00.B0.00.01\n" + b"\x00gpu-payload" * 100
SHA = {name: hashlib.sha256(data).hexdigest() for name, data in (("bmc", BMC_IMAGE), ("gpu", GPU_IMAGE))}
INVENTORY = "/redfish/v1/UpdateService/FirmwareInventory"
OLD = {"BMC": "1.10", "GPU_SXM_1": "96.00.A5.00.1A", "GPU_SXM_2": "96.00.A5.00.1A", "NVSwitch_0": "1.0.0"}


@pytest.fixture(autouse=True)
def _password(monkeypatch):
    monkeypatch.setenv("FLEETSPEC_TEST_BMC_PASSWORD", PASSWORD)


def lab_systems() -> list[dict]:
    return [system("gpu-01", 31, "52:54:00:dd:00:01", inventory=OLD),
            system("gpu-02", 32, "52:54:00:dd:00:02", power="Off", inventory=OLD),
            # its GPUs already hold the pin: only its BMC differs
            system("spare-01", 33, "52:54:00:dd:00:03",
                   inventory={**OLD, "GPU_SXM_1": "96.00.B0.00.01", "GPU_SXM_2": "96.00.B0.00.01"})]


@pytest.fixture
def lab(tmp_path, request):
    config = getattr(request, "param", "")
    (tmp_path / "images").mkdir()
    (tmp_path / "images" / "bmc-1.20.bin").write_bytes(BMC_IMAGE)
    (tmp_path / "images" / "gpu-b0.bin").write_bytes(GPU_IMAGE)
    with serving(tmp_path / "images") as images, running(
            tmp_path / "bmc", lab_systems(),
            f"FLEETSPEC_PUSH = True\nFLEETSPEC_BMC_RESET_S = 2\nFLEETSPEC_PUSH_MAX_BYTES = 1 << 20\n{config}") as bmc:
        yield bmc, images


def fleet_with(bmc, images, bmc_sha: str | None = SHA["bmc"], gpu_image: str = "gpu-b0.bin",
               gpu_sha: str = SHA["gpu"]):
    bmc_image = (f'{{url: "{images.url("bmc-1.20.bin")}", sha256: "{bmc_sha}"}}' if bmc_sha
                 else f'"{images.url("bmc-1.20.bin")}"')
    extra = (f'  baremetal:\n    firmware_images:\n      bmc: {{"1.20": {bmc_image}}}\n'
             f'      vbios: {{"96.00.B0.00.01": {{url: "{images.url(gpu_image)}", sha256: "{gpu_sha}"}}}}\n')
    result = compiled(spec(bmc.endpoint, bios="{ProcTurboMode: Disabled}", gpus=2,
                           stack_extra=', firmware: {bmc: "1.20", vbios: "96.00.B0.00.01"}', extra=extra))
    assert result.valid, result.located()
    return result.fleet


def test_plan_shows_the_disruption_each_target_needs(lab, tmp_path) -> None:
    bmc, images = lab
    fleet = fleet_with(bmc, images)
    observation = observe(fleet, tmp_path)
    assert observation.seen["gpu-01"].push
    # each node sees only its own running images (its Manager's and Bios's ActiveSoftwareImage,
    # the items whose RelatedItem points at its GPU Processors), on a service serving three; the
    # fabric switches the inventory names cannot be told to be this node's there
    seen = observation.seen["gpu-01"]
    assert seen.firmware == {"bios": {"BiosVersion": "2.4.1"}, "bmc": {"BMC_0031": "1.10"},
                             "vbios": {"GPU_SXM_1_0031": "96.00.A5.00.1A", "GPU_SXM_2_0031": "96.00.A5.00.1A"}}
    assert seen.targets["vbios"] == (f"{INVENTORY}/GPU_SXM_1_0031", f"{INVENTORY}/GPU_SXM_2_0031")
    # beside them the inventory lists a golden BIOS (Enabled, older) and a backup BMC image, as
    # real inventories do: neither is the version nor a target
    import requests

    listed = requests.get(f"{bmc.endpoint}{INVENTORY}", auth=(USER, PASSWORD), timeout=10).json()["Members"]
    assert {f"{INVENTORY}/BIOS_Golden_0031", f"{INVENTORY}/BMC_Backup_0031"} <= {m["@odata.id"] for m in listed}
    assert seen.targets["bios"] == (f"{INVENTORY}/BIOS_0031",) and seen.targets["bmc"] == (f"{INVENTORY}/BMC_0031",)
    assert seen.untargetable == {"nvswitch": "the service serves several Systems, so the fabric switches its "
                                             "inventory names cannot be told to be this node's"}
    plan, findings = plan_bmcs(fleet, observation, canary=1, max_unavailable=1)
    assert not findings, findings
    by_host = {c.host: c for c in plan.changes}
    assert by_host["gpu-01"].disruption is Disruption.DRAIN_REBOOT  # GPU firmware applies at the reboot
    assert by_host["gpu-02"].disruption is Disruption.NONE  # off: updated before it is powered on
    spare = by_host["spare-01"]
    assert spare.disruption is Disruption.ROLLING  # the BMC alone: no drain, no reboot, in waves
    assert spare.reason == (f"BMC: firmware bmc 1.10 -> 1.20 (Redfish UpdateService: {INVENTORY}/BMC_0033) (the "
                            "BMC resets itself: out-of-band management is away for minutes, the host keeps running "
                            "its work; no drain, no reboot)")
    assert spare.after == {"firmware": {"bmc": {"version": "1.20", "image": images.url("bmc-1.20.bin"),
                                                "targets": [f"{INVENTORY}/BMC_0033"], "sha256": SHA["bmc"]}}}
    assert images.fetched == []  # planning fetches nothing


def test_a_push_without_a_pinned_sha256_is_a_finding(lab, tmp_path) -> None:
    bmc, images = lab
    fleet = fleet_with(bmc, images, bmc_sha=None)
    plan, findings = plan_bmcs(fleet, observe(fleet, tmp_path, hosts=["spare-01"]))
    assert plan.changes == ()
    assert [f.message for f in findings] == [
        "spare-01: bmc firmware is 1.10; the stack pins 1.20. This BMC takes pushed images (MultipartHttpPushUri): "
        "fleetspec fetches the image and checks it before sending it, so give its sha256 "
        '(baremetal.firmware_images.bmc: {"1.20": {url: ..., sha256: ...}})']


def test_a_bmc_update_is_pushed_the_reset_waited_out_and_the_version_read_back(lab, tmp_path) -> None:
    bmc, images = lab
    fleet = fleet_with(bmc, images)
    plan, _ = plan_bmcs(fleet, observe(fleet, tmp_path, hosts=["spare-01"]))
    boots = list(bmc.system("spare-01").get("boots", []))
    lines: list[str] = []
    # no scheduler given: a rolling change needs no drain
    result = apply_bmcs(plan, tmp_path, control=None, on_line=lines.append, readback_s=30, bmc_back_s=60)
    assert result.ok, result.failed
    assert lines[:2] == [f"spare-01: bmc firmware 1.20: UpdateService from {images.url('bmc-1.20.bin')}",
                         f"spare-01: bmc firmware update task Completed/OK (MultipartHttpPushUri: pushed "
                         f"{len(BMC_IMAGE)} bytes (sha256 checked), Immediate)"]
    assert lines[2].startswith("spare-01: the BMC reset after its update and answers again (")
    assert lines[3:] == ["spare-01: firmware read back: bmc 1.20"]
    assert "BMC reset: away for 2 s" in bmc.log()  # it was really gone: its port closed, then back
    state = bmc.system("spare-01")
    assert state["inventory"]["BMC"] == "1.20" and state.get("boots", []) == boots  # the host was not rebooted
    assert state["firmware_images"] == [{"uri": "push:bmc-1.20.bin", "size": len(BMC_IMAGE), "sha256": SHA["bmc"],
                                         "protocol": "MultipartHttpPush", "apply_time": "Immediate"}]
    assert images.fetched == ["/bmc-1.20.bin"]  # fleetspec fetched it, the BMC did not
    assert not any(PASSWORD in line for line in lines)


def test_gpu_firmware_is_staged_on_reset_and_read_back_after_the_power_on(lab, tmp_path) -> None:
    bmc, images = lab
    fleet = fleet_with(bmc, images)
    with Session(fleet.baremetal.bmc("gpu-01"), tmp_path) as session:
        done = session.update_firmware("vbios", images.url("gpu-b0.bin"), SHA["gpu"])
        assert (done.route, done.apply_time, done.task) == ("MultipartHttpPushUri", "OnReset", "task Completed/OK")
        # both GPUs the inventory lists were targets; staged: the old version until a reset
        assert [i["apply_time"] for i in bmc.system("gpu-01")["firmware_images"]] == ["OnReset", "OnReset"]
        assert session.read().firmware["vbios"]["GPU_SXM_1_0031"] == "96.00.A5.00.1A"
    # through apply: gpu-02 is off, staged, then powered on into the new firmware and read back
    plan, _ = plan_bmcs(fleet, observe(fleet, tmp_path, hosts=["gpu-02"]))
    lines: list[str] = []
    result = apply_bmcs(plan, tmp_path, control=None, on_line=lines.append, readback_s=10, bmc_back_s=60)
    assert result.ok, (result.failed, lines)
    assert [line for line in lines if "vbios" in line or "powered on" in line or "read back" in line][-3:] == [
        "gpu-02: vbios firmware update task Completed/OK (MultipartHttpPushUri: pushed "
        f"{len(GPU_IMAGE)} bytes (sha256 checked), OnReset)",
        "gpu-02: boot once from the network (PXE), powered on",
        "gpu-02: firmware read back: vbios 96.00.B0.00.01"]
    assert bmc.system("gpu-02")["inventory"]["GPU_SXM_2"] == "96.00.B0.00.01"


def test_an_image_whose_hash_differs_from_the_pin_is_refused_before_sending(lab, tmp_path) -> None:
    bmc, images = lab
    fleet = fleet_with(bmc, images, gpu_sha="0" * 64)
    with pytest.raises(BmcError) as caught, Session(fleet.baremetal.bmc("gpu-01"), tmp_path) as session:
        session.update_firmware("vbios", images.url("gpu-b0.bin"), "0" * 64)
    assert str(caught.value) == (f"gpu-01: the vbios image {images.url('gpu-b0.bin')} has sha256 {SHA['gpu']}; the "
                                 f"spec pins {'0' * 64}. Refused: nothing was sent to the BMC")
    assert "firmware_images" not in bmc.system("gpu-01")
    assert "POST /redfish/v1/UpdateService/upload" not in bmc.log()


@pytest.mark.parametrize("lab", ["FLEETSPEC_PUSH_MAX_BYTES = 512\n"], indirect=True)
def test_an_oversize_image_is_refused_by_fleetspec_or_by_the_bmcs_413(lab, tmp_path) -> None:
    bmc, images = lab
    fleet = fleet_with(bmc, images)
    with Session(fleet.baremetal.bmc("gpu-01"), tmp_path) as session:
        with pytest.raises(BmcError) as ours:  # fleetspec's own bound: nothing sent
            session.update_firmware("vbios", images.url("gpu-b0.bin"), SHA["gpu"], max_bytes=1000)
        assert str(ours.value) == (f"gpu-01: the vbios image {images.url('gpu-b0.bin')} is {len(GPU_IMAGE)} bytes, "
                                   "over the 1000 bytes a push may carry. Nothing was sent to the BMC")
        with pytest.raises(BmcError) as theirs:  # the BMC's limit, which it does not advertise
            session.update_firmware("vbios", images.url("gpu-b0.bin"), SHA["gpu"])
    assert str(theirs.value).startswith(f"gpu-01: the BMC refused the vbios image as too large (HTTP 413, "
                                        f"{len(GPU_IMAGE)} bytes): The request body is ")
    assert "firmware_images" not in bmc.system("gpu-01")


def test_a_task_that_fails_leaves_the_node_failed_with_the_bmcs_message(lab, tmp_path) -> None:
    bmc, images = lab
    # the BMC's image offered as GPU firmware: its hash is right, the BMC refuses it in the task
    fleet = fleet_with(bmc, images, gpu_image="bmc-1.20.bin", gpu_sha=SHA["bmc"])
    plan, _ = plan_bmcs(fleet, observe(fleet, tmp_path, hosts=["gpu-02"]))
    result = apply_bmcs(plan, tmp_path, control=None, readback_s=10, bmc_back_s=60)
    assert result.failed["gpu-02"] == ("gpu-02: the vbios firmware update ended Exception/Critical: the image is a "
                                       "bmc image; the target GPU_SXM_1 takes another component's image")
    state = bmc.system("gpu-02")
    assert state["power_state"] == "Off" and state["inventory"]["GPU_SXM_1"] == "96.00.A5.00.1A"


@pytest.mark.parametrize("lab", ["FLEETSPEC_BMC_RESET_S = 30\n"], indirect=True)
def test_a_bmc_that_does_not_come_back_in_time_fails_the_node(lab, tmp_path) -> None:
    bmc, images = lab
    fleet = fleet_with(bmc, images)
    plan, _ = plan_bmcs(fleet, observe(fleet, tmp_path, hosts=["spare-01"]))
    result = apply_bmcs(plan, tmp_path, control=None, readback_s=10, bmc_back_s=3)
    assert result.failed == {"spare-01": f"spare-01: the BMC at {bmc.endpoint} did not answer again within 3 s of "
                                         "resetting after its firmware update: look at it (its console, its power) "
                                         "before anything else"}


@pytest.mark.parametrize("lab", ["FLEETSPEC_BMC_RESET_EARLY = True\n"], indirect=True)
def test_a_bmc_that_resets_before_reporting_the_task_end_is_judged_by_the_version_read_back(lab, tmp_path) -> None:
    bmc, images = lab
    fleet = fleet_with(bmc, images)
    plan, _ = plan_bmcs(fleet, observe(fleet, tmp_path, hosts=["spare-01"]))
    lines: list[str] = []
    result = apply_bmcs(plan, tmp_path, control=None, on_line=lines.append, readback_s=30, bmc_back_s=60)
    assert result.ok, result.failed
    assert lines[1] == ("spare-01: bmc firmware update task lost: the BMC reset before reporting its end "
                        f"(MultipartHttpPushUri: pushed {len(BMC_IMAGE)} bytes (sha256 checked), Immediate)")
    assert lines[-1] == "spare-01: firmware read back: bmc 1.20"


def test_an_update_goes_only_to_the_running_images_the_plan_showed(lab, tmp_path) -> None:
    bmc, images = lab
    fleet = fleet_with(bmc, images)
    with pytest.raises(BmcError) as caught, Session(fleet.baremetal.bmc("gpu-01"), tmp_path) as session:
        session.update_firmware("vbios", images.url("gpu-b0.bin"), SHA["gpu"], planned=[f"{INVENTORY}/GPU_SXM_9_0031"])
    assert str(caught.value) == (f"gpu-01: the vbios firmware's running images are now {INVENTORY}/GPU_SXM_1_0031, "
                                 f"{INVENTORY}/GPU_SXM_2_0031; the plan targeted {INVENTORY}/GPU_SXM_9_0031. Nothing "
                                 "was sent: plan again")
    assert "POST /redfish/v1/UpdateService/upload" not in bmc.log()
