"""A provisioning network for virtual nodes: a network namespace with a tap device the node's
QEMU NIC plugs into, and the processes (dnsmasq, an HTTP server, QEMU) started in it
(tests/baremetal/test_pxe_boot.py, test_end_to_end.py)."""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import unavailable

ADDRESS = "10.77.0.1"


def need_netboot() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces, tap devices)")
    missing = [tool for tool in ("qemu-system-x86_64", "dnsmasq", "ip") if shutil.which(tool) is None]
    if missing or not Path("/usr/lib/ipxe/qemu/pxe-e1000.rom").exists():
        unavailable(f"the boot chain test needs qemu-system-x86, ipxe-qemu and dnsmasq-base (missing: {missing})")


@contextlib.contextmanager
def switched(name: str, taps: list[str]):
    """The namespace ``name`` with a bridge ``fsboot0`` (ADDRESS) and ``taps`` plugged into it:
    a provisioning network with several nodes on it."""
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        steps = [["ip", "link", "set", "lo", "up"], ["ip", "link", "add", "fsboot0", "type", "bridge"],
                 ["ip", "addr", "add", f"{ADDRESS}/24", "dev", "fsboot0"], ["ip", "link", "set", "fsboot0", "up"]]
        for tap in taps:
            steps += [["ip", "tuntap", "add", "dev", tap, "mode", "tap"], ["ip", "link", "set", tap, "master", "fsboot0"],
                      ["ip", "link", "set", tap, "up"]]
        for argv in steps:
            subprocess.run(["ip", "netns", "exec", name, *argv], check=True)
        yield name
    finally:
        subprocess.run(["ip", "netns", "delete", name], check=False)


CLONE_NEWNET = 0x40000000


@contextlib.contextmanager
def inside(name: str):
    """This thread (and what it starts: processes, threads) in the network namespace ``name``;
    back in its own namespace after. So the test and the fleetspec commands it runs reach the
    provisioning network's addresses, and its loopback is the namespace's own."""
    libc = ctypes.CDLL(None, use_errno=True)
    with open("/proc/thread-self/ns/net") as home, open(f"/run/netns/{name}") as there:
        if libc.setns(there.fileno(), CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns into {name}")
        try:
            yield
        finally:
            if libc.setns(home.fileno(), CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "setns back")


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


@contextlib.contextmanager
def provisioning(name: str, conf: Path, tftp: Path, images: Path, workdir: Path):
    """The namespace ``name`` (a bridge, one tap: ``fsnode1``) with the rendered dnsmasq (``conf``, TFTP from ``tftp``) and an
    HTTP server for ``images`` on ADDRESS:8089 running; yields the namespace's command prefix
    and the logs: dnsmasq's and the HTTP server's."""
    dhcp, http = workdir / "dnsmasq.log", workdir / "http.log"
    with switched(name, ["fsnode1"]):
        run = ["ip", "netns", "exec", name]
        dnsmasq = [*run, "dnsmasq", "--keep-in-foreground", f"--conf-file={conf}", f"--tftp-root={tftp}",
                   "--user=root", f"--pid-file={workdir / 'dnsmasq.pid'}", f"--dhcp-leasefile={workdir / 'leases'}",
                   f"--log-facility={dhcp}"]
        server = [*run, sys.executable, "-m", "http.server", "--bind", ADDRESS, "--directory", str(images), "8089"]
        with started(dnsmasq, workdir / "dnsmasq.out"), started(server, http):
            wait_for(dhcp, "started, version", 10, "dnsmasq", [dhcp])
            yield run, dhcp, http


def qemu_node(run: list[str], mac: str, serial: Path, memory_mb: int = 128, tap: str = "fsnode1") -> list[str]:
    """A virtual node on a tap of the namespace's bridge: PXE first (its e1000's ROM is iPXE), serial to a file.
    TCG, not KVM: on this machine's nested KVM the NIC's iPXE ROM never gets to DHCP."""
    return [*run, "qemu-system-x86_64", "-accel", "tcg", "-m", str(memory_mb), "-display", "none", "-no-reboot",
            "-netdev", f"tap,id=n0,ifname={tap},script=no,downscript=no", "-device", f"e1000,netdev=n0,mac={mac}",
            "-boot", "n", "-serial", f"file:{serial}"]
