"""The boot chain and the golden images, from ``spec.baremetal.pxe``. Pure: IR to {path: text}.

- ``baremetal/dnsmasq.conf``: DHCP on the provisioning interface; a PXE ROM without iPXE
  gets iPXE's ``undionly.kpxe`` (BIOS) or ``ipxe.efi`` (UEFI) over TFTP, and iPXE itself
  (DHCP option 175 present) gets ``boot.ipxe``;
- ``baremetal/tftp/boot.ipxe``: chains the node's own script by MAC address
  (``nodes/<mac>.ipxe``, written by ``fleetspec baremetal`` from what each BMC reports), else
  the node group's script by the hostname DHCP gave (``hosts/<hostname>.ipxe``);
- ``baremetal/tftp/hosts/<host>.ipxe``: the node group's boot: kernel and initrd of its stack's
  golden image, root from ``rootfs.squashfs`` (Debian live-boot's ``fetch=``), and the node's
  name, partition and stack on the kernel command line for the join step;
- ``baremetal/golden/<stack>.sh`` with ``<stack>.pref``: the golden image recipe, mmdebstrap
  with the stack's pinned packages (``fleetspec.packages``) held by apt preferences, so a
  node boots already holding its tuple.
"""

from __future__ import annotations

import shlex
from pathlib import PurePosixPath

from fleetspec.compile.ir import Fleet, StackTuple
from fleetspec.packages import apt_preferences, packages_for, slurm_packages

OUT = PurePosixPath("baremetal")
SUITES = {"ubuntu-22.04": "jammy", "ubuntu-24.04": "noble", "debian-12": "bookworm"}
MIRRORS = {"ubuntu-22.04": "http://archive.ubuntu.com/ubuntu", "ubuntu-24.04": "http://archive.ubuntu.com/ubuntu",
           "debian-12": "http://deb.debian.org/debian"}
KERNEL = {"ubuntu-22.04": "linux-image-generic", "ubuntu-24.04": "linux-image-generic", "debian-12": "linux-image-amd64"}
CUDA_REPO_OS = {"ubuntu-22.04": "ubuntu2204", "ubuntu-24.04": "ubuntu2404", "debian-12": "debian12"}
BASE = ("systemd-sysv", "live-boot", "openssh-server", "python3", "ca-certificates", "gnupg", "squashfs-tools")


def render_baremetal(fleet: Fleet) -> dict[PurePosixPath, str]:
    pxe = fleet.baremetal.pxe if fleet.baremetal else None
    if pxe is None:
        return {}
    files = {OUT / "dnsmasq.conf": _dnsmasq(fleet), OUT / "tftp" / "boot.ipxe": BOOT_IPXE}
    for node in fleet.nodes:
        files[OUT / "tftp" / "hosts" / f"{node.hostname}.ipxe"] = _node_script(pxe.image_url, node.hostname,
                                                                               node.stack, node.partition)
    for stack in fleet.stacks:
        gpus = [n.gpu for n in fleet.nodes if n.stack == stack.name]
        if not gpus:
            continue
        files[OUT / "golden" / f"{stack.name}.pref"] = apt_preferences(stack, fleet.os, gpus)
        files[OUT / "golden" / f"{stack.name}.sh"] = _recipe(fleet, stack, gpus)
    return files


def _dnsmasq(fleet: Fleet) -> str:
    assert fleet.baremetal is not None and fleet.baremetal.pxe is not None
    pxe = fleet.baremetal.pxe
    dns = f"dhcp-option=option:dns-server,{','.join(pxe.dns)}\n" if pxe.dns else ""
    return f"""\
# Rendered by fleetspec for fleet {fleet.name}: the boot chain of docs/bare-metal.md.
# Run: dnsmasq --conf-file=dnsmasq.conf --tftp-root=$PWD/tftp (with iPXE's undionly.kpxe
# and ipxe.efi copied into tftp/ from Debian's ipxe package).
port=0
interface={pxe.interface}
bind-interfaces
dhcp-range={pxe.dhcp_range}
dhcp-option=option:router,{pxe.server}
{dns}enable-tftp
tftp-secure
log-dhcp
dhcp-match=set:ipxe,175
dhcp-match=set:efi64,option:client-arch,7
dhcp-match=set:efi64,option:client-arch,9
dhcp-boot=tag:ipxe,boot.ipxe,,{pxe.server}
dhcp-boot=tag:!ipxe,tag:efi64,ipxe.efi,,{pxe.server}
dhcp-boot=tag:!ipxe,tag:!efi64,undionly.kpxe,,{pxe.server}
"""


BOOT_IPXE = """\
#!ipxe
# fleetspec: the node's own script by MAC (written from the BMC's inventory), else by the
# hostname DHCP gave it; nothing else boots.
echo fleetspec boot: ${net0/mac} ${hostname}
chain nodes/${net0/mac:hexhyp}.ipxe || chain hosts/${hostname}.ipxe || goto unknown
:unknown
echo fleetspec: no boot script for ${net0/mac} (${hostname}): not a node of this fleet
shell
"""


def _node_script(image_url: str, host: str, stack: str, partition: str) -> str:
    base = f"{image_url}/{stack}"
    return f"""\
#!ipxe
# fleetspec: {host}, stack {stack}, partition {partition}
echo fleetspec: booting {host} into the golden image of stack {stack}
kernel {base}/vmlinuz initrd=initrd.img boot=live fetch={base}/rootfs.squashfs fleetspec.node={host} fleetspec.stack={stack} fleetspec.partition={partition} console=ttyS0,115200 console=tty0
initrd {base}/initrd.img
boot
"""


def node_script_for_mac(host: str) -> str:
    """``nodes/<mac>.ipxe``: chains the host's script (written once its BMC reported the MAC)."""
    return f"#!ipxe\nchain /hosts/{host}.ipxe\n"


def _recipe(fleet: Fleet, stack: StackTuple, gpus: list) -> str:
    pins = packages_for(stack, fleet.os, gpus)
    suite, mirror = SUITES[fleet.os], MIRRORS[fleet.os]
    local: str | None = None  # a file: mirror: the build host's directory, bound into the root for apt
    if fleet.package_mirror is not None:
        m = fleet.package_mirror
        trusted = "[trusted=yes] " if m.trusted else f"[signed-by=/etc/apt/keyrings/{fleet.name}-mirror.asc] "
        repo = [f"deb {trusted}{m.uri} {m.suite} {m.components}".rstrip()]
        key = [] if m.trusted or m.key_url is None else [f"curl -fsSL {shlex.quote(m.key_url)} -o "
                                                          f'"$1/etc/apt/keyrings/{fleet.name}-mirror.asc"']
        if m.uri.startswith("file:"):
            local = "/" + m.uri[len("file:"):].lstrip("/")
    elif stack.vendor == "nvidia":
        base = f"https://developer.download.nvidia.com/compute/cuda/repos/{CUDA_REPO_OS[fleet.os]}/x86_64/"
        repo = [f"deb [signed-by=/etc/apt/keyrings/cuda.asc] {base} /"]
        key = [f'curl -fsSL {base}3bf863cc.pub -o "$1/etc/apt/keyrings/cuda.asc"']
    else:
        repo, key = [], []
    slurm = _slurm_node(fleet, stack)
    if slurm:  # the node's Slurm daemon too, at the fleet's release, held like the tuple
        pins = [*pins, *slurm_packages(fleet.slurm.version, ["slurm_node"])]  # type: ignore[union-attr]
    names = " ".join(p.name for p in pins if p.condition is None)
    install = " ".join(shlex.quote(p.spec) for p in pins if p.condition is None)
    hooks = ['mkdir -p "$1/etc/apt/keyrings" "$1/etc/apt/preferences.d"', *key]
    hooks += ["echo " + shlex.quote(r) + ' > "$1/etc/apt/sources.list.d/fleetspec.list"' for r in repo]
    hooks += ['cp "$PREF" "$1/etc/apt/preferences.d/fleetspec"']
    if local is not None:
        hooks += [f'mkdir -p "$1{local}" && mount --bind {shlex.quote(local)} "$1{local}" && '
                  f'mount -o remount,bind,ro "$1{local}"']
    hooks += ['chroot "$1" apt-get update',
              'DEBIAN_FRONTEND=noninteractive chroot "$1" apt-get install -y --no-install-recommends ' + install,
              'chroot "$1" apt-mark hold ' + names]
    if local is not None:
        hooks += [f'umount "$1{local}"']
    hooks += [
        # every node gets its own SSH host keys at boot, not the image's copy
        'rm -f "$1"/etc/ssh/ssh_host_*_key "$1"/etc/ssh/ssh_host_*_key.pub; mkdir -p "$1/etc/systemd/system/ssh.service.d"',
        r'printf "[Service]\nExecStartPre=\nExecStartPre=/usr/bin/ssh-keygen -A\nExecStartPre=/usr/sbin/sshd -t\n" '
        r'> "$1/etc/systemd/system/ssh.service.d/host-keys.conf"',
        'if [ -n "$KEYS" ]; then mkdir -m 700 -p "$1/root/.ssh"; cp "$KEYS" "$1/root/.ssh/authorized_keys"; fi',
        f'echo {shlex.quote(f"fleetspec-{stack.name}")} > "$1/etc/hostname"',
        # the node's own name, from the kernel command line its iPXE script gave it
        'printf %s ' + shlex.quote(NODE_NAME_SCRIPT) + ' > "$1/usr/local/sbin/fleetspec-node-name"',
        'chmod 0755 "$1/usr/local/sbin/fleetspec-node-name"',
        'printf %s ' + shlex.quote(NODE_NAME_UNIT) + ' > "$1/etc/systemd/system/fleetspec-node-name.service"',
        'mkdir -p "$1/etc/systemd/system/sysinit.target.wants" && ln -sf ../fleetspec-node-name.service '
        '"$1/etc/systemd/system/sysinit.target.wants/fleetspec-node-name.service"',
        *(_slurm_hooks(fleet) if slurm else ()),
        # the site's resolvers come from DHCP: live-boot copies what its initramfs got into a
        # resolv.conf that has no entry (9990-main.sh); the build host's must not stay
        'echo "# fleetspec: filled from DHCP at boot (live-boot)" > "$1/etc/resolv.conf"',
        'cp "$1"/boot/vmlinuz-* "$1/vmlinuz.out"; cp "$1"/boot/initrd.img-* "$1/initrd.out"',
    ]
    # dbus for slurmd: its cgroup/v2 plugin creates slurmstepd's scope through systemd's D-Bus
    # API ("cgroup/v2 needs to interact with systemd", slurm.schedmd.com/cgroup_v2.html;
    # without it slurmd 22.05 stops: "cgroup_dbus_attach_to_scope: cannot connect to dbus")
    include = (*BASE, KERNEL[fleet.os], "curl", *(("munge", "dbus") if slurm else ()))
    lines = [
        "#!/bin/sh",
        f"# fleetspec golden image for stack {stack.name} ({stack.fingerprint()}) on {fleet.os}.",
        "# Run as root on a Debian/Ubuntu build host with mmdebstrap, squashfs-tools and curl:",
        f"#   sh {stack.name}.sh OUT [AUTHORIZED_KEYS]  ->  OUT/vmlinuz, OUT/initrd.img, OUT/rootfs.squashfs",
        "# AUTHORIZED_KEYS: root's keys in the image (what Ansible, verify and the join step log in with).",
        *([f"# The mirror {local} is read on the build host (bound into the image's root while apt runs)."]
          if local is not None else []),
        f"# Serve OUT as <image_url>/{stack.name}/. Packages only some nodes need (nvswitch, imex)",
        "# are left to the Ansible roles at join.",
        *(["# Slurm: slurmd fetches its configuration from the controller (configless); the image",
           "# holds no munge key (it is served to anyone on the provisioning network): the join",
           "# step (fleetspec baremetal join) installs it and starts munge and slurmd."] if slurm else []),
        "set -eu",
        'out="$1"; root="$(mktemp -d)"',
        f'PREF="$(cd "$(dirname "$0")" && pwd)/{stack.name}.pref"; export PREF',
        'KEYS=""; if [ -n "${2:-}" ]; then KEYS="$(cd "$(dirname "$2")" && pwd)/$(basename "$2")"; fi; export KEYS',
        'trap \'rm -rf --one-file-system "$root"\' EXIT',
        "mmdebstrap --variant=apt --mode=root \\",
        f"  --include={','.join(include)} \\",
        *[f"  --customize-hook={shlex.quote(hook)} \\" for hook in hooks],
        f'  {suite} "$root" {mirror}',
        'mkdir -p "$out"',
        'mv "$root/vmlinuz.out" "$out/vmlinuz"; mv "$root/initrd.out" "$out/initrd.img"',
        'mksquashfs "$root" "$out/rootfs.squashfs" -noappend -comp zstd -e boot',
        "",
    ]
    return "\n".join(lines)


def _slurm_node(fleet: Fleet, stack: StackTuple) -> bool:
    """Whether the stack's nodes run a host slurmd (native Slurm)."""
    return (fleet.slurm is not None and fleet.slurm.mode == "native"
            and any(n.stack == stack.name and n.scheduler == "slurm" for n in fleet.nodes))


def _slurm_hooks(fleet: Fleet) -> list[str]:
    """slurmd configless from the spec's controllers (slurmd(8) --conf-server; its unit reads
    SLURMD_OPTIONS from /etc/default/slurmd), no munge key in the image (munge's package makes
    one at install: every node booted from the image would share it), and munge and slurmd
    left stopped until the join step has installed the fleet's key."""
    assert fleet.slurm is not None
    servers = ",".join(fleet.slurm.controllers)
    default = f'SLURMD_OPTIONS="--conf-server {servers}"\n'
    dropin = "[Unit]\n# configless: no slurm.conf on the node\nConditionPathExists=\n"
    return [
        'printf ' + shlex.quote(default) + ' > "$1/etc/default/slurmd"',
        'mkdir -p "$1/etc/systemd/system/slurmd.service.d" && printf ' + shlex.quote(dropin)
        + ' > "$1/etc/systemd/system/slurmd.service.d/fleetspec-configless.conf"',
        'rm -f "$1/etc/munge/munge.key"',
        'chroot "$1" systemctl disable munge.service slurmd.service',
    ]


# A name is taken only when it is one a Slurm node or a Kubernetes node can have.
NODE_NAME_SCRIPT = """\
#!/bin/sh
# fleetspec: the node name from the kernel command line (fleetspec.node=, set by its iPXE script)
for word in $(cat /proc/cmdline); do
  case "$word" in fleetspec.node=*) name="${word#fleetspec.node=}" ;; esac
done
[ -n "${name:-}" ] || exit 0
echo "$name" | grep -Eq "^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\\$" || { echo "fleetspec: bad node name: $name" >&2; exit 1; }
echo "$name" > /etc/hostname
hostname "$name"
printf "127.0.0.1\\tlocalhost\\n127.0.1.1\\t%s\\n::1\\tlocalhost ip6-localhost ip6-loopback\\n" "$name" > /etc/hosts
"""
NODE_NAME_UNIT = """\
[Unit]
Description=fleetspec: the node name from the kernel command line
DefaultDependencies=no
After=local-fs.target
Before=sysinit.target network-pre.target systemd-hostnamed.service

[Service]
Type=oneshot
ExecStart=/usr/local/sbin/fleetspec-node-name
RemainAfterExit=yes
"""
