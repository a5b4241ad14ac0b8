"""Stand-in NVIDIA kernel modules that really load, for the VM lab host (vm.py).

Five tiny modules with the real driver's names and dependency chain: nvidia_uvm,
nvidia_modeset and nvidia_peermem use a symbol of nvidia, nvidia_drm one of
nvidia_modeset (lsmod on a driver node: "nvidia_modeset ... 1 nvidia_drm",
"nvidia ... nvidia_uvm,nvidia_modeset"; NVIDIA's driver container unloads them in that
order: NVIDIA/gpu-driver-container ubuntu22.04/nvidia-driver, _unload_driver). Each
carries the build's version where the real one does: ``modinfo -F version nvidia``
(MODULE_VERSION, also /sys/module/nvidia/version) and the NVRM line of
/proc/driver/nvidia/version, so verify's installed-vs-loaded check reads them for real.
nvidia also registers /dev/nvidiactl with itself as the owner: a process holding it open
keeps the module in use (rmmod refuses), as a CUDA process holding /dev/nvidia* does.

They are compiled against the VM image's kernel (its headers are in the image) and
packaged where DKMS installs the modules it builds on Debian and Ubuntu,
/lib/modules/<release>/updates/dkms/ (dkms.conf DEST_MODULE_LOCATION is overridden to
/updates/dkms on both), in a package whose postinst runs depmod, as DKMS's does.
"""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

from fleetspec.lab.repo import StandInPackage

# module -> the module whose symbol it uses (the real dependency chain).
MODULES: dict[str, str | None] = {
    "nvidia": None,
    "nvidia-uvm": "nvidia",
    "nvidia-modeset": "nvidia",
    "nvidia-peermem": "nvidia",
    "nvidia-drm": "nvidia-modeset",
}

_HEAD = """\
#include <linux/module.h>
#include <linux/init.h>
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("fleetspec lab stand-in for the NVIDIA {name} kernel module");
MODULE_VERSION("{version}");
"""

_NVIDIA = """\
#include <linux/proc_fs.h>
#include <linux/seq_file.h>
#include <linux/miscdevice.h>
#include <linux/fs.h>

int fleetspec_nvidia_core(void) { return 1; }
EXPORT_SYMBOL_GPL(fleetspec_nvidia_core);

static int version_show(struct seq_file *m, void *v)
{
    seq_puts(m, "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  {version}  Release Build  "
                "(fleetspec lab stand-in)\\nGCC version:  gcc\\n");
    return 0;
}

static const struct file_operations ctl_fops = { .owner = THIS_MODULE };
static struct miscdevice ctl = { .minor = MISC_DYNAMIC_MINOR, .name = "nvidiactl", .fops = &ctl_fops, .mode = 0666 };

static int __init standin_init(void)
{
    struct proc_dir_entry *dir = proc_mkdir("driver/nvidia", NULL);
    int err;
    if (!dir)
        return -ENOMEM;
    if (!proc_create_single("version", 0444, dir, version_show)) {
        remove_proc_subtree("driver/nvidia", NULL);
        return -ENOMEM;
    }
    err = misc_register(&ctl);
    if (err)
        remove_proc_subtree("driver/nvidia", NULL);
    return err;
}

static void __exit standin_exit(void)
{
    misc_deregister(&ctl);
    remove_proc_subtree("driver/nvidia", NULL);
}
module_init(standin_init);
module_exit(standin_exit);
"""

_DEPENDENT = """\
extern int fleetspec_{uses}_core(void);
int fleetspec_{sym}_core(void) {{ return fleetspec_{uses}_core(); }}
EXPORT_SYMBOL_GPL(fleetspec_{sym}_core);
static int __init standin_init(void) {{ return fleetspec_{uses}_core() ? 0 : -ENODEV; }}
static void __exit standin_exit(void) {{ }}
module_init(standin_init);
module_exit(standin_exit);
"""


def module_sources(version: str) -> dict[str, str]:
    """{file name: text} of the Kbuild tree for one driver build."""
    files = {"Kbuild": "obj-m := " + " ".join(f"{m}.o" for m in MODULES) + "\n"}
    for name, uses in MODULES.items():
        head = _HEAD.format(name=name.replace("-", "_"), version=version)
        body = (_NVIDIA.replace("{version}", version) if uses is None
                else _DEPENDENT.format(uses=uses.replace("-", "_"), sym=name.replace("-", "_")))
        files[f"{name}.c"] = head + body
    return files


def build_modules(rootfs: Path, kernel_release: str, version: str) -> dict[str, bytes]:
    """Compile the stand-ins in ``rootfs`` (the VM image's tree, which holds the kernel's
    headers and gcc) for ``kernel_release``; returns {module file name: .ko bytes}.

    The chroot runs in a private mount namespace, so its /proc and /dev mounts vanish with it.
    """
    src = Path(tempfile.mkdtemp(prefix="fleetspec-kmod-", dir=rootfs / "tmp"))
    try:
        for name, text in module_sources(version).items():
            (src / name).write_text(text)
        inside = "/" + str(src.relative_to(rootfs))
        script = (f'mount -t proc proc "$1/proc" && mount --bind /dev "$1/dev" && '
                  f'chroot "$1" make -s -C /lib/modules/{kernel_release}/build M={inside} modules')
        proc = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", str(rootfs)],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"building the stand-in modules failed: {proc.stdout[-1500:]}{proc.stderr[-2500:]}")
        return {f"{m}.ko": (src / f"{m}.ko").read_bytes() for m in MODULES}
    finally:
        subprocess.run(["rm", "-rf", str(src)], check=False)


def dkms_standin(name: str, version: str, kernel_release: str, modules: dict[str, bytes]) -> StandInPackage:
    """The driver package carrying the built modules where DKMS puts them, depmod in postinst."""
    files: dict[str, str | bytes] = {f"/lib/modules/{kernel_release}/updates/dkms/{ko}": data
                                     for ko, data in modules.items()}
    return StandInPackage(name, version, files=files, postinst=f"#!/bin/sh\nset -e\ndepmod -a {kernel_release}\n",
                          description="Kernel modules built against the lab VM's kernel (fleetspec lab stand-in).")
