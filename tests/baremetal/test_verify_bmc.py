"""``fleetspec verify --bmc`` and ``baremetal join``'s verify read each node's BMC over Redfish
(sushy-emulator with tests/baremetal/bmc_emulator.py's FirmwareInventory, ``FLEETSPEC_PUSH``)
and attest the firmware it reports against the stack's pins: gpu-01's BMC runs 1.10 where the
stack pins 1.20 (drift), its BIOS and GPUs hold their pins (ok); its NVSwitch is not attested:
the service serves two Systems, so the fabric switch its inventory names cannot be told to be
this node's (not-applicable, saying so); gpu-02 holds every pin; spare-01 has no system behind
the BMC endpoint (its BMC cannot be read: drift saying why)."""

from __future__ import annotations

import json
import sys

import pytest
from typer.testing import CliRunner

from fleetspec.cli import app

from .emulator import PASSWORD, running, system
from .fleets import compiled, spec

PINNED = {"BMC": "1.20", "GPU_SXM_1": "96.00.B0.00.01", "GPU_SXM_2": "96.00.B0.00.01", "NVSwitch_0": "1.0.0"}
FIRMWARE = ', firmware: {bmc: "1.20", bios: "2.4.1", nvswitch: "1.0.0", vbios: "96.00.B0.00.01"}'


@pytest.fixture(autouse=True)
def _password(monkeypatch):
    monkeypatch.setenv("FLEETSPEC_TEST_BMC_PASSWORD", PASSWORD)


@pytest.fixture(scope="module")
def spec_file(tmp_path_factory):
    root = tmp_path_factory.mktemp("verify-bmc")
    systems = [system("gpu-01", 41, "52:54:00:ee:00:01", inventory={**PINNED, "BMC": "1.10"}),
               system("gpu-02", 42, "52:54:00:ee:00:02", inventory=PINNED)]
    with running(root / "bmc", systems, "FLEETSPEC_PUSH = True\n") as bmc:
        path = root / "fleet.yaml"
        path.write_text(spec(bmc.endpoint, stack_extra=FIRMWARE, gpus=2))
        yield path


def firmware_checks(node: dict) -> dict:
    return {c["component"]: (c["status"], c["found"]) for c in node["checks"]
            if c["component"].endswith("-firmware") or c["component"] == "bmc"}


def test_verify_bmc_attests_the_firmware_each_bmc_reports(spec_file, tmp_path) -> None:
    done = CliRunner().invoke(app, ["verify", str(spec_file), "--facts", str(tmp_path), "--bmc", "--format", "json"])
    assert done.exit_code == 1, done.output
    nodes = {n["hostname"]: n for n in json.loads(done.stdout)["nodes"]}
    assert firmware_checks(nodes["gpu-01"]) == {"bios-firmware": ("ok", "2.4.1"), "bmc-firmware": ("drift", "1.10"),
                                                "nvswitch-firmware": ("not-applicable", None),
                                                "vbios-firmware": ("ok", "96.00.B0.00.01")}
    (drift,) = [c for c in nodes["gpu-01"]["checks"] if c["component"] == "bmc-firmware"]
    assert drift["message"] == ("the BMC reports bmc firmware 1.10 (BMC_0041: 1.10), the stack pins 1.20: "
                                "`fleetspec baremetal apply` updates it (Redfish UpdateService) (BMC, Redfish "
                                "FirmwareInventory)")
    (switch,) = [c for c in nodes["gpu-01"]["checks"] if c["component"] == "nvswitch-firmware"]
    assert "the service serves several Systems, so the fabric switches its inventory names cannot be told to be " \
           "this node's" in switch["message"]
    assert set(firmware_checks(nodes["gpu-02"]).values()) == {("ok", "2.4.1"), ("ok", "1.20"), ("not-applicable", None),
                                                             ("ok", "96.00.B0.00.01")}
    (unread,) = [c for c in nodes["spare-01"]["checks"] if c["component"] == "bmc"]
    assert unread["status"] == "drift"
    assert unread["message"].startswith("the BMC could not be read, so its firmware is not attested: spare-01: "
                                        "the BMC at http://127.0.0.1:")
    assert unread["message"].endswith("has no system 'spare-01' (2 systems there); check bmc.system")
    assert PASSWORD not in done.output


def test_without_bmc_verify_reads_no_bmc(spec_file, tmp_path) -> None:
    done = CliRunner().invoke(app, ["verify", str(spec_file), "--facts", str(tmp_path), "--format", "json"])
    nodes = json.loads(done.stdout)["nodes"]
    assert all(firmware_checks(n) == {} for n in nodes)  # no facts, no BMC: nothing attested


def test_verify_bmc_on_a_spec_without_a_bmc_is_an_error(tmp_path) -> None:
    from tests.verify.test_real_h200 import SPEC

    path = tmp_path / "fleet.yaml"
    path.write_text(SPEC)
    done = CliRunner().invoke(app, ["verify", str(path), "--facts", str(tmp_path), "--bmc"])
    assert done.exit_code == 1
    assert done.stderr.strip() == ("error: --bmc: the spec names no BMC (a bmc section on a rack or node group): "
                                   "there is no firmware to read over Redfish")


def test_join_verifies_node_facts_and_the_bmcs_firmware(spec_file, tmp_path) -> None:
    """``baremetal join``'s verify: facts collected through Ansible (gpu-01 is this machine),
    the BMC's firmware with them; the node's own facts report no GPU here, so the BMC's
    reading of the GPUs' VBIOS stands in."""
    import ansible_runner  # noqa: F401 - the test extra installs it

    from fleetspec.verify.run import verify_joining

    inventory = tmp_path / "hosts.ini"
    inventory.write_text(f"gpu-01 ansible_connection=local ansible_python_interpreter={sys.executable}\n")
    fleet = compiled(spec_file.read_text()).fleet
    report = verify_joining(fleet, ["gpu-01"], [inventory], spec_file.parent, forks=1)
    (node,) = report.nodes
    checks = {c.component: c for c in node.checks}
    assert checks["facts"].status.value == "ok"
    assert (checks["bmc-firmware"].status.value, checks["bmc-firmware"].found) == ("drift", "1.10")
    assert checks["vbios-firmware"].message.endswith("(BMC, Redfish FirmwareInventory)")
    assert [c.component for c in node.checks].count("vbios-firmware") == 1
