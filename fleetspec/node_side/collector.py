#!/usr/bin/env python3
"""Collect the facts of one GPU node as a single JSON document.

This file is copied to nodes and run there as ``python3 collector.py``, so it
uses the standard library only, keeps Python 3.8 syntax, and imports nothing
from the fleetspec package.  The parsers live here too, so there is one copy
of the code that turns tool output into facts.

The document is a public contract, described in docs/facts.md.  It is
deterministic apart from real state (no timestamps unless ``--with-time``),
and the script always exits 0: a missing tool or file becomes the string
``"absent"``, an unreadable one ``"unknown"`` plus an entry in the section's
``errors`` list, and a probe switched off ``"not-collected"``.
"""

import argparse
import datetime
import fnmatch
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import xml.etree.ElementTree as ET
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

SCHEMA = "fleetspec.io/facts/v1"
ABSENT = "absent"
UNKNOWN = "unknown"
NOT_COLLECTED = "not-collected"
COMMAND_TIMEOUT_S = 10.0

# ---------------------------------------------------------------------------
# Parsers: pure functions from tool output to plain data.  They never raise;
# garbage in gives None or an empty container out.
# ---------------------------------------------------------------------------

_VERSION_RE = r"[0-9]+(?:\.[0-9]+)+"


def _safe(default: Any) -> Callable:
    """Make a parser return ``default`` instead of raising on malformed input."""

    def wrap(func: Callable) -> Callable:
        def inner(*args: Any, **kwargs: Any) -> Any:
            try:
                return func(*args, **kwargs)
            except Exception:  # parsers must tolerate any garbage
                return default() if callable(default) else default

        inner.__name__ = func.__name__
        inner.__doc__ = func.__doc__
        inner.__wrapped__ = func  # type: ignore[attr-defined]
        return inner

    return wrap


def _int_or_none(value: Any) -> Optional[int]:
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        return None


@_safe(None)
def parse_proc_driver_version(text: str) -> Optional[Dict[str, str]]:
    """Read /proc/driver/nvidia/version: the loaded kernel module's version.

    The open and proprietary modules name themselves differently on the NVRM
    line; that is the only reliable place to tell them apart at runtime.
    """
    for line in str(text).splitlines():
        if not line.startswith("NVRM version:"):
            continue
        match = re.search(r"Kernel Module(?:\s+for\s+\S+)?\s+(" + _VERSION_RE + ")", line)
        if not match:
            return None
        module = "open" if "Open Kernel Module" in line else "proprietary"
        return {"version": match.group(1), "module": module}
    return None


# What nvidia-smi -q -x writes where it has no value: not supported, not applicable, or
# a query that failed ("Unknown Error"). None of them is a value to compare or report.
_NO_VALUE = frozenset(("", "N/A", "[N/A]", "None", "Unknown Error"))


def xml_text(node: Optional[ET.Element], path: str) -> Optional[str]:
    """Text at ``path`` below an nvidia-smi XML element, None where nvidia-smi has no value."""
    if node is None:
        return None
    child = node.find(path)
    if child is None or child.text is None:
        return None
    value = child.text.strip()
    return None if value in _NO_VALUE else value


def _mib(value: Optional[str]) -> Optional[int]:
    """"143771 MiB" -> 143771."""
    if not value:
        return None
    match = re.match(r"\s*([0-9]+)\s*(MiB)?\s*$", value)
    return int(match.group(1)) if match else None


@_safe(None)
def parse_nvidia_smi_xml(text: str) -> Optional[Dict[str, Any]]:
    """Read ``nvidia-smi -q -x``: driver, supported CUDA, and one entry per GPU.

    GPUs carry no index in the XML; nvidia-smi lists them in index order, so
    the position is the index.  MIG and fabric state are kept as reported
    (None where nvidia-smi says N/A) because the comparison needs to tell
    "not a MIG/NVLink-fabric GPU" from "disabled".
    """
    raw = str(text)
    # The DOCTYPE names an external DTD that is never shipped; drop it.
    raw = re.sub(r"<!DOCTYPE[^>]*>", "", raw, count=1)
    root = ET.fromstring(raw)
    if root.tag != "nvidia_smi_log":
        return None
    gpus = []
    for index, gpu in enumerate(root.findall("gpu")):
        mig = gpu.find("mig_mode")
        fabric = gpu.find("fabric")
        gpus.append(
            {
                "index": index,
                "name": xml_text(gpu, "product_name"),
                "architecture": xml_text(gpu, "product_architecture"),
                "uuid": xml_text(gpu, "uuid"),
                "serial": xml_text(gpu, "serial"),
                "pci_bus_id": gpu.get("id") or xml_text(gpu.find("pci"), "pci_bus_id"),
                "memory_mib": _mib(xml_text(gpu.find("fb_memory_usage"), "total")),
                "compute_capability": xml_text(gpu, "compute_cap"),
                "vbios_version": xml_text(gpu, "vbios_version"),
                "persistence_mode": xml_text(gpu, "persistence_mode"),
                "mig_mode": {
                    "current": xml_text(mig, "current_mig"),
                    "pending": xml_text(mig, "pending_mig"),
                },
                "fabric": {
                    "state": xml_text(fabric, "state"),
                    "status": xml_text(fabric, "status"),
                    "clique_id": xml_text(fabric, "cliqueId"),
                    "cluster_uuid": xml_text(fabric, "clusterUuid"),
                },
            }
        )
    return {
        "driver_version": xml_text(root, "driver_version"),
        "cuda_version": xml_text(root, "cuda_version"),
        "gpus": gpus,
    }


# A GPU instance row of ``nvidia-smi mig -lgi`` (NVIDIA's MIG user guide, "Creating GPU
# Instances": "|   0  MIG 1g.5gb          19        7          0:1     |", columns GPU, Name,
# Profile ID, Instance ID, Placement Start:Size).
_MIG_LGI_ROW = re.compile(r"^\|\s*([0-9]+)\s+MIG\s+(\S+)\s+([0-9]+)\s+([0-9]+)\s+([0-9]+):([0-9]+)\s*\|\s*$")


@_safe(dict)
def parse_mig_lgi(text: str) -> Dict[int, List[str]]:
    """Read ``nvidia-smi mig -lgi``: GPU index -> its GPU instances' profiles, sorted."""
    out: Dict[int, List[str]] = {}
    for line in str(text).splitlines():
        match = _MIG_LGI_ROW.match(line.strip())
        if match:
            out.setdefault(int(match.group(1)), []).append(match.group(2))
    return {gpu: sorted(profiles) for gpu, profiles in out.items()}


_QUERY_GPU_KEYS = {
    "index": "index",
    "name": "name",
    "uuid": "uuid",
    "driver_version": "driver_version",
    "pci.bus_id": "pci_bus_id",
    "memory.total": "memory_mib",
    "compute_cap": "compute_capability",
    "serial": "serial",
    "vbios_version": "vbios_version",
}


@_safe(list)
def parse_query_gpu_csv(text: str, fields: Optional[List[str]] = None) -> List[Dict[str, Any]]:
    """Read ``nvidia-smi --query-gpu=... --format=csv``.

    With a header line the columns name themselves; for ``noheader`` output
    pass the queried ``fields``.  Known fields get stable keys (see
    _QUERY_GPU_KEYS); others keep their name with dots as underscores.
    """
    lines = [line for line in str(text).splitlines() if line.strip()]
    if not lines:
        return []
    if fields is None:
        fields = [re.sub(r"\s*\[.*\]$", "", f.strip()) for f in lines[0].split(",")]
        lines = lines[1:]
    keys = [_QUERY_GPU_KEYS.get(f, f.replace(".", "_")) for f in fields]
    rows = []
    for line in lines:
        values = [v.strip() for v in line.split(",")]
        if len(values) != len(keys):
            continue
        row: Dict[str, Any] = {}
        for key, value in zip(keys, values):
            if value in ("", "N/A", "[N/A]", "[Not Supported]"):
                row[key] = None
            elif key == "index":
                row[key] = _int_or_none(value)
            elif key == "memory_mib":
                row[key] = _mib(value)
            else:
                row[key] = value
        rows.append(row)
    return rows


@_safe(None)
def parse_nvcc_version(text: str) -> Optional[Dict[str, str]]:
    """``nvcc --version`` -> {"release": "13.0", "version": "13.0.88"}."""
    match = re.search(r"release\s+([0-9]+\.[0-9]+),\s*V(" + _VERSION_RE + ")", str(text))
    if not match:
        return None
    return {"release": match.group(1), "version": match.group(2)}


@_safe(None)
def parse_cuda_version_json(text: str) -> Optional[Dict[str, Any]]:
    """Read a toolkit's version.json: the SDK version and each component's.

    Component versions differ from the SDK's (cudart 13.0.96 in CUDA 13.0.2),
    and the pinned tuple may name either, so both are kept.
    """
    data = json.loads(str(text))
    if not isinstance(data, dict):
        return None
    sdk = data.get("cuda")
    version = sdk.get("version") if isinstance(sdk, dict) else None
    components = {}
    for key, value in data.items():
        if key != "cuda" and isinstance(value, dict) and isinstance(value.get("version"), str):
            components[key] = value["version"]
    if not isinstance(version, str) and not components:
        return None
    return {"version": version if isinstance(version, str) else None, "components": components}


@_safe(None)
def parse_cuda_version_txt(text: str) -> Optional[str]:
    """Read a pre-11.1 toolkit's version.txt ("CUDA Version 10.2.89")."""
    match = re.search(r"CUDA Version\s+(" + _VERSION_RE + ")", str(text))
    return match.group(1) if match else None


@_safe(None)
def parse_cudnn_version_header(text: str) -> Optional[str]:
    """Read cudnn_version.h (or cudnn.h before cuDNN 8) -> "9.19.0"."""
    parts = []
    for name in ("CUDNN_MAJOR", "CUDNN_MINOR", "CUDNN_PATCHLEVEL"):
        match = re.search(r"#define\s+" + name + r"\s+([0-9]+)", str(text))
        if not match:
            return None
        parts.append(match.group(1))
    return ".".join(parts)


@_safe(dict)
def parse_ldconfig(text: str) -> Dict[str, List[str]]:
    """Read ``ldconfig -p``: library name -> paths, in cache order, no repeats."""
    found: Dict[str, List[str]] = {}
    for line in str(text).splitlines():
        match = re.match(r"\s+(\S+)\s+\(([^)]*)\)\s+=>\s+(\S+)\s*$", line)
        if not match:
            continue
        paths = found.setdefault(match.group(1), [])
        if match.group(3) not in paths:
            paths.append(match.group(3))
    return found


def _decode_int(value: Any) -> Optional[int]:
    if isinstance(value, bool):
        return None
    number = _int_or_none(value)
    return number if number is not None and number > 0 else None


def decode_nccl_version(value: Any) -> Optional[str]:
    """Decode ncclGetVersion: MAJOR*10000+MINOR*100+PATCH since 2.9, MAJOR*1000+MINOR*100+PATCH before.

    RCCL uses the same encoding.
    """
    code = _decode_int(value)
    if code is None:
        return None
    if code >= 10000:
        return "%d.%d.%d" % (code // 10000, (code % 10000) // 100, code % 100)
    return "%d.%d.%d" % (code // 1000, (code % 1000) // 100, code % 100)


def decode_cudart_version(value: Any) -> Optional[str]:
    """Decode cudaRuntimeGetVersion/cudaDriverGetVersion: MAJOR*1000+MINOR*10."""
    code = _decode_int(value)
    if code is None:
        return None
    return "%d.%d" % (code // 1000, (code % 1000) // 10)


def decode_cudnn_version(value: Any) -> Optional[str]:
    """Decode cudnnGetVersion: MAJOR*10000+MINOR*100+PATCH for cuDNN 9+, MAJOR*1000+MINOR*100+PATCH before."""
    code = _decode_int(value)
    if code is None:
        return None
    if code >= 90000:
        return "%d.%d.%d" % (code // 10000, (code % 10000) // 100, code % 100)
    return "%d.%d.%d" % (code // 1000, (code % 1000) // 100, code % 100)


def _is_installed(status: str) -> bool:
    """dpkg's abbreviated status: the second letter says whether files are on disk.

    "n" (not installed) and "c" (only config files left) are not; the others
    (installed, unpacked, half-configured, ...) are, even if unhealthy.
    """
    return len(status) >= 2 and status[1] in "iUFHWt"


@_safe(list)
def parse_dpkg_query(text: str) -> List[Dict[str, Any]]:
    """Read ``dpkg-query -W -f='${Package}\\t${Version}\\t${db:Status-Abbrev}\\n'``.

    Packages dpkg merely remembers (removed, config files left) are dropped.
    ``held`` is dpkg's own selection (first status letter "h"), which is what
    ``apt-mark hold`` sets.
    """
    packages = []
    for line in str(text).splitlines():
        parts = line.split("\t")
        if len(parts) < 3 or not parts[0].strip():
            continue
        status = parts[2].strip()
        if not _is_installed(status):
            continue
        packages.append(
            {
                "name": parts[0].strip().split(":")[0],
                "version": parts[1].strip(),
                "status": status,
                "held": status.startswith("h"),
            }
        )
    return sorted(packages, key=lambda p: (p["name"], p["version"]))


@_safe(list)
def parse_rpm_query(text: str) -> List[Dict[str, Any]]:
    """Read ``rpm -qa --qf '%{NAME}\\t%{VERSION}-%{RELEASE}\\n'``, or RPM_QF's
    ``NAME\\tEPOCHNUM:VERSION-RELEASE\\tARCH``: then ``version`` is the EVR as dnf and the pins
    write it (``3:580.82.07-1.el9``; no ``0:``), ``nevra`` what a versionlock line matches."""
    packages = []
    for line in str(text).splitlines():
        parts = line.split("\t")
        if len(parts) < 2 or not parts[0].strip() or not parts[1].strip():
            continue
        name, version = parts[0].strip(), parts[1].strip()
        package = {"name": name, "version": version, "status": "installed", "held": False}
        if len(parts) >= 3 and re.match(r"^[0-9]+:", version):
            epoch, evr = version.split(":", 1)
            package["version"] = evr if epoch == "0" else version
            package["nevra"] = "%s-%s.%s" % (name, version, parts[2].strip())
        packages.append(package)
    return sorted(packages, key=lambda p: (p["name"], p["version"]))


@_safe(list)
def parse_versionlock(text: str) -> List[str]:
    """DNF4's versionlock.list: one ``name-epoch:version-release.*`` pattern a line; ``#``
    comments and blank lines skipped, ``!`` lines (excludes) kept as written (dnf-plugins-core
    versionlock.py, _read_locklist)."""
    return [line.strip() for line in str(text).splitlines() if line.strip() and not line.startswith("#")]


@_safe(dict)
def parse_dnf_module_file(text: str) -> Dict[str, str]:
    """``/etc/dnf/modules.d/<name>.module`` (an ini section): {name, stream, state}."""
    values = {}
    for line in str(text).splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() in ("name", "stream", "state"):
            values[key.strip()] = value.strip()
    return values


@_safe(list)
def parse_apt_mark_showhold(text: str) -> List[str]:
    """Read ``apt-mark showhold``: one package name per line."""
    names = set()
    for line in str(text).splitlines():
        name = line.strip().split(":")[0]
        if re.match(r"^[a-z0-9][a-z0-9+.-]*$", name):
            names.add(name)
    return sorted(names)


@_safe(list)
def parse_dpkg_search(text: str) -> List[str]:
    """Read ``dpkg -S PATH`` -> owning package names (arch suffix dropped)."""
    owners = set()
    for line in str(text).splitlines():
        if line.startswith("diversion ") or ": " not in line:
            continue
        for name in line.split(": ", 1)[0].split(","):
            name = name.strip().split(":")[0]
            if name:
                owners.add(name)
    return sorted(owners)


@_safe(None)
def parse_rocm_version_file(text: str) -> Optional[str]:
    """/opt/rocm/.info/version ("6.3.3-74") -> "6.3.3"."""
    match = re.match(r"\s*(" + _VERSION_RE + ")", str(text))
    return match.group(1) if match else None


def _vram_mib(size: Any) -> Optional[int]:
    """amd-smi VRAM size as dict {value, unit}, "196592 MB" or a bare number (MB).

    amd-smi's "MB" is 2**20 bytes (an MI300X reports 196592 for 192 GiB).
    """
    unit = "MB"
    value = size
    if isinstance(size, dict):
        value, unit = size.get("value"), str(size.get("unit") or "MB")
    elif isinstance(size, str):
        match = re.match(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)", size)
        if not match:
            return None
        value, unit = match.group(1), match.group(2) or "MB"
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    scale = {"B": 1.0 / 2 ** 20, "KB": 1.0 / 1024, "MB": 1.0, "MIB": 1.0, "GB": 1024.0, "GIB": 1024.0}
    factor = scale.get(unit.upper())
    return int(number * factor) if factor is not None else None


def _na(value: Any) -> Optional[str]:
    if value is None:
        return None
    text = str(value).strip()
    return None if text in ("", "N/A", "n/a") else text


@_safe(list)
def parse_amd_smi_json(text: str) -> List[Dict[str, Any]]:
    """Read ``amd-smi static --asic --vram --json``.

    ROCm 6.x prints a list of GPU objects, later releases wrap it as
    {"gpu_data": [...]}; a single object is accepted too.
    """
    data = json.loads(str(text))
    if isinstance(data, dict):
        items = data.get("gpu_data") if isinstance(data.get("gpu_data"), list) else [data]
    elif isinstance(data, list):
        items = data
    else:
        return []
    gpus = []
    for position, item in enumerate(items):
        if not isinstance(item, dict) or ("asic" not in item and "gpu" not in item):
            continue
        asic = item.get("asic") if isinstance(item.get("asic"), dict) else {}
        vram = item.get("vram") if isinstance(item.get("vram"), dict) else {}
        index = _int_or_none(item.get("gpu"))
        gpus.append(
            {
                "index": position if index is None else index,
                "name": _na(asic.get("market_name")),
                "gfx_target": _na(asic.get("target_graphics_version")),
                "vram_mib": _vram_mib(vram.get("size")),
            }
        )
    return sorted(gpus, key=lambda g: g["index"])


def _key_ci(mapping: Dict[str, Any], *names: str) -> Any:
    lowered = {str(k).lower(): v for k, v in mapping.items()}
    for name in names:
        if name.lower() in lowered:
            return lowered[name.lower()]
    return None


@_safe(list)
def parse_rocm_smi_json(text: str) -> List[Dict[str, Any]]:
    """Read ``rocm-smi --showproductname --json`` (and/or ``--showmeminfo vram``).

    The document maps "cardN" to a flat dict; fields a query did not ask for
    come back as None, so two queries can be merged by index.
    """
    data = json.loads(str(text))
    if not isinstance(data, dict):
        return []
    gpus = []
    for key, card in data.items():
        match = re.match(r"^card([0-9]+)$", str(key))
        if not match or not isinstance(card, dict):
            continue
        vram_bytes = _int_or_none(_key_ci(card, "VRAM Total Memory (B)"))
        gpus.append(
            {
                "index": int(match.group(1)),
                "name": _na(_key_ci(card, "Card Series", "Card series", "Device Name")),
                "gfx_target": _na(_key_ci(card, "GFX Version")),
                "vram_mib": vram_bytes // 2 ** 20 if vram_bytes is not None else None,
            }
        )
    return sorted(gpus, key=lambda g: g["index"])


@_safe(None)
def parse_slurmd_version(text: str) -> Optional[str]:
    """``slurmd -V`` ("slurm 22.05.8", Debian: "slurm-wlm 22.05.8") -> "22.05.8"."""
    match = re.search(r"^\s*slurm\S*\s+(" + _VERSION_RE + r"\S*)", str(text), re.MULTILINE)
    return match.group(1) if match else None


# ``slurmd -C``: "Print actual hardware configuration and exit" (slurmd(8)), one node line
# in slurm.conf's own words, e.g. on this project's test machine (slurm-wlm 22.05.8):
# "NodeName=vm CPUs=2 Boards=1 SocketsPerBoard=1 CoresPerSocket=2 ThreadsPerCore=1
# RealMemory=24105" then "UpTime=0-05:30:37". The keys kept: the socket/core layout.
SLURMD_LAYOUT_KEYS = ("CPUs", "Boards", "SocketsPerBoard", "CoresPerSocket", "ThreadsPerCore", "RealMemory")


@_safe(None)
def parse_slurmd_config(text: str) -> Optional[Dict[str, int]]:
    """``slurmd -C``'s NodeName line -> {CPUs, Boards, SocketsPerBoard, CoresPerSocket,
    ThreadsPerCore, RealMemory, Sockets}; ``Sockets`` is Boards x SocketsPerBoard (what a
    node line's ``Sockets=`` means: slurm.conf(5)). None when the line or a layout key is
    missing or not a number."""
    for line in str(text).splitlines():
        if not line.startswith("NodeName="):
            continue
        fields = dict(token.split("=", 1) for token in line.split() if "=" in token)
        values = {}  # type: Dict[str, int]
        for key in SLURMD_LAYOUT_KEYS:
            value = fields.get(key, "")
            if not (value.isascii() and value.isdigit()) or len(value) > 12:
                return None
            values[key] = int(value)
        values["Sockets"] = values["Boards"] * values["SocketsPerBoard"]
        return values
    return None


@_safe(None)
def parse_fabricmanager_version(text: str) -> Optional[str]:
    """``nv-fabricmanager --version`` ("Fabric Manager version is : 580.95.05")."""
    match = re.search(r"version\s+is\s*:\s*(" + _VERSION_RE + ")", str(text))
    return match.group(1) if match else None


@_safe(dict)
def parse_os_release(text: str) -> Dict[str, str]:
    """Read /etc/os-release KEY=value lines, quotes removed."""
    values = {}
    for line in str(text).splitlines():
        match = re.match(r"^([A-Z0-9_]+)=(.*)$", line.strip())
        if match:
            values[match.group(1)] = match.group(2).strip().strip("\"'")
    return values


def _read_small(path: str) -> Optional[str]:
    try:
        with open(path, "r", errors="replace") as handle:
            return handle.read(4096).strip()
    except (OSError, ValueError):
        return None


def _after_colon(value: Optional[str]) -> Optional[str]:
    """sysfs "4: ACTIVE" -> "ACTIVE"."""
    if value is None:
        return None
    return value.split(":", 1)[1].strip() if ":" in value else value.strip()


@_safe(list)
def parse_infiniband_sysfs(base_dir: str) -> List[Dict[str, Any]]:
    """Read /sys/class/infiniband: devices, firmware and per-port link state.

    ``link_layer`` tells InfiniBand from RoCE (Ethernet); ``rate_gbps`` is the
    number from "400 Gb/sec (4X NDR)" so ports can be compared numerically.
    """
    devices = []
    for name in sorted(os.listdir(base_dir)):
        device_dir = os.path.join(base_dir, name)
        ports = []
        ports_dir = os.path.join(device_dir, "ports")
        port_names = os.listdir(ports_dir) if os.path.isdir(ports_dir) else []
        for port in sorted(port_names, key=lambda p: (_int_or_none(p) is None, _int_or_none(p) or 0, p)):
            port_dir = os.path.join(ports_dir, port)
            rate = _read_small(os.path.join(port_dir, "rate"))
            rate_match = re.match(r"\s*([0-9]+(?:\.[0-9]+)?)\s*Gb/sec", rate or "")
            gbps = float(rate_match.group(1)) if rate_match else None
            ports.append(
                {
                    "port": _int_or_none(port) if _int_or_none(port) is not None else port,
                    "state": _after_colon(_read_small(os.path.join(port_dir, "state"))),
                    "phys_state": _after_colon(_read_small(os.path.join(port_dir, "phys_state"))),
                    "rate": rate,
                    "rate_gbps": int(gbps) if gbps is not None and gbps.is_integer() else gbps,
                    "link_layer": _read_small(os.path.join(port_dir, "link_layer")),
                }
            )
        devices.append(
            {
                "device": name,
                "hca_type": _read_small(os.path.join(device_dir, "hca_type")),
                "fw_ver": _read_small(os.path.join(device_dir, "fw_ver")),
                "ports": ports,
            }
        )
    return devices


def library_file_version(path: str) -> Optional[str]:
    """"libnccl.so.2.28.3" -> "2.28.3"; None when the name carries only a major."""
    match = re.search(r"\.so\.([0-9]+\.[0-9]+(?:\.[0-9]+)*)$", os.path.basename(str(path)))
    return match.group(1) if match else None


# ---------------------------------------------------------------------------
# The host: file reads relative to --root, commands with timeouts, and
# library probes in a child process (a crashing library cannot kill us).
# ---------------------------------------------------------------------------

_EXTRA_BIN_DIRS = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin",
                   "/usr/local/cuda/bin", "/opt/rocm/bin", "/usr/local/nvidia/bin")

# Runs in a child interpreter: load one library, call one version function.
_LIBRARY_PROBE = r"""
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
func = getattr(lib, sys.argv[2])
if sys.argv[3] == "out-int":
    value = ctypes.c_int(0)
    func.argtypes = [ctypes.POINTER(ctypes.c_int)]
    func.restype = ctypes.c_int
    rc = func(ctypes.byref(value))
    print(rc, value.value)
else:
    func.argtypes = []
    func.restype = ctypes.c_size_t
    print(0, func())
"""


class CommandResult(object):
    """What one command did; ``missing`` when the tool is not installed."""

    def __init__(self, state: str, rc: int = 0, stdout: str = "", stderr: str = "") -> None:
        self.state = state  # "ok" | "failed" | "missing" | "disabled" | "timeout"
        self.rc = rc
        self.stdout = stdout
        self.stderr = stderr

    @property
    def ok(self) -> bool:
        return self.state == "ok"

    def describe(self, argv: List[str]) -> str:
        detail = (self.stderr or self.stdout).strip().splitlines()
        tail = (": " + detail[-1][:200]) if detail else ""
        return "%s: %s (rc %s)%s" % (" ".join(argv), self.state, self.rc, tail)


class Host(object):
    """The node as seen through --root, --no-commands and --no-load."""

    def __init__(self, root: str = "/", commands: bool = True, load: bool = True) -> None:
        self.root = os.path.abspath(root)
        self.commands = commands
        self.load = load

    def _raw(self, path: str) -> str:
        return os.path.join(self.root, path.lstrip("/"))

    def path(self, path: str) -> str:
        """Where a node path lies on this filesystem, symlinks resolved inside --root."""
        if self.root == "/":
            return path
        return self._raw(self.resolve(path))

    def islink(self, path: str) -> bool:
        parent, name = os.path.split(path.rstrip("/"))
        return os.path.islink(self._raw(self.resolve(parent).rstrip("/") + "/" + name))

    def read(self, path: str, limit: int = 1 << 20) -> Optional[str]:
        try:
            with open(self.path(path), "r", errors="replace") as handle:
                return handle.read(limit)
        except (OSError, ValueError):
            return None

    def exists(self, path: str) -> bool:
        return os.path.exists(self.path(path))

    def isdir(self, path: str) -> bool:
        return os.path.isdir(self.path(path))

    def listdir(self, path: str) -> List[str]:
        try:
            return sorted(os.listdir(self.path(path)))
        except OSError:
            return []

    def glob(self, pattern: str) -> List[str]:
        """Node paths matching a glob, sorted; expanded one component at a time inside --root."""
        paths = ["/"]
        for part in [p for p in pattern.split("/") if p]:
            expanded = []
            for base in paths:
                if re.search(r"[*?\[]", part):
                    names = [n for n in self.listdir(base) if fnmatch.fnmatchcase(n, part)
                             and (part.startswith(".") or not n.startswith("."))]
                else:
                    names = [part] if os.path.lexists(self.path(base.rstrip("/") + "/" + part)) else []
                expanded.extend(base.rstrip("/") + "/" + name for name in names)
            paths = expanded
        return sorted(p for p in paths if p != "/")

    def resolve(self, path: str) -> str:
        """The node path with every symlink followed, absolute targets kept inside root."""
        parts = [p for p in path.split("/") if p]
        resolved: List[str] = []
        hops = 0
        while parts:
            part = parts.pop(0)
            if part == ".":
                continue
            if part == "..":
                if resolved:
                    resolved.pop()
                continue
            candidate = "/" + "/".join(resolved + [part])
            real = self._raw(candidate)
            if os.path.islink(real) and hops < 40:
                hops += 1
                target = os.readlink(real)
                if target.startswith("/"):
                    resolved = []
                parts = [p for p in target.split("/") if p] + parts
                continue
            resolved.append(part)
        return "/" + "/".join(resolved)

    def which(self, name: str) -> Optional[str]:
        """Find a tool on PATH or in the usual admin directories (Ansible's PATH is thin)."""
        search = os.environ.get("PATH", "").split(os.pathsep) + list(_EXTRA_BIN_DIRS)
        return shutil.which(name, path=os.pathsep.join(d for d in search if d))

    def run(self, argv: List[str], timeout: float = COMMAND_TIMEOUT_S) -> CommandResult:
        if not self.commands:
            return CommandResult("disabled")
        tool = argv[0] if "/" in argv[0] else self.which(argv[0])
        if tool is None or not os.path.exists(tool):
            return CommandResult("missing")
        env = dict(os.environ, LC_ALL="C", LANG="C")
        try:
            proc = subprocess.run([tool] + list(argv[1:]), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  stdin=subprocess.DEVNULL, timeout=timeout, env=env)
        except subprocess.TimeoutExpired:
            return CommandResult("timeout", rc=-1)
        except OSError as exc:
            return CommandResult("failed", rc=-1, stderr=str(exc))
        stdout = proc.stdout.decode("utf-8", "replace")
        stderr = proc.stderr.decode("utf-8", "replace")
        return CommandResult("ok" if proc.returncode == 0 else "failed", proc.returncode, stdout, stderr)

    def probe_library(self, path: str, function: str, style: str) -> Tuple[Optional[int], Optional[str]]:
        """Call one version function of a library in a child process: (value, error)."""
        if not self.load:
            return None, None
        try:
            proc = subprocess.run([sys.executable, "-c", _LIBRARY_PROBE, self.path(path), function, style],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                  timeout=COMMAND_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return None, "%s %s: timeout" % (path, function)
        except OSError as exc:
            return None, "%s %s: %s" % (path, function, exc)
        fields = proc.stdout.decode("utf-8", "replace").split()
        if proc.returncode != 0 or len(fields) != 2 or fields[0] != "0":
            lines = proc.stderr.decode("utf-8", "replace").strip().splitlines()
            return None, "%s %s: %s" % (path, function, lines[-1][:200] if lines else "rc %d" % proc.returncode)
        return _int_or_none(fields[1]), None


def _or(value: Any, fallback: str) -> Any:
    return fallback if value is None else value


def _command_value(result: CommandResult, value: Any) -> Any:
    """The sentinel for a fact a command should have produced."""
    if value is not None:
        return value
    if result.state == "disabled":
        return NOT_COLLECTED
    if result.state == "missing":
        return ABSENT
    return UNKNOWN


# ---------------------------------------------------------------------------
# Library discovery: system directories, the ld cache, Python environments.
# ---------------------------------------------------------------------------

SYSTEM_LIB_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib",
                   "/usr/local/lib", "/lib/x86_64-linux-gnu", "/lib/aarch64-linux-gnu", "/lib64",
                   "/usr/local/nvidia/lib64", "/usr/local/cuda*/lib64", "/usr/local/cuda*/targets/*/lib",
                   "/opt/rocm*/lib", "/opt/rocm*/lib64")
ENV_SCAN_BASES = ("/opt", "/home", "/root", "/usr/local/lib", "/usr/lib")
ENV_SCAN_DEPTH = 6
ENV_SCAN_MAX_DIRS = 20000
_HIDDEN_ALLOWED = (".venv", ".local", ".conda", ".pyenv", ".virtualenvs", ".env", ".miniconda3")
_SKIP_DIRS = ("node_modules", "__pycache__", "site-packages", "dist-packages", "include", "share", "src")


def find_site_packages(host: Host, errors: List[str]) -> List[str]:
    """Every site-/dist-packages directory under the usual homes of Python environments.

    The walk is bounded (depth and directory count) so a huge /home cannot
    stall a node; hitting the bound is reported, not hidden.
    """
    found = []
    visited = 0
    stack: List[Tuple[str, int]] = [(base, 0) for base in reversed(ENV_SCAN_BASES)]
    while stack:
        current, depth = stack.pop()
        if visited >= ENV_SCAN_MAX_DIRS:
            errors.append("python environment scan stopped after %d directories" % ENV_SCAN_MAX_DIRS)
            break
        visited += 1
        try:
            entries = sorted(os.scandir(host.path(current)), key=lambda e: e.name)
        except OSError:
            continue
        children = []
        for entry in entries:
            try:
                if not entry.is_dir(follow_symlinks=False):
                    continue
            except OSError:
                continue
            node_path = current.rstrip("/") + "/" + entry.name
            if entry.name in ("site-packages", "dist-packages"):
                found.append(node_path)
            elif depth + 1 < ENV_SCAN_DEPTH and entry.name not in _SKIP_DIRS and (
                    not entry.name.startswith(".") or entry.name in _HIDDEN_ALLOWED):
                children.append((node_path, depth + 1))
        stack.extend(reversed(children))
    return sorted(set(found))


def _environment_of(site_packages: str) -> str:
    """/opt/torch/.venv/lib/python3.12/site-packages -> /opt/torch/.venv."""
    match = re.match(r"^(.*)/lib(?:64)?/python[^/]*/(?:site|dist)-packages$", site_packages)
    return match.group(1) if match else site_packages


class LibraryIndex(object):
    """Where libraries live on this node, gathered once and shared by sections."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self.errors: List[str] = []
        result = host.run(["ldconfig", "-p"])
        self.ldcache = parse_ldconfig(result.stdout) if result.ok else {}
        if result.state in ("failed", "timeout"):
            self.errors.append(result.describe(["ldconfig", "-p"]))
        self.site_packages = find_site_packages(host, self.errors)
        self._pip_records: Dict[str, Dict[str, Tuple[str, str]]] = {}

    def find(self, stem: str, python_globs: Iterable[str]) -> List[Dict[str, Any]]:
        """Every distinct library file named ``stem.so*``, with all paths that lead to it."""
        found: Dict[str, Dict[str, Any]] = {}

        def add(path: str, environment: Optional[str], site: Optional[str]) -> None:
            real = self.host.resolve(path)
            if not os.path.isfile(self.host.path(real)):
                return
            entry = found.setdefault(real, {"aliases": set(), "environment": None, "site": None})
            entry["aliases"].add(path)
            if site is not None:
                entry["environment"], entry["site"] = environment, site

        for name, paths in self.ldcache.items():
            if name.startswith(stem + ".so"):
                for path in paths:
                    add(path, None, None)
        for directory in SYSTEM_LIB_DIRS:
            for path in self.host.glob(directory + "/" + stem + ".so*"):
                add(path, None, None)
        for site in self.site_packages:
            for pattern in python_globs:
                for path in self.host.glob(site + "/" + pattern + "/" + stem + ".so*"):
                    add(path, _environment_of(site), site)
        return [dict(found[real], path=real) for real in sorted(found)]

    def pip_owner(self, site: str, paths: Iterable[str]) -> Optional[Dict[str, str]]:
        """The wheel that installed a file, from the RECORD of nvidia/torch dist-infos."""
        records = self._pip_records.get(site)
        if records is None:
            records = {}
            for info in self.host.glob(site + "/*.dist-info"):
                base = os.path.basename(info)[: -len(".dist-info")]
                if not base.lower().startswith(("nvidia", "torch", "rccl", "cupy")):
                    continue
                name, _, version = base.partition("-")
                text = self.host.read(info + "/RECORD", limit=8 << 20) or ""
                for line in text.splitlines():
                    records[line.split(",", 1)[0]] = (name, version)
            self._pip_records[site] = records
        for path in paths:
            if path.startswith(site + "/") and path[len(site) + 1:] in records:
                name, version = records[path[len(site) + 1:]]
                return {"manager": "pip", "name": name.replace("_", "-"), "version": version}
        return None


class PackageOwners(object):
    """Which OS package owns a file, cached per file: rpm -qf on an EL node (its epoch
    included, as collect_rpm_packages reads it; Debian's dpkg on the same host is not the
    node's package manager), dpkg -S elsewhere, rpm -qf where dpkg is missing."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self.errors: List[str] = []
        self._versions: Dict[str, str] = {}
        self._el: Optional[bool] = None

    def owner(self, paths: Iterable[str]) -> Any:
        if not self.host.commands:
            return NOT_COLLECTED
        if self._el is None:
            self._el = is_el(self.host)
        for path in paths:
            if self._el:
                found = self._rpm_owner(path)
                if found:
                    return found
                continue
            result = self.host.run(["dpkg", "-S", path])
            if result.ok:
                names = parse_dpkg_search(result.stdout)
                if names:
                    return {"manager": "dpkg", "name": names[0], "version": self._dpkg_version(names[0])}
            elif result.state == "missing":
                found = self._rpm_owner(path)
                if found:
                    return found
        return ABSENT

    def _rpm_owner(self, path: str) -> Optional[Dict[str, str]]:
        root = ["--root", self.host.root] if self.host.root != "/" else []
        rpm = self.host.run(["rpm"] + root + ["-qf", "--qf", RPM_QF, path])
        packages = parse_rpm_query(rpm.stdout) if rpm.ok else []
        if packages:
            return {"manager": "rpm", "name": packages[0]["name"], "version": packages[0]["version"]}
        return None

    def _dpkg_version(self, name: str) -> str:
        if name not in self._versions:
            result = self.host.run(["dpkg-query", "-W", "-f=${Package}\t${Version}\t${db:Status-Abbrev}\n", name])
            packages = parse_dpkg_query(result.stdout) if result.ok else []
            self._versions[name] = packages[0]["version"] if packages else UNKNOWN
        return self._versions[name]


def describe_libraries(index: LibraryIndex, owners: PackageOwners, stem: str, python_globs: Iterable[str],
                       function: str, style: str, decode: Callable[[Any], Optional[str]],
                       errors: List[str]) -> List[Dict[str, Any]]:
    """One entry per library file: where, what it reports, what its name says, who installed it."""
    described = []
    for entry in index.find(stem, python_globs):
        value, error = index.host.probe_library(entry["path"], function, style)
        if error:
            errors.append(error)
        version = decode(value) if value is not None else None
        if version is None:
            version = NOT_COLLECTED if not index.host.load else UNKNOWN
        if entry["site"] is not None:
            package = index.pip_owner(entry["site"], sorted(entry["aliases"]) + [entry["path"]]) or ABSENT
        else:
            package = owners.owner([entry["path"]] + sorted(entry["aliases"]))
        described.append(
            {
                "path": entry["path"],
                "aliases": sorted(entry["aliases"]),
                "origin": "python" if entry["site"] is not None else "system",
                "environment": entry["environment"],
                "version": version,
                "file_version": library_file_version(entry["path"]),
                "package": package,
            }
        )
    return described


def _versions(libraries: List[Dict[str, Any]]) -> List[str]:
    return sorted({lib["version"] for lib in libraries if lib["version"] not in (UNKNOWN, NOT_COLLECTED)})


# ---------------------------------------------------------------------------
# Sections.  Each returns a dict with its own ``errors`` list.
# ---------------------------------------------------------------------------

def collect_os(host: Host) -> Dict[str, Any]:
    text = host.read("/etc/os-release") or host.read("/usr/lib/os-release")
    values = parse_os_release(text) if text is not None else {}
    return {
        "id": values.get("ID", ABSENT),
        "version_id": values.get("VERSION_ID", ABSENT),
        "pretty_name": values.get("PRETTY_NAME", ABSENT),
    }


def collect_kernel(host: Host) -> str:
    release = host.read("/proc/sys/kernel/osrelease")
    if release and release.strip():
        return release.strip()
    if host.root == "/":
        return os.uname().release
    return ABSENT


def collect_hostname(host: Host) -> str:
    if host.root == "/":
        return socket.gethostname()
    name = (host.read("/etc/hostname") or "").strip()
    return name or ABSENT


def nvidia_smi_command(host: Host) -> List[str]:
    """nvidia-smi on PATH, or the GPU Operator's driver container's copy under /run/nvidia/driver."""
    if host.which("nvidia-smi") is None and os.path.exists("/run/nvidia/driver/usr/bin/nvidia-smi"):
        return ["/run/nvidia/driver/usr/bin/nvidia-smi"]
    return ["nvidia-smi"]


QUERY_GPU_FIELDS = ["index", "name", "uuid", "driver_version", "pci.bus_id", "memory.total", "compute_cap",
                    "serial", "vbios_version"]


def collect_nvidia(host: Host) -> Dict[str, Any]:
    """Driver (kernel module and userspace), GPUs, fabric manager."""
    errors: List[str] = []
    proc_text = host.read("/proc/driver/nvidia/version")
    proc = parse_proc_driver_version(proc_text) if proc_text is not None else None
    if proc_text is not None and proc is None:
        errors.append("/proc/driver/nvidia/version: unrecognised")
    proc_sentinel = ABSENT if proc_text is None else UNKNOWN

    smi = nvidia_smi_command(host)
    xml_result = host.run(smi + ["-q", "-x"])
    xml = parse_nvidia_smi_xml(xml_result.stdout) if xml_result.ok else None
    if xml_result.state in ("failed", "timeout") or (xml_result.ok and xml is None):
        errors.append(xml_result.describe(smi + ["-q", "-x"]))
    csv_argv = smi + ["--query-gpu=" + ",".join(QUERY_GPU_FIELDS), "--format=csv,noheader,nounits"]
    csv_result = host.run(csv_argv) if xml is not None else CommandResult("missing")
    rows = parse_query_gpu_csv(csv_result.stdout, QUERY_GPU_FIELDS) if csv_result.ok else []
    if csv_result.state in ("failed", "timeout"):
        errors.append(csv_result.describe(csv_argv))
    by_uuid = {row.get("uuid"): row for row in rows}

    instances = collect_mig_instances(host, smi, (xml or {}).get("gpus", []), errors)
    gpus = []
    for gpu in (xml or {}).get("gpus", []):
        row = by_uuid.get(gpu["uuid"], {})
        merged = dict(gpu)
        merged["compute_capability"] = gpu["compute_capability"] or row.get("compute_capability") or UNKNOWN
        for key in ("name", "uuid", "serial", "pci_bus_id", "memory_mib", "architecture", "vbios_version"):
            merged[key] = _or(merged[key], UNKNOWN)
        if instances is not None and (gpu.get("mig_mode") or {}).get("current") == "Enabled":
            merged["mig_instances"] = instances.get(gpu["index"], []) if isinstance(instances, dict) else instances
        gpus.append(merged)

    return {
        "present": proc is not None or proc_text is not None or bool(gpus),
        "driver_version": proc["version"] if proc else proc_sentinel,
        "kernel_module": proc["module"] if proc else proc_sentinel,
        "smi_driver_version": _command_value(xml_result, (xml or {}).get("driver_version")),
        "smi_cuda_version": _command_value(xml_result, (xml or {}).get("cuda_version")),
        "gpus": gpus,
        "fabric_manager": collect_fabric_manager(host, errors),
        "installed_module_version": collect_installed_module(host, errors),
        "nvswitches": collect_nvswitches(host),
        "nvlink5_bridges": collect_nvlink5_bridges(host),
        "persistenced": collect_persistenced(host),
        "imex": collect_imex(host),
        "reboot_required": _reboot_marker(host),
        "errors": errors,
    }


def collect_mig_instances(host: Host, smi: List[str], gpus: List[Dict[str, Any]], errors: List[str]) -> Any:
    """GPU index -> its MIG instances' profiles (``nvidia-smi mig -lgi``), asked only where a GPU
    runs in MIG mode (``nvidia-smi -q -x`` names no profile: its mig_device has SM and memory
    counts only); None without MIG, UNKNOWN where the command failed."""
    if not any((g.get("mig_mode") or {}).get("current") == "Enabled" for g in gpus):
        return None
    argv = smi + ["mig", "-lgi"]
    result = host.run(argv)
    if not result.ok:
        errors.append(result.describe(argv))
        return UNKNOWN
    return parse_mig_lgi(result.stdout)


def collect_installed_module(host: Host, errors: List[str]) -> Any:
    """The version of the nvidia.ko on disk for the running kernel (``modinfo``): after a
    driver upgrade it is the new one while ``/proc/driver/nvidia/version`` still shows the
    module loaded at boot. Installed != loaded: user space and module disagree until reboot."""
    result = host.run(["modinfo", "-F", "version", "nvidia"])
    value = result.stdout.strip().splitlines()[0] if result.ok and result.stdout.strip() else None
    if result.state == "timeout":
        errors.append(result.describe(["modinfo", "-F", "version", "nvidia"]))
    if result.state == "failed":
        return ABSENT  # no nvidia module for this kernel
    if result.state == "missing":  # no modinfo (kmod not installed, as on the lent H200 VM)
        return _module_file(host)
    return _command_value(result, value)


_MODULE_NAMES = ("nvidia.ko", "nvidia.ko.xz", "nvidia.ko.zst", "nvidia.ko.gz")


def _module_file(host: Host) -> str:
    """Without modinfo: ``unknown`` when an nvidia.ko lies in the running kernel's module tree
    (DKMS's updates/dkms, Ubuntu's kernel/nvidia-*: its version is not read), ``absent`` when
    the tree holds none or the kernel has no module tree at all."""
    release = collect_kernel(host)
    if release == ABSENT:
        return UNKNOWN
    tree = "/lib/modules/%s" % release
    if not host.isdir(tree):
        return ABSENT
    for _dirpath, _dirs, files in os.walk(host.path(tree)):
        if any(name in _MODULE_NAMES for name in files):
            return UNKNOWN
    return ABSENT


def collect_nvswitches(host: Host) -> List[str]:
    """PCI addresses of NVIDIA NVSwitches (vendor 0x10de, class 0x0680xx bridge), as HGX
    A100/H100/H200 boards show them; read from each device's own vendor and class."""
    found = []
    for dev in host.glob("/sys/bus/pci/devices/*"):
        vendor = (host.read(dev + "/vendor") or "").strip()
        klass = (host.read(dev + "/class") or "").strip()
        if vendor == "0x10de" and klass.startswith("0x0680"):
            found.append(dev.rsplit("/", 1)[-1])
    return sorted(found)


def collect_nvlink5_bridges(host: Host) -> List[Dict[str, Any]]:
    """HGX B200/B300 (NVLink 5): the InfiniBand devices of the baseboard's ConnectX-7 bridge
    whose VPD reads SW_MNG (its limited PFs; the fabric manager and nvlsm reach the
    NVSwitches through them), with the first port's GUID, from which the fabric manager's
    start script sets FM_SM_MGMT_PORT_GUID. Compute-fabric ConnectX-7 NICs have no SW_MNG."""
    found = []
    for dev in host.glob("/sys/class/infiniband/*"):
        if NVLINK5_BRIDGE_VPD not in (host.read(dev + "/device/vpd") or ""):
            continue
        gid = (host.read(dev + "/ports/1/gids/0") or "").strip().split(":")
        found.append({"device": dev.rsplit("/", 1)[-1],
                      "pci": host.resolve(dev + "/device").rsplit("/", 1)[-1],
                      "port_guid": "0x" + "".join(gid[4:]) if len(gid) == 8 else None})
    return found


# PCI classes of GPUs: VGA (0x0300), 3D controller (0x0302: NVIDIA data-center GPUs),
# display controller (0x0380: AMD Instinct MI200), processing accelerator (0x1200: MI300).
# The VPD marker of an HGX B200/B300 baseboard's ConnectX-7 management bridge: the catalog's
# nvidia.nvlink5.management_bridge_vpd, with its sources (tests/verify/test_nvlink5_facts.py
# holds the two equal; the collector runs on nodes without the catalog).
NVLINK5_BRIDGE_VPD = "SW_MNG"
GPU_PCI_CLASSES = ("0x0300", "0x0302", "0x0380", "0x1200")
GPU_PCI_VENDORS = {"0x10de": "nvidia", "0x1002": "amd"}


def _cpu_list(text: str) -> List[int]:
    """``0-55,112-167`` (the kernel's cpulist format) -> the CPU numbers; [] when unreadable."""
    out: List[int] = []
    for part in text.strip().split(","):
        lo, _, hi = part.partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            return []
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def collect_gpu_topology(host: Host) -> Dict[str, Any]:
    """Where each GPU sits: its device minor (the /dev file gres.conf names: NVIDIA's
    ``Device Minor`` in /proc/driver/nvidia/gpus/<pci>/information, AMD's render node), its
    NUMA node, and the sockets of its local CPUs (sysfs ``local_cpulist``, each CPU's
    ``topology/physical_package_id``), sockets numbered in package order as Slurm does.
    https://docs.kernel.org/PCI/sysfs-pci.html, https://docs.kernel.org/admin-guide/cputopology.html"""
    packages: Dict[int, int] = {}
    for cpu in host.glob("/sys/devices/system/cpu/cpu[0-9]*"):
        package = (host.read(cpu + "/topology/physical_package_id") or "").strip()
        number = cpu.rsplit("/cpu", 1)[-1]
        if number.isdigit() and package.isdigit():
            packages[int(number)] = int(package)
    order = {p: i for i, p in enumerate(sorted(set(packages.values())))}
    gpus = []
    for dev in host.glob("/sys/bus/pci/devices/*"):
        vendor = GPU_PCI_VENDORS.get((host.read(dev + "/vendor") or "").strip())
        if vendor is None or (host.read(dev + "/class") or "").strip()[:6] not in GPU_PCI_CLASSES:
            continue
        address = dev.rsplit("/", 1)[-1]
        minor = None  # type: Optional[int]
        if vendor == "nvidia":
            info = host.read("/proc/driver/nvidia/gpus/%s/information" % address) or ""
            match = re.search(r"^Device Minor:\s*(\d+)", info, re.M)
            minor = int(match.group(1)) if match else None
        else:
            nodes = [int(n[7:]) for n in host.listdir(dev + "/drm") if n.startswith("renderD") and n[7:].isdigit()]
            minor = min(nodes) if nodes else None
        numa = (host.read(dev + "/numa_node") or "").strip()
        cpus = _cpu_list(host.read(dev + "/local_cpulist") or "")
        gpus.append({
            "pci": address, "vendor": vendor, "minor": minor,
            "numa_node": int(numa) if numa.lstrip("-").isdigit() else None,
            "sockets": sorted({order[packages[c]] for c in cpus if c in packages}),
        })
    return {"sockets": len(order), "gpus": gpus}


def collect_persistenced(host: Host) -> Dict[str, Any]:
    """The persistence daemon and the arguments it runs with (Ubuntu's unit passes
    ``--no-persistence-mode``: the daemon runs, persistence mode stays off)."""
    service = host.run(["systemctl", "is-active", "nvidia-persistenced"])
    state = service.stdout.strip() if service.state in ("ok", "failed") and service.stdout.strip() else None
    show = host.run(["systemctl", "show", "-p", "ExecStart", "--value", "nvidia-persistenced"])
    exec_start = show.stdout.strip() if show.ok else None
    return {"service": _command_value(service, state),
            "exec_start": exec_start if exec_start is not None else _command_value(show, None),
            "no_persistence_mode": ("--no-persistence-mode" in exec_start) if exec_start else None}


def collect_imex(host: Host) -> Dict[str, Any]:
    """IMEX on multi-node NVLink nodes: the peers file, the service, the channel devices."""
    config = host.read("/etc/nvidia-imex/nodes_config.cfg")
    peers = [line.strip() for line in (config or "").splitlines() if line.strip() and not line.startswith("#")]
    devices = host.read("/proc/devices") or ""
    registered = any(line.split()[-1:] == ["nvidia-caps-imex-channels"] for line in devices.splitlines())
    service = host.run(["systemctl", "is-active", "nvidia-imex"])
    state = service.stdout.strip() if service.state in ("ok", "failed") and service.stdout.strip() else None
    return {
        "nodes_config": peers if config is not None else ABSENT,
        "service": _command_value(service, state) if host.exists("/usr/bin/nvidia-imex") else ABSENT,
        "channel_device": registered,
        "channels": host.listdir("/dev/nvidia-caps-imex-channels"),
        "channel0_option": "NVreg_CreateImexChannel0=1" in "".join(
            host.read(p) or "" for p in host.glob("/etc/modprobe.d/*.conf")),
    }


def _reboot_marker(host: Host) -> Any:
    """What the playbook recorded when it changed a driver without a reboot (or None)."""
    text = host.read("/var/lib/fleetspec/reboot-required")
    return text.strip() if text is not None else None


def collect_fabric_manager(host: Host, errors: List[str]) -> Dict[str, Any]:
    """NVSwitch systems need nv-fabricmanager at the driver's exact version."""
    binary = next((p for p in ("/usr/bin/nv-fabricmanager", "/usr/sbin/nv-fabricmanager") if host.exists(p)), None)
    if binary is None:
        return {"version": ABSENT, "service": ABSENT}
    result = host.run([host.path(binary), "--version"])
    version = parse_fabricmanager_version(result.stdout + result.stderr) if result.state in ("ok", "failed") else None
    if result.state in ("failed", "timeout") and version is None:
        errors.append(result.describe([binary, "--version"]))
    service = host.run(["systemctl", "is-active", "nvidia-fabricmanager"])
    state = service.stdout.strip() if service.state in ("ok", "failed") and service.stdout.strip() else None
    return {"version": _command_value(result, version), "service": _command_value(service, state)}


def collect_cuda(host: Host, index: LibraryIndex, owners: PackageOwners) -> Dict[str, Any]:
    """Toolkits on disk, the default one, nvcc, and every libcudart."""
    errors: List[str] = []
    toolkits = []
    for path in host.glob("/usr/local/cuda*"):
        if not host.isdir(path) or host.islink(path):
            continue
        text = host.read(path + "/version.json")
        parsed = parse_cuda_version_json(text) if text is not None else None
        if parsed is None:
            txt = host.read(path + "/version.txt")
            legacy = parse_cuda_version_txt(txt) if txt is not None else None
            parsed = {"version": legacy, "components": {}} if legacy else None
        if parsed is None and text is None and not host.exists(path + "/bin"):
            continue
        if parsed is None:
            errors.append("%s: no readable version.json or version.txt" % path)
        toolkits.append({"path": path, "version": _or((parsed or {}).get("version"), UNKNOWN),
                         "components": (parsed or {}).get("components", {})})
    default = host.resolve("/usr/local/cuda") if host.exists("/usr/local/cuda") else ABSENT

    nvcc_path = host.which("nvcc") if host.root == "/" else None
    nvcc_argv = [nvcc_path or host.path("/usr/local/cuda/bin/nvcc"), "--version"]
    nvcc_result = host.run(nvcc_argv)
    nvcc = parse_nvcc_version(nvcc_result.stdout) if nvcc_result.ok else None
    if nvcc_result.state in ("failed", "timeout") or (nvcc_result.ok and nvcc is None):
        errors.append(nvcc_result.describe(nvcc_argv))
    cudart = describe_libraries(index, owners, "libcudart", ["nvidia/*/lib"], "cudaRuntimeGetVersion",
                                "out-int", decode_cudart_version, errors)
    return {
        "toolkits": toolkits,
        "default_toolkit": default,
        "nvcc": {
            "release": _command_value(nvcc_result, (nvcc or {}).get("release")),
            "version": _command_value(nvcc_result, (nvcc or {}).get("version")),
        },
        "cudart": cudart,
        "cudart_versions": _versions(cudart),
        "errors": errors,
    }


CUDNN_HEADER_GLOBS = ("/usr/include/cudnn_version*.h", "/usr/include/*-linux-gnu/cudnn_version*.h",
                      "/usr/local/cuda*/include/cudnn_version.h", "/usr/local/cuda*/targets/*/include/cudnn_version.h")


def collect_cudnn(host: Host, index: LibraryIndex, owners: PackageOwners) -> Dict[str, Any]:
    errors: List[str] = []
    libraries = describe_libraries(index, owners, "libcudnn", ["nvidia/*/lib"], "cudnnGetVersion",
                                   "ret-size", decode_cudnn_version, errors)
    headers = []
    seen = set()
    for pattern in CUDNN_HEADER_GLOBS:
        for path in host.glob(pattern):
            real = host.resolve(path)
            if real in seen:
                continue
            seen.add(real)
            version = parse_cudnn_version_header(host.read(path) or "")
            headers.append({"path": path, "version": _or(version, UNKNOWN)})
    return {"libraries": libraries, "headers": headers, "versions": _versions(libraries), "errors": errors}


def collect_nccl(host: Host, index: LibraryIndex, owners: PackageOwners) -> Dict[str, Any]:
    """Every libnccl on the node: a Python environment's wheel is as real as the system package."""
    errors: List[str] = []
    libraries = describe_libraries(index, owners, "libnccl", ["nvidia/*/lib"], "ncclGetVersion", "out-int",
                                   decode_nccl_version, errors)
    return {"libraries": libraries, "versions": _versions(libraries), "errors": errors}


def _merge_by_index(primary: List[Dict[str, Any]], extra: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    extras = {gpu["index"]: gpu for gpu in extra}
    merged = []
    for gpu in primary:
        other = extras.get(gpu["index"], {})
        merged.append({k: (v if v is not None else other.get(k)) for k, v in gpu.items()})
    return merged


def collect_amd_gpus(host: Host, errors: List[str]) -> Tuple[str, List[Dict[str, Any]]]:
    """GPUs from amd-smi, else rocm-smi (product names and VRAM asked separately)."""
    argv = ["amd-smi", "static", "--asic", "--vram", "--json"]
    result = host.run(argv)
    if result.ok:
        gpus = parse_amd_smi_json(result.stdout)
        if gpus:
            return "amd-smi", gpus
        errors.append("amd-smi: no GPU in output")
    elif result.state in ("failed", "timeout"):
        errors.append(result.describe(argv))
    names_argv = ["rocm-smi", "--showproductname", "--json"]
    names = host.run(names_argv)
    if names.ok:
        gpus = parse_rocm_smi_json(names.stdout)
        vram = host.run(["rocm-smi", "--showmeminfo", "vram", "--json"])
        if vram.ok:
            gpus = _merge_by_index(gpus, parse_rocm_smi_json(vram.stdout))
        return "rocm-smi", gpus
    if names.state in ("failed", "timeout"):
        errors.append(names.describe(names_argv))
    if result.state == "disabled":
        return NOT_COLLECTED, []
    return ABSENT, []


def collect_amd(host: Host, index: LibraryIndex, owners: PackageOwners) -> Dict[str, Any]:
    errors: List[str] = []
    driver = (host.read("/sys/module/amdgpu/version") or "").strip()
    installs = []
    for path in host.glob("/opt/rocm*"):
        if host.islink(path):
            continue
        text = host.read(path + "/.info/version")
        if text is None:
            continue
        installs.append({"path": path, "version": _or(parse_rocm_version_file(text), UNKNOWN)})
    default_text = host.read("/opt/rocm/.info/version")
    source, gpus = collect_amd_gpus(host, errors)
    rccl = describe_libraries(index, owners, "librccl", ["torch/lib", "rccl/lib"], "ncclGetVersion",
                              "out-int", decode_nccl_version, errors)
    return {
        "present": bool(driver) or host.isdir("/sys/module/amdgpu") or bool(gpus),
        "driver_version": driver or ABSENT,
        "rocm_version": _or(parse_rocm_version_file(default_text), UNKNOWN) if default_text is not None else ABSENT,
        "rocm_path": host.resolve("/opt/rocm") if host.exists("/opt/rocm") else ABSENT,
        "rocm_installs": installs,
        "gpus": gpus,
        "gpu_source": source,
        "rccl": rccl,
        "rccl_versions": _versions(rccl),
        "errors": errors,
    }


# What verify compares: the tuple's families, the CUDA toolkit's components (cuda-*: the
# cuda-components check), DCGM 4 (datacenter-gpu-manager-4-*), the RDMA user space of an
# InfiniBand/RoCE fabric, Slurm.
PACKAGE_PATTERNS = ("nvidia-driver*", "nvidia-open*", "cuda-*", "libnvidia-compute*",
                    "libcudnn*", "cudnn*", "libnccl*", "nvidia-fabricmanager*",
                    "nvidia-dkms*", "nvidia-kernel-*", "nvidia-utils*", "nvidia-imex*", "nvidia-persistenced*", "nvlsm",
                    "libcuda1", "nvidia-container-toolkit*", "amdgpu-dkms*", "rocm", "rocm-core*", "rccl*", "slurm*",
                    "libnvjitlink*", "datacenter-gpu-manager*", "rdma-core", "libibverbs1", "ibverbs-providers",
                    # EL names (fleetspec/catalog/data/el_packages.yaml): the kmod and its common files,
                    # NVML, nvidia-modprobe, CUDA's libraries, ROCm's runtime and SMI
                    "kmod-nvidia*", "nvidia-kmod-common", "libnvidia-ml*", "nvidia-modprobe", "libcublas*",
                    "libcurand*", "hsa-rocr*", "amd-smi-lib*", "libibverbs")


def collect_packages(host: Host) -> Dict[str, Any]:
    """Installed versions and holds of the packages a fleet tuple pins."""
    errors: List[str] = []
    if host.commands and is_el(host):  # Debian ships rpm and EL may carry dpkg: the OS decides
        rpm = collect_rpm_packages(host, errors)
        if rpm is not None:
            return rpm
    dpkg_argv = ["dpkg-query", "-W", "-f=${Package}\t${Version}\t${db:Status-Abbrev}\n"] + list(PACKAGE_PATTERNS)
    dpkg = host.run(dpkg_argv)
    if dpkg.state == "disabled":
        return {"manager": NOT_COLLECTED, "installed": [], "holds": [], "errors": errors}
    if dpkg.state in ("ok", "failed"):
        # dpkg-query exits 1 when some pattern matches nothing, yet prints the rest.
        installed = parse_dpkg_query(dpkg.stdout)
        holds_result = host.run(["apt-mark", "showhold"])
        holds = set(parse_apt_mark_showhold(holds_result.stdout)) if holds_result.ok else set()
        if holds_result.state in ("failed", "timeout"):
            errors.append(holds_result.describe(["apt-mark", "showhold"]))
        holds.update(p["name"] for p in installed if p["held"])
        for package in installed:
            package["held"] = package["name"] in holds
        relevant_holds = sorted(h for h in holds if any(fnmatch.fnmatchcase(h, p) for p in PACKAGE_PATTERNS))
        return {"manager": "dpkg", "installed": installed, "holds": relevant_holds, "errors": errors}
    if dpkg.state == "timeout":
        errors.append(dpkg.describe(dpkg_argv[:3]))
    rpm = collect_rpm_packages(host, errors)
    return rpm if rpm is not None else {"manager": ABSENT, "installed": [], "holds": [], "errors": errors}


# NAME, EPOCHNUM:VERSION-RELEASE and ARCH: the epoch is part of what a pin and a versionlock
# line name (nvidia-driver-cuda-3:580.82.07-1.el9); rpm prints EPOCHNUM 0 where none is set.
RPM_QF = "%{NAME}\t%{EPOCHNUM}:%{VERSION}-%{RELEASE}\t%{ARCH}\n"
EL_IDS = ("rhel", "rocky", "almalinux", "centos", "fedora")
VERSIONLOCK_LIST = "/etc/dnf/plugins/versionlock.list"
DNF_MODULES_DIR = "/etc/dnf/modules.d"


def is_el(host: Host) -> bool:
    """An RHEL-family node by its os-release (ID, or ID_LIKE naming rhel/fedora)."""
    values = parse_os_release(host.read("/etc/os-release") or "")
    return values.get("ID", "") in EL_IDS or any(i in EL_IDS for i in values.get("ID_LIKE", "").split())


def collect_rpm_packages(host: Host, errors: List[str]) -> Optional[Dict[str, Any]]:
    """rpm -q of the pinned packages (epoch included), with dnf's versionlock list and the
    enabled module streams: what holds an EL node's tuple. None when rpm did not answer.
    Under --root, rpm reads that root's rpmdb (rpm --root)."""
    argv = ["rpm"] + (["--root", host.root] if host.root != "/" else []) + ["-qa", "--qf", RPM_QF]
    rpm = host.run(argv + list(PACKAGE_PATTERNS))
    if rpm.state not in ("ok", "failed"):  # rpm -qa PATTERN exits 1 when one pattern matches nothing
        if rpm.state == "timeout":
            errors.append(rpm.describe(argv))
        return None
    installed = parse_rpm_query(rpm.stdout)
    lock_text = host.read(VERSIONLOCK_LIST)
    locks = parse_versionlock(lock_text or "")
    for package in installed:
        package["held"] = any(fnmatch.fnmatchcase(package.get("nevra", ""), lock) for lock in locks)
    streams = {}
    for name in host.listdir(DNF_MODULES_DIR):
        if name.endswith(".module"):
            values = parse_dnf_module_file(host.read(DNF_MODULES_DIR + "/" + name) or "")
            if values.get("name") and values.get("state") == "enabled":
                streams[values["name"]] = values.get("stream", "")
    relevant = sorted(lock for lock in locks if any(fnmatch.fnmatchcase(lock, p + "*") for p in PACKAGE_PATTERNS))
    return {"manager": "rpm", "installed": installed, "holds": sorted(p["name"] for p in installed if p["held"]),
            "versionlock": relevant if lock_text is not None else None, "module_streams": streams,
            "errors": errors}


def collect_slurm(host: Host) -> Dict[str, Any]:
    errors: List[str] = []
    result = host.run(["slurmd", "-V"])
    version = parse_slurmd_version(result.stdout) if result.ok else None
    if result.state in ("failed", "timeout") or (result.ok and version is None):
        errors.append(result.describe(["slurmd", "-V"]))
    layout = None  # type: Any
    if result.ok:  # slurmd is installed: its view of this node's sockets and cores
        shown = host.run(["slurmd", "-C"])
        layout = _command_value(shown, parse_slurmd_config(shown.stdout) if shown.ok else None)
        if shown.state in ("failed", "timeout") or (shown.ok and layout == UNKNOWN):
            errors.append(shown.describe(["slurmd", "-C"]))
    return {"slurmd_version": _command_value(result, version), "layout": _command_value(result, layout),
            "errors": errors}


def collect_fabric(host: Host) -> Dict[str, Any]:
    base = host.path("/sys/class/infiniband")
    return {"infiniband": parse_infiniband_sysfs(base) if os.path.isdir(base) else [], "errors": []}


def collect_standins(host: Host) -> List[str]:
    """Packages that are fleetspec test stand-ins (lab hosts): they carry a marker file.

    A stand-in host has no GPU and no kernel module; verify says so instead of
    reporting drift it cannot fix, and never counts a stand-in as real hardware.
    """
    marker = "/usr/share/doc/*/fleetspec-standin"
    return sorted(p.split("/")[-2] for p in host.glob(marker))


# ---------------------------------------------------------------------------
# Secure Boot: the Machine Owner Key DKMS signs with, and who signed the modules.
# ---------------------------------------------------------------------------

# DKMS 3 reads its signing settings from these, the last one that sets a variable winning
# (dkms read_framework_conf: /etc/dkms/framework.conf, then framework.conf.d/*.conf);
# without one it signs with Ubuntu's shim-signed MOK on Ubuntu and /var/lib/dkms/mok.key
# and mok.pub elsewhere (dkms prepare_signing).
DKMS_FRAMEWORK = "/etc/dkms/framework.conf"
DKMS_FRAMEWORK_DIR = "/etc/dkms/framework.conf.d"
DKMS_DEFAULT_CERTIFICATE = "/var/lib/dkms/mok.pub"
DKMS_UBUNTU_CERTIFICATE = "/var/lib/shim-signed/mok/MOK.der"
_SECURE_BOOT_VAR = "/sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"
_DKMS_SETTING = re.compile(r"^\s*(mok_certificate|mok_signing_key)=(.*)$")
_DKMS_PLAIN = re.compile(r"^([\"']?)([A-Za-z0-9._+/:-]*)\1\s*(?:#.*)?$")
SIGNED_MODULES = ("nvidia", "amdgpu")
# Where `dkms install` puts what it builds, under /lib/modules/<release>: DKMS overrides every
# dkms.conf's DEST_MODULE_LOCATION by the distribution os-release names (ID, else ID_LIKE):
# /extra on fedora*/rhel* (Rocky's and AlmaLinux's ID_LIKE "rhel centos fedora", RHEL's
# "fedora"), /updates/dkms on debian*/ubuntu* (override_dest_module_location in Debian 12's
# DKMS 3.0.10 and in dell/dkms' dkms.in; NVIDIA's own /kernel/drivers/video is overridden too).
DKMS_DEST_EL = "/extra/"
DKMS_DEST_DEBIAN = "/updates/dkms/"


@_safe(dict)
def parse_dkms_signing(texts: List[str]) -> Dict[str, str]:
    """``mok_certificate``/``mok_signing_key`` as DKMS sources them from its framework files
    (in DKMS's order: a later file wins). A value that is not a plain path (quoted or not)
    is shell DKMS would evaluate: ``unknown``."""
    found: Dict[str, str] = {}
    for text in texts:
        for line in text.splitlines():
            match = _DKMS_SETTING.match(line)
            if match:
                plain = _DKMS_PLAIN.match(match.group(2))
                found[match.group(1)] = plain.group(2) if plain else UNKNOWN
    return found


def _der_item(data: bytes, pos: int) -> Tuple[int, int, int]:
    """(tag, start of contents, end of contents) of the DER element at ``pos``."""
    tag = data[pos]
    length = data[pos + 1]
    pos += 2
    if length & 0x80:
        count = length & 0x7F
        if count == 0 or count > 4:
            raise ValueError("unsupported DER length")
        length = int.from_bytes(data[pos:pos + count], "big")
        pos += count
    if pos + length > len(data):
        raise ValueError("truncated DER")
    return tag, pos, pos + length


def _der_children(data: bytes, start: int, end: int) -> List[Tuple[int, int, int]]:
    items = []
    while start < end:
        item = _der_item(data, start)
        items.append(item)
        start = item[2]
    return items


_OID_COMMON_NAME = bytes([0x55, 0x04, 0x03])  # 2.5.4.3


@_safe(None)
def parse_certificate_signer(der: bytes) -> Optional[Dict[str, str]]:
    """What ``modinfo`` shows for a module this X.509 certificate (DER) signed: ``signer``,
    the common name of the certificate's issuer, and ``sig_key``, its serial number as
    colon-separated upper-case hex bytes without leading zero bytes (kmod reads both from
    the PKCS#7 signature's issuer-and-serial; a MOK is self-signed, so issuer = subject).
    None for anything that is not such a certificate."""
    tag, start, end = _der_item(der, 0)
    if tag != 0x30:
        return None
    tbs_tag, tbs_start, tbs_end = _der_item(der, start)
    if tbs_tag != 0x30:
        return None
    fields = _der_children(der, tbs_start, tbs_end)
    if fields and fields[0][0] == 0xA0:  # [0] version
        fields = fields[1:]
    if len(fields) < 3 or fields[0][0] != 0x02 or fields[2][0] != 0x30:
        return None
    serial = der[fields[0][1]:fields[0][2]].lstrip(b"\x00") or b"\x00"
    common_name = None
    for _set_tag, set_start, set_end in _der_children(der, fields[2][1], fields[2][2]):
        for _tag, attr_start, attr_end in _der_children(der, set_start, set_end):
            oid, value = _der_children(der, attr_start, attr_end)[:2]
            if der[oid[1]:oid[2]] == _OID_COMMON_NAME:
                common_name = der[value[1]:value[2]].decode("utf-8", "replace")
    if common_name is None:
        return None
    return {"signer": common_name, "sig_key": ":".join("%02X" % b for b in serial)}


def collect_secure_boot(host: Host, kernel_release: Optional[str] = None) -> Dict[str, Any]:
    """The Secure Boot state (the UEFI SecureBoot variable, as gpu_facts reads it), the
    certificate DKMS signs with (its framework files) and who it names as signer, and the
    signer of each GPU driver module for ``kernel_release`` (default: the running kernel)."""
    errors: List[str] = []
    raw = None
    try:
        with open(host.path(_SECURE_BOOT_VAR), "rb") as handle:
            raw = handle.read(16)
    except OSError:
        pass
    enabled: Any = False if raw is None else (len(raw) >= 5 and raw[4] == 1)
    texts = [host.read(DKMS_FRAMEWORK) or ""]
    texts += [host.read(p) or "" for p in host.glob(DKMS_FRAMEWORK_DIR + "/*.conf")]
    default = DKMS_UBUNTU_CERTIFICATE if collect_os(host).get("id") == "ubuntu" else DKMS_DEFAULT_CERTIFICATE
    certificate = parse_dkms_signing(texts).get("mok_certificate") or default
    identity: Any = ABSENT
    try:
        with open(host.path(certificate), "rb") as handle:
            identity = parse_certificate_signer(handle.read(1 << 20)) or UNKNOWN
        if identity == UNKNOWN:
            errors.append("%s is not an X.509 certificate in DER form" % certificate)
    except OSError as exc:
        if os.path.exists(host.path(certificate)):
            identity = UNKNOWN
            errors.append("%s: %s" % (certificate, exc.strerror))
    release = kernel_release or collect_kernel(host)
    dest = DKMS_DEST_EL if is_el(host) else DKMS_DEST_DEBIAN
    modules: Dict[str, Any] = {}
    for name in SIGNED_MODULES:
        base = [] if host.root == "/" else ["-b", host.root]
        argv = ["modinfo"] + base + ["-k", release, "-F", "signer", name]
        signer = host.run(argv)
        if signer.state == "failed":
            continue  # no such module for this kernel
        if not signer.ok:
            errors.append(signer.describe(argv))
            modules[name] = UNKNOWN
            continue
        key = host.run(["modinfo"] + base + ["-k", release, "-F", "sig_key", name])
        filename = host.run(["modinfo"] + base + ["-k", release, "-F", "filename", name])
        path = filename.stdout.strip() if filename.ok else ""
        taint = host.read("/sys/module/%s/taint" % name)
        # DKMS installs into ``dest`` of the kernel's tree; the kernel's own amdgpu, signed by
        # the kernel's build key, is not DKMS's.
        modules[name] = {"signer": signer.stdout.strip(), "sig_key": key.stdout.strip().upper() if key.ok else UNKNOWN,
                         "filename": path, "dkms": ("/%s%s" % (release, dest)) in path,
                         "loaded": taint is not None, "unsigned_loaded": taint is not None and "E" in taint}
    return {"enabled": enabled, "dkms_mok_certificate": certificate, "certificate": identity,
            "kernel": release, "dkms_modules_dir": "/lib/modules/%s%s" % (release, dest.rstrip("/")),
            "modules": modules, "errors": errors}


def collect(host: Host) -> Dict[str, Any]:
    """The whole facts document for one node."""
    index = LibraryIndex(host)
    owners = PackageOwners(host)
    return {
        "schema": SCHEMA,
        "hostname": collect_hostname(host),
        "kernel": collect_kernel(host),
        "os": collect_os(host),
        "probe": {"root": host.root, "commands": host.commands, "load_libraries": host.load,
                  "python": "%d.%d.%d" % sys.version_info[:3]},
        "nvidia": collect_nvidia(host),
        "cuda": collect_cuda(host, index, owners),
        "cudnn": collect_cudnn(host, index, owners),
        "nccl": collect_nccl(host, index, owners),
        "amd": collect_amd(host, index, owners),
        "packages": collect_packages(host),
        "slurm": collect_slurm(host),
        "fabric": collect_fabric(host),
        "gpu_topology": collect_gpu_topology(host),
        "standin": collect_standins(host),
        "secure_boot": collect_secure_boot(host),
        "errors": index.errors,
    }


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description="Print this node's GPU stack facts as JSON.")
    parser.add_argument("--root", default="/", help="read files relative to this directory (default /)")
    parser.add_argument("--no-commands", action="store_true", help="run no external command")
    parser.add_argument("--no-load", action="store_true", help="load no library to ask its version")
    parser.add_argument("--with-time", action="store_true", help="add collected_at (UTC, ISO 8601)")
    parser.add_argument("--secure-boot", metavar="KERNEL_RELEASE", default=None,
                        help="print only the secure_boot section, for this kernel's modules (the "
                             "stack_packages role's check after DKMS built them)")
    args = parser.parse_args(argv)
    host = Host(args.root, commands=not args.no_commands, load=not args.no_load)
    if args.secure_boot is not None:
        try:
            section = collect_secure_boot(host, args.secure_boot or None)
        except Exception as exc:  # one JSON document and exit 0, always
            section = {"errors": ["collector failed: %s: %s" % (type(exc).__name__, exc)]}
        sys.stdout.write(json.dumps({"schema": SCHEMA, "secure_boot": section}, indent=2, sort_keys=True) + "\n")
        return 0
    try:
        facts = collect(host)
    except Exception as exc:  # the contract is one JSON document and exit 0, always
        facts = {"schema": SCHEMA, "errors": ["collector failed: %s: %s" % (type(exc).__name__, exc)]}
    if args.with_time:
        facts["collected_at"] = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat()
    sys.stdout.write(json.dumps(facts, indent=2, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
