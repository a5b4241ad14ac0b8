"""The boot chain and golden image recipe as rendered (pure): what the PXE test boots, and the
recipe that installs the stack's pinned packages held at their builds."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import PurePosixPath

from fleetspec.packages import packages_for
from fleetspec.render import render_all
from fleetspec.render.baremetal import render_baremetal

from .fleets import compiled, spec

PXE = """\
  baremetal:
    pxe: {server: 10.77.0.1, interface: eth1, dhcp_range: "10.77.0.50,10.77.0.60", image_url: "https://images.example.com/golden/"}
"""


def test_the_chain_and_the_recipe_render_only_with_a_pxe_section() -> None:
    plain = compiled(spec("http://127.0.0.1:8000")).fleet
    assert render_baremetal(plain) == {}
    fleet = compiled(spec("http://127.0.0.1:8000", extra=PXE)).fleet
    files = render_baremetal(fleet)
    assert set(files) == {PurePosixPath(p) for p in (
        "baremetal/dnsmasq.conf", "baremetal/tftp/boot.ipxe", "baremetal/tftp/hosts/gpu-01.ipxe",
        "baremetal/tftp/hosts/gpu-02.ipxe", "baremetal/tftp/hosts/spare-01.ipxe", "baremetal/golden/hopper.sh",
        "baremetal/golden/hopper.pref")}
    assert set(files) <= set(render_all(fleet))
    conf = files[PurePosixPath("baremetal/dnsmasq.conf")]
    assert "interface=eth1\n" in conf and "dhcp-boot=tag:ipxe,boot.ipxe,,10.77.0.1\n" in conf
    node = files[PurePosixPath("baremetal/tftp/hosts/gpu-02.ipxe")]
    assert "kernel https://images.example.com/golden/hopper/vmlinuz" in node  # the trailing slash is dropped
    assert "fleetspec.node=gpu-02 fleetspec.stack=hopper fleetspec.partition=nvidia-hopper" in node


def test_the_golden_recipe_installs_and_holds_every_unconditional_pin() -> None:
    fleet = compiled(spec("http://127.0.0.1:8000", extra=PXE)).fleet
    recipe = render_baremetal(fleet)[PurePosixPath("baremetal/golden/hopper.sh")]
    pins = [p for p in packages_for(fleet.stack("hopper"), fleet.os, [n.gpu for n in fleet.nodes]) if p.condition is None]
    assert pins and all(p.spec in recipe for p in pins)
    assert "apt-mark hold " + " ".join(p.name for p in pins) in recipe
    assert "developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/x86_64/" in recipe
    if shutil.which("sh"):
        assert subprocess.run(["sh", "-n"], input=recipe, text=True).returncode == 0  # it parses as shell
