"""Fault classes, their default actions and where each default comes from.

Runs on nodes (stdlib only, Python 3.8 syntax): the node check reads these tables to
classify what it sees, and the fleet side reads them to render the policy, the alert
rules and docs/health.md. Each default follows the vendor's own guidance, and each
fault class names the page that guidance is on.

Actions, weakest first: ``none`` (report only), ``quarantine-device`` (stop scheduling
on one GPU: a DRA device taint where the pool has one; Slurm and device-plugin pools
cannot take one GPU out of service, so there the node is drained with the device
named), ``drain`` (the node: running work finishes, nothing new lands), ``drain-reboot``
(drain, then the node needs a reboot or driver reload before it may return),
``replace`` (drain and open a hardware ticket: the part must be swapped).
"""

from typing import Dict, List, NamedTuple

ACTIONS = ("none", "quarantine-device", "drain", "drain-reboot", "replace")

XID_CATALOG = "https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html"
MEMORY_ERRORS = "https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/index.html"
PAGE_RETIREMENT = "https://docs.nvidia.com/deploy/dynamic-page-retirement/visibility.html"
DEVICE_PLUGIN_HEALTH = "https://github.com/NVIDIA/k8s-device-plugin/blob/main/internal/rm/health.go"
FABRIC_MANAGER = "https://docs.nvidia.com/datacenter/tesla/fabric-manager-user-guide/index.html"
NVML_RECOVERY = "https://nvidia.github.io/cuda-python/cuda-bindings/latest/module/generated/cuda.bindings.nvml.DeviceGpuRecoveryAction.html"
IB_SYSFS = "https://www.kernel.org/doc/Documentation/ABI/stable/sysfs-class-infiniband"
NHC_IB = "https://github.com/mej/nhc/blob/master/scripts/lbnl_hw.nhc"
NVIDIA_SMI = "https://docs.nvidia.com/deploy/nvidia-smi/index.html"
AMD_RAS = "https://rocm.docs.amd.com/projects/amdsmi/en/latest/conceptual/ras.html"
DCGM_DIAG = "https://docs.nvidia.com/datacenter/dcgm/latest/user-guide/dcgm-diagnostics.html"
# dcgmErrorSeverity_t and the DCGM_FR_* codes; dcgm_errors.c gives each code its severity
# (DCGM_FR_NVLINK_DOWN and DCGM_FR_VOLATILE_DBE_DETECTED are DCGM_ERROR_ISOLATE).
DCGM_ERRORS = "https://github.com/NVIDIA/DCGM/blob/master/dcgmlib/dcgm_errors.h"
# DCGM's NVLink health watch (MonitorNVLink): over a window, any new replay or recovery
# error fails (DCGM_FR_NVLINK_ERROR_CRITICAL); CRC errors fail at 100 per second or more
# (DCGM_FR_NVLINK_CRC_ERROR_THRESHOLD), below that they warn (DCGM_FR_NVLINK_ERROR_THRESHOLD);
# the limits are common/DcgmGPUHardwareLimits.h's ("RM has informed us that CRC errors only
# matter at rates of 100+ per second"); dcgm_errors.c rates the failing codes DCGM_ERROR_ISOLATE.
DCGM_HEALTH_NVLINK = "https://github.com/NVIDIA/DCGM/blob/master/modules/health/DcgmHealthWatch.cpp"
DCGM_LIMITS = "https://github.com/NVIDIA/DCGM/blob/master/common/DcgmGPUHardwareLimits.h"
# NVLink 5 (Blackwell, compute capability 10+): DCGM's health watch judges the link recovery
# counters instead (MonitorNVLinkErrorFields; its tests: DCGM_FI_DEV_NVLINK_RECOVERY_FAILED_TOTAL
# rising fails, DCGM_FI_DEV_NVLINK_RECOVERY_SUCCESSFUL_TOTAL rising warns), and nvidia-smi
# nvlink -e prints those counters in place of the replay/recovery/CRC ones.
DCGM_HEALTH_NVLINK5 = "https://github.com/NVIDIA/DCGM/blob/master/modules/health/tests/DcgmHealthWatchTests.cpp"
NVLINK_MAX_ERROR = 1  # DCGM_LIMIT_MAX_NVLINK_ERROR: new replay/recovery errors that fail
NVLINK_MAX_CRC_PER_S = 100.0  # DCGM_LIMIT_MAX_NVLINK_CRC_ERROR


class FaultClass(NamedTuple):
    id: str
    scope: str  # "device": one GPU/port is sick; "node": the node as a whole
    default: str  # one of ACTIONS
    summary: str
    source: str  # the vendor page the default follows


FAULT_CLASSES = (
    FaultClass("xid-application", "device", "none",
               "Xid 8, 11, 13, 31, 43, 45, 68: an application fault (bad kernel, bad address, stopped "
               "channel); the catalog's action is to restart the application, and NVIDIA's device "
               "plugin does not mark the GPU unhealthy for these", XID_CATALOG + " ; " + DEVICE_PLUGIN_HEALTH),
    FaultClass("ecc-contained", "device", "none",
               "Xid 94: a contained uncorrectable ECC error; only the application that touched the "
               "memory is affected (restart it); the row remap it triggers is its own class",
               MEMORY_ERRORS),
    FaultClass("ecc-correctable-rate", "device", "none",
               "Xid 92: a high single-bit (correctable) ECC error rate; corrected in hardware, "
               "reported for trend alerts", XID_CATALOG),
    FaultClass("ecc-uncorrectable", "device", "quarantine-device",
               "Xid 48 (double-bit ECC), Xid 95 (uncontained ECC), a volatile uncorrectable DRAM "
               "count, or AMD RAS uncorrectable/deferred ECC: the GPU must be reset before it is "
               "trusted again", MEMORY_ERRORS + " ; " + AMD_RAS),
    FaultClass("row-remap-pending", "device", "quarantine-device",
               "nvidia-smi: remapped rows pending (Xid 63 on Ampere and later): a GPU reset activates "
               "the remap; until then the bad row stays in use", MEMORY_ERRORS),
    FaultClass("row-remap-failure", "device", "replace",
               "nvidia-smi: remapped rows failure (Xid 64): the GPU ran out of spare rows; NVIDIA's "
               "guidance is to replace the board", MEMORY_ERRORS),
    FaultClass("page-retirement-pending", "node", "drain-reboot",
               "nvidia-smi: retired pages pending (Volta and older): the retirement takes effect when "
               "the driver is reloaded", PAGE_RETIREMENT),
    FaultClass("gpu-lost", "node", "drain-reboot",
               "Xid 79 (GPU has fallen off the bus) or fewer GPUs visible than the fleet says: the "
               "device is gone from PCIe; a reboot (or cold power cycle) is needed to get it back",
               XID_CATALOG),
    FaultClass("gpu-reset-required", "device", "quarantine-device",
               "Xid 154 with recovery action 'GPU Reset Required' (or Xid 119/120 GSP timeouts and "
               "errors, and Xid 140 unrecovered ECC, 143 GPU initialization failure, 158 GPU fatal "
               "timeout, which the catalog resolves by resetting the GPU)", XID_CATALOG + " ; " + NVML_RECOVERY),
    FaultClass("node-reboot-required", "node", "drain-reboot",
               "Xid 154 with recovery action 'Node Reboot Required' or 'Drain and Reset'", NVML_RECOVERY),
    FaultClass("nvlink-error", "node", "drain-reboot",
               "Xid 74: an NVLink error; a broken link slows or hangs every collective on the node, "
               "and the GPUs must be reset together", XID_CATALOG),
    FaultClass("nvswitch-fatal", "node", "drain-reboot",
               "SXid marked Fatal from an NVSwitch: the fabric needs a reset (Fabric Manager "
               "guide: fatal SXids need the GPUs and switches reset)", FABRIC_MANAGER),
    FaultClass("nvswitch-nonfatal", "node", "none",
               "SXid marked Non-fatal from an NVSwitch: corrected, reported", FABRIC_MANAGER),
    FaultClass("fabric-unhealthy", "node", "drain",
               "nvidia-smi fabric state not Completed or status not Success on an NVLink-fabric GPU: "
               "the GPU is not part of its NVLink domain", FABRIC_MANAGER),
    FaultClass("pcie-degraded", "device", "drain",
               "PCIe link narrower than the link's maximum width or trained below the model's "
               "generation: host-device bandwidth is cut, and with it every collective that "
               "stages through the host", NVIDIA_SMI),
    FaultClass("ib-port-down", "node", "drain",
               "an InfiniBand port not ACTIVE / LinkUp: the node cannot take part in multi-node "
               "collectives", IB_SYSFS + " ; " + NHC_IB),
    FaultClass("flapping", "node", "drain",
               "a counter-based fault (InfiniBand link errors, NVLink replay/recovery errors) came back "
               "FLAP_LIMIT times within FLAP_WINDOW_S after clearing: the node stays drained until it "
               "reboots or an operator runs the check with --clear (each fault also clears only after "
               "CLEAR_AFTER clean checks in a row)", NHC_IB + " ; " + DCGM_HEALTH_NVLINK),
    FaultClass("ib-link-errors", "node", "drain",
               "an InfiniBand port's link_downed or link_error_recovery counter rose since the last "
               "check: a flapping link", IB_SYSFS),
    FaultClass("probe-failed", "node", "drain",
               "the GPU tool itself failed or hung (nvidia-smi / amd-smi) on a node that has GPUs",
               NVIDIA_SMI),
    FaultClass("nvlink-down", "device", "quarantine-device",
               "nvidia-smi nvlink --status: a link <inactive> while the GPU's other links (or other "
               "GPUs' links) are up; DCGM rates a down NVLink (DCGM_FR_NVLINK_DOWN) 'GPU should be "
               "isolated'", NVIDIA_SMI + " ; " + DCGM_ERRORS),
    FaultClass("nvlink-link-errors", "device", "quarantine-device",
               "nvidia-smi nvlink -e: a link's replay or recovery error counter rose since the last "
               "check, or its CRC errors rose at 100 per second or more, or (NVLink 5, Blackwell) its "
               "failed link recoveries rose; DCGM's NVLink health watch fails each "
               "(DCGM_FR_NVLINK_ERROR_CRITICAL, DCGM_FR_NVLINK_CRC_ERROR_THRESHOLD: DCGM_ERROR_ISOLATE)",
               NVIDIA_SMI + " ; " + DCGM_HEALTH_NVLINK + " ; " + DCGM_LIMITS + " ; " + DCGM_HEALTH_NVLINK5),
    FaultClass("nvlink-crc-errors", "device", "none",
               "nvidia-smi nvlink -e: a link's CRC errors rose, below 100 per second (DCGM's health "
               "watch warns: DCGM_FR_NVLINK_ERROR_THRESHOLD); reported",
               NVIDIA_SMI + " ; " + DCGM_HEALTH_NVLINK + " ; " + DCGM_LIMITS),
    FaultClass("nvlink-link-recovered", "device", "none",
               "nvidia-smi nvlink -e (NVLink 5, Blackwell): a link's successful link recoveries rose: "
               "it went down and came back (DCGM's health watch warns); reported",
               NVIDIA_SMI + " ; " + DCGM_HEALTH_NVLINK5),
    FaultClass("dcgm-diag-isolate", "device", "quarantine-device",
               "dcgmi diag: a failed test whose error severity is DCGM_ERROR_ISOLATE ('cannot perform "
               "workload, GPU should be isolated')", DCGM_DIAG + " ; " + DCGM_ERRORS),
    FaultClass("dcgm-diag-reset", "device", "drain",
               "dcgmi diag: a failed test whose error severity is DCGM_ERROR_RESET ('drain and reset "
               "GPU')", DCGM_DIAG + " ; " + DCGM_ERRORS),
    FaultClass("dcgm-diag-monitor", "device", "none",
               "dcgmi diag: a failed or warning test whose severity is monitor, triage, config or "
               "unknown: the GPU can run work; reported", DCGM_DIAG + " ; " + DCGM_ERRORS),
    FaultClass("xid-unknown", "device", "drain",
               "an Xid this catalog does not map (among them 109, which the current catalog no longer "
               "calls an application fault, the GB200 NVLink 5 family 144-150, and the catalog's "
               "unused codes it says to contact support about): the node is drained, never silently "
               "reported; the policy may lower it (actions: {xid-unknown: none})", XID_CATALOG),
)

FAULTS = {f.id: f for f in FAULT_CLASSES}  # type: Dict[str, FaultClass]

# NVIDIA's Xid catalog (Ampere and later), as sourced data: Xid -> (mnemonic, the catalog's
# "Resolution Bucket (Immediate Action)"). Source: XID_CATALOG, table "Xids", retrieved on
# XID_CATALOG_RETRIEVED; these are the rows read there (the page's table from Xid 1 to 13).
# Rows not read here are not guessed: an Xid without a class below is xid-unknown (drain).
XID_CATALOG_RETRIEVED = "2026-12-01"
XID_CATALOG_ROWS = {
    1: ("ROBUST_CHANNEL_FIFO_ERROR_FIFO_METHOD", "CONTACT_SUPPORT"),  # Unused
    2: ("ROBUST_CHANNEL_FIFO_ERROR_SW_METHOD", "CONTACT_SUPPORT"),  # Unused
    3: ("ROBUST_CHANNEL_FIFO_ERROR_UNK_METHOD", "CONTACT_SUPPORT"),  # Unused
    4: ("ROBUST_CHANNEL_FIFO_ERROR_CHANNEL_BUSY", "CONTACT_SUPPORT"),  # Unused
    5: ("ROBUST_CHANNEL_FIFO_ERROR_RUNOUT_OVERFLOW", "CONTACT_SUPPORT"),  # Unused
    6: ("ROBUST_CHANNEL_FIFO_ERROR_PARSE_ERR", "CONTACT_SUPPORT"),  # Unused
    7: ("ROBUST_CHANNEL_FIFO_ERROR_PTE_ERR", "CONTACT_SUPPORT"),  # Unused
    8: ("ROBUST_CHANNEL_FIFO_ERROR_IDLE_TIMEOUT", "RESTART_APP"),  # GPU stopped processing
    9: ("ROBUST_CHANNEL_GR_ERROR_INSTANCE", "CONTACT_SUPPORT"),  # Unused
    10: ("ROBUST_CHANNEL_GR_ERROR_SINGLE_STEP", "CONTACT_SUPPORT"),  # Unused
    11: ("ROBUST_CHANNEL_GR_ERROR_MISSING_HW", "RESTART_APP"),  # Invalid or corrupted push buffer stream
    12: ("ROBUST_CHANNEL_GR_ERROR_SW_METHOD", "CONTACT_SUPPORT"),  # Unused
    13: ("ROBUST_CHANNEL_GR_EXCEPTION", "RESTART_APP"),  # Graphics Engine Exception
}  # type: Dict[int, Tuple[str, str]]

# The catalog's immediate-action buckets and the class each gives. CONTACT_SUPPORT (and any
# bucket not named here) has no class of its own: xid-unknown, which drains.
XID_BUCKET_CLASSES = {
    "RESTART_APP": "xid-application",
    "RESET_GPU": "gpu-reset-required",
    "RESTART_BM": "node-reboot-required",
}  # type: Dict[str, str]

# Xid number -> fault class: the catalog rows' buckets, then the classes the vendor pages
# named beside each class give (63/64 also mean page retirement on Volta and older, where
# nvidia-smi's retired_pages section tells it).
XID_CLASSES = {
    xid: XID_BUCKET_CLASSES[bucket] for xid, (_, bucket) in XID_CATALOG_ROWS.items() if bucket in XID_BUCKET_CLASSES
}  # type: Dict[int, str]
XID_CLASSES.update({
    13: "xid-application",  # Graphics Engine Exception
    31: "xid-application",  # GPU memory page fault
    43: "xid-application",  # GPU stopped processing (reset channel verification)
    45: "xid-application",  # Preemptive cleanup, due to previous errors
    68: "xid-application",  # NVDEC0 exception
    48: "ecc-uncorrectable",  # DBE
    63: "row-remap-pending",  # ECC page retirement or row remapping recording event
    64: "row-remap-failure",  # ECC page retirement or row remapper recording failure
    74: "nvlink-error",
    79: "gpu-lost",  # GPU has fallen off the bus
    92: "ecc-correctable-rate",  # High single-bit ECC error rate
    94: "ecc-contained",  # Contained ECC error
    95: "ecc-uncorrectable",  # Uncontained ECC error
    119: "gpu-reset-required",  # GSP RPC timeout
    120: "gpu-reset-required",  # GSP error
    # Resolved by GPU reset in the current catalog as issue #26 reports it (its rows were not
    # read here: the page's excerpts end at Xid 13); names as leptonai/gpud's xid.go gives them.
    140: "gpu-reset-required",  # Unrecovered ECC Error
    143: "gpu-reset-required",  # GPU Initialization Failure
    158: "gpu-reset-required",  # GPU Fatal Timeout
})

# Xid 154 carries the driver's recovery action (nvmlDeviceGpuRecoveryAction_t).
RECOVERY_ACTIONS = (
    ("gpu reset required", "gpu-reset-required"),
    ("node reboot required", "node-reboot-required"),
    ("drain and reset", "node-reboot-required"),
    ("drain p2p", "nvlink-error"),
)  # type: Tuple[Tuple[str, str], ...]

# Which checks produce which classes: ``spec.health.checks`` switches them on and off.
CHECKS = {
    "kernel-log": ("xid-application", "ecc-contained", "ecc-correctable-rate", "ecc-uncorrectable",
                   "row-remap-pending", "row-remap-failure", "gpu-lost", "gpu-reset-required",
                   "node-reboot-required", "nvlink-error", "nvswitch-fatal", "nvswitch-nonfatal",
                   "xid-unknown"),
    "gpu-memory": ("ecc-uncorrectable", "row-remap-pending", "row-remap-failure", "page-retirement-pending"),
    "gpu-count": ("gpu-lost", "probe-failed"),
    "fabric": ("fabric-unhealthy",),
    "pcie": ("pcie-degraded",),
    "infiniband": ("ib-port-down", "ib-link-errors", "flapping"),
    "nvlink": ("nvlink-down", "nvlink-link-errors", "flapping", "nvlink-crc-errors", "nvlink-link-recovered"),
    "dcgm": ("dcgm-diag-isolate", "dcgm-diag-reset", "dcgm-diag-monitor"),
}  # type: Dict[str, Tuple[str, ...]]

# PCIe generation each model's GPU links at (NVIDIA datasheets: A100 PCIe Gen4; H100,
# H200 Gen5). Width: every data-centre GPU here is x16, and nvidia-smi's own
# max_link_width is the reference, so a board in a narrower slot is caught too.
PCIE_GENERATION = {
    "a100": 4,
    "h100-sxm": 5,
    "h100-pcie": 5,
    "h200": 5,
}  # type: Dict[str, int]


# dcgmErrorSeverity_t (dcgm_errors.h): 0 NONE, 1 MONITOR, 2 ISOLATE, 3 UNKNOWN, 4 TRIAGE,
# 5 CONFIG, 6 RESET; the classes a failed diagnostic's severity maps to.
DCGM_SEVERITY_CLASS = {2: "dcgm-diag-isolate", 6: "dcgm-diag-reset"}  # type: Dict[int, str]
# dcgmi diag run time grows with the level (DCGM user guide: r1 seconds, r2 about two
# minutes, r3 about 30 minutes, r4 one to two hours): the check's timeout per level.
DCGM_TIMEOUT_S = {1: 300, 2: 900, 3: 3600, 4: 10800}  # type: Dict[int, int]


# Hysteresis for faults judged by a counter's rise between two checks (a flapping link rises,
# then is quiet for one interval): such a fault clears only after CLEAR_AFTER clean checks in a
# row, and one that comes back FLAP_LIMIT times within FLAP_WINDOW_S is ``flapping`` (latched
# until a reboot or --clear). The policy may set ``clear_after``, ``flap_limit``, ``flap_window_s``.
COUNTER_CLASSES = ("ib-link-errors", "nvlink-link-errors")
CLEAR_AFTER = 3
FLAP_LIMIT = 3
FLAP_WINDOW_S = 6 * 3600


def default_actions() -> Dict[str, str]:
    return {f.id: f.default for f in FAULT_CLASSES}


def action_rank(action: str) -> int:
    return ACTIONS.index(action)


def strongest(actions: List[str]) -> str:
    return max(actions, key=action_rank) if actions else "none"
