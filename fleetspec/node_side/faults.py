"""Fault classes, their default actions and where each default comes from.

Runs on nodes (stdlib only, Python 3.8 syntax): the node check reads these tables to
classify what it sees, and the fleet side reads them to render the policy, the alert
rules and docs/health.md. Each default follows the vendor's own guidance, and each
fault class names the page that guidance is on.

Actions, weakest first: ``none`` (report only), ``reset-when-idle`` (the node keeps taking
work; once it is idle it is drained for a moment and the GPU reset: a pending row remap,
which NVIDIA says does not stop new work), ``quarantine-device`` (stop scheduling
on one GPU: a DRA device taint where the pool has one; Slurm and device-plugin pools
cannot take one GPU out of service, so there the node is drained with the device
named), ``drain`` (the node: running work finishes, nothing new lands), ``drain-reboot``
(drain, then the node needs a reboot or driver reload before it may return),
``replace`` (drain and open a hardware ticket: the part must be swapped).
"""

from typing import Dict, List, NamedTuple

ACTIONS = ("none", "reset-when-idle", "quarantine-device", "drain", "drain-reboot", "replace")

XID_CATALOG = "https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html"
MEMORY_ERRORS = "https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/index.html"
# "Row-remapping pending flag: ... row-remapping will happen at the next GPU reset. Even with
# the flag set, unaffected applications can continue running without affecting accuracy and
# performance, and new workloads can be launched."
MEMORY_FLAGS = "https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/error-recovery-and-response-flags.html"
PAGE_RETIREMENT = "https://docs.nvidia.com/deploy/dynamic-page-retirement/visibility.html"
DEVICE_PLUGIN_HEALTH = "https://github.com/NVIDIA/k8s-device-plugin/blob/main/internal/rm/health.go"
FABRIC_MANAGER = "https://docs.nvidia.com/datacenter/tesla/fabric-manager-user-guide/index.html"
# NVML's fabric health mask and summary (nvmlGpuFabricInfo_v3): the values nvidia-smi -q prints
# in its Fabric > Health block. The text of each value as a real GB300 tray prints it (driver
# 580.173.02): NVIDIA/k8s-test-infra issue #677 and the mock that models it (PR #685).
NVML_FABRIC = "https://docs.nvidia.com/deploy/nvml-api/group__nvmlFabricDefs.html"
NMX_PARTITION_HEALTH = "https://docs.nvidia.com/networking/display/nmxmv8513000/partition+health"
NVML_RECOVERY = "https://nvidia.github.io/cuda-python/cuda-bindings/latest/module/generated/cuda.bindings.nvml.DeviceGpuRecoveryAction.html"
IB_SYSFS = "https://www.kernel.org/doc/Documentation/ABI/stable/sysfs-class-infiniband"
NHC_IB = "https://github.com/mej/nhc/blob/master/scripts/lbnl_hw.nhc"
NVIDIA_SMI = "https://docs.nvidia.com/deploy/nvidia-smi/index.html"
SLURM_CONF = "https://slurm.schedmd.com/slurm.conf.html"
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
               "an Xid whose catalog immediate action is RESTART_APP (or WORKFLOW_XID_45): an "
               "application fault (bad kernel, bad address, an engine exception); restart the "
               "application, and NVIDIA's device plugin does not mark the GPU unhealthy for these",
               XID_CATALOG + " ; " + DEVICE_PLUGIN_HEALTH),
    FaultClass("xid-informational", "device", "none",
               "an Xid whose catalog immediate action is IGNORE (a driver notice, a corrected C2C "
               "error, a retirement event the driver handled): reported", XID_CATALOG),
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
    FaultClass("row-remap-pending", "device", "reset-when-idle",
               "nvidia-smi: remapped rows pending (Xid 63 on Ampere and later): the remap happens at the "
               "next GPU reset; NVIDIA: 'even with the flag set, unaffected applications can continue "
               "running ... and new workloads can be launched', so the node keeps taking work and the "
               "GPU is reset when the node is idle", MEMORY_ERRORS + " ; " + MEMORY_FLAGS),
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
               "Xid 154 whose newest recovery action is 'GPU Reset Required' (NVML GPU_RESET: terminate "
               "the GPU's processes, reset it with nvidia-smi -r), or an Xid whose catalog immediate action "
               "is RESET_GPU (among them 109 context-switch timeout, 119/120 GSP, 140 unrecovered ECC, 143 "
               "GPU initialization, 158 GPU fatal timeout), or a GB200 NVLink 5 Xid 144-150 the driver "
               "prints Fatal (the catalog's NVLink 5 table: RESET_GPU), or one whose unit or severity the "
               "table does not name (refused: the strongest of the family)", XID_CATALOG + " ; " + NVML_RECOVERY),
    FaultClass("gpu-drain-and-reset", "device", "quarantine-device",
               "Xid 154 whose newest recovery action is 'Drain and Reset' (NVML DRAIN_AND_RESET, 'Drain P2P "
               "and Reset Gpu'), or nvidia-smi's recovery action says so now: no new work on the GPU, the "
               "running work drains, then the GPU is reset; not a node reboot", NVML_RECOVERY + " ; " + MEMORY_FLAGS),
    FaultClass("gpu-drain-p2p", "node", "drain",
               "Xid 154 whose newest recovery action is 'Drain P2P' (NVML DRAIN_P2P: quiesce all peer-to-peer "
               "traffic, then read the recovery action again, which names one of the others): the node "
               "takes no new work until the driver names the next action; not a node reboot",
               NVML_RECOVERY + " ; " + MEMORY_FLAGS),
    FaultClass("nvlink5-nonfatal", "device", "none",
               "a GB200 NVLink 5 Xid 144-150 the driver prints Nonfatal for a unit of the catalog's NVLink 5 "
               "table (e.g. Xid 149 NETIR_BER_EVENT, a link's bit-error-rate event): IGNORE for the workload; "
               "the investigatory action is the link's signal integrity and cables; reported", XID_CATALOG),
    FaultClass("node-reboot-required", "node", "drain-reboot",
               "Xid 154 whose newest recovery action is 'Node Reboot Required' (NVML NODE_REBOOT), or an Xid "
               "whose catalog immediate action is RESTART_BM", NVML_RECOVERY + " ; " + XID_CATALOG),
    FaultClass("nvlink-error", "node", "drain-reboot",
               "Xid 74 (catalog: WORKFLOW_NVLINK_ERR): an NVLink error; a broken link slows or hangs "
               "every collective on the node, and the GPUs must be reset together", XID_CATALOG),
    FaultClass("nvswitch-fatal", "node", "drain-reboot",
               "SXid marked Fatal from an NVSwitch: the fabric needs a reset (Fabric Manager "
               "guide: fatal SXids need the GPUs and switches reset)", FABRIC_MANAGER),
    FaultClass("nvswitch-nonfatal", "node", "none",
               "SXid marked Non-fatal from an NVSwitch: corrected, reported", FABRIC_MANAGER),
    FaultClass("fabric-unhealthy", "node", "drain",
               "nvidia-smi fabric state not Completed or status not Success on an NVLink-fabric GPU (the "
               "GPU is not part of its NVLink domain), or its fabric health (R570+, GB200/GB300) says "
               "summary Unhealthy, a route unhealthy, an access-timeout recovery or an incorrect "
               "configuration (no partition, insufficient NVLinks, incompatible firmware, ...)",
               FABRIC_MANAGER + " ; " + NVML_FABRIC),
    FaultClass("fabric-degraded", "node", "none",
               "nvidia-smi fabric health (R570+, GB200/GB300 NVLink domains): summary Limited Capacity, "
               "bandwidth Degraded or a route recovery in progress: the GPU still talks to its NVLink "
               "domain at reduced bandwidth (NMX: a degraded partition is 'considered operational'); "
               "reported", NVML_FABRIC + " ; " + NMX_PARTITION_HEALTH),
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
    FaultClass("check-crashed", "node", "drain",
               "the node check itself failed (an exception: a bug, a state file or tool output no parser "
               "expected): nothing on the node was judged, so it is not trusted until a check passes; the "
               "drain reason names the exception type and where it was raised (NHC likewise marks a node "
               "offline when a check errors)", SLURM_CONF + " ; " + NHC_IB),
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
               "an Xid without a class: not in the catalog, or its immediate action is CONTACT_SUPPORT "
               "(every unused code), CHECK_MECHANICALS, UPDATE_SWFW, RESTART_VM, CHECK_UVM or none: the "
               "node is drained, never silently reported; the policy may lower it "
               "(actions: {xid-unknown: none})", XID_CATALOG),
)

FAULTS = {f.id: f for f in FAULT_CLASSES}  # type: Dict[str, FaultClass]

# NVIDIA's Xid catalog (Ampere and later), as sourced data: Xid -> (mnemonic, the catalog's
# "Resolution Bucket (Immediate Action)"; "" where the row names none). Source: XID_CATALOG,
# table "Xids" (Xid 1-171, read from a copy of the page that names it as its source,
# retrieved XID_CATALOG_RETRIEVED). The buckets: RESTART_APP, IGNORE, RESET_GPU, RESTART_BM,
# CONTACT_SUPPORT (every "Unused" code), WORKFLOW_* (a named workflow), XID_154 and others.
XID_CATALOG_RETRIEVED = "2026-12-01"
XID_CATALOG_ROWS = {
    1: ("ROBUST_CHANNEL_FIFO_ERROR_FIFO_METHOD", "CONTACT_SUPPORT"),
    2: ("ROBUST_CHANNEL_FIFO_ERROR_SW_METHOD", "CONTACT_SUPPORT"),
    3: ("ROBUST_CHANNEL_FIFO_ERROR_UNK_METHOD", "CONTACT_SUPPORT"),
    4: ("ROBUST_CHANNEL_FIFO_ERROR_CHANNEL_BUSY", "CONTACT_SUPPORT"),
    5: ("ROBUST_CHANNEL_FIFO_ERROR_RUNOUT_OVERFLOW", "CONTACT_SUPPORT"),
    6: ("ROBUST_CHANNEL_FIFO_ERROR_PARSE_ERR", "CONTACT_SUPPORT"),
    7: ("ROBUST_CHANNEL_FIFO_ERROR_PTE_ERR", "CONTACT_SUPPORT"),
    8: ("ROBUST_CHANNEL_FIFO_ERROR_IDLE_TIMEOUT", "RESTART_APP"),
    9: ("ROBUST_CHANNEL_GR_ERROR_INSTANCE", "CONTACT_SUPPORT"),
    10: ("ROBUST_CHANNEL_GR_ERROR_SINGLE_STEP", "CONTACT_SUPPORT"),
    11: ("ROBUST_CHANNEL_GR_ERROR_MISSING_HW", "RESTART_APP"),
    12: ("ROBUST_CHANNEL_GR_ERROR_SW_METHOD", "CONTACT_SUPPORT"),
    13: ("ROBUST_CHANNEL_GR_EXCEPTION", "RESTART_APP"),
    14: ("ROBUST_CHANNEL_FAKE_ERROR", "IGNORE"),
    15: ("ROBUST_CHANNEL_SCANLINE_TIMEOUT", "CONTACT_SUPPORT"),
    16: ("ROBUST_CHANNEL_VBLANK_CALLBACK_TIMEOUT", "CONTACT_SUPPORT"),
    17: ("ROBUST_CHANNEL_PARAMETER_ERROR", "CONTACT_SUPPORT"),
    18: ("ROBUST_CHANNEL_BUS_MASTER_TIMEOUT_ERROR", "CONTACT_SUPPORT"),
    19: ("ROBUST_CHANNEL_DISP_MISSED_NOTIFIER", "CONTACT_SUPPORT"),
    20: ("ROBUST_CHANNEL_MPEG_ERROR_SW_METHOD", "CONTACT_SUPPORT"),
    21: ("ROBUST_CHANNEL_ME_ERROR_SW_METHOD", "CONTACT_SUPPORT"),
    22: ("ROBUST_CHANNEL_VP_ERROR_SW_METHOD", "CONTACT_SUPPORT"),
    23: ("ROBUST_CHANNEL_RC_LOGGING_ENABLED", "CONTACT_SUPPORT"),
    24: ("ROBUST_CHANNEL_GR_SEMAPHORE_TIMEOUT", "CONTACT_SUPPORT"),
    25: ("ROBUST_CHANNEL_GR_ILLEGAL_NOTIFY", "RESTART_APP"),
    26: ("ROBUST_CHANNEL_FIFO_ERROR_FBISTATE_TIMEOUT", "CONTACT_SUPPORT"),
    27: ("ROBUST_CHANNEL_VP_ERROR", "CONTACT_SUPPORT"),
    28: ("ROBUST_CHANNEL_VP2_ERROR", "CONTACT_SUPPORT"),
    29: ("ROBUST_CHANNEL_BSP_ERROR", "CONTACT_SUPPORT"),
    30: ("ROBUST_CHANNEL_BAD_ADDR_ACCESS", "CONTACT_SUPPORT"),
    31: ("ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT", "RESTART_APP"),
    32: ("ROBUST_CHANNEL_PBDMA_ERROR", "RESTART_APP"),
    33: ("ROBUST_CHANNEL_SEC_ERROR", "CONTACT_SUPPORT"),
    34: ("ROBUST_CHANNEL_MSVLD_ERROR", "CONTACT_SUPPORT"),
    35: ("ROBUST_CHANNEL_MSPDEC_ERROR", "CONTACT_SUPPORT"),
    36: ("ROBUST_CHANNEL_MSPPP_ERROR", "CONTACT_SUPPORT"),
    37: ("ROBUST_CHANNEL_FECS_ERR_UNIMP_FIRMWARE_METHOD", "IGNORE"),
    38: ("ROBUST_CHANNEL_FECS_ERR_WATCHDOG_TIMEOUT", "IGNORE"),
    39: ("ROBUST_CHANNEL_CE0_ERROR", "RESTART_APP"),
    40: ("ROBUST_CHANNEL_CE1_ERROR", "RESTART_APP"),
    41: ("ROBUST_CHANNEL_CE2_ERROR", "RESTART_APP"),
    42: ("ROBUST_CHANNEL_VIC_ERROR", "CONTACT_SUPPORT"),
    43: ("ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR", "IGNORE"),
    44: ("ROBUST_CHANNEL_GR_FAULT_DURING_CTXSW", "IGNORE"),
    45: ("ROBUST_CHANNEL_PREEMPTIVE_REMOVAL", "WORKFLOW_XID_45"),
    46: ("ROBUST_CHANNEL_GPU_TIMEOUT_ERROR", "RESET_GPU"),
    47: ("ROBUST_CHANNEL_NVENC0_ERROR", "CONTACT_SUPPORT"),
    48: ("ROBUST_CHANNEL_GPU_ECC_DBE", "WORKFLOW_XID_48"),
    49: ("SILENT_RUNNING_CONSTANT_LEVEL_SET_BY_REGISTRY", "CONTACT_SUPPORT"),
    50: ("SILENT_RUNNING_LEVEL_TRANSITION_DUE_TO_RC_ERROR", "CONTACT_SUPPORT"),
    51: ("SILENT_RUNNING_STRESS_TEST_FAILURE", "CONTACT_SUPPORT"),
    52: ("SILENT_RUNNING_LEVEL_TRANS_DUE_TO_TEMP_RISE", "CONTACT_SUPPORT"),
    53: ("SILENT_RUNNING_TEMP_REDUCED_CLOCKING", "CONTACT_SUPPORT"),
    54: ("SILENT_RUNNING_PWR_REDUCED_CLOCKING", "CHECK_MECHANICALS"),
    55: ("SILENT_RUNNING_TEMPERATURE_READ_ERROR", "CONTACT_SUPPORT"),
    56: ("DISPLAY_CHANNEL_EXCEPTION", "CONTACT_SUPPORT"),
    57: ("FB_LINK_TRAINING_FAILURE_ERROR", "CONTACT_SUPPORT"),
    58: ("FB_MEMORY_ERROR", "CONTACT_SUPPORT"),
    59: ("PMU_ERROR", "CONTACT_SUPPORT"),
    60: ("ROBUST_CHANNEL_SEC2_ERROR", "RESTART_APP"),
    61: ("PMU_BREAKPOINT", "CONTACT_SUPPORT"),
    62: ("PMU_HALT_ERROR", "RESET_GPU"),
    63: ("INFOROM_DRAM_RETIREMENT_EVENT", "IGNORE"),
    64: ("INFOROM_DRAM_RETIREMENT_FAILURE", "RESET_GPU"),
    65: ("ROBUST_CHANNEL_NVENC1_ERROR", "CONTACT_SUPPORT"),
    66: ("ROBUST_CHANNEL_FECS_ERR_REG_ACCESS_VIOLATION", "IGNORE"),
    67: ("ROBUST_CHANNEL_FECS_ERR_VERIF_VIOLATION", "IGNORE"),
    68: ("ROBUST_CHANNEL_NVDEC0_ERROR", "RESTART_APP"),
    69: ("ROBUST_CHANNEL_GR_CLASS_ERROR", "RESTART_APP"),
    70: ("ROBUST_CHANNEL_CE3_ERROR", "RESTART_APP"),
    71: ("ROBUST_CHANNEL_CE4_ERROR", "RESTART_APP"),
    72: ("ROBUST_CHANNEL_CE5_ERROR", "RESTART_APP"),
    73: ("ROBUST_CHANNEL_NVENC2_ERROR", "CONTACT_SUPPORT"),
    74: ("NVLINK_ERROR", "WORKFLOW_NVLINK_ERR"),
    75: ("ROBUST_CHANNEL_CE6_ERROR", "RESTART_APP"),
    76: ("ROBUST_CHANNEL_CE7_ERROR", "RESTART_APP"),
    77: ("ROBUST_CHANNEL_CE8_ERROR", "RESTART_APP"),
    78: ("VGPU_START_ERROR", "UPDATE_SWFW"),
    79: ("ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", "RESTART_BM"),
    80: ("PBDMA_PUSHBUFFER_CRC_MISMATCH", "RESTART_APP"),
    81: ("ROBUST_CHANNEL_VGA_SUBSYSTEM_ERROR", "CONTACT_SUPPORT"),
    82: ("ROBUST_CHANNEL_NVJPG0_ERROR", "RESTART_APP"),
    83: ("ROBUST_CHANNEL_NVDEC1_ERROR", "RESTART_APP"),
    84: ("ROBUST_CHANNEL_NVDEC2_ERROR", "RESTART_APP"),
    85: ("ROBUST_CHANNEL_CE9_ERROR", "RESTART_APP"),
    86: ("ROBUST_CHANNEL_OFA0_ERROR", "RESTART_APP"),
    87: ("NVTELEMETRY_DRIVER_REPORT", "CONTACT_SUPPORT"),
    88: ("ROBUST_CHANNEL_NVDEC3_ERROR", "RESTART_APP"),
    89: ("ROBUST_CHANNEL_NVDEC4_ERROR", "RESTART_APP"),
    90: ("LTC_ERROR", "CONTACT_SUPPORT"),
    91: ("RESERVED_XID", "CONTACT_SUPPORT"),
    92: ("EXCESSIVE_SBE_INTERRUPTS", "IGNORE"),
    93: ("INFOROM_ERASE_LIMIT_EXCEEDED", "IGNORE"),
    94: ("ROBUST_CHANNEL_CONTAINED_ERROR", "RESTART_APP"),
    95: ("ROBUST_CHANNEL_UNCONTAINED_ERROR", "RESET_GPU"),
    96: ("ROBUST_CHANNEL_NVDEC5_ERROR", "RESTART_APP"),
    97: ("ROBUST_CHANNEL_NVDEC6_ERROR", "RESTART_APP"),
    98: ("ROBUST_CHANNEL_NVDEC7_ERROR", "RESTART_APP"),
    99: ("ROBUST_CHANNEL_NVJPG1_ERROR", "RESTART_APP"),
    100: ("ROBUST_CHANNEL_NVJPG2_ERROR", "RESTART_APP"),
    101: ("ROBUST_CHANNEL_NVJPG3_ERROR", "RESTART_APP"),
    102: ("ROBUST_CHANNEL_NVJPG4_ERROR", "RESTART_APP"),
    103: ("ROBUST_CHANNEL_NVJPG5_ERROR", "RESTART_APP"),
    104: ("ROBUST_CHANNEL_NVJPG6_ERROR", "RESTART_APP"),
    105: ("ROBUST_CHANNEL_NVJPG7_ERROR", "RESTART_APP"),
    106: ("SMBPBI_TEST_MESSAGE", "IGNORE"),
    107: ("SMBPBI_TEST_MESSAGE_SILENT", "IGNORE"),
    108: ("NVLINK_REMOTE_TRANSLATION_ERROR", "IGNORE"),
    109: ("ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR", "RESET_GPU"),
    110: ("SEC_FAULT_ERROR", "RESET_GPU"),
    111: ("BUNDLE_ERROR_EVENT", "CONTACT_SUPPORT"),
    112: ("DISP_SUPERVISOR_ERROR", "CONTACT_SUPPORT"),
    113: ("DP_LT_FAILURE", "CONTACT_SUPPORT"),
    114: ("HEAD_RG_UNDERFLOW", "CONTACT_SUPPORT"),
    115: ("CORE_CHANNEL_REGS", "CONTACT_SUPPORT"),
    116: ("WINDOW_CHANNEL_REGS", "CONTACT_SUPPORT"),
    117: ("CURSOR_CHANNEL_REGS", "CONTACT_SUPPORT"),
    118: ("HEAD_REGS", "CONTACT_SUPPORT"),
    119: ("GSP_RPC_TIMEOUT", "RESET_GPU"),
    120: ("GSP_ERROR", "RESET_GPU"),
    121: ("C2C_ERROR", "IGNORE"),
    122: ("SPI_PMU_RPC_READ_FAIL", "CONTACT_SUPPORT"),
    123: ("SPI_PMU_RPC_WRITE_FAIL", "CONTACT_SUPPORT"),
    124: ("SPI_PMU_RPC_ERASE_FAIL", "CONTACT_SUPPORT"),
    125: ("INFOROM_FS_ERROR", "CONTACT_SUPPORT"),
    126: ("ROBUST_CHANNEL_CE10_ERROR", "RESTART_APP"),
    127: ("ROBUST_CHANNEL_CE11_ERROR", "RESTART_APP"),
    128: ("ROBUST_CHANNEL_CE12_ERROR", "RESTART_APP"),
    129: ("ROBUST_CHANNEL_CE13_ERROR", "RESTART_APP"),
    130: ("ROBUST_CHANNEL_CE14_ERROR", "RESTART_APP"),
    131: ("ROBUST_CHANNEL_CE15_ERROR", "RESTART_APP"),
    132: ("ROBUST_CHANNEL_CE16_ERROR", "RESTART_APP"),
    133: ("ROBUST_CHANNEL_CE17_ERROR", "RESTART_APP"),
    134: ("ROBUST_CHANNEL_CE18_ERROR", "RESTART_APP"),
    135: ("ROBUST_CHANNEL_CE19_ERROR", "RESTART_APP"),
    136: ("ALI_TRAINING_FAIL", "RESET_GPU"),
    137: ("NVLINK_PRIV_ERR", "IGNORE"),
    138: ("ROBUST_CHANNEL_DLA_ERROR", "CONTACT_SUPPORT"),
    139: ("ROBUST_CHANNEL_OFA1_ERROR", "RESTART_APP"),
    140: ("UNRECOVERABLE_ECC_ERROR_ESCAPE", "RESET_GPU"),
    141: ("ROBUST_CHANNEL_FAST_PATH_ERROR", "IGNORE"),
    142: ("ROBUST_CHANNEL_NVENC3_ERROR", "CONTACT_SUPPORT"),
    143: ("GPU_INIT_ERROR", "RESET_GPU"),
    144: ("NVLINK_SAW_ERROR", "WORKFLOW_NVLINK5_ERR"),
    145: ("NVLINK_RLW_ERROR", "WORKFLOW_NVLINK5_ERR"),
    146: ("NVLINK_TLW_ERROR", "WORKFLOW_NVLINK5_ERR"),
    147: ("NVLINK_TREX_ERROR", "WORKFLOW_NVLINK5_ERR"),
    148: ("NVLINK_NVLPW_CTRL_ERROR", "WORKFLOW_NVLINK5_ERR"),
    149: ("NVLINK_NETIR_ERROR", "WORKFLOW_NVLINK5_ERR"),
    150: ("NVLINK_MSE_ERROR", "WORKFLOW_NVLINK5_ERR"),
    151: ("ROBUST_CHANNEL_KEY_ROTATION_ERROR", "RESTART_VM"),
    152: ("ROBUST_CHANNEL_DLA_SMMU_ERROR", "IGNORE"),
    153: ("ROBUST_CHANNEL_DLA_TIMEOUT", "IGNORE"),
    154: ("GPU_RECOVERY_ACTION_CHANGED", "XID_154"),
    155: ("NVLINK_SW_DEFINED_ERROR", "RESET_GPU"),
    156: ("RESOURCE_RETIREMENT_EVENT", "RESET_GPU"),
    157: ("RESOURCE_RETIREMENT_FAILURE", "IGNORE"),
    158: ("GPU_FATAL_TIMEOUT", "RESET_GPU"),
    159: ("ROBUST_CHANNEL_CHI_NON_DATA_ERROR", "CHECK_UVM"),
    160: ("CHANNEL_RETIREMENT_EVENT", "IGNORE"),
    161: ("CHANNEL_RETIREMENT_FAILURE", "IGNORE"),
    162: ("PSHC_REENGAGED", ""),
    163: ("PSHC_DISENGAGED", ""),
    164: ("PSHC_LOW_LIFETIME", ""),
    165: ("PSHC_ZERO_LIFETIME", ""),
    166: ("NVLINK_SECURE_CRYPTO_ERR", ""),
    167: ("PCIE_FATAL_TIMEOUT", ""),
    168: ("REDUCED_GPU_MEMORY_CAPACITY", ""),
    169: ("SEC2_HALT_ERROR", ""),
    170: ("NVLINK_SECURE_OTHER", ""),
    171: ("UNCORRECTABLE_DRAM_ERROR", ""),
}  # type: Dict[int, Tuple[str, str]]

# The immediate-action buckets and the class each gives. Any other bucket (CONTACT_SUPPORT,
# CHECK_MECHANICALS, UPDATE_SWFW, RESTART_VM, CHECK_UVM, none named) and any Xid the catalog
# does not list have no class: xid-unknown, which drains unless the policy lowers it.
XID_BUCKET_CLASSES = {
    "RESTART_APP": "xid-application",
    "WORKFLOW_XID_45": "xid-application",
    "IGNORE": "xid-informational",
    "RESET_GPU": "gpu-reset-required",
    "RESTART_BM": "node-reboot-required",
    "WORKFLOW_NVLINK_ERR": "nvlink-error",
    # NVLink 5 (GB200, 144-150): the class of the family when its line names no unit the
    # catalog's NVLink 5 table knows; classify decodes each line by NVLINK5_UNITS.
    "WORKFLOW_NVLINK5_ERR": "gpu-reset-required",
    "WORKFLOW_XID_48": "ecc-uncorrectable",
}  # type: Dict[str, str]

# Xid number -> fault class: the catalog rows' buckets, then the more specific classes the
# pages named beside each class give (63/64 also mean page retirement on Volta and older,
# where nvidia-smi's retired_pages section tells it). Xid 154 is read by its recovery action.
XID_CLASSES = {
    xid: XID_BUCKET_CLASSES[bucket] for xid, (_, bucket) in XID_CATALOG_ROWS.items() if bucket in XID_BUCKET_CLASSES
}  # type: Dict[int, str]
XID_CLASSES.update({
    48: "ecc-uncorrectable",  # DBE (WORKFLOW_XID_48)
    63: "row-remap-pending",  # row remapping event (catalog: IGNORE; the memory-error guide: reset to activate)
    64: "row-remap-failure",  # row remapping failure (catalog: RESET_GPU; the memory-error guide: replace)
    79: "gpu-lost",  # GPU has fallen off the bus (RESTART_BM)
    92: "ecc-correctable-rate",  # High single-bit ECC error rate (IGNORE)
    94: "ecc-contained",  # Contained ECC error (RESTART_APP)
    95: "ecc-uncorrectable",  # Uncontained ECC error (RESET_GPU)
})

# Xid 154 carries the driver's recovery action, nvmlDeviceGpuRecoveryAction_t, as the driver
# prints it: "GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)". The
# values 0-4 are the same in every NVML header and binding read (NVML_RECOVERY: 0 "No action
# needed", 1 "Reset Gpu", 2 "Reboot Node", 3 "Drain P2P", 4 "Drain P2P and Reset Gpu"); MEMORY_FLAGS
# says what each asks for: GPU_RESET "terminate all GPU processes, reset the GPU using
# nvidia-smi -r"; NODE_REBOOT "reboot the operating system"; DRAIN_P2P "terminate all GPU
# processes that conduct peer-to-peer traffic ... query ... again, which will return one of the
# other actions". Later values (5 and up) differ between NVML releases (RECOVER_IMEX_DOMAIN in
# one, GPU_RESET_BUS in another): not mapped, so xid-unknown (drained). Action -> (NVML's
# name, the class; None: nothing to do).
RECOVERY_ACTIONS = {
    0: ("NONE", None),
    1: ("GPU_RESET", "gpu-reset-required"),
    2: ("NODE_REBOOT", "node-reboot-required"),
    3: ("DRAIN_P2P", "gpu-drain-p2p"),
    4: ("DRAIN_AND_RESET", "gpu-drain-and-reset"),
}  # type: Dict[int, Tuple[str, Optional[str]]]

# The catalog's NVLink 5 workflow table (WORKFLOW_NVLINK5_ERR, Xids 144-150; XID_CATALOG, the
# table after "Xids", read XID_CATALOG_RETRIEVED): per Xid the units it names (the "unit/subunit"
# column split at "/", as the driver prints the unit in the line: "149, NETIR_BER_EVENT Nonfatal
# XC0 i0 Link 07 (0x00000013 ...)"), each row with a severity and a Data Center Recovery Action.
# Every row the table rates Fatal or Link Fatal is RESET_GPU but two NETIR_LINK_DOWN subcodes
# (IGNORE, told apart only by IntrInfo bits: not decoded, so they take the reset); every row it
# rates Non-fatal is IGNORE except the units below (NVLINK5_NONFATAL), where a Non-fatal row
# names another bucket. A unit the table does not name, or a line without a severity, takes
# RESET_GPU: refused by default, as before this decode.
NVLINK5_UNITS = {
    144: ("SAW_MVB",),
    145: ("RLW_CTRL", "RLW_REMAP", "RLW_RSPCOL", "RLW_RXPIPE", "RLW_SRC_TRACK", "RLW_TAGSTATE"),
    146: ("TLW_CTRL", "TLW_RX", "TLW_RX_PIPE0", "TLW_RX_PIPE1", "TLW_TX", "TLW_TX_PIPE0", "TLW_TX_PIPE1"),
    147: ("TREX",),
    148: ("NVLPW_CTRL", "NVLPW"),
    149: ("NETIR", "NETIR_INT", "NETIR_LINK_EVT", "NETIR_LINK_DOWN", "NETIR_BER_EVENT", "NETIR_MFDE_EVENT"),
    150: ("MSE", "MSE_WATCHDOG"),
}  # type: Dict[int, Tuple[str, ...]]
NVLINK5_SEVERITY = {"fatal": "RESET_GPU", "link fatal": "RESET_GPU", "nonfatal": "IGNORE", "non-fatal": "IGNORE"}
# Non-fatal rows with another bucket: RLW_RXPIPE's "Non-fatal*" rows whose second decode is
# RESET_GPU (taken: the stronger); RLW_REMAP and RLW_SRC_TRACK rows whose bucket is XID_154_EVAL
# (the Xid 154 the driver prints with them carries the action: this line is reported).
NVLINK5_NONFATAL = {(145, "RLW_RXPIPE"): "RESET_GPU", (145, "RLW_REMAP"): "XID_154_EVAL",
                    (145, "RLW_SRC_TRACK"): "XID_154_EVAL"}  # type: Dict[Tuple[int, str], str]
NVLINK5_BUCKET_CLASSES = {"RESET_GPU": "gpu-reset-required", "IGNORE": "nvlink5-nonfatal",
                          "XID_154_EVAL": "xid-informational"}  # type: Dict[str, str]

# What the GPU says now, against what the kernel log once said. A latched Xid is a line printed
# once; where nvidia-smi -q -x reports the state that line was about, that reading is the GPU's
# current state and supersedes the line (kept in the verdict as evidence, ``superseded``). Where
# nvidia-smi does not answer (hung, missing, failed) the log decides. Xid -> the reading:
# "row-remapper" (remapped_rows: pending, failure, counts; MEMORY_ERRORS: "the remap happens at
# the next GPU reset"; on Volta and older, retired_pages pending instead), "recovery-action"
# (gpu_recovery_action, NVML's current action: Xid 154 only reports its changes),
# "volatile-ecc" (ecc_errors/volatile: uncorrectable counts since the driver loaded; zero means
# the error predates the driver that runs now). Every other latched class has no live reading
# nvidia-smi gives (gpu-lost, nvlink-error, nvswitch-*, the RESET_GPU Xids, xid-*): the log decides.
LIVE_READINGS = {
    48: "volatile-ecc",
    63: "row-remapper",
    64: "row-remapper",
    95: "volatile-ecc",
    154: "recovery-action",
}  # type: Dict[int, str]

# Latched kernel-log faults a GPU reset ends (the prescribed action done): the catalog's
# RESET_GPU bucket and Xid 154 "GPU Reset Required" (NVML: "reset the GPU using nvidia-smi -r,
# and the GPU can be used again", MEMORY_ERRORS "Error Recovery and Response Flags"), an
# uncorrectable ECC error and a pending row remap (the remap is applied at the next GPU
# reset, MEMORY_ERRORS), and the report-only classes of that GPU. Every other latched class
# (gpu-lost, node-reboot-required, nvlink-error, nvswitch-fatal, row-remap-failure,
# xid-unknown) holds until the node reboots (a new boot id) or --clear.
RESET_CLEARS = frozenset(("gpu-reset-required", "gpu-drain-and-reset", "ecc-uncorrectable", "row-remap-pending",
                          "xid-application", "xid-informational", "ecc-contained", "ecc-correctable-rate",
                          "nvlink5-nonfatal"))

# Which checks produce which classes: ``spec.health.checks`` switches them on and off.
CHECKS = {
    "kernel-log": ("xid-application", "xid-informational", "ecc-contained", "ecc-correctable-rate", "ecc-uncorrectable",
                   "row-remap-pending", "row-remap-failure", "gpu-lost", "gpu-reset-required",
                   "gpu-drain-and-reset", "gpu-drain-p2p", "nvlink5-nonfatal",
                   "node-reboot-required", "nvlink-error", "nvswitch-fatal", "nvswitch-nonfatal",
                   "xid-unknown"),
    # the recovery action nvidia-smi reports now (gpu_recovery_action) gives its class too
    "gpu-memory": ("ecc-uncorrectable", "row-remap-pending", "row-remap-failure", "page-retirement-pending",
                   "gpu-reset-required", "gpu-drain-and-reset", "gpu-drain-p2p", "node-reboot-required"),
    "gpu-count": ("gpu-lost", "probe-failed"),
    "fabric": ("fabric-unhealthy", "fabric-degraded"),
    "pcie": ("pcie-degraded",),
    "infiniband": ("ib-port-down", "ib-link-errors", "flapping"),
    "nvlink": ("nvlink-down", "nvlink-link-errors", "flapping", "nvlink-crc-errors", "nvlink-link-recovered"),
    "dcgm": ("dcgm-diag-isolate", "dcgm-diag-reset", "dcgm-diag-monitor"),
}  # type: Dict[str, Tuple[str, ...]]
# Classes no check produces: the check itself does, whatever checks are on.
CHECK_ITSELF = ("check-crashed",)

# PCIe generation each model's GPU links at (NVIDIA datasheets: A100 PCIe Gen4; H100,
# H200 Gen5). Width: every data-centre GPU here is x16, and nvidia-smi's own
# max_link_width is the reference, so a board in a narrower slot is caught too.
PCIE_GENERATION = {
    "a100": 4,
    "a100-40gb": 4,
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
