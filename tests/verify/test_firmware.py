"""verify attests the stack's firmware pins: VBIOS against what nvidia-smi reported on a real
H200 (tests/data/fixtures/h200-node), ConnectX firmware against each mlx5 device's fw_ver."""

from __future__ import annotations

import copy
import json

from fleetspec.pipeline import compile_text
from fleetspec.verify.compare import compare
from tests.conftest import DATA
from tests.verify.test_real_h200 import SPEC

FACTS = json.loads((DATA / "fixtures" / "h200-node" / "collector.json").read_text())


def firmware(pins: str, facts: dict = FACTS) -> dict:
    text = SPEC.replace('nccl: "2.28.3"}', f'nccl: "2.28.3", firmware: {pins}}}')
    result = compile_text(text, "device.yaml")
    assert result.fleet is not None, result.located()
    (node,) = compare(result.fleet, {"vm": facts}, hosts=["vm"]).nodes
    return {c.component: (c.status.value, c.found, c.message) for c in node.checks if c.component.endswith("-firmware")}


def test_the_vbios_the_h200_reported_is_attested() -> None:
    got = firmware('{vbios: "96.00.A5.00.1A"}')
    assert got == {"vbios-firmware": ("ok", "96.00.A5.00.1A", "all 1 devices run vbios firmware 96.00.A5.00.1A "
                                      "(nvidia-smi)")}


def test_another_vbios_is_drift_with_a_drain_reboot_to_repair() -> None:
    text = SPEC.replace('nccl: "2.28.3"}', 'nccl: "2.28.3", firmware: {vbios: "96.00.74.00.01"}}')
    fleet = compile_text(text, "device.yaml").fleet
    (node,) = compare(fleet, {"vm": FACTS}, hosts=["vm"]).nodes
    (check,) = [c for c in node.checks if c.component == "vbios-firmware"]
    assert (check.status.value, check.found, check.disruption) == ("drift", "96.00.A5.00.1A", "drain-reboot")
    assert "00000000:00:06.0: 96.00.A5.00.1A" in check.message


def test_connectx_firmware_is_compared_per_device_and_absent_devices_are_not_drift() -> None:
    assert firmware('{connectx: "28.43.2566"}')["connectx-firmware"][0] == "not-applicable"  # no HCA on that VM
    facts = copy.deepcopy(FACTS)
    facts["fabric"]["infiniband"] = [{"device": "mlx5_0", "hca_type": "MT4129", "fw_ver": "28.43.2566", "ports": []},
                                     {"device": "mlx5_1", "hca_type": "MT4129", "fw_ver": "28.41.1000", "ports": []}]
    status, found, message = firmware('{connectx: "28.43.2566"}', facts)["connectx-firmware"]
    assert (status, found) == ("drift", "28.41.1000, 28.43.2566")
    assert message.startswith("1 of 2 devices run other connectx firmware (mlx5_1: 28.41.1000)")
