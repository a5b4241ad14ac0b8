"""Against the stock ``sushy-emulator`` (PyPI sushy-tools, its fake driver as shipped, no
harness): what a Redfish BMC nobody on the project wrote does with what apply sets, read back.
Its fake driver takes a power change after a random 1 to 11 s (the old state is reported
until then: no PoweringOn), and its System always answers ``BootSourceOverrideEnabled:
Continuous`` (templates/system.json), whatever it was asked: apply's read-back must catch that
rather than report a boot-once that the BMC does not hold."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from fleetspec.baremetal.run import apply_bmcs, observe, plan_bmcs
from fleetspec.cli import app

from .emulator import PASSWORD, running, system
from .fleets import compiled

SYSTEMS = [system("gpu-01", 51, "52:54:00:ff:00:01", power="Off"), system("gpu-02", 52, "52:54:00:ff:00:02"),
           system("gpu-03", 53, "52:54:00:ff:00:03", power="Off")]


@pytest.fixture(autouse=True)
def _password(monkeypatch):
    monkeypatch.setenv("FLEETSPEC_TEST_BMC_PASSWORD", PASSWORD)


@pytest.fixture(scope="module")
def stock(tmp_path_factory):
    with running(tmp_path_factory.mktemp("stock"), SYSTEMS, stock=True) as emulator:
        yield emulator


def spec(endpoint: str, hosts: str = "gpu-[01-02]") -> str:
    return f"""\
apiVersion: fleetspec.io/v1alpha1
kind: Fleet
metadata: {{name: stock}}
spec:
  os: ubuntu-24.04
  stacks:
    hopper: {{driver: "580.95.05", cuda: "13.0.2", nccl: "2.28.3"}}
  racks:
    - name: r01
      bmc:
        endpoint: "{endpoint}"
        system: "{{host}}"
        username: admin
        password: env:FLEETSPEC_TEST_BMC_PASSWORD
      nodes:
        - hosts: "{hosts}"
          gpu: {{model: h100-sxm, count: 8}}
          stack: hopper
          scheduler: slurm
  slurm: {{version: "24.11.1", controllers: ctl-01}}
"""


def test_the_stock_emulator_reads_and_plans(stock, tmp_path) -> None:
    fleet = compiled(spec(stock.endpoint)).fleet
    observation = observe(fleet, tmp_path)
    assert observation.unreachable == {}
    seen = observation.seen["gpu-02"]
    assert (seen.power, seen.boot_enabled) == ("On", "Continuous")
    assert seen.sockets is None and seen.gpus is None  # its fake driver serves no processors
    plan, findings = plan_bmcs(fleet, observation)
    assert findings == []
    assert [c.host for c in plan.changes] == ["gpu-01"]  # off: powered on, PXE once


def test_boot_once_is_read_back_and_a_bmc_that_holds_continuous_fails_the_node(stock, tmp_path) -> None:
    fleet = compiled(spec(stock.endpoint, hosts="gpu-01")).fleet
    plan, _ = plan_bmcs(fleet, observe(fleet, tmp_path))
    lines: list[str] = []
    result = apply_bmcs(plan, tmp_path, control=None, on_line=lines.append)
    assert result.failed == {"gpu-01": "gpu-01: asked to boot once from the network, the BMC holds boot override "
                                       "Pxe/Continuous (BootSourceOverrideTarget/Enabled), not Pxe/Once: not powered "
                                       "on. Set the override in the BMC, or boot the node from its console"}
    assert lines == []  # nothing reported done
    assert stock.system("gpu-01")["power_state"] == "Off"  # never powered on into an endless PXE loop


def test_power_is_read_back_until_the_bmc_reports_it(stock, tmp_path, monkeypatch) -> None:
    from fleetspec.baremetal import run
    from fleetspec.baremetal.redfish import Session

    monkeypatch.setattr(run, "READBACK_POLL_S", 0.5)
    fleet = compiled(spec(stock.endpoint, hosts="gpu-03")).fleet
    with Session(fleet.baremetal.bmc("gpu-03"), tmp_path) as session:
        session.power("On")
        assert session.read().power == "Off"  # the fake driver takes it 1 to 11 s later
        run._power_read_back(session, 30)
        assert session.read().power == "On"


def test_an_unreadable_bmc_is_an_error_in_plan_never_a_match(stock, tmp_path) -> None:
    path = tmp_path / "fleet.yaml"
    path.write_text(spec(stock.endpoint).replace('system: "{host}"', 'system: "{host}-x"'))
    done = CliRunner().invoke(app, ["baremetal", "plan", str(path)])
    assert done.exit_code == 1
    assert "No changes" not in done.stdout and "matches" not in done.stdout
    assert done.stdout.strip() == "No plan: 2 BMC(s) could not be read (the errors above); 0 read"
    assert "error: gpu-01: the BMC at " in done.stderr and "has no system 'gpu-01-x'" in done.stderr
