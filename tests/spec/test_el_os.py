"""EL node operating systems in spec.os (#42): accepted, EL8 refused with its reason, the
parts that cannot handle EL yet (baremetal.pxe, the lab on EL10) refuse it at a location, and
import names an EL node by its major release."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetspec.findings import Severity
from fleetspec.importer.facts import os_name
from fleetspec.lab.fleet import LabSetupError, lab_up
from fleetspec.pipeline import compile_text
from tests.conftest import EXAMPLES

ROCKY9 = (EXAMPLES / "rocky9.yaml").read_text()


def errors(text: str) -> list:
    return [f for f in compile_text(text, "fleet.yaml").located() if f.severity >= Severity.ERROR]


@pytest.mark.parametrize("os", ["rocky-9", "rhel-9", "almalinux-9"])
def test_the_el9_family_is_accepted(os: str) -> None:
    assert errors(ROCKY9.replace("os: rocky-9", f"os: {os}")) == []


@pytest.mark.parametrize("os", ["rocky-8", "rhel-8", "almalinux-8"])
def test_el8_is_refused_with_the_ansible_reason(os: str) -> None:
    found = errors(ROCKY9.replace("os: rocky-9", f"os: {os}"))
    assert [(f.rule, f.line, f.column) for f in found] == [("schema", 9, 7)]
    assert "ansible/ansible#82068" in found[0].message and "Python 3.6" in found[0].message
    assert "EL9" in found[0].message  # what to do


def test_pxe_on_an_el_fleet_is_refused_with_the_reason() -> None:
    text = ROCKY9.replace("  slurm:\n", '  baremetal:\n    pxe: {server: 10.77.0.1, interface: fsboot0, dhcp_range: '
                                          '"10.77.0.50,10.77.0.60,1h", image_url: "http://10.77.0.1:8089"}\n  slurm:\n', 1)
    found = errors(text)
    assert [f.path for f in found] == ["spec.baremetal"], [(f.path, f.message) for f in found]
    assert "debootstrap" in found[0].message and "kickstart" in found[0].message


# An EL10 fleet the catalog can pin (its EL10 rows: driver 580.167.08, CUDA 13.0.2, NCCL 2.28.3).
EL10 = """apiVersion: fleetspec.io/v1alpha1
kind: Fleet
metadata: {name: el10}
spec:
  os: rocky-10
  stacks:
    hopper: {driver: "580.167.08", cuda: "13.0.2", nccl: "2.28.3"}
  racks:
    - name: r01
      leaf: leaf-01
      nodes:
        - {hosts: "h100-[001-002]", gpu: {model: h100-sxm, count: 8}, stack: hopper, scheduler: kubernetes}
"""


def test_lab_up_refuses_an_el10_spec_at_spec_os(tmp_path: Path) -> None:
    """The lab's EL hosts are Rocky 9-shaped (tests/lab/test_el_host.py runs an EL9 fleet's lab)."""
    spec = tmp_path / "fleet.yaml"
    spec.write_text(EL10)
    with pytest.raises(LabSetupError) as exc:
        lab_up(spec, lab_dir=tmp_path / "lab")
    assert str(exc.value).startswith(f"{spec}:5:7: spec.os is rocky-10: the lab's EL hosts are shaped as Rocky Linux 9")
    assert "no module streams" in str(exc.value) and "rocky-9 copy" in str(exc.value)
    assert not (tmp_path / "lab").exists()  # refused before anything was made


@pytest.mark.parametrize(("ident", "version", "expected"), [
    ("rocky", "9.6", "rocky-9"), ("rhel", "9.4", "rhel-9"), ("almalinux", "10.0", "almalinux-10"),
    ("rocky", "8.10", "rocky-8"), ("ubuntu", "24.04", "ubuntu-24.04"), ("debian", "12", "debian-12"),
])  # fmt: skip
def test_import_names_an_el_node_by_its_major_release(ident: str, version: str, expected: str) -> None:
    # rocky-8 comes out as itself: the spec then refuses it with the reason above.
    assert os_name({"os": {"id": ident, "version_id": version}}) == expected


def test_the_schema_offers_the_el_family_and_not_el8() -> None:
    from fleetspec.tasks import spec_json_schema

    enum = spec_json_schema()["$defs"]["FleetBody"]["properties"]["os"]["enum"]
    assert {"rocky-9", "rhel-9", "almalinux-9", "rocky-10", "rhel-10", "almalinux-10"} <= set(enum)
    assert not {"rocky-8", "rhel-8"} & set(enum)
