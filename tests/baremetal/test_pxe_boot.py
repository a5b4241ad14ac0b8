"""The rendered boot chain, booted: a QEMU virtual node whose MAC is the one gpu-01's BMC
reports (the sushy-emulator) PXE-boots in a network namespace this test makes, from the
rendered dnsmasq.conf. QEMU's NIC option ROM is iPXE (Debian's ipxe-qemu): it gets boot.ipxe
over TFTP, which chains nodes/<mac>.ipxe (written from the BMC's inventory), which chains
the node's script, which fetches its stack's golden image kernel over HTTP. Booting the built
image itself is test_end_to_end.py (a lab test: it builds the image once per recipe)."""

from __future__ import annotations

import os

from fleetspec.baremetal.run import mac_scripts, observe
from fleetspec.render.baremetal import render_baremetal
from fleetspec.render.writer import write_tree

from .emulator import PASSWORD
from .fleets import compiled, spec
from .netboot import ADDRESS, need_netboot, provisioning, qemu_node, started, wait_for

PXE = f"""\
  baremetal:
    pxe: {{server: {ADDRESS}, interface: fsboot0, dhcp_range: "10.77.0.50,10.77.0.60,1h", image_url: "http://{ADDRESS}:8089"}}
"""


def test_a_virtual_node_pxe_boots_the_rendered_chain_to_its_golden_image(bmc, tmp_path, monkeypatch) -> None:
    need_netboot()
    monkeypatch.setenv("FLEETSPEC_TEST_BMC_PASSWORD", PASSWORD)
    result = compiled(spec(bmc.endpoint, extra=PXE))
    fleet = result.fleet
    assert fleet is not None and result.valid, result.located()
    out = tmp_path / "out"
    observation = observe(fleet, tmp_path, hosts=["gpu-01"])
    write_tree({**render_baremetal(fleet), **mac_scripts(fleet, observation)}, out)
    tftp = out / "baremetal" / "tftp"
    assert (tftp / "nodes" / "52-54-00-aa-00-01.ipxe").read_text() == "#!ipxe\nchain /hosts/gpu-01.ipxe\n"
    images = tmp_path / "images"
    (images / "hopper").mkdir(parents=True)
    serial = tmp_path / "serial.log"
    with provisioning(f"fsboot-{os.getpid()}", out / "baremetal" / "dnsmasq.conf", tftp, images, tmp_path) as (
            run, dhcp_log, http_log):
        logs = [dhcp_log, http_log, serial, tmp_path / "qemu.log"]
        with started(qemu_node(run, "52:54:00:aa:00:01", serial), logs[3]):
            wait_for(logs[0], "sent " + str(tftp / "boot.ipxe"), 60, "iPXE fetched boot.ipxe", logs)
            wait_for(logs[0], "sent " + str(tftp / "hosts" / "gpu-01.ipxe"), 30,
                     "boot.ipxe chained the node's script", logs)
            wait_for(logs[1], "GET /hopper/vmlinuz", 30, "the node's script fetched its golden kernel", logs)
    dhcp = logs[0].read_text()
    assert "52:54:00:aa:00:01" in dhcp and "DHCPACK" in dhcp
    assert "sent " + str(tftp / "nodes" / "52-54-00-aa-00-01.ipxe") in dhcp  # found by the MAC the BMC reported
