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


def test_a_file_mirror_is_bound_read_only_into_the_image_root_only_while_apt_runs() -> None:
    # The recipe's apt runs chrooted in the image's root, which does not see the build host's
    # file: mirror: bound there read-only (a failed build's cleanup cannot delete through it)
    # and unbound before the root is packed (the image must not hold the mirror).
    mirror = '  packages:\n    mirror: {uri: "file:/srv/site-mirror", trusted: true}\n'
    fleet = compiled(spec("http://127.0.0.1:8000", extra=mirror + PXE)).fleet
    recipe = render_baremetal(fleet)[PurePosixPath("baremetal/golden/hopper.sh")]
    bind = recipe.index('mount --bind /srv/site-mirror "$1/srv/site-mirror" && mount -o remount,bind,ro')
    assert bind < recipe.index("apt-get update") < recipe.index('umount "$1/srv/site-mirror"') < recipe.index(
        "mksquashfs")
    assert "rm -rf --one-file-system" in recipe
    assert "deb [trusted=yes] file:/srv/site-mirror ./" in recipe
    plain = render_baremetal(compiled(spec("http://127.0.0.1:8000", extra=PXE)).fleet)
    assert "mount --bind" not in plain[PurePosixPath("baremetal/golden/hopper.sh")]


def test_the_image_takes_root_s_keys_from_its_second_argument_and_makes_host_keys_at_boot() -> None:
    recipe = render_baremetal(compiled(spec("http://127.0.0.1:8000", extra=PXE)).fleet)[
        PurePosixPath("baremetal/golden/hopper.sh")]
    assert 'cp "$KEYS" "$1/root/.ssh/authorized_keys"' in recipe
    assert 'rm -f "$1"/etc/ssh/ssh_host_*_key' in recipe
    # sshd -t (Debian's ExecStartPre) fails without host keys: the drop-in makes them first
    assert r"ExecStartPre=\nExecStartPre=/usr/bin/ssh-keygen -A\nExecStartPre=/usr/sbin/sshd -t" in recipe


def test_a_slurm_node_image_holds_slurmd_configless_and_no_munge_key() -> None:
    """SchedMD's packages at the fleet's release held with the tuple; slurmd told where its
    configuration comes from (the spec's controllers); the key munge's package makes at install
    deleted (every node booted from the image would share it) and munge and slurmd left for the
    join step; dbus for slurmd's cgroup/v2 plugin."""
    from fleetspec.packages import slurm_packages

    fleet = compiled(spec("http://127.0.0.1:8000", extra=PXE)).fleet
    recipe = render_baremetal(fleet)[PurePosixPath("baremetal/golden/hopper.sh")]
    slurm = slurm_packages(fleet.slurm.version, ["slurm_node"])
    assert [p.name for p in slurm] == ["slurm-smd", "slurm-smd-client", "slurm-smd-slurmd"]
    assert all(p.spec in recipe for p in slurm) and " ".join(p.name for p in slurm) in recipe
    assert "--include=" in recipe and ",munge,dbus " in recipe
    assert 'SLURMD_OPTIONS="--conf-server ctl-01"' in recipe
    assert "ConditionPathExists=\n" in recipe
    assert recipe.index('rm -f "$1/etc/munge/munge.key"') > recipe.index("apt-get install")
    assert 'chroot "$1" systemctl disable munge.service slurmd.service' in recipe
    assert "fleetspec.node=" in recipe and "sysinit.target.wants/fleetspec-node-name.service" in recipe
    assert 'echo "# fleetspec: filled from DHCP at boot (live-boot)" > "$1/etc/resolv.conf"' in recipe


def test_configless_and_the_sites_dns_come_with_the_boot_chain() -> None:
    from fleetspec.render.slurm import render_slurm

    with_dns = PXE.replace('image_url: "https://', 'dns: [10.77.0.2, 10.77.0.3], image_url: "https://')
    fleet = compiled(spec("http://127.0.0.1:8000", extra=with_dns)).fleet
    assert "dhcp-option=option:dns-server,10.77.0.2,10.77.0.3\n" in render_baremetal(fleet)[
        PurePosixPath("baremetal/dnsmasq.conf")]
    conf = {p.name: t for p, t in render_slurm(fleet).items()}["slurm.conf"]
    assert "SlurmctldParameters=enable_configless\n" in conf
    plain = compiled(spec("http://127.0.0.1:8000")).fleet
    assert "enable_configless" not in {p.name: t for p, t in render_slurm(plain).items()}["slurm.conf"]
    assert "dns-server" not in render_baremetal(compiled(spec("http://127.0.0.1:8000", extra=PXE)).fleet)[
        PurePosixPath("baremetal/dnsmasq.conf")]
