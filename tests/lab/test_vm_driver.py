"""The node layer's kernel-side steps on a lab host with a kernel of its own (a QEMU VM,
fleetspec/lab/vm.py), where nspawn hosts cannot go: real driver modules loaded and
unloaded, a real reboot in the middle of the driver role, the Secure Boot stop.

The roles run as the site playbook runs them (gpu_facts, stack_packages, nvidia_driver),
by ansible-playbook over SSH, against a flat apt repository copied into the VM. The driver
packages are stand-ins (fleetspec/lab/kmods.py): modules built against the VM's kernel
with the real names, dependency chain and version files; nvidia-persistenced holds
/dev/nvidiactl open as the real daemon holds the GPUs. What stays unproven without a GPU:
the PCI device (a sysfs fixture tree of a PCIe H100 stands in for it), udev loading the
module at boot, and the real driver's own refusals. Issue #24 items 8, 9, 10.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleetspec.lab import LabUnavailable
from fleetspec.lab.kmods import build_modules, dkms_standin
from fleetspec.lab.repo import StandInPackage, build_repo
from fleetspec.lab.vm import Vm, ensure_vm_image, running_vm
from fleetspec.verify.compare import Status, _loaded_module_check
from tests.conftest import ROOT
from tests.lab.conftest import lab_unavailable

pytestmark = [pytest.mark.lab, pytest.mark.vm]

# Two builds of NVIDIA's 580 family as its CUDA repository names them (evidence table,
# fleetspec/lab/vendor_packages.yaml: 580.95.05-0ubuntu1, 580.105.08-0ubuntu1).
OLD, NEW = "580.95.05", "580.105.08"
REPO = "/srv/fleetspec-repo"
SYSFS = "/srv/fleetspec-sysfs"
# The unit Ubuntu's package ships runs the daemon without persistence mode; the role's drop-in fixes that.
UNIT = """[Unit]
Description=NVIDIA Persistence Daemon (fleetspec lab stand-in)
[Service]
ExecStart=/usr/bin/nvidia-persistenced --user nvidia-persistenced --no-persistence-mode --verbose
"""
# Holds the control device open as the real daemon holds the GPUs: nvidia is in use while it runs.
DAEMON = "#!/bin/sh\nexec sleep infinity < /dev/nvidiactl\n"
# udev's part at boot, for the fixture's GPUs: the kmod builtin loads what matches each display
# device's modalias (pci:v<vendor>d<device>sv..sd..bc<class>sc<subclass>i<interface>), as
# "modprobe -b" does: blacklists apply. Without the nouveau blacklist nouveau takes the GPU at
# every boot (its alias pci:v000010DEd*sv*sd*bc03sc*i*), so the reboot proves the blacklist.
# It also notes each boot's id, so a test counts the boots a run caused.
BOOTS = "/var/lib/fleetspec-lab-boots"
COLDPLUG = f"""#!/bin/sh
cat /proc/sys/kernel/random/boot_id >> {BOOTS}
for dev in {SYSFS}/bus/pci/devices/*; do
  class=$(cat "$dev/class"); [ $((class >> 16)) -eq 3 ] || continue
  modprobe -b -q "$(printf 'pci:v%08Xd%08Xsv00000000sd00000000bc%02Xsc%02Xi%02X' "$(cat "$dev/vendor")" \\
    "$(cat "$dev/device")" $((class >> 16)) $(((class >> 8) & 255)) $((class & 255)))" || true
done
"""
COLDPLUG_UNIT = """[Unit]
Description=Load the fixture GPUs' modules by modalias (fleetspec lab stand-in for udev coldplug)
[Service]
Type=oneshot
ExecStart=/usr/local/sbin/fleetspec-coldplug
[Install]
WantedBy=multi-user.target
"""

PLAY = """\
- hosts: vm
  gather_facts: true
  gather_subset: [min, virtual]
  roles:
    - role: gpu_facts
    - role: stack_packages
    - role: nvidia_driver
"""


def _packages(release: str, rootfs: Path) -> list[StandInPackage]:
    out: list[StandInPackage] = []
    for build in (OLD, NEW):
        version = f"{build}-0ubuntu1"
        out.append(dkms_standin("nvidia-dkms-580-open", version, release, build_modules(rootfs, release, build)))
        out.append(StandInPackage("nvidia-persistenced", version, files={
            "/usr/bin/nvidia-persistenced": DAEMON, "/lib/systemd/system/nvidia-persistenced.service": UNIT}))
    return out


@pytest.fixture(scope="module")
def vm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Vm]:
    """One VM for the module, with the stand-in repository and a PCIe H100's sysfs tree in it."""
    for tool in ("qemu-system-x86_64", "mmdebstrap", "mkfs.ext4", "ansible-playbook"):
        if shutil.which(tool) is None:
            lab_unavailable(f"the VM lab needs {tool} (scripts/test installs it)")
    try:
        image = ensure_vm_image()
    except (LabUnavailable, OSError, subprocess.CalledProcessError) as exc:
        lab_unavailable(str(exc))
    with running_vm(image, tmp_path_factory.mktemp("vm")) as machine:
        repo = build_repo(_packages(image.kernel_release, image.build_tree), tmp_path_factory.mktemp("vm-repo"))
        tree = ROOT / "tests/data/fixtures/sysfs/pcie-h100/sys"
        for source, dest in ((repo, REPO), (tree, SYSFS)):
            tar = subprocess.run(["tar", "-C", str(source), "-c", "."], capture_output=True, check=True)
            subprocess.run([*machine.ssh_argv(), f"mkdir -p {dest} && tar -C {dest} -x"], input=tar.stdout,
                           check=True, capture_output=True)
        for path, text in (("/usr/local/sbin/fleetspec-coldplug", COLDPLUG),
                           ("/etc/systemd/system/fleetspec-coldplug.service", COLDPLUG_UNIT)):
            subprocess.run([*machine.ssh_argv(), f"cat > {path} && chmod +x {path}"], input=text, text=True,
                           check=True, capture_output=True)
        machine.ssh("systemctl enable fleetspec-coldplug.service")
        yield machine


def play(vm: Vm, tmp_path: Path, build: str, **extra: object) -> subprocess.CompletedProcess[str]:
    """ansible-playbook of the node roles against the VM, pinning the driver at ``build``."""
    version = f"{build}-0ubuntu1"
    hostvars = {
        "ansible_host": "127.0.0.1", "ansible_port": vm.port, "ansible_user": "root",
        "ansible_ssh_private_key_file": str(vm.image.ssh_key),
        "ansible_ssh_common_args": "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null",
        "ansible_python_interpreter": "/usr/bin/python3",
        "fleetspec_sysfs_root": SYSFS, "fleetspec_components": ["nvidia_driver"],
        "fleetspec_packages": [{"name": n, "version": version, "role": "nvidia_driver", "condition": ""}
                               for n in ("nvidia-dkms-580-open", "nvidia-persistenced")],
        "fleetspec_apt_sources": [{"name": "lab", "uri": f"file:{REPO}", "suite": "./", "components": "",
                                   "trusted": True, "key_url": None}],
        **extra,
    }
    inventory = tmp_path / "inventory.json"
    inventory.write_text(json.dumps({"all": {"hosts": {"vm": hostvars}}}))
    (tmp_path / "play.yml").write_text(PLAY)
    playbook = shutil.which("ansible-playbook")
    assert playbook
    env = {"ANSIBLE_ROLES_PATH": str(ROOT / "playbooks/roles"), "ANSIBLE_HOME": str(tmp_path / ".ansible"),
           "ANSIBLE_PIPELINING": "true", "ANSIBLE_TIMEOUT": "60", "ANSIBLE_HOST_KEY_CHECKING": "false",
           "PATH": f"/usr/bin:/bin:/usr/sbin:/sbin:{Path(playbook).parent}"}
    return subprocess.run([playbook, "-i", str(inventory), str(tmp_path / "play.yml")], capture_output=True,
                          text=True, env=env, timeout=1500)


def loaded(vm: Vm) -> str:
    return vm.ssh("cat /sys/module/nvidia/version 2>/dev/null || echo none").stdout.strip()


def collector_check(vm: Vm) -> tuple[Status, str]:
    """verify's installed-vs-loaded check on what the node collector reads in the VM."""
    script = (ROOT / "fleetspec/node_side/collector.py").read_bytes()
    proc = subprocess.run([*vm.ssh_argv(), "python3 - --no-load"], input=script, capture_output=True, timeout=300)
    nvidia = json.loads(proc.stdout)["nvidia"]
    check = _loaded_module_check(nvidia, False)
    return check.status, check.message


def test_secure_boot_stops_the_host_before_anything_is_installed(vm: Vm, tmp_path: Path) -> None:
    """#24 item 9: the UEFI SecureBoot variable reads 1 (a fixture efivars entry; the VM itself
    boots without UEFI) and DKMS's key is not enrolled: the run stops on its first task."""
    efivars = f"{SYSFS}/firmware/efi/efivars"
    vm.ssh(f"mkdir -p {efivars} && printf '\\006\\000\\000\\000\\001' > {efivars}/"
           "SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c")
    try:
        result = play(vm, tmp_path, OLD)
    finally:
        vm.ssh(f"rm -rf {SYSFS}/firmware")
    out = result.stdout
    assert result.returncode != 0, out[-3000:]
    assert "Secure Boot is enabled" in out and "Nothing was installed" in out and "mokutil --import" in out, out[-3000:]
    assert "nvidia-dkms-580-open" in out
    # Stopped before the sources and packages: no list written, nothing installed.
    state = vm.ssh("ls /etc/apt/sources.list.d; dpkg-query -W nvidia-dkms-580-open 2>&1", check=False).stdout
    assert "fleetspec-source" not in state and "no packages found" in state, state


def test_first_install_over_nouveau_reboots_mid_role_and_starts_the_daemons_in_the_same_run(
        vm: Vm, tmp_path: Path) -> None:
    """#24 item 8: nouveau is loaded, the first driver install needs the reboot (--allow-reboot);
    the reboot fires mid-role and the daemons still start in that same run, on facts read after it."""
    vm.ssh("systemctl start fleetspec-coldplug.service && test -d /sys/module/nouveau")  # as at boot
    boot = vm.boot_id()
    result = play(vm, tmp_path, OLD, fleetspec_allow_reboot=True)
    assert result.returncode == 0, result.stdout[-4000:]
    boots = vm.ssh(f"cat {BOOTS}").stdout.split()
    assert boots[0] == boot and len(boots) == 2 and vm.boot_id() == boots[1], f"{boot} -> {boots}: one reboot expected"
    assert "Reboot for the new driver" in result.stdout
    assert loaded(vm) == OLD
    assert vm.ssh("test ! -d /sys/module/nouveau && cat /etc/modprobe.d/blacklist-nouveau.conf").stdout.count(
        "blacklist nouveau") == 1
    assert vm.ssh("systemctl is-active nvidia-persistenced", check=False).stdout.strip() == "active"
    assert vm.ssh("test -e /var/lib/fleetspec/reboot-required", check=False).returncode != 0
    status, message = collector_check(vm)
    assert status is Status.OK, message


def test_driver_change_without_reboot_reloads_the_modules_on_a_drained_node(vm: Vm, tmp_path: Path) -> None:
    """#24 item 10: a drained node, no --allow-reboot: the role stops the persistence daemon
    (it holds the device), unloads the old modules in dependency order and loads the new ones;
    verify's installed-vs-loaded check passes."""
    vm.ssh("modprobe nvidia_drm && modprobe nvidia_uvm")  # the modules a driver node has loaded
    assert loaded(vm) == OLD
    result = play(vm, tmp_path, NEW, fleetspec_drained=True)
    assert result.returncode == 0, result.stdout[-4000:]
    assert loaded(vm) == NEW
    modules = vm.ssh("cat /proc/modules").stdout
    assert all(f"{m} " in modules for m in ("nvidia_drm", "nvidia_modeset", "nvidia_uvm", "nvidia")), modules
    assert NEW in vm.ssh("cat /proc/driver/nvidia/version").stdout
    assert vm.ssh("systemctl is-active nvidia-persistenced", check=False).stdout.strip() == "active"
    assert vm.ssh("test -e /var/lib/fleetspec/reboot-required", check=False).returncode != 0
    status, message = collector_check(vm)
    assert status is Status.OK, message


def test_a_driver_still_in_use_is_refused_with_what_holds_it(vm: Vm, tmp_path: Path) -> None:
    """#24 item 10: a process holds the GPU (not one of the daemons the role stops): the
    modules stay, the run fails naming the holder and the two ways out; verify reports it."""
    vm.ssh("systemd-run --unit=fleetspec-gpu-job sh -c 'exec sleep infinity < /dev/nvidiactl'")
    try:
        result = play(vm, tmp_path, OLD, fleetspec_drained=True)
    finally:
        vm.ssh("systemctl stop fleetspec-gpu-job", check=False)
    assert result.returncode != 0
    out = result.stdout
    assert "cannot be unloaded" in out and "sleep" in out and "--allow-reboot" in out, out[-3000:]
    assert loaded(vm) == NEW  # nothing was unloaded
    assert vm.ssh("systemctl is-active nvidia-persistenced", check=False).stdout.strip() == "active"
    status, message = collector_check(vm)
    assert status is Status.DRIFT and OLD in message and NEW in message, message

