"""Four real BMCs, as DMTF's Redfish-Mockup-Creator captured them (shared/redfish/mockups/,
copied with their source notes, served by tests/baremetal/mockup_server.py): for each, the spec that states
what the capture holds (written from reading the capture, values below) plans no change,
``verify --bmc`` reports exactly the running firmware (never a backup, golden, staging or
pending image, an ERoT, an InfoROM or the HGX baseboard's own BMC), and a pin to another
version targets only the running image of that component, or, where the BMC's documents
cannot tell that image, is a located error saying what could not be told."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

import pytest
from typer.testing import CliRunner

from fleetspec.baremetal.run import observe, plan_bmcs
from fleetspec.cli import app
from fleetspec.findings import locate
from fleetspec.pipeline import compile_text
from tests.conftest import shared_tree

from .mockup_server import serving

INVENTORY = "/redfish/v1/UpdateService/FirmwareInventory"
SHA = hashlib.sha256(b"not fetched: plan only").hexdigest()
PASSWORD = "not-checked-by-the-mockup-server"


@dataclass(frozen=True)
class Capture:
    """What a capture holds, read from its files (paths under redfish/v1)."""

    folder: str
    system: str | None  # bmc.system where the service serves several Systems
    gpu: str  # catalog id
    gpus: int  # GPU Processors (or GPU PCIe devices)
    memory_gb: int  # MemorySummary.TotalSystemMemoryGiB
    cores: int  # TotalCores of each CPU Processor
    threads_per_core: int  # TotalThreads / TotalCores
    bios: str  # System BiosVersion
    bmc: str  # the Manager's Links.ActiveSoftwareImage Version, else its FirmwareVersion
    vbios: str  # the GPUs' inventory items (RelatedItem) or their own FirmwareVersion
    attribute: tuple[str, str]  # a BIOS attribute as the capture's Bios holds it
    bios_target: str | None  # the Bios's Links.ActiveSoftwareImage; None: it names none
    bmc_target: str | None  # the Manager's Links.ActiveSoftwareImage
    vbios_why: str  # why no update can be aimed at the GPUs' running images


CAPTURES = {
    # Systems/1: Processors 1, 2 (CPU, 32 cores, 64 threads); GPUs are Chassis/1/PCIeDevices/GPU1..8
    # (their PCIeFunctions' DeviceClass); Managers/1 -> FirmwareInventory/BMC 11.01.01 (beside
    # Backup_BMC "Not Present", Golden_BMC 01.00.26, Staging_BMC, HGX_FW_BMC_0 HGX-22.10-1-rc34);
    # the GPU items GPU1..8 point at the PCIe devices and are not Updateable.
    "supermicro-hgx-h100": Capture("supermicro-hgx-h100", None, "h100-sxm", 8, 2048, 32, 2, "1.4", "11.01.01",
                                   "96.00.61.00.01", ("ADDDCSparing_3C3F", "Enabled"), f"{INVENTORY}/BIOS",
                                   f"{INVENTORY}/BMC", "the FirmwareInventory items of the GPUs are not Updateable"),
    # System.Embedded.1: CPU.Socket.1, .2 (18 cores, 36 threads), GPU Video.Slot.2-1 (H100 PCIe);
    # the iDRAC is the System's ManagedBy, its running image Installed-25227-6.00.30.00 (beside
    # Previous-25227-4.40.29.00); the BIOS's Installed-159-1.8.2 (beside Previous-159-1.2.4).
    "dell-r750": Capture("dell-r750", None, "h100-pcie", 1, 512, 18, 2, "1.8.2", "6.00.30.00", "",
                         ("BootSeqRetry", "Enabled"), f"{INVENTORY}/Installed-159-1.8.2__BIOS.Setup.1-1",
                         f"{INVENTORY}/Installed-25227-6.00.30.00__iDRAC.Embedded.1-1",
                         "no FirmwareInventory item points at /redfish/v1/Systems/System.Embedded.1/Processors/"
                         "Video.Slot.2-1 (RelatedItem), so its running image cannot be told"),
    # Systems/1: Processors 1, 2 (32 cores, 64 threads), GPU1..8 (ProcessorType GPU);
    # Managers/1 -> BMC-Primary 42S-2.83 (beside BMC-Primary-Pending, BMC-Backup StandbySpare);
    # Bios -> UEFI (beside UEFI-Pending). The GPUs are the catalog's L40 (PCIeDevices slot_1..8
    # Name "NVIDIA L40"; Lenovo's GPU Processors name no model, so the BMC check compares the count).
    "lenovo-sr670v2-l40": Capture("lenovo-sr670v2-l40", None, "l40", 8, 1024, 32, 2, "U8E122J", "42S-2.83",
                                  "95.02.39.00.01", ("Processors_SWGuardExtensions", "Disabled"),
                                  f"{INVENTORY}/UEFI", f"{INVENTORY}/BMC-Primary",
                                  "the FirmwareInventory items of the GPUs are not Updateable"),
    # Systems/DGX: DevType1_CPU0, 1 (56 cores, 112 threads); the GPUs are the GPU_SXM_1..8
    # Processors of Systems/HGX_Baseboard_0 (FirmwareVersion 96.00.89.00.01); Managers/BMC
    # FirmwareVersion 23.11.20 names no ActiveSoftwareImage (the inventory's HostBMC_0 says
    # 23.11.21 and points at nothing), the Bios names none, no item has a RelatedItem.
    "nvidia-dgx-h100": Capture("nvidia-dgx-h100", "DGX", "h100-sxm", 8, 2048, 56, 2, "1.1.3", "23.11.20",
                               "96.00.89.00.01", ("ARIEnable", "Enable"), None, None,
                               "no FirmwareInventory item points at /redfish/v1/Systems/HGX_Baseboard_0/Processors/"
                               "GPU_SXM_1 (nor at 7 more GPUs) (RelatedItem), so its running image cannot be told"),
}


def spec(endpoint: str, c: Capture, pins: dict[str, str] | None = None, images: str = "") -> str:
    firmware = {"bios": c.bios, "bmc": c.bmc, **({"vbios": c.vbios} if c.vbios else {}), **(pins or {})}
    system = f'\n        system: "{c.system}"' if c.system else ""
    name, value = c.attribute
    return f"""\
apiVersion: fleetspec.io/v1alpha1
kind: Fleet
metadata: {{name: captured}}
spec:
  os: ubuntu-24.04
  stacks:
    s: {{driver: "580.95.05", cuda: "13.0.2", nccl: "2.28.3", firmware: {json.dumps(firmware)}}}
  racks:
    - name: r01
      bmc:
        endpoint: "{endpoint}"{system}
        username: root
        password: env:FLEETSPEC_TEST_BMC_PASSWORD
      nodes:
        - hosts: node-01
          gpu: {{model: {c.gpu}, count: {c.gpus}}}
          stack: s
          scheduler: slurm
          memory_gb: {c.memory_gb}
          sockets: 2
          cores_per_socket: {c.cores}
          threads_per_core: {c.threads_per_core}
          bmc:
            bios: {{{name}: {value}}}
  slurm: {{version: "24.11.1", controllers: ctl-01}}
{images}"""


@pytest.fixture(autouse=True)
def _password(monkeypatch):
    monkeypatch.setenv("FLEETSPEC_TEST_BMC_PASSWORD", PASSWORD)


@pytest.fixture(scope="module", params=sorted(CAPTURES))
def captured(request):
    capture = CAPTURES[request.param]
    with serving(shared_tree(f"redfish/mockups/{capture.folder}")) as endpoint:
        yield capture, endpoint


@pytest.fixture(scope="module")
def observed(captured, tmp_path_factory):
    """The capture read once (what a BMC reports does not depend on the spec's pins): the
    plans below are made from it."""
    capture, endpoint = captured
    fleet = compile_text(spec(endpoint, capture), "fleet.yaml").fleet
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("FLEETSPEC_TEST_BMC_PASSWORD", PASSWORD)
        observation = observe(fleet, tmp_path_factory.mktemp("observed"))
    assert observation.unreachable == {}
    return capture, endpoint, observation


def test_the_spec_that_states_what_the_capture_holds_plans_no_change(captured, tmp_path) -> None:
    capture, endpoint = captured
    path = tmp_path / "fleet.yaml"
    path.write_text(spec(endpoint, capture))
    done = CliRunner().invoke(app, ["baremetal", "plan", str(path), "--format", "json"])
    assert done.exit_code == 0, done.output
    plan = json.loads(done.stdout)
    assert plan["changes"] == [] and plan["findings"] == [] and plan["unreachable"] == {}
    seen = plan["observed"]["node-01"]
    assert (seen["sockets"], seen["cores"], seen["threads"]) == (2, 2 * capture.cores,
                                                                  2 * capture.cores * capture.threads_per_core)
    assert len(seen["gpus"]) == capture.gpus


def test_verify_bmc_reports_exactly_the_running_firmware(captured, tmp_path) -> None:
    capture, endpoint = captured
    path = tmp_path / "fleet.yaml"
    path.write_text(spec(endpoint, capture))
    done = CliRunner().invoke(app, ["verify", str(path), "--facts", str(tmp_path), "--bmc", "--format", "json"])
    (node,) = json.loads(done.stdout)["nodes"]
    found = {c["component"]: (c["status"], c["found"]) for c in node["checks"] if c["component"].endswith("-firmware")}
    want = {"bios-firmware": ("ok", capture.bios), "bmc-firmware": ("ok", capture.bmc)}
    if capture.vbios:
        want["vbios-firmware"] = ("ok", capture.vbios)
    assert found == want


def test_a_pin_to_another_version_targets_only_the_running_image(observed) -> None:
    capture, endpoint, observation = observed
    images = (f'  baremetal:\n    firmware_images:\n'
              f'      bios: {{"9.9.9": {{url: "http://127.0.0.1:9/bios.bin", sha256: "{SHA}"}}}}\n'
              f'      bmc: {{"9.9.9": {{url: "http://127.0.0.1:9/bmc.bin", sha256: "{SHA}"}}}}\n')
    for component in ("bios", "bmc"):
        text = spec(endpoint, capture, {component: "9.9.9"}, images)
        result = compile_text(text, "fleet.yaml")
        assert result.valid, result.located()
        plan, findings = plan_bmcs(result.fleet, observation)
        target = capture.bios_target if component == "bios" else capture.bmc_target
        if target is None:  # the DGX: its Manager and Bios name no running image
            (finding,) = findings
            where = "Bios resource" if component == "bios" else "Manager /redfish/v1/Managers/BMC"
            assert f"the {where} names no Links.ActiveSoftwareImage" in finding.message
            # located at the node group's bmc (its value: the mapping under the key)
            assert locate(finding, result.source).line == text.splitlines().index("          bmc:") + 2
            assert plan.changes == ()
            continue
        assert findings == []
        (change,) = plan.changes
        assert change.after["firmware"][component]["targets"] == [target]
        assert f"(Redfish UpdateService: {target})" in change.reason


def test_a_gpu_firmware_pin_the_inventory_cannot_target_is_a_located_error(observed) -> None:
    capture, endpoint, observation = observed
    images = (f'  baremetal:\n    firmware_images:\n'
              f'      vbios: {{"96.00.99.00.01": {{url: "http://127.0.0.1:9/gpu.bin", sha256: "{SHA}"}}}}\n')
    result = compile_text(spec(endpoint, capture, {"vbios": "96.00.99.00.01"}, images), "fleet.yaml")
    plan, findings = plan_bmcs(result.fleet, observation)
    if not capture.vbios:  # the Dell: the BMC reports no GPU firmware version at all
        assert findings == [] and plan.changes == ()
        return
    (finding,) = findings
    assert finding.message.endswith(f"no update can be aimed at its running image: {capture.vbios_why}. fleetspec "
                                    "does not guess an update target (a backup, staging or security chip's image "
                                    "is not the component's): update it with the vendor's tool, then plan again")
    assert plan.changes == ()


def test_a_bios_pin_is_checked_against_each_vendors_registry_and_staged(observed) -> None:
    """Each capture's Bios names its attribute registry, found in its Registries (Supermicro's
    Bios names ``BiosAttributeRegistry.v1_0_0``, the registry's Id is ``...1_0_0``); a pin to
    another value the registry allows is a drain-reboot change, one it does not allow a
    located error."""
    capture, endpoint, observation = observed
    name, value = capture.attribute
    seen = observation.seen["node-01"]
    attribute = seen.registry[name]
    other = next(v for v in attribute.values if v != value)
    text = spec(endpoint, capture).replace(f"bios: {{{name}: {value}}}", f'bios: {{{name}: "{other}"}}')
    result = compile_text(text, "fleet.yaml")
    plan, findings = plan_bmcs(result.fleet, observation)
    assert findings == []
    (change,) = plan.changes
    assert (change.disruption.value, change.after) == ("drain-reboot", {"bios": {name: other}})
    result = compile_text(text.replace(f'"{other}"', '"Sometimes"'), "fleet.yaml")
    _, findings = plan_bmcs(result.fleet, observation)
    assert [f.message for f in findings] == [f"node-01: BIOS attribute {name} cannot be 'Sometimes'; the registry "
                                             f"allows {', '.join(attribute.values)}"]


def test_a_plan_with_errors_never_says_the_fleet_matches(tmp_path) -> None:
    capture = CAPTURES["nvidia-dgx-h100"]
    with serving(shared_tree(f"redfish/mockups/{capture.folder}")) as endpoint:
        path = tmp_path / "fleet.yaml"
        path.write_text(spec(endpoint, capture, {"bmc": "23.11.21"}))  # the inventory's HostBMC_0, not the Manager
        done = CliRunner().invoke(app, ["baremetal", "plan", str(path)])
    assert done.exit_code == 1
    assert done.stdout.strip() == "No changes apply can make, and the fleet does not match the BMCs: the errors above"
    assert "node-01: bmc firmware is 23.11.20; the stack pins 23.11.21" in done.stderr


def test_the_mockup_server_serves_the_capture_read_only_and_nothing_beside_it() -> None:
    import requests

    with serving(shared_tree("redfish/mockups/dell-r750")) as endpoint:
        assert requests.get(f"{endpoint}/redfish/v1/Systems/System.Embedded.1", timeout=5).json()["Id"] == \
            "System.Embedded.1"
        login = requests.post(f"{endpoint}/redfish/v1/SessionService/Sessions", timeout=5,
                              json={"UserName": "root", "Password": "any"})
        assert login.status_code == 201 and login.headers["X-Auth-Token"]
        assert requests.delete(f"{endpoint}{login.headers['Location']}", timeout=5).status_code == 204
        assert requests.patch(f"{endpoint}/redfish/v1/Systems/System.Embedded.1", json={}, timeout=5).status_code == 405
        assert requests.post(f"{endpoint}/redfish/v1/UpdateService/MultipartUpload", timeout=5).status_code == 405
        assert requests.get(f"{endpoint}/SOURCE", timeout=5).status_code == 404  # the notes beside the tree
        assert requests.get(f"{endpoint}/redfish/%2e%2e/%2e%2e/README.md", timeout=5).status_code == 404
