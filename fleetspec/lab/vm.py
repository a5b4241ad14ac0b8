"""A lab host with a kernel of its own: a Debian bookworm VM under QEMU/KVM.

nspawn lab hosts share this machine's kernel, so nothing that loads a kernel module or
reboots can be rehearsed on them. This VM can: it boots Debian's own kernel
(linux-image-amd64, direct -kernel/-initrd boot), reboots for real (QEMU restarts the
same kernel, the disk keeps what the guest wrote: -snapshot is per QEMU process), and
loads the stand-in driver modules built against that kernel when the image is built
(:func:`standin_modules`). It is reached over SSH on a 127.0.0.1 port forward only; the
guest reaches this machine's loopback as 10.0.2.2 (QEMU user networking), where a test
serves its apt repository.

Cached like the nspawn base (base.py): one build per package list, kept in the lab cache.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from fleetspec.lab.base import SUITE, LabUnavailable, default_cache_dir
from fleetspec.lab.slurm import free_ports

DEFAULT_MIRROR = "http://deb.debian.org/debian"
# A node Ansible can drive (python3-apt), with a kernel, its headers and a compiler to
# build the stand-in modules against it, kmod (modprobe/rmmod/modinfo), initramfs-tools
# (update-initramfs after the nouveau blacklist) and mokutil (the Secure Boot fact).
VM_PACKAGES: tuple[str, ...] = (
    "systemd-sysv", "dbus", "udev", "python3", "python3-apt", "openssh-server", "iproute2", "procps", "kmod",
    "linux-image-amd64", "linux-headers-amd64", "initramfs-tools", "gcc", "make", "libc6-dev", "mokutil",
)
MASKED_UNITS: tuple[str, ...] = ("apt-daily.timer", "apt-daily-upgrade.timer", "e2scrub_reap.service")
# The address the guest sees this machine's loopback at (QEMU user networking).
HOST_FROM_GUEST = "10.0.2.2"
# modules-load.d is not used: the stand-ins load only when modprobe'd, as the real driver
# does on a GPU-less machine.
_NETWORK = "[Match]\\nName=en*\\n[Network]\\nDHCP=yes\\n"
# The initramfs holds only what mounts the VM's root (virtio disk, ext4): MODULES=list
# (initramfs-tools(7)) with the modules listed, instead of Debian's MODULES=most (every
# storage and DRM driver, ~36 MB). The boot initrd is built that way in the image, and the
# role's update-initramfs -u in the guest takes seconds under emulation, not 20 minutes.
INITRAMFS_MODULES: tuple[str, ...] = ("virtio_pci", "virtio_blk", "ext4", "crc32c_generic")
# Module trees of the image's kernel that no lab test loads (no such hardware in the VM):
# removed, so the depmod -a each driver package's postinst runs (as DKMS's does) scans
# ~2,100 modules instead of ~4,000. nouveau and what it needs stay: drivers/gpu, i2c, acpi
# video, platform/x86 wmi, and drivers/media's cec and rc (drm_display_helper uses cec):
# depmod drops a module whose dependency is gone, so a pruned dependency fails modprobe.
PRUNED_MODULES: tuple[str, ...] = (
    "drivers/media/!(cec|rc)", "drivers/iio", "sound", "drivers/net/wireless", "drivers/net/ethernet", "drivers/net/can",
    "drivers/net/usb", "drivers/comedi", "drivers/mtd", "drivers/hid", "drivers/usb", "drivers/staging",
    "drivers/infiniband", "drivers/isdn", "drivers/bluetooth", "net/bluetooth", "net/wireless", "net/mac80211",
)


def vm_key(packages: tuple[str, ...] = VM_PACKAGES) -> str:
    text = "\n".join((SUITE, *sorted(packages), *MASKED_UNITS, _NETWORK, *INITRAMFS_MODULES, *PRUNED_MODULES, "vm-layout-2"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class VmImage:
    """A built image: the root filesystem (ext4, raw), its kernel and initrd, the root
    SSH key that logs in, and the kernel release (for modules built against it)."""

    root: Path

    @property
    def disk(self) -> Path:
        return self.root / "disk.raw"

    @property
    def kernel(self) -> Path:
        return self.root / "vmlinuz"

    @property
    def initrd(self) -> Path:
        return self.root / "initrd.img"

    @property
    def ssh_key(self) -> Path:
        return self.root / "id_ed25519"

    @property
    def kernel_release(self) -> str:
        return (self.root / "kernel-release").read_text().strip()

    @property
    def build_tree(self) -> Path:
        """The rootfs the disk was made from (kept: modules are compiled in it by chroot)."""
        return self.root / "rootfs"


def _hook() -> str:
    """mmdebstrap customize hook ("$1" is the root): fixed text, no user values."""
    masks = " ".join(MASKED_UNITS)
    modules = " ".join(INITRAMFS_MODULES)
    pruned = " ".join(PRUNED_MODULES)
    return (
        'rm -f "$1/etc/apt/sources.list"; echo fleetspec-vm > "$1/etc/hostname"; '
        'echo "/dev/vda / ext4 rw,discard 0 1" > "$1/etc/fstab"; '
        f'for u in {masks}; do ln -sf /dev/null "$1/etc/systemd/system/$u"; done; '
        f'printf "{_NETWORK}" > "$1/etc/systemd/network/en.network"; '
        'ln -sf /lib/systemd/system/systemd-networkd.service '
        '"$1/etc/systemd/system/multi-user.target.wants/systemd-networkd.service"; '
        'mkdir -p "$1/root/.ssh"; chmod 700 "$1/root/.ssh"; '
        'passwd --root "$1" -d root >/dev/null; '
        'echo MODULES=list > "$1/etc/initramfs-tools/conf.d/fleetspec-vm.conf"; '
        f'printf "%s\\n" {modules} >> "$1/etc/initramfs-tools/modules"; '
        f'bash -O extglob -c \'for d in {pruned}; do rm -rf "$0"/lib/modules/*/kernel/$d; done\' "$1"; '
        'for k in "$1"/lib/modules/*; do chroot "$1" depmod -a "${k##*/}"; done; '
        'chroot "$1" update-initramfs -u -k all >/dev/null'
    )


def ensure_vm_image(cache_dir: Path | None = None, mirror: str | None = None) -> VmImage:
    """The cached VM image, built once (mmdebstrap, then mkfs.ext4 -d): atomic like ensure_base."""
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    final = cache / f"vm-{SUITE}-{vm_key()}"
    if (final / "disk.raw").exists():
        return VmImage(final)
    if os.geteuid() != 0:
        raise LabUnavailable("building the VM image needs root (mmdebstrap, mkfs.ext4 -d)")
    missing = [t for t in ("mmdebstrap", "mkfs.ext4", "qemu-system-x86_64", "ssh-keygen") if shutil.which(t) is None]
    if missing:
        raise LabUnavailable(f"the VM image needs {missing} (mmdebstrap, e2fsprogs, qemu-system-x86, openssh-client)")
    cache.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".build-vm-", dir=cache))
    try:
        image = VmImage(tmp)
        rootfs = image.build_tree
        argv = ["mmdebstrap", "--variant=apt", "--mode=root", "--include=" + ",".join(VM_PACKAGES),
                "--customize-hook=" + _hook(), SUITE, str(rootfs),
                mirror or os.environ.get("FLEETSPEC_LAB_MIRROR", DEFAULT_MIRROR)]
        proc = subprocess.run(argv, capture_output=True, text=True)
        if proc.returncode != 0:
            raise LabUnavailable(f"mmdebstrap (VM image) failed ({proc.returncode}): {proc.stderr[-2000:]}")
        releases = sorted(p.name for p in (rootfs / "lib/modules").iterdir())
        if len(releases) != 1:
            raise LabUnavailable(f"the VM image should hold one kernel, found {releases}")
        (tmp / "kernel-release").write_text(releases[0] + "\n")
        shutil.copyfile(rootfs / "boot" / f"vmlinuz-{releases[0]}", image.kernel)
        shutil.copyfile(rootfs / "boot" / f"initrd.img-{releases[0]}", image.initrd)
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "fleetspec-vm", "-f", str(image.ssh_key)],
                       check=True)
        shutil.copyfile(str(image.ssh_key) + ".pub", rootfs / "root/.ssh/authorized_keys")
        _make_disk(rootfs, image.disk)
        try:
            tmp.rename(final)
        except OSError:
            if not (final / "disk.raw").exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return VmImage(final)


def _make_disk(rootfs: Path, disk: Path, size: str = "3G") -> None:
    """An ext4 file system holding ``rootfs`` (sparse; booted with -snapshot, never written)."""
    subprocess.run(["mkfs.ext4", "-q", "-F", "-L", "root", "-d", str(rootfs), str(disk), size], check=True,
                   capture_output=True)


class KvmUnusable(LabUnavailable):
    """$FLEETSPEC_VM_ACCEL=kvm, and KVM is absent or boots no guest kernel (a machine property)."""


# A guest kernel under working KVM prints its banner within a second or two of QEMU's start.
KVM_PROBE_S = 10


@dataclass
class Vm:
    """A running VM: ``ssh(...)`` runs a command as root in it."""

    image: VmImage
    port: int
    workdir: Path
    process: subprocess.Popen[bytes]
    accel: str = "kvm"

    @property
    def serial_log(self) -> Path:
        return self.workdir / "serial.log"

    def ssh_argv(self) -> list[str]:
        return ["ssh", "-q", "-p", str(self.port), "-i", str(self.image.ssh_key), "-o", "BatchMode=yes",
                "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "ConnectTimeout=5",
                "root@127.0.0.1"]

    def ssh(self, command: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([*self.ssh_argv(), command], capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError(f"in the VM: {command!r} exited {proc.returncode}: {proc.stdout[-1500:]}"
                                 f"{proc.stderr[-1500:]}")
        return proc

    def wait_ssh(self, timeout: float = 120) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.process.poll() is not None:
                raise LabUnavailable(f"QEMU exited ({self.process.returncode}): {self.tail()}")
            with contextlib.suppress(subprocess.TimeoutExpired):
                if self.ssh("true", check=False, timeout=10).returncode == 0:
                    return
            time.sleep(1)
        raise LabUnavailable(f"the VM did not answer SSH in {timeout:.0f} s: {self.tail()}")

    def boot_id(self) -> str:
        return self.ssh("cat /proc/sys/kernel/random/boot_id").stdout.strip()

    def tail(self) -> str:
        return self.serial_log.read_text(errors="replace")[-3000:] if self.serial_log.exists() else ""


def _qemu_argv(image: VmImage, workdir: Path, accel: str, port: int, memory_mb: int, cpus: int) -> list[str]:
    return ["qemu-system-x86_64", "-accel", accel, *(["-cpu", "max"] if accel == "tcg" else []), "-m", str(memory_mb),
            "-smp", str(cpus), "-display", "none", "-monitor", "none", "-serial", f"file:{workdir / 'serial.log'}",
            "-kernel", str(image.kernel), "-initrd", str(image.initrd),
            # loglevel 6: the kernel's banner (KERN_NOTICE) reaches the serial log (the KVM probe
            # reads it); mitigations=off, no5lvl: a throwaway test guest, and emulation pays for each
            # mitigation and for a fifth page-table level (TCG's "-cpu max" offers la57)
            "-append", "root=/dev/vda rw console=ttyS0 loglevel=6 mitigations=off no5lvl systemd.show_status=0",
            "-drive", f"file={image.disk},format=raw,if=virtio,snapshot=on",
            "-netdev", f"user,id=n0,hostfwd=tcp:127.0.0.1:{port}-:22", "-device", "virtio-net-pci,netdev=n0"]


def _start(argv: list[str], workdir: Path) -> subprocess.Popen[bytes]:
    (workdir / "serial.log").unlink(missing_ok=True)
    with open(workdir / "qemu.log", "wb") as log:
        return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _kernel_started(process: subprocess.Popen[bytes], serial: Path, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end and process.poll() is None:
        if serial.exists() and "Linux version" in serial.read_text(errors="replace"):
            return True
        time.sleep(0.5)
    return False


# What this process learnt of KVM: None until a first VM has probed it.
_kvm_boots: bool | None = None


def _requested_accel() -> str | None:
    """$FLEETSPEC_VM_ACCEL (kvm or tcg) forces an accelerator; unset, KVM is probed."""
    accel = os.environ.get("FLEETSPEC_VM_ACCEL") or None
    if accel not in (None, "kvm", "tcg"):
        raise LabUnavailable(f"FLEETSPEC_VM_ACCEL={accel!r}: use kvm or tcg (or leave it unset: KVM, else TCG)")
    return accel


def _boot(image: VmImage, workdir: Path, port: int, memory_mb: int, cpus: int) -> tuple[str, subprocess.Popen[bytes]]:
    """Start QEMU under KVM when it boots a guest kernel here, else under TCG.

    Some nested-virtualisation hosts accept /dev/kvm but hang the guest before its kernel
    banner (a nested AMD EPYC host: "-cpu host" aborts on MSR 0x10a, every other CPU model,
    machine type and irqchip mode hangs after the real-mode setup). A KVM boot with no
    banner in ``KVM_PROBE_S`` falls back to TCG, and the rest of the process does not try
    KVM again. $FLEETSPEC_VM_ACCEL=kvm makes that a :class:`KvmUnusable` instead.
    """
    global _kvm_boots
    requested = _requested_accel()
    if requested != "tcg" and _kvm_boots is not False:
        if not os.access("/dev/kvm", os.R_OK | os.W_OK):
            _kvm_boots = False
            why = "/dev/kvm is missing or not accessible"
        else:
            process = _start(_qemu_argv(image, workdir, "kvm", port, memory_mb, cpus), workdir)
            if _kernel_started(process, workdir / "serial.log", KVM_PROBE_S):
                _kvm_boots = True
                return "kvm", process
            _stop(process)
            _kvm_boots = False
            why = f"KVM boots no guest kernel here (no kernel banner in {KVM_PROBE_S} s: nested virtualisation)"
        if requested == "kvm":
            raise KvmUnusable(why + "; unset FLEETSPEC_VM_ACCEL to fall back to TCG")
    elif requested == "kvm":
        raise KvmUnusable("KVM booted no guest kernel earlier in this process")
    return "tcg", _start(_qemu_argv(image, workdir, "tcg", port, memory_mb, cpus), workdir)


@contextlib.contextmanager
def running_vm(image: VmImage, workdir: Path, memory_mb: int = 1024, cpus: int = 2) -> Iterator[Vm]:
    """Boot ``image`` (-snapshot: the cached disk is never written) until the block exits.

    Under KVM where it works, else under TCG (:func:`_boot`): the same guest, emulated,
    ~40 s to SSH and about a minute per playbook run. ``Vm.accel`` says which.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_ports(1)[0]
    accel, process = _boot(image, workdir, port, memory_mb, cpus)
    vm = Vm(image, port, workdir, process, accel)
    try:
        vm.wait_ssh(timeout=300)
        yield vm
    finally:
        _stop(process)
