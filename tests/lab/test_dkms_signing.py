"""A real DKMS signs the driver's modules with the site's Machine Owner Key (#24 item 9).

The node is the VM lab image's tree (fleetspec/lab/vm.py: Debian bookworm with its kernel's
headers, gcc, kmod, mokutil; the cached image is only read: an overlay takes every write)
entered with chroot in a private mount namespace, with this machine's DKMS 3.0.10 (Debian
bookworm's package, scripts/test installs it) copied in. Ansible runs inside it (its
interpreter bind-mounted at the same paths) with a local connection, so the role's own task
files do the work: stack_packages' secure_boot.yml checks the site's key files and writes
DKMS's framework setting, `dkms install` builds the stand-in driver (fleetspec/lab/kmods.py)
as the driver package's postinst would, and secure_boot_signed.yml runs the fact collector
on the result. The key is made by openssl; sign-file is the kernel's own
(/usr/lib/linux-kbuild-6.1/scripts/sign-file, which DKMS picks on Debian); the signer is
read back by kmod's modinfo. Nothing is faked but the absence of a UEFI firmware.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fleetspec.compile.ir import StackTuple
from fleetspec.lab import LabUnavailable
from fleetspec.lab.kmods import MODULES, module_sources
from fleetspec.lab.vm import ensure_vm_image
from fleetspec.node_side.collector import parse_certificate_signer
from fleetspec.verify.compare import Status, secure_boot_checks
from tests.conftest import ROOT
from tests.lab.conftest import lab_unavailable

pytestmark = pytest.mark.lab

BUILD = "580.95.05"
PACKAGE = "fleetspec-standin"
VENV = Path(sys.executable).parent.parent  # bind-mounted into the node at the same path
BASE_PYTHON = Path(os.path.realpath(sys.executable)).parent.parent



def dkms_conf(dest: str) -> str:
    """The stand-in driver's dkms.conf; ``dest`` its DEST_MODULE_LOCATION, which DKMS then
    overrides by the node's os-release (dkms override_dest_module_location)."""
    return "\n".join(
        [f'PACKAGE_NAME="{PACKAGE}"', f'PACKAGE_VERSION="{BUILD}"',
         'MAKE[0]="make -C ${kernel_source_dir} M=${dkms_tree}/${PACKAGE_NAME}/${PACKAGE_VERSION}/build modules"',
         'CLEAN="true"', 'AUTOINSTALL="yes"']
        + [line for i, name in enumerate(MODULES) for line in
           (f'BUILT_MODULE_NAME[{i}]="{name}"', f'DEST_MODULE_LOCATION[{i}]="{dest}"')]) + "\n"


# NVIDIA's own dkms.conf names /kernel/drivers/video for every module (its __DKMS_MODULES
# lines, as distribution packages fill them: BUILT_MODULE_NAME[0]="nvidia" ...
# DEST_MODULE_LOCATION[0]="/kernel/drivers/video"); DKMS puts them in /extra on EL.
NVIDIA_DEST = "/kernel/drivers/video"
# Rocky Linux 9's /etc/os-release (rocky-release 9.6), as tests/ansible/test_pins_dnf.py has it.
ROCKY_OS_RELEASE = ('NAME="Rocky Linux"\nVERSION="9.6 (Blue Onyx)"\nID="rocky"\nID_LIKE="rhel centos fedora"\n'
                    'VERSION_ID="9.6"\nPLATFORM_ID="platform:el9"\nPRETTY_NAME="Rocky Linux 9.6 (Blue Onyx)"\n')

PLAY = """\
- hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: The role's checks and DKMS setting, before anything is installed
      ansible.builtin.include_role:
        name: stack_packages
        tasks_from: secure_boot.yml
    - name: DKMS builds, signs and installs the driver, as the -dkms package's postinst does
      ansible.builtin.command:
        argv: [dkms, install, -m, {package}, -v, "{build}", -k, "{{{{ fleetspec_kernel_release }}}}"]
      when: build | bool
    - name: The role's check of the modules' signer
      ansible.builtin.include_role:
        name: stack_packages
        tasks_from: secure_boot_signed.yml
    - name: Keep the collector's answer for the test
      ansible.builtin.copy:
        content: "{{{{ _fleetspec_signatures.stdout }}}}"
        dest: /tmp/signatures.json
        mode: "0644"
"""

# Runs as root in a private mount namespace: the overlay, the node's /proc and /dev, and the
# interpreter and checkout at their own paths; then the command in the chroot.
ENTER = r"""
set -e
lower=$1 upper=$2 work=$3 node=$4; shift 4
mount -t overlay overlay -o "lowerdir=$lower,upperdir=$upper,workdir=$work" "$node"
mount -t proc proc "$node/proc"
mount --bind /dev "$node/dev"
for dir in "$@"; do
  case $dir in --) break ;; esac
  mkdir -p "$node$dir" && mount --bind "$dir" "$node$dir"
done
while [ "$1" != -- ]; do shift; done; shift
exec chroot "$node" "$@"
"""


def _dkms_files() -> dict[str, Path]:
    """This machine's DKMS (a script and its helpers) as its package lists them."""
    listed = subprocess.run(["dpkg", "-L", "dkms"], capture_output=True, text=True).stdout.split()
    return {p: Path(p) for p in listed
            if Path(p).is_file() and p.startswith(("/usr/sbin/dkms", "/usr/lib/dkms/", "/etc/dkms/"))}


def _mok(directory: Path, name: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    subprocess.run(["openssl", "req", "-new", "-x509", "-nodes", "-days", "3650", "-newkey", "rsa:2048",
                    "-subj", f"/CN={name}/O=fleetspec lab", "-keyout", str(directory / "MOK.priv"),
                    "-outform", "DER", "-out", str(directory / "MOK.der")], check=True, capture_output=True)
    (directory / "MOK.priv").chmod(0o600)
    return directory


class Node:
    """The image's tree under an overlay of its own, entered for one command at a time."""

    def __init__(self, rootfs: Path, tmp: Path, release: str, dest: str = "/updates/dkms",
                 os_release: str | None = None) -> None:
        self.rootfs, self.tmp, self.release = rootfs, tmp, release
        self.upper, self.work, self.mount = tmp / "upper", tmp / "work", tmp / "node"
        for path in (self.upper, self.work, self.mount):
            path.mkdir()
        for name, source in _dkms_files().items():
            target = self.upper / name.lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
        src = self.upper / f"usr/src/{PACKAGE}-{BUILD}"
        src.mkdir(parents=True)
        for name, text in module_sources(BUILD).items():
            (src / name).write_text(text)
        (src / "dkms.conf").write_text(dkms_conf(dest))
        if os_release is not None:  # a regular file in the overlay hides bookworm's symlink
            (self.upper / "etc").mkdir(exist_ok=True)
            (self.upper / "etc/os-release").write_text(os_release)

    def run(self, *argv: str, binds: tuple[Path, ...] = ()) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c", ENTER, "sh", str(self.rootfs),
             str(self.upper), str(self.work), str(self.mount), *map(str, binds), "--", *argv],
            capture_output=True, text=True, timeout=600,
            env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root", "LC_ALL": "C.UTF-8"})

    def play(self, extra: dict, build: bool = False) -> subprocess.CompletedProcess[str]:
        (self.tmp / "play.yml").write_text(PLAY.format(package=PACKAGE, build=BUILD))
        (self.tmp / "extra.json").write_text(json.dumps({**extra, "build": build}))
        return self.run(
            "env", f"ANSIBLE_ROLES_PATH={ROOT / 'playbooks/roles'}", f"ANSIBLE_HOME={self.tmp / '.ansible'}",
            "ANSIBLE_LOCALHOST_WARNING=false", "ANSIBLE_INVENTORY_UNPARSED_WARNING=false",
            str(VENV / "bin/ansible-playbook"), "-i", "localhost,", str(self.tmp / "play.yml"),
            "-e", f"@{self.tmp / 'extra.json'}", "-e", "ansible_python_interpreter=/usr/bin/python3",
            binds=(VENV, BASE_PYTHON, ROOT, self.tmp))

    def file(self, path: str) -> Path:
        """Where the node wrote ``path`` (bookworm is merged-/usr: /lib is usr/lib)."""
        relative = path.lstrip("/")
        return self.upper / ("usr/" + relative if relative.startswith("lib/") else relative)


def _vars(release: str, mok: Path, secure_boot: bool = False) -> dict:
    return {
        "fleetspec_gpu": {"kernel_modules": True, "secure_boot": secure_boot},
        "fleetspec_packages": [{"name": "nvidia-dkms-580-open", "version": f"{BUILD}-0ubuntu1",
                                "role": "nvidia_driver", "condition": None}],
        "fleetspec_components": ["nvidia_driver"],
        "fleetspec_stack": {"name": "hopper", "vendor": "nvidia"},
        "fleetspec_kernel_release": release,
        "fleetspec_dkms_mok_certificate": str(mok / "MOK.der"),
        "fleetspec_dkms_mok_signing_key": str(mok / "MOK.priv"),
        "fleetspec_collector_src": str(ROOT / "fleetspec/node_side/collector.py"),
    }


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Node:
    for tool in ("dkms", "openssl", "unshare", "mmdebstrap"):
        if shutil.which(tool) is None:
            lab_unavailable(f"the DKMS signing test needs {tool} (scripts/test installs it)")
    if os.geteuid() != 0:
        lab_unavailable("needs root (mount namespaces, overlay, chroot)")
    try:
        image = ensure_vm_image()
    except (LabUnavailable, OSError, subprocess.CalledProcessError) as exc:
        lab_unavailable(str(exc))
    return Node(image.build_tree, tmp_path_factory.mktemp("dkms-node"), image.kernel_release)


def test_dkms_signs_with_the_declared_mok_and_the_checks_see_it(node: Node) -> None:
    mok = _mok(node.tmp / "site-mok", "Example Site MOK 2026")
    proc = node.play(_vars(node.release, mok), build=True)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    conf = node.file("/etc/dkms/framework.conf.d/fleetspec-mok.conf").read_text()
    assert f'mok_signing_key="{mok}/MOK.priv"' in conf and f'mok_certificate="{mok}/MOK.der"' in conf
    # kmod's own reading of every module DKMS installed, beside the collector's parse of the certificate
    expected = parse_certificate_signer((mok / "MOK.der").read_bytes())
    openssl = subprocess.run(["openssl", "x509", "-inform", "DER", "-in", str(mok / "MOK.der"), "-noout", "-serial"],
                             capture_output=True, text=True, check=True).stdout.strip().split("=", 1)[1]
    assert expected is not None and expected["signer"] == "Example Site MOK 2026"
    assert int(expected["sig_key"].replace(":", ""), 16) == int(openssl, 16)
    for name in MODULES:
        # DKMS compresses as the kernel does (Debian 6.1: CONFIG_MODULE_COMPRESS_XZ, nvidia.ko.xz)
        found = sorted(node.file(f"/lib/modules/{node.release}/updates/dkms").glob(f"{name}.ko*"))
        assert len(found) == 1, f"DKMS did not install {name}.ko: {found}"
        ko = found[0]
        signer = subprocess.run(["modinfo", "-F", "signer", str(ko)], capture_output=True, text=True).stdout.strip()
        key = subprocess.run(["modinfo", "-F", "sig_key", str(ko)], capture_output=True, text=True).stdout.strip()
        assert (signer, key) == (expected["signer"], expected["sig_key"]), name
    # verify's check on the collector's answer from the node (the role kept it)
    facts = json.loads(node.file("/tmp/signatures.json").read_text())
    section = facts["secure_boot"]
    assert section["dkms_mok_certificate"] == f"{mok}/MOK.der"
    assert section["modules"]["nvidia"]["signer"] == "Example Site MOK 2026"
    stack = StackTuple(name="hopper", vendor="nvidia", driver=BUILD, mok_certificate=f"{mok}/MOK.der",
                       mok_signing_key=f"{mok}/MOK.priv")
    assert secure_boot_checks(stack, facts) == []  # this chroot has no UEFI: Secure Boot reads as off
    on = {"schema": facts["schema"], "secure_boot": {**section, "enabled": True}}
    checks = secure_boot_checks(stack, on)
    assert [c.status for c in checks] == [Status.OK] and "signed by the declared MOK" in checks[0].message

    # Another MOK declared, the modules not rebuilt: the role's check stops the host, and verify says drift.
    other = _mok(node.tmp / "other-mok", "Another Site MOK")
    proc = node.play(_vars(node.release, other))
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "nvidia for kernel" in out and "is signed by Example Site MOK 2026" in out, out[-4000:]
    assert "not by Another Site MOK" in out
    drift = secure_boot_checks(StackTuple(name="hopper", vendor="nvidia", mok_certificate=f"{other}/MOK.der",
                                          mok_signing_key=f"{other}/MOK.priv"), on)
    assert drift[0].status is Status.DRIFT and "DKMS signs with" in drift[0].message


def test_a_missing_or_open_key_stops_before_dkms_could_make_one(node: Node) -> None:
    absent = node.tmp / "nowhere"
    extra = {**_vars(node.release, absent)}
    proc = node.play(extra)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "is not a file on the node" in out and "Nothing was installed" in out, out[-3000:]
    assert not absent.exists()
    loose = _mok(node.tmp / "loose-mok", "Loose MOK")
    (loose / "MOK.priv").chmod(0o644)
    proc = node.play(_vars(node.release, loose))
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "chmod 600" in out, out[-3000:]


def test_secure_boot_without_a_confirmed_enrollment_stops_with_how_to_enroll(node: Node) -> None:
    """The real mokutil, on a node where it cannot read the MOK list (no UEFI here): not
    enrolled as far as anyone can tell, so the host stops before installing anything."""
    mok = _mok(node.tmp / "sb-mok", "Secure Boot MOK")
    proc = node.play(_vars(node.release, mok, secure_boot=True))
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert "Secure Boot is enabled" in out and "Nothing was installed" in out
    assert f"mokutil --import {mok}/MOK.der" in out and "MokManager" in out


@pytest.fixture(scope="module")
def el_node(node: Node, tmp_path_factory: pytest.TempPathFactory) -> Node:
    """The same image under an overlay of its own whose os-release is Rocky Linux 9's: DKMS
    (the same 3.0.10) and the collector both decide by it, as on an EL node."""
    return Node(node.rootfs, tmp_path_factory.mktemp("dkms-el-node"), node.release, NVIDIA_DEST, ROCKY_OS_RELEASE)


def test_on_el_dkms_installs_into_extra_and_the_signer_check_reads_it_there(el_node: Node) -> None:
    """DKMS overrides the dkms.conf location by the distribution: /extra on an RHEL-family
    node (where kmod-nvidia-open-dkms' modules land), not Debian's updates/dkms. The role's
    check (dnf.yml includes it after the install) passes only if it finds them there (it stops
    on "no GPU driver module built by DKMS" otherwise), and verify reads them there."""
    mok = _mok(el_node.tmp / "site-mok", "Example EL Site MOK")
    proc = el_node.play(_vars(el_node.release, mok), build=True)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    extra = el_node.file(f"/lib/modules/{el_node.release}/extra")
    assert sorted(p.name.split(".")[0] for p in extra.glob("*.ko*")) == sorted(MODULES)
    assert not el_node.file(f"/lib/modules/{el_node.release}/updates/dkms").exists()
    assert not el_node.file(f"/lib/modules/{el_node.release}{NVIDIA_DEST}").exists()
    facts = json.loads(el_node.file("/tmp/signatures.json").read_text())
    section = facts["secure_boot"]
    assert section["dkms_modules_dir"] == f"/lib/modules/{el_node.release}/extra"
    assert section["modules"]["nvidia"]["dkms"] is True and "/extra/nvidia.ko" in section["modules"]["nvidia"]["filename"]
    stack = StackTuple(name="hopper", vendor="nvidia", driver=BUILD, mok_certificate=f"{mok}/MOK.der",
                       mok_signing_key=f"{mok}/MOK.priv")
    checks = secure_boot_checks(stack, {"schema": facts["schema"], "secure_boot": {**section, "enabled": True}})
    assert [c.status for c in checks] == [Status.OK] and "signed by the declared MOK" in checks[0].message
