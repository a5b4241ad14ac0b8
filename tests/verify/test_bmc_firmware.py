"""verify attests the firmware a node's BMC reports (fleetspec.verify.bmc): each stack pin
against every FirmwareInventory member naming it, node facts first where they attest the
component (the VBIOS nvidia-smi reported on a real H200, tests/data/fixtures/h200-node).
tests/baremetal/test_verify_bmc.py reads the same from a Redfish BMC (sushy-emulator)."""

from __future__ import annotations

from fleetspec.baremetal.redfish import Observed
from fleetspec.compile.ir import StackTuple
from fleetspec.pipeline import compile_text
from fleetspec.verify.bmc import bmc_firmware_checks, with_bmc
from fleetspec.verify.compare import Status, compare
from tests.verify.test_firmware import FACTS
from tests.verify.test_real_h200 import SPEC

PINS = (("bios", "2.4.1"), ("bmc", "1.20"), ("nvswitch", "1.0.0"), ("vbios", "96.00.B0.00.01"))
STACK = StackTuple("hopper", "nvidia", driver="580.95.05", firmware=PINS)
# as fleetspec.baremetal.standard reads tests/baremetal/bmc_emulator.py: component -> the
# running images (where -> version)
INVENTORY = {"bios": {"BiosVersion": "2.4.1"}, "bmc": {"BMC_0031": "1.10"},
             "vbios": {"GPU_SXM_1_0031": "96.00.B0.00.01", "GPU_SXM_2_0031": "96.00.A5.00.1A"},
             "nvswitch": {"NVSwitch_0_0031": "1.0.0"}}


def by_component(checks) -> dict:  # type: ignore[no-untyped-def]
    return {c.component: c for c in checks}


def test_each_pin_the_bmc_reports_is_ok_or_drift_with_what_repairs_it() -> None:
    got = by_component(bmc_firmware_checks(STACK, INVENTORY))
    assert {k: (c.status, c.found, c.disruption) for k, c in got.items()} == {
        "bios-firmware": (Status.OK, "2.4.1", None),
        "bmc-firmware": (Status.DRIFT, "1.10", "rolling"),  # the BMC resets itself; the host keeps its work
        "nvswitch-firmware": (Status.OK, "1.0.0", None),
        "vbios-firmware": (Status.DRIFT, "96.00.A5.00.1A", "drain-reboot"),  # one GPU of two is enough
    }
    assert got["bmc-firmware"].message == (
        "the BMC reports bmc firmware 1.10 (BMC_0031: 1.10), the stack pins 1.20: `fleetspec baremetal apply` "
        "updates it (Redfish UpdateService) (BMC, Redfish FirmwareInventory)")
    assert got["vbios-firmware"].message.startswith(
        "the BMC reports vbios firmware 96.00.A5.00.1A (GPU_SXM_1_0031: 96.00.B0.00.01, GPU_SXM_2_0031: "
        "96.00.A5.00.1A), the stack pins 96.00.B0.00.01")
    assert got["nvswitch-firmware"].message == ("the BMC reports nvswitch firmware 1.0.0 (NVSwitch_0_0031: 1.0.0) "
                                                "(BMC, Redfish FirmwareInventory)")


def test_a_pin_the_bmc_reports_nothing_for_is_not_attested_and_says_why() -> None:
    got = by_component(bmc_firmware_checks(STACK, {"bios": {"BiosVersion": "2.4.1"}},
                                           notes=("no UpdateService/FirmwareInventory",)))
    assert got["bios-firmware"].status is Status.OK
    bmc = got["bmc-firmware"]
    assert (bmc.status, bmc.found) == (Status.NOT_APPLICABLE, None)
    assert bmc.message == ("the BMC reports no bmc firmware (no UpdateService/FirmwareInventory): the pin 1.20 "
                           "is not attested (BMC, Redfish FirmwareInventory)")


def test_components_node_facts_attest_are_skipped() -> None:
    got = by_component(bmc_firmware_checks(STACK, INVENTORY, attested={"vbios"}))
    assert sorted(got) == ["bios-firmware", "bmc-firmware", "nvswitch-firmware"]


def observed(firmware: dict[str, dict[str, str]]) -> Observed:
    return Observed("vm", "vm", None, None, "On", None, None, None, None, (), None, {}, None, firmware)


def h200(pins: str, firmware: dict[str, str]) -> dict:
    fleet = compile_text(SPEC.replace('nccl: "2.28.3"}', f'nccl: "2.28.3", firmware: {pins}}}'), "device.yaml").fleet
    assert fleet is not None
    report = with_bmc(fleet, compare(fleet, {"vm": FACTS}, hosts=["vm"]), {"vm": observed(firmware)}, {})
    (node,) = report.nodes
    assert report.partitions[0].nodes == (node,)  # the same node in both views
    firmware_checks = [c for c in node.checks if c.component.endswith("-firmware")]
    assert len({c.component for c in firmware_checks}) == len(firmware_checks)  # each component once
    return by_component(firmware_checks)


def test_node_facts_win_over_the_bmc_where_they_attest_the_component() -> None:
    # nvidia-smi on the node read 96.00.A5.00.1A; a BMC saying otherwise does not override it
    got = h200('{vbios: "96.00.A5.00.1A", bmc: "1.20"}', {"vbios": {"GPU_SXM_1": "96.00.B0.00.01"},
                                                          "bmc": {"BMC": "1.20"}})
    assert (got["vbios-firmware"].status, got["vbios-firmware"].message) == (
        Status.OK, "all 1 devices run vbios firmware 96.00.A5.00.1A (nvidia-smi)")
    assert got["bmc-firmware"].status is Status.OK


def test_the_bmc_stands_in_where_node_facts_report_nothing() -> None:
    # the H200 VM has no ConnectX: the node's check is not-applicable; the BMC's member replaces it
    got = h200('{connectx: "28.43.2566"}', {"connectx": {"NIC_0": "28.41.1000"}})
    assert (got["connectx-firmware"].status, got["connectx-firmware"].found) == (Status.DRIFT, "28.41.1000")
    assert got["connectx-firmware"].message.endswith("(BMC, Redfish FirmwareInventory)")
    # neither reports it: the node's own not-applicable check stays, once
    got = h200('{connectx: "28.43.2566"}', {})
    assert got["connectx-firmware"].message == "no device reports connectx firmware here (sysfs fw_ver)"


def test_a_bmc_that_could_not_be_read_fails_the_node_saying_why() -> None:
    fleet = compile_text(SPEC, "device.yaml").fleet
    assert fleet is not None
    report = with_bmc(fleet, compare(fleet, {"vm": FACTS}, hosts=["vm"]), {}, {"vm": "vm: cannot open a session"})
    (node,) = report.nodes
    check = node.checks[-1]
    assert (check.component, check.status, check.found) == ("bmc", Status.DRIFT, "unreachable")
    assert check.message == "the BMC could not be read, so its firmware is not attested: vm: cannot open a session"
