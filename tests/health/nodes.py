"""Stand-in node roots for the node check: the files and tools a GPU node has.

A root holds ``dev/kmsg`` (the kernel log, in /dev/kmsg's record form),
``proc/sys/kernel/random/boot_id``, ``sys/class/infiniband/...`` (one HCA, the files
the kernel's sysfs ABI documents, Documentation/ABI/stable/sysfs-class-infiniband), and
``bin/`` with stand-in ``nvidia-smi``/``amd-smi`` that print captured real output for
the arguments the check uses (``-q -x`` / ``metric --ecc --json``), and fail for any
other. The node check reaches them through PATH, as it reaches the real tools.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.conftest import DATA

FIXTURES = DATA / "fixtures" / "health"
H200_XML = DATA / "fixtures" / "h200-node" / "nvidia-smi-q.xml"

IB_STATES = {
    # state, phys_state as the kernel prints them
    "active": ("4: ACTIVE", "5: LinkUp"),
    "down": ("1: DOWN", "3: Disabled"),
}


def make_node(root: Path, *, kmsg: str = "kmsg-healthy.txt", nvidia_xml: Path | None = H200_XML,
              amd_json: Path | None = None, ib: str | None = "active", boot_id: str = "boot-1",
              link_downed: int = 0) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "dev").mkdir(exist_ok=True)
    shutil.copy(FIXTURES / kmsg, root / "dev" / "kmsg")
    set_boot_id(root, boot_id)
    bin_dir = root / "bin"
    bin_dir.mkdir(exist_ok=True)
    if nvidia_xml is not None:
        set_tool_output(root, "nvidia-smi", nvidia_xml, "-q -x")
    if amd_json is not None:
        set_tool_output(root, "amd-smi", amd_json, "metric --ecc --json")
    if ib is not None:
        set_ib(root, ib, link_downed)
    return root


def set_boot_id(root: Path, boot_id: str) -> None:
    path = root / "proc" / "sys" / "kernel" / "random" / "boot_id"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(boot_id + "\n")


def set_tool_output(root: Path, tool: str, output: Path, args: str, rc: int = 0) -> None:
    """A stand-in ``tool`` printing ``output`` (exit ``rc``) for ``args``, and failing for any
    other arguments; each call adds one more ``args`` it answers."""
    captured = root / "captured" / tool
    captured.mkdir(parents=True, exist_ok=True)
    cases = captured / "cases.json"
    known = json.loads(cases.read_text()) if cases.exists() else {}
    target = captured / f"out-{len(known) if args not in known else known[args]['n']}"
    shutil.copy(output, target)
    known[args] = {"n": int(target.name.split("-")[1]), "file": str(target), "rc": rc}
    cases.write_text(json.dumps(known))
    script = root / "bin" / tool
    lines = ["#!/bin/sh"]
    lines += [f'if [ "$*" = "{a}" ]; then cat "{c["file"]}"; exit {c["rc"]}; fi' for a, c in known.items()]
    lines.append(f'echo "{tool}: stand-in knows only: {", ".join(known)}" >&2; exit 2')
    script.write_text("\n".join(lines) + "\n")
    script.chmod(0o755)


def set_ib(root: Path, state: str, link_downed: int = 0) -> None:
    port = root / "sys" / "class" / "infiniband" / "mlx5_0" / "ports" / "1"
    (port / "counters").mkdir(parents=True, exist_ok=True)
    (root / "sys" / "class" / "infiniband" / "mlx5_0" / "hca_type").write_text("MT4129\n")
    (root / "sys" / "class" / "infiniband" / "mlx5_0" / "fw_ver").write_text("28.39.1002\n")
    st, phys = IB_STATES[state]
    (port / "state").write_text(st + "\n")
    (port / "phys_state").write_text(phys + "\n")
    (port / "rate").write_text("400 Gb/sec (4X NDR)\n")
    (port / "link_layer").write_text("InfiniBand\n")
    for name, value in (("link_downed", link_downed), ("link_error_recovery", 0), ("symbol_error", 0),
                        ("port_rcv_errors", 0)):
        (port / "counters" / name).write_text(f"{value}\n")
