"""The rendered boot chain, booted: a QEMU virtual node whose MAC is the one gpu-01's BMC
reports (the sushy-emulator) PXE-boots in a network namespace this test makes, from the
rendered dnsmasq.conf. QEMU's NIC option ROM is iPXE (Debian's ipxe-qemu): it gets boot.ipxe
over TFTP, which chains nodes/<mac>.ipxe (written from the BMC's inventory), which chains
the node's script, which fetches its stack's golden image kernel over HTTP. What the image
then does needs a built image (its recipe is rendered, not built here: docs/bare-metal.md)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fleetspec.baremetal.run import mac_scripts, observe
from fleetspec.render.baremetal import render_baremetal
from fleetspec.render.writer import write_tree
from tests.conftest import unavailable

from .emulator import PASSWORD
from .fleets import compiled, spec

ADDRESS = "10.77.0.1"
PXE = f"""\
  baremetal:
    pxe: {{server: {ADDRESS}, interface: fsboot0, dhcp_range: "10.77.0.50,10.77.0.60,1h", image_url: "http://{ADDRESS}:8089"}}
"""


def _need() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces, tap devices)")
    missing = [tool for tool in ("qemu-system-x86_64", "dnsmasq", "ip") if shutil.which(tool) is None]
    if missing or not Path("/usr/lib/ipxe/qemu/pxe-e1000.rom").exists():
        unavailable(f"the boot chain test needs qemu-system-x86, ipxe-qemu and dnsmasq-base (missing: {missing})")


@contextlib.contextmanager
def namespace(name: str):
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        for argv in (["ip", "link", "set", "lo", "up"], ["ip", "tuntap", "add", "dev", "fsboot0", "mode", "tap"],
                     ["ip", "addr", "add", f"{ADDRESS}/24", "dev", "fsboot0"], ["ip", "link", "set", "fsboot0", "up"]):
            subprocess.run(["ip", "netns", "exec", name, *argv], check=True)
        yield name
    finally:
        subprocess.run(["ip", "netns", "delete", name], check=False)


@contextlib.contextmanager
def started(argv: list[str], log: Path):
    with open(log, "wb") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        yield process
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def wait_for(path: Path, text: str, timeout: float, what: str, logs: list[Path]) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if path.exists() and text in path.read_text(errors="replace"):
            return
        time.sleep(0.3)
    shown = "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-1500:]}" for p in logs if p.exists())
    raise AssertionError(f"{what}: '{text}' never appeared in {path.name}\n{shown}")


def test_a_virtual_node_pxe_boots_the_rendered_chain_to_its_golden_image(bmc, tmp_path, monkeypatch) -> None:
    _need()
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
    logs = [tmp_path / n for n in ("dnsmasq.log", "http.log", "serial.log", "qemu.log")]
    name = f"fsboot-{os.getpid()}"
    with namespace(name):
        run = ["ip", "netns", "exec", name]
        dnsmasq = [*run, "dnsmasq", "--keep-in-foreground", f"--conf-file={out / 'baremetal' / 'dnsmasq.conf'}",
                   f"--tftp-root={tftp}", "--user=root", f"--pid-file={tmp_path / 'dnsmasq.pid'}",
                   f"--dhcp-leasefile={tmp_path / 'leases'}", f"--log-facility={logs[0]}"]
        http = [*run, sys.executable, "-m", "http.server", "--bind", ADDRESS, "--directory", str(images), "8089"]
        # TCG, not KVM: on this machine's nested KVM the NIC's iPXE ROM never gets to DHCP; the
        # firmware and iPXE are small enough that emulation boots them in seconds.
        qemu = [*run, "qemu-system-x86_64", "-accel", "tcg", "-m", "128", "-display", "none", "-no-reboot",
                "-netdev", "tap,id=n0,ifname=fsboot0,script=no,downscript=no",
                "-device", "e1000,netdev=n0,mac=52:54:00:aa:00:01",
                "-boot", "n", "-serial", f"file:{logs[2]}"]
        with started(dnsmasq, tmp_path / "dnsmasq.out"), started(http, logs[1]):
            wait_for(logs[0], "started, version", 10, "dnsmasq", logs)
            with started(qemu, logs[3]):
                wait_for(logs[0], "sent " + str(tftp / "boot.ipxe"), 60, "iPXE fetched boot.ipxe", logs)
                wait_for(logs[0], "sent " + str(tftp / "hosts" / "gpu-01.ipxe"), 30,
                         "boot.ipxe chained the node's script", logs)
                wait_for(logs[1], "GET /hopper/vmlinuz", 30, "the node's script fetched its golden kernel", logs)
    dhcp = logs[0].read_text()
    assert "52:54:00:aa:00:01" in dhcp and "DHCPACK" in dhcp
    assert "sent " + str(tftp / "nodes" / "52-54-00-aa-00-01.ipxe") in dhcp  # found by the MAC the BMC reported
