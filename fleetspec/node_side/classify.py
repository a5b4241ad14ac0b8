"""Turn what a node's tools say into faults, and faults into one verdict.

Pure functions (no I/O), stdlib only, Python 3.8 syntax: this module runs on nodes
inside the node check. Inputs are the tools' own output, parsed here:

- the kernel log (``/dev/kmsg`` records or ``dmesg``/journal lines): NVRM Xid lines
  and NVSwitch SXid lines, in the form the driver prints them (NVIDIA Xid catalog);
- ``nvidia-smi -q -x``: remapped rows, retired pages, volatile ECC counts, PCIe link
  generation and width, NVLink fabric state;
- ``amd-smi metric --ecc --json``: RAS ECC counts per GPU (ROCm 6 prints a list,
  ROCm 7 ``{"gpu_data": [...]}``);
- ``/sys/class/infiniband`` as the fact collector reads it, plus the port counters;
- ``nvidia-smi nvlink --status``: per-GPU link lines (``Link 3: 26.562 GB/s`` or
  ``Link 3: <inactive>``);
- ``nvidia-smi nvlink -e``: per-GPU, per-link error counters (``Link 3: Replay Errors: 0``,
  ``Recovery Errors``, ``CRC Errors``; on NVLink 5 ``Link recovery failed events`` and
  ``Link recovery successful events``), judged by how much they rose since the last check
  the way DCGM's NVLink health watch judges them;
- ``dcgmi diag -r N -j``: DCGM 4's JSON (``DCGM Diagnostic`` -> ``test_categories`` ->
  ``tests`` -> ``results`` per entity, each failure's ``warnings`` with ``error_id`` and
  ``error_severity``; NVIDIA/DCGM testing/python3/dcgm_diag_schema.json);
- ``dcgmi discovery -l``: the table naming each DCGM GPU id's PCI bus id (NVIDIA/DCGM
  dcgmi/Query.cpp ``DisplayDiscoveredDevices``), so DCGM faults name the GPU by the
  address a DRA device taint selects.

A verdict is healthy, degraded (only faults whose action is ``none``: reported) or
sick; its action is the strongest action among its faults.
"""

import json
import re
import xml.etree.ElementTree as ET
from typing import Any, Dict, Iterable, List, Optional, Tuple

from fleetspec.node_side.collector import xml_text
from fleetspec.node_side.faults import (
    DCGM_SEVERITY_CLASS,
    FAULTS,
    LIVE_READINGS,
    NVLINK5_BUCKET_CLASSES,
    NVLINK5_NONFATAL,
    NVLINK5_SEVERITY,
    NVLINK5_UNITS,
    NVLINK_MAX_CRC_PER_S,
    NVLINK_MAX_ERROR,
    PCIE_GENERATION,
    RECOVERY_ACTIONS,
    XID_CLASSES,
    default_actions,
    strongest,
)

Fault = Dict[str, Any]

# NVRM: Xid (PCI:0000:18:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.
# Anchored at the start of the record (after dmesg's "[  123.456789] " when a line carries
# one): a line that only mentions the form (a program's own log message quoting an Xid, a
# job printing one) is not the driver's record.
_DMESG_TIME = r"(?:\[\s*[0-9]+\.[0-9]+\]\s*)?"
# On a GPU in MIG mode the driver attributes an Xid to the GPU instance, and the compute
# instance where it knows it: NVIDIA's open kernel modules, src/nvidia/src/kernel/gpu/rc/
# kernel_rc.c (krcReportXid), print "NVRM: Xid (PCI:%04x:%02x:%02x GPU-I:%02u GPU-CI:%02u): %d,
# pid=%s, name=%s, %s", or with " GPU-I:%02u" alone, or neither; the memory error guide's Xid 94
# example: "NVRM: Xid (PCI:0000:01:00 GPU-I:05): 94, pid=7194, Contained: CE User Channel (0x9).
# RST: No, D-RST: No" (https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/index.html).
_XID = re.compile(_DMESG_TIME + r"NVRM: Xid \((?:PCI:)?([0-9A-Fa-f:.]+)(?: GPU-I:([0-9]{1,4})(?: GPU-CI:([0-9]{1,4}))?)?\): "
                  r"([0-9]{1,9})(?:,\s*(.*))?$")
# nvidia-nvswitch3: SXid (PCI:0000:c3:00.0): 12028, Non-fatal, Link 44 egress non-posted PRIV error
_SXID = re.compile(_DMESG_TIME + r"(nvidia-nvswitch[0-9]*): SXid \((?:PCI:)?([0-9A-Fa-f:.]+)\): ([0-9]{1,9}), (Fatal|Non-fatal)[^,]*,?\s*(.*)$",
                   re.IGNORECASE)
# /dev/kmsg: "<prio>,<seq>,<usec>,<flags>[,...];<message>"
_KMSG = re.compile(r"^([0-9]{1,4}),([0-9]{1,20}),([0-9]{1,20}),[^;]*;(.*)$")  # ASCII digits, bounded
_PID_NAME = re.compile(r"^(?:pid=\S*,\s*)?(?:name=\S*,\s*)?")


def _fault(cls: str, device: str, detail: str, source: str) -> Fault:
    return {"class": cls, "scope": FAULTS[cls].scope, "device": device, "detail": detail, "source": source}


# ---------------------------------------------------------------- kernel log


def parse_kmsg(text: str) -> List[Tuple[Optional[int], str]]:
    """(sequence number, message) per record. ``/dev/kmsg`` records carry a sequence
    number (the cursor for "since the last run"); dmesg/journal lines get None."""
    records = []  # type: List[Tuple[Optional[int], str]]
    for line in str(text).splitlines():
        if not line.strip() or line.startswith(" "):  # kmsg continuation lines (KEY=value)
            continue
        match = _KMSG.match(line)
        if match:
            # A record with a facility other than kern (prefix >= 8) was written by a
            # program: the kernel turns facility 0 from a /dev/kmsg writer into LOG_USER
            # (kernel/printk/printk.c, devkmsg_write). It keeps its sequence number (the
            # cursor moves past it) but gives no message: only the kernel speaks for a GPU.
            kernel = int(match.group(1)) < 8
            records.append((int(match.group(2)), match.group(4) if kernel else ""))
        else:
            records.append((None, line))
    return records


def latch_key(fault: Fault) -> Tuple[str, str, str]:
    """(class, device, "Xid N" / "SXid N Severity"): one latched kernel-log fault per key."""
    return fault["class"], fault["device"], fault["detail"].split(":", 1)[0]


# "GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)": the new action's code.
_RECOVERY_TO = re.compile(r"\bto\s+0x([0-9A-Fa-f]{1,8})\b")
# NVLink 5 (144-150): "NETIR_BER_EVENT Nonfatal XC0 i0 Link 07 (0x00000013 ...)", the unit (or
# "unit/subunit") then the severity the driver prints.
_NVLINK5 = re.compile(r"^([A-Z][A-Z0-9_]*(?:/[A-Z][A-Z0-9_]*)?)(?: Degraded)? (Link Fatal|Fatal|Nonfatal|Non-fatal)\b")


def recovery_class(number: int, rest: str) -> str:
    """The class of an Xid 154 line: the action it changed *to* (RECOVERY_ACTIONS by its code);
    a change back to None is informational; a code NVML does not define the same everywhere is
    xid-unknown."""
    match = _RECOVERY_TO.search(rest)
    action = RECOVERY_ACTIONS.get(int(match.group(1), 16)) if match else None
    if action is None:
        return "xid-unknown"
    return action[1] or "xid-informational"


def nvlink5_class(number: int, rest: str) -> str:
    """The class of an NVLink 5 Xid (144-150) by the catalog's NVLink 5 table: the unit and the
    severity the driver printed (NVLINK5_UNITS, NVLINK5_SEVERITY); the family's class
    (a GPU reset) for a unit or severity the table does not name."""
    match = _NVLINK5.match(rest)
    if not match:
        return XID_CLASSES.get(number, "xid-unknown")
    units = match.group(1).split("/")
    known = NVLINK5_UNITS.get(number, ())
    if not all(unit in known for unit in units):
        return XID_CLASSES.get(number, "xid-unknown")
    bucket = NVLINK5_SEVERITY[match.group(2).lower()]
    if bucket == "IGNORE":
        bucket = next((NVLINK5_NONFATAL[(number, u)] for u in units if (number, u) in NVLINK5_NONFATAL), bucket)
    return NVLINK5_BUCKET_CLASSES[bucket]


def xid_class(number: int, rest: str) -> str:
    """An Xid line's class: the catalog's (XID_CLASSES), decoded further where the line carries
    what the catalog decides by (Xid 154's recovery action, the NVLink 5 unit and severity)."""
    if number == 154:
        return recovery_class(number, rest)
    if number in NVLINK5_UNITS:
        return nvlink5_class(number, rest)
    return XID_CLASSES.get(number, "xid-unknown")


def mig_instance(gi: Optional[str], ci: Optional[str]) -> Optional[Dict[str, int]]:
    """The MIG instance an Xid line names: {"gi": GPU instance id, "ci": compute instance id}
    (``ci`` only where the driver printed GPU-CI), or None for a line about the whole GPU."""
    if gi is None:
        return None
    instance = {"gi": int(gi)}
    if ci is not None:
        instance["ci"] = int(ci)
    return instance


def instance_text(instance: Optional[Dict[str, int]]) -> str:
    """``GPU-I 5 GPU-CI 0`` (nvidia-smi's GI/CI ids, as ``nvidia-smi mig -lgi`` lists them)."""
    if not instance:
        return ""
    return "GPU-I %d" % instance["gi"] + (" GPU-CI %d" % instance["ci"] if "ci" in instance else "")


def kernel_log_faults(messages: Iterable[str], counts: Optional[Dict[Tuple[str, str, str], int]] = None) -> List[Fault]:
    """Faults from NVRM Xid and NVSwitch SXid lines; one fault per (class, device, Xid, MIG
    instance), the first line's. An Xid the driver attributes to a MIG instance names it in its
    detail ("Xid 13 on GPU-I 1 GPU-CI 0: ...") and in ``instance``; its class and so its action
    are the Xid's, as on a whole GPU (docs/health.md, "MIG"). Xid 154 is a state, not an event: per GPU only its newest line counts (the
    recovery action it changed to is the current one). ``counts`` gets how many lines each
    fault stands for (by ``latch_key``)."""
    faults = []  # type: List[Fault]
    seen = set()
    lines = {}  # type: Dict[Tuple[Any, ...], int]
    for message in messages:
        xid = _XID.match(message)
        if xid:
            bus, gi, ci = xid.group(1), xid.group(2), xid.group(3)
            number, rest = int(xid.group(4)), _PID_NAME.sub("", (xid.group(5) or "").strip())
            cls = xid_class(number, rest)
            instance = mig_instance(gi, ci)
            key = (cls, bus, number, instance_text(instance))
            if number == 154:  # the newest transition replaces the ones before it on this GPU
                older = [f for f in faults if f["_key"][1:3] == (bus, 154)]  # type: ignore[index]
                for fault in older:
                    faults.remove(fault)
                    seen.discard(fault["_key"])
                    lines.pop(fault["_key"], None)
            lines[key] = lines.get(key, 0) + 1
            if key not in seen:
                seen.add(key)
                where = " on %s" % instance_text(instance) if instance else ""
                faults.append(_fault(cls, bus, ("Xid %d%s: %s" % (number, where, rest)).strip().rstrip(":"),
                                     "kernel-log"))
                if instance:
                    faults[-1]["instance"] = instance
                faults[-1]["_key"] = key  # type: ignore[assignment]
            continue
        sxid = _SXID.match(message)
        if sxid:
            switch, bus, number, severity, rest = sxid.groups()
            cls = "nvswitch-fatal" if severity.lower() == "fatal" else "nvswitch-nonfatal"
            key = (cls, bus, int(number))
            lines[key] = lines.get(key, 0) + 1
            if key not in seen:
                seen.add(key)
                faults.append(_fault(cls, "%s %s" % (switch, bus), "SXid %s %s: %s" % (number, severity, rest),
                                     "kernel-log"))
                faults[-1]["_key"] = key  # type: ignore[assignment]
    for fault in faults:
        n = lines[fault.pop("_key")]  # type: ignore[arg-type]
        if counts is not None:
            counts[latch_key(fault)] = n
    return faults


# ---------------------------------------------------------------- nvidia-smi -q -x


def pci_key(text: Optional[str]) -> Optional[Tuple[int, int, int]]:
    """(domain, bus, device) of a PCI address in any of the forms the tools print: the Xid
    line's ``0000:3b:00``, nvidia-smi's ``00000000:3B:00.0``; None for anything else."""
    match = re.match(r"^\s*(?:PCI:)?([0-9A-Fa-f]{1,8}):([0-9A-Fa-f]{2}):([0-9A-Fa-f]{2})(?:\.[0-7])?\s*$", text or "")
    return (int(match.group(1), 16), int(match.group(2), 16), int(match.group(3), 16)) if match else None


def _int(value: Optional[str]) -> Optional[int]:
    match = re.match(r"\s*(\d+)", value or "")
    return int(match.group(1)) if match else None


def _sum(values: Iterable[Optional[int]]) -> Optional[int]:
    """The sum of the values nvidia-smi reported; None when it reported none of them."""
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def parse_gpu_health_xml(text: str) -> Optional[List[Dict[str, Any]]]:
    """The health-relevant fields of ``nvidia-smi -q -x``, one dict per GPU in index
    order; None when the text is not nvidia-smi's XML."""
    raw = re.sub(r"<!DOCTYPE[^>]*>", "", str(text), count=1)
    try:
        root = ET.fromstring(raw)
    except ET.ParseError:
        return None
    if root.tag != "nvidia_smi_log":
        return None
    gpus = []
    for index, gpu in enumerate(root.findall("gpu")):
        link = gpu.find("pci/pci_gpu_link_info")
        gpus.append({
            "index": index,
            "bus_id": gpu.get("id") or xml_text(gpu, "pci/pci_bus_id") or str(index),
            "uuid": xml_text(gpu, "uuid"),
            "minor": _int(xml_text(gpu, "minor_number")),  # N of /dev/nvidiaN (the prolog's job GPUs)
            "name": xml_text(gpu, "product_name"),
            "remap_pending": xml_text(gpu, "remapped_rows/remapped_row_pending"),
            "remap_failure": xml_text(gpu, "remapped_rows/remapped_row_failure"),
            "remap_unc": _int(xml_text(gpu, "remapped_rows/remapped_row_unc")),  # active uncorrectable remaps
            "remap_corr": _int(xml_text(gpu, "remapped_rows/remapped_row_corr")),
            "retired_pending": xml_text(gpu, "retired_pages/pending_retirement"),
            "retired_sbe": _int(xml_text(gpu, "retired_pages/multiple_single_bit_retirement/retired_count")),
            "retired_dbe": _int(xml_text(gpu, "retired_pages/double_bit_retirement/retired_count")),
            "volatile_dram_uncorrectable": _int(xml_text(gpu, "ecc_errors/volatile/dram_uncorrectable")),
            # SRAM uncorrectable, parity and SEC-DED, as the real H200 prints them (driver 580)
            "volatile_sram_uncorrectable": _sum(_int(xml_text(gpu, "ecc_errors/volatile/" + key)) for key in
                                                ("sram_uncorrectable_parity", "sram_uncorrectable_secded")),
            "pcie_gen_current": _int(xml_text(link, "pcie_gen/current_link_gen")),
            "pcie_gen_max": _int(xml_text(link, "pcie_gen/max_link_gen")),
            "pcie_width_current": _int(xml_text(link, "link_widths/current_link_width")),
            "pcie_width_max": _int(xml_text(link, "link_widths/max_link_width")),
            "fabric_state": xml_text(gpu, "fabric/state"),
            "fabric_status": xml_text(gpu, "fabric/status"),
            # fabric/health (R570+ drivers; NVML nvmlGpuFabricInfo_v3 healthMask/healthSummary),
            # element names as the real H200 capture prints them (N/A off an NVLink fabric).
            "fabric_health": {key: xml_text(gpu, "fabric/health/" + key) for key in FABRIC_HEALTH_FIELDS},
            # The driver's recovery action (R550+; nvmlDeviceGpuRecoveryAction_t): None once
            # the action an Xid 154 asked for was done. The real H200 prints "None".
            "recovery_action": (gpu.findtext("gpu_recovery_action") or "").strip() or None,
        })
    return gpus


def nvidia_gpu_faults(gpus: List[Dict[str, Any]], model: Optional[str] = None) -> List[Fault]:
    """Faults from the parsed XML: memory state, PCIe link, NVLink fabric."""
    faults = []  # type: List[Fault]
    for gpu in gpus:
        dev = "GPU %d %s" % (gpu["index"], gpu["bus_id"])
        if gpu["remap_failure"] == "Yes":
            faults.append(_fault("row-remap-failure", dev, "remapped rows failure: Yes", "nvidia-smi"))
        if gpu["remap_pending"] == "Yes":
            faults.append(_fault("row-remap-pending", dev, "remapped rows pending: Yes (reset the GPU)", "nvidia-smi"))
        if gpu["retired_pending"] == "Yes":
            retired = (gpu["retired_sbe"] or 0) + (gpu["retired_dbe"] or 0)
            faults.append(_fault("page-retirement-pending", dev,
                                 "retired pages pending: Yes (%d retired; reload the driver)" % retired, "nvidia-smi"))
        if gpu["volatile_dram_uncorrectable"]:
            faults.append(_fault("ecc-uncorrectable", dev, "volatile DRAM uncorrectable ECC: %d"
                                 % gpu["volatile_dram_uncorrectable"], "nvidia-smi"))
        action = recovery_reading(gpu.get("recovery_action"))
        if action is not None and RECOVERY_ACTIONS[action][1] is not None:
            faults.append(_fault(RECOVERY_ACTIONS[action][1], dev, "recovery action now: %s" % gpu["recovery_action"],
                                 "nvidia-smi"))
        width, max_width = gpu["pcie_width_current"], gpu["pcie_width_max"]
        if width is not None and max_width is not None and width < max_width:
            faults.append(_fault("pcie-degraded", dev, "PCIe link x%d, expected x%d" % (width, max_width), "nvidia-smi"))
        # The current generation drops at idle to save power; the maximum the link trained
        # to does not, so that is what is held against the model's generation.
        want = PCIE_GENERATION.get(model or "")
        if want is not None and gpu["pcie_gen_max"] is not None and gpu["pcie_gen_max"] < want:
            faults.append(_fault("pcie-degraded", dev, "PCIe link trained at Gen%d, %s links at Gen%d"
                                 % (gpu["pcie_gen_max"], model, want), "nvidia-smi"))
        state, status = gpu["fabric_state"], gpu["fabric_status"]
        unhealthy, degraded = fabric_health(gpu.get("fabric_health") or {})
        if state is not None and (state != "Completed" or (status is not None and status != "Success")):
            unhealthy.insert(0, "fabric state %s, status %s" % (state, status))
        if unhealthy:
            faults.append(_fault("fabric-unhealthy", dev, "; ".join(unhealthy + degraded), "nvidia-smi"))
        elif degraded:
            faults.append(_fault("fabric-degraded", dev, "; ".join(degraded), "nvidia-smi"))
    return faults


def recovery_reading(text: Optional[str]) -> Optional[int]:
    """The NVML recovery action (RECOVERY_ACTIONS' code) of nvidia-smi's ``gpu_recovery_action``
    text; None when it reports none (absent, N/A) or a text this does not know."""
    low = (text or "").strip().lower()
    if not low or low in _NOT_REPORTED:
        return None
    if low == "none":
        return 0
    if "drain" in low:  # "Drain P2P"; "Drain and Reset" / "Drain P2P and Reset Gpu"
        return 4 if "reset" in low else 3
    if "reboot" in low:  # "Node Reboot Required"
        return 2
    if "reset" in low:  # "GPU Reset Required"
        return 1
    return None


def live_reading(xid: int, gpu: Dict[str, Any]) -> Optional[Tuple[bool, str]]:
    """What nvidia-smi says now about the state an Xid line reported (LIVE_READINGS): (whether
    the GPU still is in that state, the reading in words); None where it reports nothing to go
    by, so the log line decides. The live state itself is judged by nvidia_gpu_faults."""
    reading = LIVE_READINGS.get(xid)
    if reading == "row-remapper" and gpu.get("remap_pending") in ("Yes", "No"):
        words = "remapped rows pending %s, failure %s, %s uncorrectable remap(s) active" % (
            gpu["remap_pending"], gpu.get("remap_failure"), gpu.get("remap_unc") if gpu.get("remap_unc") is not None
            else "?")
        still = gpu["remap_pending"] == "Yes" if xid == 63 else gpu.get("remap_failure") == "Yes"
        return still, words
    if reading == "row-remapper" and xid == 63 and gpu.get("retired_pending") in ("Yes", "No"):
        return gpu["retired_pending"] == "Yes", "retired pages pending %s" % gpu["retired_pending"]
    if reading == "recovery-action":
        action = recovery_reading(gpu.get("recovery_action"))
        if action is not None:
            return action != 0, "recovery action %s" % gpu["recovery_action"]
    if reading == "volatile-ecc":
        dram, sram = gpu.get("volatile_dram_uncorrectable"), gpu.get("volatile_sram_uncorrectable")
        if dram == 0 and sram in (0, None):  # no uncorrectable error since the driver loaded
            return False, "volatile uncorrectable ECC 0 (counted since the driver loaded)"
    return None


def supersede(latched: List[Fault], gpus: List[Dict[str, Any]]) -> Tuple[List[Fault], List[Fault]]:
    """(acting, superseded): the latched kernel-log faults that still act, and those a live
    reading of their GPU supersedes (LIVE_READINGS), each with ``by``: the reading. A line whose
    state the GPU still reports is superseded too: the live fault (nvidia_gpu_faults) acts for
    it, so one state is not judged twice. ``gpus``: nvidia-smi's parsed GPUs, [] when it did
    not answer (then the log decides)."""
    by_bus = {pci_key(g.get("bus_id")): g for g in gpus}
    acting, superseded = [], []  # type: List[Fault], List[Fault]
    for fault in latched:
        match = re.match(r"^Xid (\d+)", fault.get("detail", ""))
        gpu = by_bus.get(pci_key(fault["device"])) if match else None
        live = live_reading(int(match.group(1)), gpu) if match and gpu is not None else None
        if live is None:
            acting.append(fault)
            continue
        item = dict(fault)
        item["by"] = "nvidia-smi now: %s%s" % (live[1], " (the live fault acts)" if live[0] else "")
        superseded.append(item)
    return acting, superseded


# <fabric><health> children nvidia-smi -q -x prints (tests/data/fixtures/h200-node/nvidia-smi-q.xml,
# driver 580): one per field of NVML's fabric health mask, and the summary.
FABRIC_HEALTH_FIELDS = ("summary", "bandwidth", "route_recovery_in_progress", "route_unhealthy",
                        "access_timeout_recovery", "incorrect_configuration")
_NOT_REPORTED = ("not supported", "n/a")


def fabric_health(health: Dict[str, Optional[str]]) -> Tuple[List[str], List[str]]:
    """(unhealthy, degraded) findings of a GPU's fabric health block. The values nvidia-smi
    prints for NVML's mask (nvmlFabricDefs, docs.nvidia.com/deploy/nvml-api/group__nvmlFabricDefs.html):
    Summary Healthy / Unhealthy / Limited Capacity; Bandwidth Full / Degraded; Route Recovery in
    progress, Route Unhealthy, Access Timeout Recovery True / False; Incorrect Configuration None
    or the cause (No Partition, Insufficient Nvlinks, Incompatible GPU Firmware, ...). Unhealthy:
    summary Unhealthy, a route unhealthy, an access-timeout recovery, any incorrect configuration.
    Degraded (NVIDIA NMX: "operational"): summary Limited Capacity, bandwidth degraded, a route
    recovery in progress. A value this does not know is unhealthy (refuse by default)."""
    unhealthy, degraded = [], []  # type: List[str]
    for key in FABRIC_HEALTH_FIELDS:
        value = (health.get(key) or "").strip()
        low = value.lower()
        if not value or low in _NOT_REPORTED:
            continue
        label = key.replace("_", " ")
        if key == "summary":
            ok, soft = low == "healthy", low == "limited capacity"
        elif key == "bandwidth":
            ok, soft = low == "full", low == "degraded"
        elif key == "incorrect_configuration":
            ok, soft = low == "none", False
        else:
            ok, soft = low == "false", key == "route_recovery_in_progress" and low == "true"
        if not ok:
            (degraded if soft else unhealthy).append("fabric %s: %s" % (label, value))
    return unhealthy, degraded


# ---------------------------------------------------------------- amd-smi


def parse_amd_ecc_json(text: str) -> Optional[List[Dict[str, Any]]]:
    """``amd-smi metric --ecc --json``: [{gpu, correctable, uncorrectable, deferred}].

    The keys (``ecc`` -> ``total_correctable_count``, ``total_uncorrectable_count``,
    ``total_deferred_count``) are amd-smi's own:
    https://github.com/ROCm/amdsmi/blob/develop/amdsmi_cli/amdsmi_commands.py"""
    try:
        data = json.loads(text)
    except ValueError:
        return None
    entries = data.get("gpu_data") if isinstance(data, dict) else data
    if not isinstance(entries, list):
        return None
    out = []
    for entry in entries:
        if not isinstance(entry, dict) or not isinstance(entry.get("ecc"), dict):
            continue
        ecc = entry["ecc"]
        out.append({"gpu": entry.get("gpu"), "correctable": _count(ecc, "total_correctable_count"),
                    "uncorrectable": _count(ecc, "total_uncorrectable_count"),
                    "deferred": _count(ecc, "total_deferred_count")})
    return out


def _count(ecc: Dict[str, Any], key: str) -> Optional[int]:
    """An amd-smi count: an int, or "N/A" where the GPU does not report it."""
    value = ecc.get(key)
    return value if isinstance(value, int) else _int(value if isinstance(value, str) else None)


def amd_gpu_faults(gpus: List[Dict[str, Any]]) -> List[Fault]:
    faults = []  # type: List[Fault]
    for gpu in gpus:
        bad = (gpu["uncorrectable"] or 0) + (gpu["deferred"] or 0)
        if bad:
            faults.append(_fault("ecc-uncorrectable", "GPU %s" % gpu["gpu"],
                                 "RAS ECC uncorrectable %s, deferred %s" % (gpu["uncorrectable"], gpu["deferred"]),
                                 "amd-smi"))
    return faults


# ---------------------------------------------------------------- InfiniBand


def infiniband_faults(devices: List[Dict[str, Any]], counters: Dict[str, Dict[str, int]],
                      before: Dict[str, Dict[str, int]]) -> List[Fault]:
    """Ports with an InfiniBand link layer that are not ACTIVE/LinkUp, and ports whose
    link_downed or link_error_recovery counter rose since ``before`` (the last run)."""
    faults = []  # type: List[Fault]
    for device in devices:
        for port in device.get("ports", []):
            if (port.get("link_layer") or "InfiniBand") != "InfiniBand":
                continue  # RoCE/Ethernet ports are the network's business
            name = "%s/%s" % (device["device"], port["port"])
            if port.get("state") != "ACTIVE" or port.get("phys_state") not in (None, "LinkUp"):
                faults.append(_fault("ib-port-down", name, "port %s, physical %s"
                                     % (port.get("state"), port.get("phys_state")), "sysfs"))
            now, then = counters.get(name, {}), before.get(name, {})
            rose = ["%s +%d" % (k, now[k] - then[k]) for k in ("link_downed", "link_error_recovery")
                    if k in now and k in then and now[k] > then[k]]
            if rose:
                faults.append(_fault("ib-link-errors", name, ", ".join(rose), "sysfs"))
    return faults


# ---------------------------------------------------------------- verdict


# ---------------------------------------------------------------- NVLink


_NVLINK_GPU = re.compile(r"^GPU (\d+): .*?(?:\(UUID: ([^)]+)\))?\s*$")
_NVLINK_LINK = re.compile(r"^\s+Link (\d+): (.*?)\s*$")


def parse_nvlink_status(text: str) -> Optional[Dict[int, Dict[str, Any]]]:
    """``nvidia-smi nvlink --status``: {gpu index: {"uuid", "links": {link: "active" |
    "inactive"}}}; None when the output has no GPU line. A link is active when it shows a
    speed above zero, inactive when it shows ``<inactive>`` (or 0 GB/s)."""
    gpus = {}  # type: Dict[int, Dict[str, Any]]
    current = None  # type: Optional[Dict[str, Any]]
    for line in str(text).splitlines():
        head = _NVLINK_GPU.match(line)
        if head:
            current = gpus.setdefault(int(head.group(1)), {"uuid": head.group(2), "links": {}})
            continue
        link = _NVLINK_LINK.match(line)
        if link and current is not None:
            speed = re.match(r"(\d+(?:\.\d+)?)\s*GB/s", link.group(2))
            if speed or "inactive" in link.group(2).lower():
                current["links"][int(link.group(1))] = \
                    "active" if speed and float(speed.group(1)) > 0 else "inactive"
    return gpus or None


def nvlink_faults(gpus: Dict[int, Dict[str, Any]], bus_by_uuid: Optional[Dict[str, str]] = None) -> List[Fault]:
    """A link down where NVLink is in use: an inactive link on a GPU whose other links are
    up, or a GPU with every link inactive while other GPUs of the node have links up. A
    node whose GPUs show no active link at all (no NVLink, or PCIe cards) gives none. The
    GPU is named by its PCI address where ``bus_by_uuid`` (from ``nvidia-smi -q -x``) knows
    its UUID, as kernel-log faults are (a DRA device taint needs the address), else by index."""
    bus_by_uuid = bus_by_uuid or {}
    if not any(state == "active" for g in gpus.values() for state in g["links"].values()):
        return []
    faults = []
    for index, gpu in sorted(gpus.items()):
        down = sorted(n for n, state in gpu["links"].items() if state == "inactive")
        if down:
            faults.append(_fault("nvlink-down", bus_by_uuid.get(gpu.get("uuid") or "", "GPU %d" % index),
                                 "GPU %d NVLink %s inactive (%d of %d links up)" % (index,
                                     ", ".join(str(n) for n in down), len(gpu["links"]) - len(down),
                                     len(gpu["links"])), "nvidia-smi nvlink"))
    return faults


def parse_nvlink_errors(text: str) -> Dict[int, Dict[str, Any]]:
    """``nvidia-smi nvlink -e``: {GPU index: {"uuid", "links": {link: {counter: value}}}}.

    nvidia-smi prints a ``GPU i: <name> (UUID: ...)`` header per GPU, then ``Link n: <counter>:
    <value>`` lines (a blank line between links). Up to NVLink 4 (Hopper) the counters are
    ``Replay Errors``, ``Recovery Errors`` and ``CRC Errors``; NVLink 5 (Blackwell) drivers
    print others instead (``Link recovery successful events``, ``Link recovery failed
    events``, ``Rx Errors``, ``Rx remote Errors``, ``FEC Errors - 0``, ...). A counter is
    named by its whole label, lower case, words joined by ``-``, a trailing ``Errors``
    dropped: ``replay``, ``crc``, ``rx-remote``, ``link-recovery-failed-events``,
    ``fec-errors-0``. A value that is not a whole number (a BER) is skipped."""
    gpus = {}  # type: Dict[int, Dict[str, Any]]
    current = None  # type: Optional[Dict[str, Any]]
    for line in text.splitlines():
        header = re.match(r"^GPU (\d+): .*?(?:\(UUID: ([^)]+)\))?\s*$", line)
        if header:
            current = gpus.setdefault(int(header.group(1)), {"uuid": header.group(2), "links": {}})
            continue
        counter = re.match(r"^\s+Link (\d+): ([A-Za-z][^:]*?): (\d+)\s*$", line)
        if counter and current is not None:
            name = re.sub(r"[^a-z0-9]+", "-", counter.group(2).lower()).strip("-")
            name = re.sub(r"-errors$", "", name)
            current["links"].setdefault(int(counter.group(1)), {})[name] = int(counter.group(3))
    return gpus


# Counters whose every new count fails a link, as DCGM's NVLink health watch fails them:
# replay and recovery errors (NVLink 4 and older), failed link recoveries (NVLink 5).
_NVLINK_CRITICAL = {"replay": "replay errors", "recovery": "recovery errors",
                    "link-recovery-failed-events": "failed link recoveries"}
_NVLINK_RECOVERED = "link-recovery-successful-events"


def nvlink_counter_faults(gpus: Dict[int, Dict[str, Any]], previous: Dict[str, int], seconds: Optional[float],
                          bus_by_uuid: Optional[Dict[str, str]] = None) -> List[Fault]:
    """Faults from how much each link's counters rose since the last check (``previous``:
    ``{"<gpu>/<link>/<counter>": value}``, ``seconds`` since then), by DCGM's NVLink health
    watch policy. NVLink 4 and older (MonitorNVLink): a rise of at least
    DCGM_LIMIT_MAX_NVLINK_ERROR (1) in replay or recovery errors fails; CRC errors fail at
    DCGM_LIMIT_MAX_NVLINK_CRC_ERROR (100) per second or more and warn below. NVLink 5
    (Blackwell, MonitorNVLinkErrorFields): a new failed link recovery fails, a new successful
    one (the link dropped and came back) warns. A counter lower than before was reset
    (``nvidia-smi nvlink -r``, a driver reload): its value is the rise. No previous reading:
    nothing to compare, no fault."""
    bus_by_uuid = bus_by_uuid or {}
    faults = []  # type: List[Fault]
    for index, gpu in sorted(gpus.items()):
        device = bus_by_uuid.get(gpu.get("uuid") or "", "GPU %d" % index)
        for link, counters in sorted(gpu["links"].items()):
            rises = {}
            for name, value in counters.items():
                before = previous.get("%d/%d/%s" % (index, link, name))
                if before is not None:
                    rises[name] = value - before if value >= before else value
            critical = {n: rises.get(n, 0) for n in _NVLINK_CRITICAL if rises.get(n, 0) >= NVLINK_MAX_ERROR}
            crc = rises.get("crc", 0)
            rate = crc / seconds if crc and seconds else None
            where = "GPU %d NVLink %d" % (index, link)
            if critical or (rate is not None and rate >= NVLINK_MAX_CRC_PER_S):
                parts = ["%d new %s" % (v, _NVLINK_CRITICAL[n]) for n, v in sorted(critical.items())]
                if rate is not None and rate >= NVLINK_MAX_CRC_PER_S:
                    parts.append("%d new CRC errors (%.0f/s)" % (crc, rate))
                faults.append(_fault("nvlink-link-errors", device, "%s: %s" % (where, ", ".join(parts)),
                                     "nvidia-smi nvlink -e"))
            elif crc >= NVLINK_MAX_ERROR:
                faults.append(_fault("nvlink-crc-errors", device, "%s: %d new CRC errors%s" % (
                    where, crc, " (%.1f/s)" % rate if rate is not None else ""), "nvidia-smi nvlink -e"))
            if not critical and rises.get(_NVLINK_RECOVERED, 0) >= NVLINK_MAX_ERROR:
                faults.append(_fault("nvlink-link-recovered", device, "%s: %d link recoveries (the link went down "
                                     "and came back)" % (where, rises[_NVLINK_RECOVERED]), "nvidia-smi nvlink -e"))
    return faults


def nvlink_counter_state(gpus: Dict[int, Dict[str, Any]]) -> Dict[str, int]:
    """The readings to compare the next check against: ``{"<gpu>/<link>/<counter>": value}``."""
    return {"%d/%d/%s" % (index, link, name): value for index, gpu in gpus.items()
            for link, counters in gpu["links"].items() for name, value in counters.items()}


# ---------------------------------------------------------------- DCGM diagnostics


def parse_dcgm_diag_json(text: str) -> Optional[Dict[str, Any]]:
    """``dcgmi diag -j``'s document, or None when it is not one (DCGM 4 names the top key
    ``DCGM Diagnostic``; DCGM 3 ``DCGM GPU Diagnostic``)."""
    try:
        doc = json.loads(text)
    except ValueError:
        return None
    if not isinstance(doc, dict):
        return None
    diag = doc.get("DCGM Diagnostic", doc.get("DCGM GPU Diagnostic"))
    return diag if isinstance(diag, dict) else None


def parse_dcgmi_discovery(text: str) -> Dict[int, Dict[str, str]]:
    """``dcgmi discovery -l``: {DCGM GPU id: {"name", "bus_id", "uuid"}}.

    dcgmi prints one table per entity kind (``N GPUs found.``, then ``| GPU ID | Device
    Information |`` with rows ``| 3 | Name: ... |``, ``|   | PCI Bus ID: 00000000:4E:00.0 |``,
    ``|   | Device UUID: GPU-... |``; NVSwitches, ConnectX devices and CPUs follow in their
    own tables). Only the GPU table is read. ``--all`` suffixes a GPU that is not active
    with ``(last known)`` (DCGM's dcgmi-discovery reference): the address is still its own."""
    gpus = {}  # type: Dict[int, Dict[str, str]]
    in_gpus = False
    current = None  # type: Optional[int]
    fields = {"Name": "name", "PCI Bus ID": "bus_id", "Device UUID": "uuid"}
    for line in text.splitlines():
        line = line.strip()
        if re.match(r"^\d+ \S+ found", line):
            in_gpus, current = line.split()[1].startswith("GPU"), None
            continue
        if not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        if cells[0] == "GPU ID":
            in_gpus, current = True, None
            continue
        if not in_gpus or len(cells) != 2:
            continue
        if cells[0].isdigit():
            current = int(cells[0])
            gpus[current] = {}
        elif cells[0]:
            current = None
        key, _, value = cells[1].partition(":")
        if current is not None and key.strip() in fields:
            gpus[current][fields[key.strip()]] = re.sub(r"\s*\(last known\)$", "", value.strip())
    return {gpu: info for gpu, info in gpus.items() if info.get("bus_id")}


def dcgm_diag_faults(diag: Dict[str, Any], level: int,
                     bus_by_gpu: Optional[Dict[int, str]] = None) -> Tuple[List[Fault], List[str]]:
    """(faults, errors): one fault per failed or warning test result per GPU, classed by
    the worst DCGM error severity among its warnings (ISOLATE, RESET; anything else is
    monitor-only). A ``runtime_error`` (the diagnostic could not run) is an error, not a fault.
    A GPU is named ``GPU <DCGM id>``, followed by its PCI bus id where ``bus_by_gpu``
    (``dcgmi discovery -l``) knows it: the address a DRA device taint selects."""
    bus_by_gpu = bus_by_gpu or {}
    faults = []  # type: List[Fault]
    errors = []  # type: List[str]
    if diag.get("runtime_error"):
        errors.append("dcgmi diag -r %d: %s" % (level, str(diag["runtime_error"])[:150]))
    for category in _dicts(diag.get("test_categories")):
        for test in _dicts(category.get("tests")):
            for result in _dicts(test.get("results")):
                status = str(result.get("status", "")).lower()
                if status not in ("fail", "warn"):
                    continue
                warnings = _dicts(result.get("warnings"))
                classes = [DCGM_SEVERITY_CLASS.get(w.get("error_severity"), "dcgm-diag-monitor") for w in warnings]
                cls = next((c for c in ("dcgm-diag-reset", "dcgm-diag-isolate") if c in classes), "dcgm-diag-monitor")
                first = next((w for w in warnings if DCGM_SEVERITY_CLASS.get(w.get("error_severity")) == cls),
                             warnings[0] if warnings else {})
                detail = "r%d %s %s: %s" % (level, test.get("name", "?"), status,
                                            str(first.get("warning", "no warning text")).strip())
                if "error_id" in first:
                    detail += " (DCGM error %s)" % first["error_id"]
                group, entity = result.get("entity_group", "GPU"), result.get("entity_id", "?")
                device = "%s %s" % (group, entity)
                if group == "GPU" and entity in bus_by_gpu:
                    device += " " + bus_by_gpu[entity]
                faults.append(_fault(cls, device, detail[:300], "dcgmi diag"))
    return faults, errors


def _dicts(value: Any) -> List[Dict[str, Any]]:
    """The objects of a JSON list (a document of another DCGM version may hold anything)."""
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def verdict(node: str, faults: List[Fault], actions: Optional[Dict[str, str]] = None,
            errors: Optional[List[str]] = None, superseded: Optional[List[Fault]] = None) -> Dict[str, Any]:
    """One node's verdict: every fault with its action under ``actions`` (the policy;
    the catalog's defaults where it says nothing), the strongest action, the status.
    ``superseded``: kernel-log lines a live reading overrules (``supersede``), kept as
    evidence; they give no action."""
    policy = dict(default_actions())
    policy.update(actions or {})
    resolved = []
    for fault in faults:
        item = dict(fault)
        item["action"] = policy.get(fault["class"], "none")
        resolved.append(item)
    resolved.sort(key=lambda f: (f["class"], f["device"], f["detail"]))
    action = strongest([f["action"] for f in resolved])
    status = "sick" if action != "none" else ("degraded" if resolved else "healthy")
    return {"node": node, "status": status, "action": action, "faults": resolved, "errors": list(errors or []),
            "superseded": sorted((dict(f) for f in superseded or []), key=lambda f: (f["device"], f["detail"]))}


def reason(result: Dict[str, Any], limit: int = 200) -> str:
    """The drain reason, in the form NHC uses ("<leader>: <check>: <message>"): the
    strongest fault first, the count of the others after it."""
    acting = [f for f in result["faults"] if f["action"] == result["action"]]
    first = acting[0] if acting else {"class": "none", "device": "", "detail": ""}
    text = "%s %s: %s %s" % (result["action"], first["class"], first["device"], first["detail"])
    others = len([f for f in result["faults"] if f["action"] != "none"]) - 1
    if others > 0:
        text += " (+%d more)" % others
    return text[:limit]
