"""The golden image, built from its rendered recipe and booted: a new node boots already
holding its tuple.

The recipe (``baremetal/golden/hopper.sh`` with ``hopper.pref``, as ``fleetspec render``
writes them) runs with mmdebstrap against Debian's mirror and the lab's stand-in vendor
repository (the fleet's ``packages.mirror``), cached per recipe (fleetspec/lab/golden.py).
A QEMU node then PXE-boots the rendered chain in a network namespace, iPXE fetches the
image's kernel and initrd over HTTP, live-boot fetches ``rootfs.squashfs`` (``fetch=``) and
boots it; over SSH, inside the node, the stack's pinned packages are installed at the pinned
versions and held, and the rendered apt preferences are in place.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path, PurePosixPath

import pytest

from fleetspec.lab import build_repo
from fleetspec.lab.fleet import repo_packages
from fleetspec.lab.golden import GoldenImage, ensure_golden_image
from fleetspec.packages import packages_for
from fleetspec.pipeline import compile_text
from fleetspec.render.baremetal import node_script_for_mac, render_baremetal
from fleetspec.render.writer import write_tree

from .netboot import ADDRESS, need_netboot, provisioning, qemu_node, started, wait_for

pytestmark = [pytest.mark.lab, pytest.mark.vm]

MAC = "52:54:00:aa:00:07"
SPEC = f"""\
apiVersion: fleetspec.io/v1alpha1
kind: Fleet
metadata: {{name: golden}}
spec:
  os: debian-12
  stacks:
    hopper: {{driver: "580.95.05", cuda: "13.0.2", nccl: "2.28.3"}}
  packages:
    mirror: {{uri: "file:/srv/fleetspec-repo", trusted: true}}
  racks:
    - name: r01
      nodes:
        - {{hosts: "gpu-[01-02]", gpu: {{model: h100-sxm, count: 1}}, stack: hopper, scheduler: slurm}}
  slurm: {{version: "22.05.8", controllers: ctl-01}}
  baremetal:
    pxe: {{server: {ADDRESS}, interface: fsboot0, dhcp_range: "10.77.0.50,10.77.0.60,1h",
          image_url: "http://{ADDRESS}:8089"}}
"""


@pytest.fixture(scope="module")
def golden(tmp_path_factory):  # type: ignore[no-untyped-def]
    need_netboot()
    result = compile_text(SPEC, "fleet.yaml")
    assert result.fleet is not None and result.valid, result.located()
    fleet = result.fleet
    files = render_baremetal(fleet)
    repo = tmp_path_factory.mktemp("repo")
    build_repo(repo_packages(fleet), repo)
    return fleet, files, ensure_golden_image(files, "hopper", repo)


def _ssh(run: list[str], image: GoldenImage, address: str, command: str, timeout: float = 60):  # type: ignore[no-untyped-def]
    return subprocess.run([*run, "ssh", "-q", "-i", str(image.ssh_key), "-o", "BatchMode=yes",
                           "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
                           "-o", "ConnectTimeout=5", f"root@{address}", command],
                          capture_output=True, text=True, timeout=timeout)


def test_a_node_boots_the_golden_image_already_holding_its_tuple(golden, tmp_path: Path) -> None:
    fleet, files, image = golden
    out = tmp_path / "out"
    write_tree({**files, PurePosixPath("baremetal/tftp/nodes") / f"{MAC.replace(':', '-')}.ipxe":
                node_script_for_mac("gpu-01")}, out)
    tftp = out / "baremetal" / "tftp"
    images = tmp_path / "images"
    images.mkdir()
    (images / "hopper").symlink_to(image.files)
    serial = tmp_path / "serial.log"
    started_at = time.monotonic()
    with provisioning(f"fsgold-{os.getpid()}", out / "baremetal" / "dnsmasq.conf", tftp, images, tmp_path) as (
            run, dhcp_log, http_log):
        logs = [dhcp_log, http_log, serial, tmp_path / "qemu.log"]
        with started(qemu_node(run, MAC, serial, memory_mb=1024), logs[3]):
            wait_for(http_log, "GET /hopper/rootfs.squashfs", 120, "live-boot fetched the root", logs)
            wait_for(serial, "login:", 420, "the golden image booted to a login prompt", logs)
            address = re.findall(rf"DHCPACK\(fsboot0\) (10\.77\.0\.\d+) {MAC}", dhcp_log.read_text())[-1]
            end = time.monotonic() + 120
            while (probe := _ssh(run, image, address, "true")).returncode != 0:
                assert time.monotonic() < end, f"no SSH to {address}: {probe.stderr}\n{serial.read_text()[-2000:]}"
                time.sleep(2)
            booted = time.monotonic() - started_at
            inside = _ssh(run, image, address, "cat /proc/cmdline; echo ---; "
                          "dpkg-query -W -f='${Package} ${Version} ${db:Status-Abbrev}\\n'; echo ---; "
                          "apt-mark showhold; echo ---; cat /etc/apt/preferences.d/fleetspec")
    assert inside.returncode == 0, inside.stderr
    cmdline, installed, held, preferences = inside.stdout.split("---\n")
    assert "fleetspec.node=gpu-01 fleetspec.stack=hopper" in cmdline and "fetch=" in cmdline
    versions = {line.split()[0]: line.split()[1:] for line in installed.splitlines()}
    pins = [p for p in packages_for(fleet.stacks[0], fleet.os, [fleet.nodes[0].gpu]) if p.condition is None]
    assert pins
    for pin in pins:
        # "hi": the selection is hold, the package installed at the pinned version
        assert versions.get(pin.name) == [pin.version, "hi"], (pin.name, versions.get(pin.name))
    assert sorted(held.split()) == sorted(p.name for p in pins)
    assert preferences == files[PurePosixPath("baremetal/golden/hopper.pref")]
    print(f"PXE to SSH in the golden image: {booted:.0f} s")
