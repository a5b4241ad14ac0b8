"""Compare node facts with the compiled fleet: each node against its partition's tuple,
and the nodes of each partition against each other.

Pure: ``compare(fleet, facts_by_host)`` reads the collector's documents
(docs/facts.md) and returns a typed ``VerifyReport``; nothing here runs a command or
reads a file, so ``fleetspec verify`` (every mode) and the testinfra module share it.

Why each rule is what it is:
- Versions are compared by meaning (``fleetspec.verify.versions``): nvcc shows only
  major.minor, a package carries ``-1+cuda13.0``; a match on what a source can show
  is a match, and the check says so.
- The *pinned* NCCL/RCCL/cuDNN is the system library (the package the playbooks install).
  Copies in Python environments are what jobs may load instead; a copy that differs is
  a warning with its path: it hangs collectives only when a job picks it up.
- Nodes owned by Kubernetes carry only the driver (and the container toolkit); CUDA,
  cuDNN and NCCL live in images. Those checks are ``not-applicable``, never drift.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from fleetspec.catalog import Catalog, load_catalog
from fleetspec.compile.ir import Fleet, Node, StackTuple
from fleetspec.node_side.collector import NVLINK5_BRIDGE_VPD
from fleetspec.packages import (
    EL_OS,
    PackageError,
    compute_only_unconfirmed,
    cuda_components,
    dcgm_pins,
    driver_module_stream,
    has_nvswitch,
    kernel_module_flavor,
    needs_imex,
    needs_nvlsm,
    nvswitch_on_pci,
    packages_for,
    rdma_packages,
    versionlock_line,
)
from fleetspec.verify.mig import mig_checks
from fleetspec.verify.versions import at_precision, match_version, upstream
from fleetspec.versions import version_key

FACTS_SCHEMA = "fleetspec.io/facts/v1"
_NOT_VERSIONS = ("absent", "unknown", "not-collected")


class Status(str, Enum):
    """A check's outcome, in increasing order of concern. Only ``drift`` fails a node."""

    OK = "ok"
    NOT_APPLICABLE = "not-applicable"
    WARNING = "warning"
    DRIFT = "drift"

    @property
    def rank(self) -> int:
        return _RANK[self]


_RANK = {Status.OK: 0, Status.NOT_APPLICABLE: 1, Status.WARNING: 2, Status.DRIFT: 3}

# Every check id a node's report can carry (docs/verify.md "What is checked" lists each, the
# testinfra module has one test per id but the "-shadow" ones, which belong to their library).
# "module-signer" also stands for "module-signer:<module>"; bmc.py adds the Redfish
# "<component>-firmware" ids and "bmc", health.py "health" (--local). tests/verify/
# test_check_ids.py derives every id the verify modules can emit from their Check(...) calls
# and fails on one missing here.
NODE_CHECK_IDS = (
    "facts", "driver", "kernel-module", "gpu-model", "gpu-count", "gpus", "mig", "fabric-manager", "loaded-module",
    "persistence-mode", "nvswitch", "nvlink5-bridge", "nvlsm", "dcgm", "cuda-components", "driver-set",
    "rdma-userspace", "gpu-binding", "slurm-layout", "imex-peers", "imex-service", "imex-channel", "gpu-fabric",
    "gpu-clique", "container-toolkit", "cuda", "cudnn", "cudnn-shadow", "nccl", "nccl-shadow", "amdgpu", "rocm", "rccl",
    "rccl-shadow", "package-holds", "el-packages", "driver-stream", "module-signer", "vbios-firmware",
    "connectx-firmware", "nvswitch-firmware", "bmc-firmware", "bios-firmware", "bmc", "health")
PARTITION_CHECK_IDS = ("consistency",)


@dataclass(frozen=True, slots=True)
class Check:
    """One component of one node (or of a partition) compared with what the spec pins."""

    component: str  # "driver", "cuda", "nccl", "nccl-shadow", "gpu-count", "facts", ...
    status: Status
    expected: str | None
    found: str | None
    message: str
    paths: tuple[str, ...] = ()  # files the finding is about (shadow libraries)
    disruption: str | None = None  # what repairing it costs, as plan names it ("drain-reboot")


@dataclass(frozen=True, slots=True)
class NodeReport:
    hostname: str
    partition: str  # the node's primary partition
    stack: str
    scheduler: str
    checks: tuple[Check, ...]
    fingerprint: str | None  # the tuple as found, at the spec's precision; None without facts

    @property
    def status(self) -> Status:
        return max((c.status for c in self.checks), key=lambda s: s.rank, default=Status.OK)

    @property
    def conforms(self) -> bool:
        return self.status is not Status.DRIFT


@dataclass(frozen=True, slots=True)
class PartitionReport:
    name: str
    scheduler: str
    stack: str | None
    expected: str | None  # the pinned tuple's fingerprint
    nodes: tuple[NodeReport, ...]
    checks: tuple[Check, ...]  # partition-wide: "consistency"

    @property
    def status(self) -> Status:
        statuses = [c.status for c in self.checks] + [n.status for n in self.nodes]
        return max(statuses, key=lambda s: s.rank, default=Status.OK)

    @property
    def conforms(self) -> bool:
        return self.status is not Status.DRIFT


@dataclass(frozen=True, slots=True)
class VerifyReport:
    fleet: str
    partitions: tuple[PartitionReport, ...]
    unknown_hosts: tuple[str, ...] = ()  # facts for hosts the spec does not name
    nodes: tuple[NodeReport, ...] = field(default=())  # every checked node once, spec order

    @property
    def conforms(self) -> bool:
        return all(p.conforms for p in self.partitions) and all(n.conforms for n in self.nodes)

    @property
    def status(self) -> Status:
        statuses = [p.status for p in self.partitions] + [n.status for n in self.nodes]
        return max(statuses, key=lambda s: s.rank, default=Status.OK)


class UnknownHostError(ValueError):
    """A host asked for by name is not a node of the spec."""


def compare(
    fleet: Fleet,
    facts_by_host: Mapping[str, Mapping[str, Any]],
    hosts: Iterable[str] | None = None,
    unreachable: Mapping[str, str] | None = None,
    catalog: Catalog | None = None,
) -> VerifyReport:
    """Check ``hosts`` (default: every node of the fleet) against the fleet.

    ``unreachable`` gives, per host, why no facts came back (ssh error, bad file); a node
    with neither facts nor a reason is reported "missing".
    """
    catalog = catalog or load_catalog()
    unreachable = unreachable or {}
    wanted = list(hosts) if hosts is not None else [n.hostname for n in fleet.nodes]
    unknown = sorted(h for h in wanted if fleet.node(h) is None)
    if unknown:
        raise UnknownHostError(f"not a node of fleet {fleet.name!r}: {', '.join(unknown)}")
    reports: dict[str, NodeReport] = {}
    for hostname in wanted:
        node = fleet.node(hostname)
        assert node is not None
        facts = facts_by_host.get(hostname)
        reports[hostname] = (
            _unreachable(node, unreachable.get(hostname)) if facts is None else check_node(fleet, node, facts, catalog)
        )
    partitions = []
    for partition in fleet.partitions:
        members = tuple(reports[h] for h in partition.nodes if h in reports)
        if not members:
            continue
        stack = fleet.stack(partition.stack) if partition.stack else None
        partitions.append(
            PartitionReport(
                name=partition.name,
                scheduler=partition.scheduler,
                stack=partition.stack,
                expected=stack.fingerprint() if stack else None,
                nodes=members,
                checks=(consistency(members),),
            )
        )
    extra = tuple(sorted(h for h in facts_by_host if fleet.node(h) is None))
    return VerifyReport(fleet.name, tuple(partitions), extra, tuple(reports.values()))


def _unreachable(node: Node, reason: str | None) -> NodeReport:
    message = f"unreachable: {reason}" if reason else "missing: no facts for this host"
    check = Check("facts", Status.DRIFT, "facts document", "none", message)
    return NodeReport(node.hostname, node.partition, node.stack, node.scheduler, (check,), None)


def consistency(nodes: Iterable[NodeReport]) -> Check:
    """All nodes of a partition must show the same tuple: one collective runs across them."""
    groups: dict[str, list[str]] = {}
    for node in nodes:
        if node.fingerprint is not None:
            groups.setdefault(node.fingerprint, []).append(node.hostname)
    if len(groups) <= 1:
        found = next(iter(groups), None)
        return Check("consistency", Status.OK, "one tuple on every node", found,
                     "every node with facts shows the same tuple" if found else "no node returned facts")
    parts = [f"{fp} on {', '.join(hosts)}" for fp, hosts in sorted(groups.items(), key=lambda kv: -len(kv[1]))]
    return Check("consistency", Status.DRIFT, "one tuple on every node", f"{len(groups)} tuples",
                 "the partition is split: " + "; ".join(parts))


# --- one node -------------------------------------------------------------------------


def check_node(fleet: Fleet, node: Node, facts: Mapping[str, Any], catalog: Catalog | None = None) -> NodeReport:
    """Every check of one node whose facts came back."""
    catalog = catalog or load_catalog()
    stack = fleet.stack(node.stack)
    problem = _facts_problem(facts)
    if problem is not None or stack is None:
        message = problem or f"stack {node.stack!r} is not in the spec"
        schema = facts.get("schema", "none") if isinstance(facts, Mapping) else type(facts).__name__
        check = Check("facts", Status.DRIFT, FACTS_SCHEMA, _clip(str(schema)), message)
        return NodeReport(node.hostname, node.partition, node.stack, node.scheduler, (check,), None)
    found: dict[str, str] = {}
    collected = Check("facts", Status.OK, FACTS_SCHEMA, FACTS_SCHEMA,
                      f"facts collected on {facts.get('hostname', '?')} (kernel {facts.get('kernel', '?')})")
    if stack.vendor == "nvidia":
        checks = _nvidia_checks(fleet, node, stack, facts, catalog, found)
    else:
        checks = _amd_checks(fleet, node, stack, facts, catalog, found)
    checks = [collected, *checks, *_rdma_checks(fleet, facts), *_gpu_binding_checks(fleet, node, facts),
              *slurm_layout_checks(node, facts), *_hold_checks(fleet, node, stack, facts), *firmware_checks(stack, facts),
              *secure_boot_checks(stack, facts)]
    fingerprint = ",".join(f"{k}={found.get(k, '?')}" for k in stack.versions())
    return NodeReport(node.hostname, node.partition, node.stack, node.scheduler, tuple(checks), fingerprint)


def _facts_problem(facts: Mapping[str, Any]) -> str | None:
    """Why ``facts`` (whatever JSON a node sent back) cannot be checked, or None."""
    if not isinstance(facts, Mapping):
        return f"not a facts document (a JSON {type(facts).__name__}, not an object)"
    if facts.get("schema") != FACTS_SCHEMA:
        return f"not a facts document (schema {_clip(repr(facts.get('schema')))}, expected {FACTS_SCHEMA!r})"
    errors = facts.get("errors", [])
    failed = [_clip(str(e)) for e in (errors if isinstance(errors, list) else [errors])
              if str(e).startswith("collector failed")]
    if failed:
        return "; ".join(failed)
    return None


def _clip(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _section(facts: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    value = facts.get(name)
    return value if isinstance(value, Mapping) else {}


def _items(section: Mapping[str, Any], name: str) -> list[Any]:
    """A list the collector writes, or none when the file holds anything else there."""
    value = section.get(name)
    return value if isinstance(value, list) else []


def _is_version(value: object) -> bool:
    return isinstance(value, str) and value not in _NOT_VERSIONS and upstream(value) is not None


def _version_check(component: str, expected: str, found: object, source: str) -> Check:
    """Compare one reported version with the pinned one, naming the source."""
    if not _is_version(found):
        return Check(component, Status.DRIFT, expected, str(found), f"{source}: {found}")
    match = match_version(expected, found)
    if match is None:
        return Check(component, Status.DRIFT, expected, str(found), f"{source} reports {found}, the spec pins {expected}")
    if match.agreement == "partial":
        return Check(component, Status.OK, expected, str(found),
                     f"{source} shows only {match.shown}: it matches {expected} as far as it can show")
    return Check(component, Status.OK, expected, str(found), f"{source} reports {found}")


# --- NVIDIA ---------------------------------------------------------------------------


def _nvidia_checks(fleet: Fleet, node: Node, stack: StackTuple, facts: Mapping[str, Any], catalog: Catalog,
                   found: dict[str, str]) -> list[Check]:
    nvidia = _section(facts, "nvidia")
    if facts.get("standin") and nvidia.get("driver_version") == "absent":
        checks = _standin_checks(stack, nvidia, found)
    else:
        checks = [_driver_check(stack, nvidia, found)]
        if nvidia.get("driver_version") not in _NOT_VERSIONS:
            checks.append(_kernel_module_check(node, nvidia, catalog))
        checks += _gpu_checks(node, nvidia.get("gpus"), nvidia.get("smi_driver_version"), catalog,
                              dict(fleet.site_gpu_names))
        checks += [Check("mig", Status(c.status), c.expected, c.found, c.message, disruption=c.disruption)
                   for c in mig_checks(node, nvidia.get("gpus"))]
    standin = bool(facts.get("standin"))
    checks += _node_runtime_checks(fleet, node, nvidia, standin)
    if has_nvswitch(node.gpu) and stack.driver:
        fabric_manager = _fabric_manager_check(stack.driver, _section(nvidia, "fabric_manager"))
        if facts.get("standin") and fabric_manager.status is Status.DRIFT and "inactive" in fabric_manager.message:
            # No NVSwitch on a stand-in host: the service cannot start; its version still counts.
            fabric_manager = Check("fabric-manager", Status.NOT_APPLICABLE, fabric_manager.expected,
                                   fabric_manager.found, "stand-in host: no NVSwitch, so the fabric manager "
                                   "service cannot run; its package version matches")
        checks.append(fabric_manager)
    if needs_nvlsm(node.gpu) and stack.driver:
        checks.append(_nvlsm_check(fleet, node, facts, catalog))
    if stack.dcgm:
        checks.append(_dcgm_check(fleet, node, stack, facts, found))
    headless = compute_only_unconfirmed(stack, fleet.os, [node.gpu])
    if headless and not (node.scheduler == "kubernetes" and fleet.kubernetes and fleet.kubernetes.gpu_operator
                         and fleet.kubernetes.gpu_operator.driver == "operator"):
        checks.append(Check("driver-set", Status.WARNING, "compute-only driver set", "desktop metapackage",
                            f"{headless}; the desktop set works, with display libraries compute nodes do not use"))
    if node.scheduler == "kubernetes":
        checks.append(_container_toolkit_check(fleet, facts))
        for key in ("cuda", "cudnn", "nccl"):
            if getattr(stack, key):
                checks.append(_in_images(key, getattr(stack, key)))
                found[key] = "image"
        return checks
    if stack.cuda:
        checks.append(_cuda_check(stack.cuda, _section(facts, "cuda"), found))
        checks.append(_cuda_components_check(fleet, stack.cuda, facts))
    if stack.cudnn:
        cudnn = _section(facts, "cudnn")
        checks += _library_checks("cudnn", "libcudnn", stack.cudnn, cudnn.get("libraries"), facts, found,
                                  headers=cudnn.get("headers"))
    if stack.nccl:
        checks += _library_checks("nccl", "libnccl", stack.nccl, _section(facts, "nccl").get("libraries"), facts,
                                  found)
    return checks


def _node_runtime_checks(fleet: Fleet, node: Node, nvidia: Mapping[str, Any], standin: bool) -> list[Check]:
    """What the driver runs with: the loaded module against the installed one, persistence
    mode, NVSwitches where the spec says the board has them, IMEX and the GPU fabric on
    multi-node NVLink nodes. Only for facts that carry these sections (collector 2026-11+)."""
    checks = []
    if "installed_module_version" in nvidia or "reboot_required" in nvidia:
        operator = fleet.kubernetes.gpu_operator if fleet.kubernetes else None
        in_container = node.scheduler == "kubernetes" and operator is not None and operator.driver == "operator"
        checks.append(_loaded_module_check(nvidia, standin, operator.version if in_container and operator else None))
    if "persistenced" in nvidia:
        checks.append(_persistence_check(nvidia, standin))
    if "nvswitches" in nvidia and not standin and nvswitch_on_pci(node.gpu):
        switches = _items(nvidia, "nvswitches")
        checks.append(Check("nvswitch", Status.OK if switches else Status.DRIFT, "NVSwitch PCI bridges",
                            f"{len(switches)} NVSwitch(es)",
                            f"{len(switches)} NVSwitch(es) on the PCI bus" if switches else
                            f"no NVSwitch on the PCI bus, but {node.gpu.model} x{node.gpu.count} is an NVSwitch "
                            "board: the fabric manager cannot start and CUDA cannot initialise"))
    if "nvlink5_bridges" in nvidia and not standin and needs_nvlsm(node.gpu):
        bridges = _items(nvidia, "nvlink5_bridges")
        names = ", ".join(str(b.get("device")) for b in bridges if isinstance(b, Mapping))
        checks.append(Check("nvlink5-bridge", Status.OK if bridges else Status.DRIFT, "NVSwitch management bridge",
                            f"{len(bridges)} ({names})" if bridges else "none",
                            f"ConnectX-7 management bridge(s) with VPD {NVLINK5_BRIDGE_VPD}: {names}" if bridges else
                            f"no InfiniBand device with VPD {NVLINK5_BRIDGE_VPD}, but {node.gpu.model} x{node.gpu.count} is an "
                            "NVLink 5 board: the fabric manager and nvlsm cannot reach the NVSwitches (mlx5_core "
                            "or ib_umad not loaded, or the bridge is passed through)"))
    if needs_imex(node.gpu) and "imex" in nvidia:
        checks += _imex_checks(fleet, node, _section(nvidia, "imex"), standin)
    if (has_nvswitch(node.gpu) or needs_imex(node.gpu)) and not standin:
        checks += _fabric_state_checks(nvidia.get("gpus"))
    return checks


def _gpu_binding_checks(fleet: Fleet, node: Node, facts: Mapping[str, Any]) -> list[Check]:
    """gres.conf's ``Cores=`` against where each GPU really is. The renderer assumes GPUs in
    index order over the sockets (HGX/OAM boards); a board wired otherwise (PCIe cards all
    behind one socket) would keep tasks on the cores far from their GPU. Checked from the
    collector's ``gpu_topology`` (sysfs local_cpulist per GPU, by device minor)."""
    from fleetspec.render.slurm import device_numbers, gpu_core_ranges

    topology = facts.get("gpu_topology")
    if (fleet.slurm is None or fleet.slurm.gres_autodetect or node.scheduler != "slurm"
            or not isinstance(topology, Mapping) or not isinstance(topology.get("gpus"), list)):
        return []
    binding = gpu_core_ranges(node.gpu.count, node.sockets, node.cores_per_socket)
    if binding is None:
        return []
    minors = device_numbers(node.gpu.vendor, node.gpu.generation, node.gpu.count)
    expected = {minors[i]: (socket, cores) for socket, (first, last, cores) in enumerate(binding)
                for i in range(first, last + 1)}
    base = "/dev/nvidia" if node.gpu.vendor == "nvidia" else "/dev/dri/renderD"
    gpus = [g for g in topology["gpus"] if isinstance(g, Mapping) and g.get("vendor") == node.gpu.vendor]
    if not gpus:
        return []  # no GPU on the bus (a lab host): the GPU checks say so
    placed = {g.get("minor"): g for g in gpus if g.get("minor") in expected}
    want = " ".join(f"{m}:{expected[m][0]}" for m in sorted(expected))
    known = {m: g["sockets"] for m, g in placed.items() if isinstance(g.get("sockets"), list) and g["sockets"]}
    if not known:
        return [Check("gpu-binding", Status.NOT_APPLICABLE, want, None,
                      "no GPU's device minor and local CPUs could be read (/proc/driver/nvidia/gpus, sysfs "
                      "local_cpulist): gres.conf Cores= not checked")]
    found = " ".join(f"{m}:{'+'.join(map(str, known[m]))}" for m in sorted(known))
    wrong = [f"{base}{m} ({placed[m].get('pci', '?')}) is local to socket {'+'.join(map(str, known[m]))}, "
             f"gres.conf binds it to socket {expected[m][0]} (Cores={expected[m][1]})"
             for m in sorted(known) if known[m] != [expected[m][0]]]
    sockets = topology.get("sockets")
    if isinstance(sockets, int) and sockets and sockets != node.sockets:
        wrong.insert(0, f"the node has {sockets} socket(s), the spec says sockets: {node.sockets}")
    if wrong:
        return [Check("gpu-binding", Status.DRIFT, want, found,
                      "; ".join(wrong) + ". Tasks bound by --gres-flags=enforce-binding would run on cores far "
                      "from their GPU: set slurm.gres_autodetect: true (NVML/RSMI read the real affinity) "
                      "or correct the node's sockets in the spec")]
    return [Check("gpu-binding", Status.OK, want, found,
                  f"each GPU's local CPUs are on the socket gres.conf binds it to ({len(known)} checked)")]


# The node line's layout fields and the words ``slurmd -C`` prints for them (slurm.conf(5)).
_LAYOUT = (("sockets", "Sockets"), ("cores_per_socket", "CoresPerSocket"), ("threads_per_core", "ThreadsPerCore"),
           ("cpus", "CPUs"))


def slurm_layout_checks(node: Node, facts: Mapping[str, Any]) -> list[Check]:
    """The node line's socket/core layout against ``slurmd -C`` on the node (the collector's
    ``slurm.layout``; only where slurmd is installed). A field the spec sets and slurmd
    reads otherwise is drift naming both; a spec with no layout at all is a warning: the
    node line then gives slurmctld no sockets (CoresPerSocket defaults to 1, slurm.conf(5)),
    so core binding and gres.conf ``Cores=`` work on a layout the node does not have."""
    layout = _section(facts, "slurm").get("layout")
    if node.scheduler != "slurm" or not isinstance(layout, Mapping):
        return []
    real = {word: layout.get(word) for _, word in _LAYOUT}
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in real.values()):
        return []
    found = " ".join(f"{word}={real[word]}" for _, word in _LAYOUT)
    spec = {word: getattr(node, key) for key, word in _LAYOUT if getattr(node, key) is not None}
    if not spec.keys() & {"Sockets", "CoresPerSocket"}:
        return [Check("slurm-layout", Status.WARNING, None, found,
                      f"the spec gives {node.hostname} no socket layout; slurmd -C on the node says {found}: "
                      "set sockets, cores_per_socket and threads_per_core on its node group "
                      "(without them slurmctld assumes one-core sockets)")]
    expected = " ".join(f"{word}={value}" for word, value in spec.items())
    wrong = [word for word, value in spec.items() if real[word] != value]
    if wrong:
        return [Check("slurm-layout", Status.DRIFT, expected, found,
                      f"the spec's node line says {' '.join(f'{w}={spec[w]}' for w in wrong)}, slurmd -C on "
                      f"{node.hostname} says {' '.join(f'{w}={real[w]}' for w in wrong)}: slurmctld would "
                      "schedule and bind cores on a layout the node does not have (and drains a node whose "
                      "slurmd reports fewer resources); correct the node group's layout in the spec")]
    return [Check("slurm-layout", Status.OK, expected, found, "the node line's layout is what slurmd -C reads")]


def firmware_checks(stack: StackTuple, facts: Mapping[str, Any]) -> list[Check]:
    """The stack's firmware pins against what the node reports: ``vbios`` against every GPU's
    vbios_version (nvidia-smi), ``connectx`` against every Mellanox device's fw_ver (sysfs).
    BMC, BIOS and NVSwitch firmware are read from the BMC (`fleetspec verify --bmc`: fleetspec.verify.bmc)."""
    pins = dict(stack.firmware)
    checks = []
    if "vbios" in pins:
        gpus = [g for g in _items(_section(facts, "nvidia"), "gpus") if isinstance(g, Mapping)]
        checks.append(_firmware_check("vbios", pins["vbios"], {
            str(g.get("pci_bus_id") or g.get("index") or i): g.get("vbios_version") for i, g in enumerate(gpus)},
            "nvidia-smi"))
    if "connectx" in pins:
        devices = [d for d in _items(_section(facts, "fabric"), "infiniband")
                   if isinstance(d, Mapping) and str(d.get("device", "")).startswith("mlx5")]
        checks.append(_firmware_check("connectx", pins["connectx"],
                                      {str(d.get("device")): d.get("fw_ver") for d in devices}, "sysfs fw_ver"))
    return checks


def secure_boot_checks(stack: StackTuple, facts: Mapping[str, Any]) -> list[Check]:
    """With Secure Boot on (the node's UEFI SecureBoot variable) and the site's MOK declared
    (stacks.<name>.secure_boot): DKMS signs with the declared certificate, and each GPU driver
    module for the running kernel names it as signer (modinfo's signer and sig_key: the
    certificate's issuer common name and serial, parsed on the node by the collector). A
    loaded module that tainted the kernel as unsigned ("E") is drift as well. Secure Boot off,
    no MOK declared, or an older collector without the section: no check."""
    section = _section(facts, "secure_boot")
    if not stack.mok_certificate or section.get("enabled") is not True:
        return []
    expected = stack.mok_certificate
    configured = section.get("dkms_mok_certificate")
    if configured != expected:
        return [Check("module-signer", Status.DRIFT, expected, _clip(str(configured)),
                      f"DKMS signs with {_clip(str(configured))}, not the MOK the spec declares ({expected}): "
                      "apply again to point DKMS at it")]
    certificate = section.get("certificate")
    if not isinstance(certificate, Mapping):
        return [Check("module-signer", Status.DRIFT, expected, _clip(str(certificate)),
                      f"the MOK certificate {expected} on the node is {_clip(str(certificate))}"
                      + ("" if certificate == "absent" else " (not an X.509 certificate in DER form)"))]
    want = f"{certificate.get('signer')} ({certificate.get('sig_key')})"
    found = section.get("modules")
    # DKMS's builds (the collector's dkms: updates/dkms, extra on EL); a module it could not read counts too.
    modules = {name: module for name, module in (found.items() if isinstance(found, Mapping) else ())
               if not isinstance(module, Mapping) or module.get("dkms") is not False}
    if not modules:
        return [Check("module-signer", Status.DRIFT, want, "no module",
                      f"no GPU driver module built by DKMS for kernel {_clip(str(section.get('kernel')))} to check")]
    checks = []
    for name, module in sorted(modules.items()):
        label = f"module-signer:{name}"
        if not isinstance(module, Mapping):
            checks.append(Check(label, Status.DRIFT, want, _clip(str(module)), f"modinfo could not read {name}"))
            continue
        got = f"{module.get('signer') or 'unsigned'} ({module.get('sig_key') or '-'})"
        if (module.get("signer"), module.get("sig_key")) != (certificate.get("signer"), certificate.get("sig_key")):
            checks.append(Check(label, Status.DRIFT, want, _clip(got),
                                f"{name} is signed by {_clip(got)}, not by the declared MOK {expected}: under "
                                "Secure Boot the kernel refuses it at the next load; rebuild it with DKMS "
                                "(apply again)"))
        elif module.get("unsigned_loaded"):
            checks.append(Check(label, Status.DRIFT, want, "unsigned module loaded",
                                f"the loaded {name} tainted the kernel as unsigned (E): it is not the signed build"))
        else:
            checks.append(Check(label, Status.OK, want, _clip(got), f"{name} is signed by the declared MOK {expected}"))
    return checks


def _firmware_check(component: str, pinned: str, found: Mapping[str, object], source: str) -> Check:
    if not found:
        return Check(f"{component}-firmware", Status.NOT_APPLICABLE, pinned, None,
                     f"no device reports {component} firmware here ({source})")
    wrong = {k: str(v) for k, v in found.items() if str(v or "").strip().lower() != pinned.lower()}
    seen = ", ".join(sorted({str(v) for v in found.values()}))
    if wrong:
        shown = ", ".join(f"{k}: {v}" for k, v in sorted(wrong.items())[:8])
        return Check(f"{component}-firmware", Status.DRIFT, pinned, _clip(seen),
                     f"{len(wrong)} of {len(found)} devices run other {component} firmware ({shown}); the stack "
                     f"pins {pinned}. Update it with the vendor's firmware tool", disruption="drain-reboot")
    return Check(f"{component}-firmware", Status.OK, pinned, seen,
                 f"all {len(found)} devices run {component} firmware {pinned} ({source})")


def reboot_due(facts: Mapping[str, Any]) -> tuple[str, str, str] | None:
    """(loaded, installed, why) when a node runs another kernel module than the one
    installed, or the playbook recorded a driver change that waits for a reboot; None
    otherwise (and on stand-in hosts, which have no module to reboot into)."""
    nvidia = _section(facts, "nvidia")
    if facts.get("standin") or not isinstance(facts.get("nvidia"), Mapping):
        return None
    check = _loaded_module_check(nvidia, False)
    if check.status is not Status.DRIFT:
        return None
    return str(check.found), str(check.expected), check.message


def _loaded_module_check(nvidia: Mapping[str, Any], standin: bool, operator: str | None = None) -> Check:
    """Installed != loaded: a driver upgraded without a reboot runs the old kernel module
    under new user space (nvidia-smi: "Driver/library version mismatch"). ``operator``: the
    GPU Operator version whose driver container runs this node's driver (its nvidia.ko lives
    in the container's root file system, never in the host's /lib/modules)."""
    loaded, installed = nvidia.get("driver_version"), nvidia.get("installed_module_version")
    marker = nvidia.get("reboot_required")
    if standin:
        note = f" (the playbook recorded: {marker})" if marker else ""
        return Check("loaded-module", Status.NOT_APPLICABLE, None, None,
                     f"stand-in host: no kernel module to load or reboot into{note}")
    if _is_version(loaded) and _is_version(installed) and match_version(str(installed), loaded) is None:
        return Check("loaded-module", Status.DRIFT, str(installed), str(loaded),
                     f"the installed NVIDIA kernel module is {installed} but {loaded} is loaded: "
                     "reboot the node (drain first)", disruption="drain-reboot")
    if marker:
        return Check("loaded-module", Status.DRIFT, "no pending reboot", str(marker),
                     f"a driver change waits for a reboot ({marker}); apply with --allow-reboot",
                     disruption="drain-reboot")
    if _is_version(loaded) and installed == "absent" and operator is not None:
        return Check("loaded-module", Status.NOT_APPLICABLE, None, str(loaded),
                     f"the GPU Operator {operator} driver container builds and loads the module from its own "
                     "root file system (the host's /lib/modules has none) and loads it again after a reboot")
    if _is_version(loaded) and installed == "absent":
        # modinfo finds no nvidia.ko for the running kernel (DKMS did not build it after a kernel
        # upgrade, the packages were removed, or the module was loaded from outside /lib/modules,
        # as on the lent H200 VM): the node runs now and comes back from a reboot without a driver.
        return Check("loaded-module", Status.WARNING, "an installed module", str(loaded),
                     f"{loaded} is loaded but the running kernel has no nvidia module on disk (modinfo nvidia, "
                     "or without modinfo its /lib/modules tree, finds none): a reboot would come up without the "
                     "driver. Reinstall the driver's kernel module for this kernel (the playbook's driver role), "
                     "then check `modinfo nvidia`")
    return Check("loaded-module", Status.OK, str(installed), str(loaded),
                 "the loaded kernel module is the installed one" if _is_version(installed) else
                 f"installed module: {installed}")


def _persistence_check(nvidia: Mapping[str, Any], standin: bool) -> Check:
    """Persistence mode keeps the driver initialised between jobs (no seconds-long start,
    no lost clocks/ECC settings); Ubuntu's nvidia-persistenced unit runs without it."""
    daemon = _section(nvidia, "persistenced")
    gpus = [g for g in _items(nvidia, "gpus") if isinstance(g, Mapping) and g.get("persistence_mode")]
    off = [str(g.get("index")) for g in gpus if str(g.get("persistence_mode")).lower() != "enabled"]
    if off:
        return Check("persistence-mode", Status.WARNING, "Enabled", f"disabled on GPU {', '.join(off)}",
                     f"persistence mode is off on GPU {', '.join(off)}: run nvidia-persistenced without "
                     "--no-persistence-mode (the playbook's drop-in does)")
    if daemon.get("no_persistence_mode"):
        return Check("persistence-mode", Status.WARNING, "--persistence-mode", str(daemon.get("exec_start")),
                     "nvidia-persistenced runs with --no-persistence-mode (Ubuntu's unit): GPUs stay out of "
                     "persistence mode")
    if gpus:
        return Check("persistence-mode", Status.OK, "Enabled", "Enabled", "every GPU is in persistence mode")
    if daemon.get("no_persistence_mode") is False:
        return Check("persistence-mode", Status.OK if standin else Status.NOT_APPLICABLE, "--persistence-mode",
                     str(daemon.get("exec_start")), "nvidia-persistenced runs in persistence mode"
                     + (" (stand-in host: no GPU to hold)" if standin else ""))
    return Check("persistence-mode", Status.NOT_APPLICABLE, None, str(daemon.get("service")),
                 "no GPU reports a persistence mode and no nvidia-persistenced unit was read")


def _imex_checks(fleet: Fleet, node: Node, imex: Mapping[str, Any], standin: bool) -> list[Check]:
    domain = sorted(n.hostname for n in fleet.nodes if node.nvlink_domain and n.nvlink_domain == node.nvlink_domain)
    peers = imex.get("nodes_config")
    checks = []
    if not isinstance(peers, list):
        checks.append(Check("imex-peers", Status.DRIFT, f"{len(domain)} peers", str(peers),
                            "/etc/nvidia-imex/nodes_config.cfg is missing: IMEX cannot form the NVLink domain"))
    elif len(peers) != len(domain) or len(set(peers)) != len(peers):
        checks.append(Check("imex-peers", Status.DRIFT, f"{len(domain)} peers", f"{len(peers)} listed",
                            f"nodes_config.cfg lists {len(peers)} address(es); the NVLink domain "
                            f"{node.nvlink_domain} has {len(domain)} node(s)"))
    else:
        checks.append(Check("imex-peers", Status.OK, f"{len(domain)} peers", f"{len(peers)} listed",
                            f"nodes_config.cfg lists every node of NVLink domain {node.nvlink_domain}"))
    service = imex.get("service")
    if standin:
        checks.append(Check("imex-service", Status.NOT_APPLICABLE, "active", str(service),
                            "stand-in host: IMEX cannot run without GPUs"))
    else:
        checks.append(Check("imex-service", Status.OK if service == "active" else Status.DRIFT, "active",
                            str(service), f"nvidia-imex is {service}"))
        if node.scheduler == "slurm":
            checks.append(Check("imex-channel", Status.NOT_APPLICABLE, "per job", None,
                                "Slurm creates one IMEX channel per job (SwitchType=switch/nvidia_imex)"))
        else:
            ok = "channel0" in _items(imex, "channels") or bool(imex.get("channel0_option"))
            checks.append(Check("imex-channel", Status.OK if ok else Status.DRIFT, "channel0",
                                ", ".join(map(str, _items(imex, "channels"))) or "none",
                                "IMEX channel0 exists (and is recreated at module load)" if ok else
                                "no IMEX channel: CUDA's multi-node NVLink calls fail with insufficient permission"))
    return checks


def _fabric_state_checks(gpus: object) -> list[Check]:
    """nvidia-smi -q: every GPU's NVLink fabric registration completed, one clique per node."""
    listed = [g for g in gpus if isinstance(g, Mapping)] if isinstance(gpus, list) else []
    fabric = [(g.get("index"), _section(g, "fabric")) for g in listed]
    reported = [(i, f) for i, f in fabric if f.get("state") not in (None, "N/A")]
    if not reported:
        return []
    bad = [f"GPU {i}: {f.get('state')}/{f.get('status')}" for i, f in reported
           if f.get("state") != "Completed" or f.get("status") != "Success"]
    cliques = sorted({str(f.get("clique_id")) for _, f in reported})
    checks = [Check("gpu-fabric", Status.DRIFT if bad else Status.OK, "Completed/Success",
                    "; ".join(bad) or "Completed/Success",
                    ("NVLink fabric registration incomplete: " + "; ".join(bad)) if bad else
                    "every GPU completed NVLink fabric registration")]
    if len(cliques) > 1:
        checks.append(Check("gpu-clique", Status.DRIFT, "one clique", ", ".join(cliques),
                            f"the node's GPUs sit in {len(cliques)} NVLink cliques: {', '.join(cliques)}"))
    return checks


def _standin_checks(stack: StackTuple, nvidia: Mapping[str, Any], found: dict[str, str]) -> list[Check]:
    """A lab host with stand-in packages: no GPU, no kernel module, only user space to check."""
    checks = []
    if stack.driver:
        user_space = nvidia.get("smi_driver_version")
        check = _version_check("driver", stack.driver, user_space, "nvidia-smi of the installed driver package")
        found["driver"] = str(user_space)
        checks.append(Check("driver", check.status, check.expected, check.found,
                            check.message + " (stand-in host: no kernel module is loaded; the user-space package "
                            "version is checked instead)"))
    checks.append(Check("gpus", Status.NOT_APPLICABLE, None, "stand-in host",
                        "a lab host with fleetspec stand-in packages has no GPUs: model, count and kernel module "
                        "are not checked"))
    return checks


def _driver_check(stack: StackTuple, nvidia: Mapping[str, Any], found: dict[str, str]) -> Check:
    if not stack.driver:
        return Check("driver", Status.OK, None, nvidia.get("driver_version"), "the stack pins no driver")
    loaded = nvidia.get("driver_version")
    if loaded == "absent":
        found["driver"] = "absent"
        return Check("driver", Status.DRIFT, stack.driver, "absent",
                     "no NVIDIA driver: /proc/driver/nvidia/version is absent (kernel module not loaded)")
    check = _version_check("driver", stack.driver, loaded, "loaded kernel module (/proc/driver/nvidia/version)")
    found["driver"] = str(loaded)
    user_space = nvidia.get("smi_driver_version")
    if check.status is Status.OK and _is_version(user_space) and match_version(str(loaded), user_space) is None:
        return Check("driver", Status.DRIFT, stack.driver, f"{loaded} (kernel), {user_space} (user space)",
                     f"the loaded kernel module is {loaded} but nvidia-smi's user-space driver is {user_space}: "
                     "reboot or reload the module after the upgrade")
    return check


def _kernel_module_check(node: Node, nvidia: Mapping[str, Any], catalog: Catalog) -> Check:
    try:
        wanted = kernel_module_flavor([node.gpu])
    except PackageError as exc:
        return Check("kernel-module", Status.WARNING, None, nvidia.get("kernel_module"), str(exc))
    module = nvidia.get("kernel_module")
    if module == wanted:
        return Check("kernel-module", Status.OK, wanted, str(module), f"the {module} kernel module is loaded")
    model = catalog.gpu(node.gpu.model)
    required = bool(model and model.open_module_required) and wanted == "open"
    return Check("kernel-module", Status.DRIFT if required else Status.WARNING, wanted, str(module),
                 f"the {module} kernel module is loaded; fleetspec installs the {wanted} one"
                 + (f" and {node.gpu.model} requires it" if required else ""))


def _gpu_checks(node: Node, gpus: object, source_state: object, catalog: Catalog,
                site_names: Mapping[str, str] | None = None) -> list[Check]:
    """GPU model and count as nvidia-smi/amd-smi list them, mapped through the catalog, or,
    for a model the site declared (``spec.gpu_models``, ``site_names``: id -> the name the
    tool prints), compared with the declared name (case and spacing aside). A node with
    ``other_gpus`` must show each model's count."""
    site_names = site_names or {}
    wanted = {g.model: g.count for g in (node.gpu, *node.other_gpus)}
    total = sum(wanted.values())
    listed = gpus if isinstance(gpus, list) else []
    if not listed and source_state in ("unknown", "not-collected"):
        why = f"the GPU list is {source_state} (see the facts' errors)"
        return [Check("gpu-count", Status.DRIFT, str(total), str(source_state), why)]
    tool = " (no GPU tool on the node)" if not listed and source_state == "absent" else ""
    count = Check("gpu-count", Status.OK if len(listed) == total else Status.DRIFT, str(total),
                  str(len(listed)), f"{len(listed)} GPU(s) listed{tool}, the spec says {total}")
    names = [str(g.get("name")) for g in listed if isinstance(g, Mapping)]
    if not names:
        return [count]

    def model_of(name: str) -> str | None:
        site = next((i for i, declared in site_names.items() if _same_name(name, declared)), None)
        if site is not None:
            return site
        model = catalog.gpu(name)
        return model.id if model is not None and model.id not in site_names else None

    found: dict[str, int] = {}
    wrong = []
    for name in sorted(set(names)):
        model = model_of(name)
        if model is None or model not in wanted:
            declared = [f"{m} as '{site_names[m]}'" for m in wanted if m in site_names]
            known = model or (catalog.gpu(name).id if catalog.gpu(name) else "not in the catalog")
            wrong.append(f"{name} ({known}{'; the site declared ' + ', '.join(declared) if declared else ''})")
        else:
            found[model] = names.count(name) + found.get(model, 0)
    spec_says = ", ".join(f"{c}x {m}" for m, c in wanted.items())
    if not wrong and len(wanted) > 1 and found != wanted:
        shown = ", ".join(f"{found.get(m, 0)}x {m}" for m in wanted)
        wrong.append(f"{shown} by model")
    if len(wanted) == 1:
        message = f"GPUs are {', '.join(wrong)}, the spec says {node.gpu.model}" if wrong else \
            f"every GPU is {node.gpu.model}"
    else:
        message = f"GPUs are {', '.join(wrong)}, the spec says {spec_says}" if wrong else \
            f"the GPUs are {spec_says}"
    model_check = Check("gpu-model", Status.DRIFT if wrong else Status.OK,
                        node.gpu.model if len(wanted) == 1 else spec_says, ", ".join(sorted(set(names))), message)
    return [model_check, count]


def _same_name(a: str, b: str) -> bool:
    return " ".join(a.lower().split()) == " ".join(b.lower().split())


def _fabric_manager_check(driver: str, fabric_manager: Mapping[str, Any]) -> Check:
    version, service = fabric_manager.get("version"), fabric_manager.get("service")
    if version == "absent":
        return Check("fabric-manager", Status.DRIFT, driver, "absent",
                     "an NVSwitch node needs nvidia-fabricmanager at the driver's version; it is not installed")
    check = _version_check("fabric-manager", driver, version, "nv-fabricmanager --version")
    if check.status is Status.OK and service not in ("active", "not-collected"):
        return Check("fabric-manager", Status.DRIFT, driver, f"{version} ({service})",
                     f"nvidia-fabricmanager is {service}; NVSwitch GPUs stay unusable until it runs")
    return check


def _nvlsm_check(fleet: Fleet, node: Node, facts: Mapping[str, Any], catalog: Catalog) -> Check:
    """HGX B200/B300: the NVLink Subnet Manager at the version fleetspec pins (catalog)."""
    wanted = catalog.nvlink5_packages().nvlsm_version
    operator = fleet.kubernetes.gpu_operator if fleet.kubernetes else None
    if node.scheduler == "kubernetes" and operator is not None and operator.driver == "operator":
        return Check("nvlsm", Status.NOT_APPLICABLE, wanted, None,
                     f"the GPU Operator {operator.version} runs the driver, and nvlsm with it, in its driver container")
    if fleet.os in EL_OS:
        return Check("nvlsm", Status.NOT_APPLICABLE, wanted, None, "no EL package of nvlsm is in the catalog "
                     "(fleetspec/catalog/data/el_packages.yaml): its version is not checked")
    unread = _unread_packages(fleet, facts)
    if unread:
        return Check("nvlsm", Status.NOT_APPLICABLE, wanted, None, f"nvlsm's version {unread}")
    found = [str(p.get("version")) for p in _installed(facts) if p.get("name") == "nvlsm"]
    if not found:
        return Check("nvlsm", Status.DRIFT, wanted, "absent", "an NVLink 5 board needs the NVLink Subnet Manager "
                     "(nvlsm): without it the fabric manager cannot configure the NVSwitches")
    if found[0] != wanted:
        return Check("nvlsm", Status.DRIFT, wanted, found[0], f"nvlsm {found[0]} is installed, the pin is {wanted}")
    return Check("nvlsm", Status.OK, wanted, found[0], "nvlsm at its pin")


def _rdma_checks(fleet: Fleet, facts: Mapping[str, Any]) -> list[Check]:
    """On an InfiniBand/RoCE fabric the node needs the RDMA user space (libibverbs and a
    provider), or NCCL/RCCL fall back to sockets without a word."""
    wanted = rdma_packages(fleet.fabric.type if fleet.fabric else None, fleet.os)
    if not wanted:
        return []
    unread = _unread_packages(fleet, facts)
    if unread:
        return [Check("rdma-userspace", Status.NOT_APPLICABLE, " ".join(wanted), None, f"the RDMA packages {unread}")]
    installed = {str(p.get("name")) for p in _installed(facts)}
    missing = [n for n in wanted if n not in installed]
    if missing:
        return [Check("rdma-userspace", Status.DRIFT, " ".join(wanted), f"absent: {', '.join(missing)}",
                      f"a {fleet.fabric.type if fleet.fabric else ''} fabric node without {', '.join(missing)}: "
                      "NCCL/RCCL cannot load the verbs transport and fall back to sockets")]
    return [Check("rdma-userspace", Status.OK, " ".join(wanted), "installed", "the RDMA user space is installed")]


def _cuda_components_check(fleet: Fleet, cuda: str, facts: Mapping[str, Any]) -> Check:
    """cuda-toolkit-X-Y depends on its components with >=: the ones fleetspec knows the
    release's versions of (``cuda_components``: apt's CUDA_COMPONENTS, or the EL ``cuda`` row's
    packages read from rpm on an EL fleet) must be installed at them; for a release
    without a known component manifest, say that its components are not held."""
    major, minor = (version_key(cuda) + (0, 0))[:2]
    toolkit = f"cuda-toolkit-{major}-{minor}"
    held = cuda_components(cuda, fleet.os)
    if held is None:
        return Check("cuda-components", Status.WARNING, f"CUDA {cuda}'s component versions", "not held",
                     f"{toolkit} depends on its components with >= and fleetspec knows no published component "
                     f"manifest of CUDA {cuda}: the components are not held, a later update of one can come in")
    unread = _unread_packages(fleet, facts)
    if unread:
        return Check("cuda-components", Status.NOT_APPLICABLE, f"{len(held)} components", None,
                     f"component versions {unread}")
    installed = {str(p.get("name")): str(p.get("version")) for p in _installed(facts)}
    off = [f"{n} {installed[n]} (pin {v})" for n, v in held.items() if n in installed and installed[n] != v]
    if off:
        return Check("cuda-components", Status.DRIFT, f"CUDA {cuda}'s component versions", "; ".join(off),
                     f"{toolkit}'s components moved off CUDA {cuda}'s versions: {'; '.join(off)}")
    present = sum(n in installed for n in held)
    return Check("cuda-components", Status.OK, f"CUDA {cuda}'s component versions", f"{present} at the pin",
                 f"{present} of the {len(held)} components fleetspec holds are at CUDA {cuda}'s versions; "
                 f"{toolkit}'s other components are not held")


def _dcgm_check(fleet: Fleet, node: Node, stack: StackTuple, facts: Mapping[str, Any],
                found: dict[str, str]) -> Check:
    """DCGM's packages at the stack's pin (the host engine the health seam and the exporter use)."""
    operator = fleet.kubernetes.gpu_operator if fleet.kubernetes else None
    if node.scheduler == "kubernetes" and operator is not None and operator.driver == "operator":
        return Check("dcgm", Status.NOT_APPLICABLE, stack.dcgm, None,
                     f"the GPU Operator {operator.version} runs DCGM in its own containers")
    unread = _unread_packages(fleet, facts)
    if unread:
        return Check("dcgm", Status.NOT_APPLICABLE, stack.dcgm, None, f"DCGM's version {unread}")
    try:
        wanted = dict(dcgm_pins(stack, fleet.os))
    except PackageError as exc:
        return Check("dcgm", Status.NOT_APPLICABLE, stack.dcgm, None, f"DCGM packages unknown: {exc}")
    installed = {str(p.get("name")): str(p.get("version")) for p in _installed(facts)}
    off = [f"{n} {installed.get(n, 'absent')}" for n, v in wanted.items() if installed.get(n) != v]
    pin = next(iter(wanted.values()))
    if off:
        return Check("dcgm", Status.DRIFT, pin, "; ".join(off),
                     f"DCGM is pinned at {pin} ({', '.join(wanted)}): {'; '.join(off)}")
    found["dcgm"] = stack.dcgm or ""
    return Check("dcgm", Status.OK, pin, pin, f"{', '.join(wanted)} at the pin")


def _container_toolkit_check(fleet: Fleet, facts: Mapping[str, Any]) -> Check:
    installed = [p for p in _installed(facts) if str(p.get("name", "")).startswith("nvidia-container-toolkit")]
    if installed:
        versions = ", ".join(f"{p['name']} {p.get('version')}" for p in installed)
        return Check("container-toolkit", Status.OK, None, versions, "installed on the host")
    operator = fleet.kubernetes.gpu_operator if fleet.kubernetes else None
    if operator is not None:
        return Check("container-toolkit", Status.NOT_APPLICABLE, None, "no host package",
                     f"the GPU Operator {operator.version} deploys the container toolkit; the host carries none")
    return Check("container-toolkit", Status.WARNING, "nvidia-container-toolkit", "absent",
                 "no GPU Operator in the spec and no nvidia-container-toolkit on the host: pods cannot see GPUs")


def _in_images(component: str, expected: str) -> Check:
    return Check(component, Status.NOT_APPLICABLE, expected, None,
                 f"a Kubernetes node: {component} lives in container images, the host cannot show it")


def _cuda_check(expected: str, cuda: Mapping[str, Any], found: dict[str, str]) -> Check:
    """The default toolkit's version.json, else nvcc, else the system cudart."""
    default = cuda.get("default_toolkit")
    toolkits = [t for t in _items(cuda, "toolkits") if isinstance(t, Mapping)]
    chosen = next((t for t in toolkits if t.get("path") == default), None)
    if chosen is None and len(toolkits) == 1:
        chosen = toolkits[0]
    if chosen is not None and _is_version(chosen.get("version")):
        value, source = str(chosen["version"]), f"{chosen.get('path')}/version.json"
    elif _is_version(_section(cuda, "nvcc").get("release")):
        value, source = str(cuda["nvcc"]["release"]), "nvcc --version"
    else:
        system = [lib for lib in _items(cuda, "cudart") if isinstance(lib, Mapping) and lib.get("origin") == "system" and _is_version(lib.get("version"))]
        if not system:
            found["cuda"] = "absent"
            return Check("cuda", Status.DRIFT, expected, "absent",
                         "missing: no CUDA toolkit in /usr/local/cuda*, no nvcc and no system libcudart")
        value, source = str(system[0]["version"]), f"cudaRuntimeGetVersion ({system[0].get('path')})"
    found["cuda"] = at_precision(expected, value)
    return _version_check("cuda", expected, value, source)


def _library_version(lib: Mapping[str, Any]) -> tuple[str | None, str]:
    """What a library entry says its version is, and which source said it."""
    if _is_version(lib.get("version")):
        return str(lib["version"]), "the library itself"
    package = lib.get("package")
    if isinstance(package, Mapping) and _is_version(package.get("version")):
        return str(package["version"]), f"package {package.get('name')}"
    if _is_version(lib.get("file_version")):
        return str(lib["file_version"]), "its file name"
    return None, f"unreadable ({lib.get('version')})"


def _library_checks(component: str, library: str, expected: str, libraries: object, facts: Mapping[str, Any],
                    found: dict[str, str], headers: object = None) -> list[Check]:
    """The pinned (system) library must match; other copies that differ are shadows (warning)."""
    entries = [lib for lib in (libraries if isinstance(libraries, list) else []) if isinstance(lib, Mapping)]
    system = [lib for lib in entries if lib.get("origin") != "python"]
    matching, differing = [], []
    for lib in system:
        version, _ = _library_version(lib)
        (matching if version and match_version(expected, version) else differing).append(lib)
    checks: list[Check] = []
    if matching:
        lib = matching[0]
        version, source = _library_version(lib)
        check = _version_check(component, expected, version, f"{lib.get('path')} ({source})")
        checks.append(Check(check.component, check.status, check.expected, check.found, check.message,
                            (str(lib.get("path")),)))
        found[component] = at_precision(expected, str(version))
    elif differing:
        shown = [f"{_library_version(lib)[0] or lib.get('version')} at {lib.get('path')}" for lib in differing]
        found[component] = ",".join(sorted({at_precision(expected, str(_library_version(lib)[0])) for lib in differing}))
        checks.append(Check(component, Status.DRIFT, expected, ", ".join(sorted({str(_library_version(l)[0]) for l in differing})),
                            f"the system {library} is {'; '.join(shown)}, the spec pins {expected}",
                            tuple(str(lib.get("path")) for lib in differing)))
        differing = []
    else:
        found[component] = "absent"
        copies = [str(lib.get("path")) for lib in entries]
        where = f"; only Python environments carry it: {', '.join(copies)}" if copies else ""
        header = _header_version(headers)
        note = f" (the header {header[1]} says {header[0]})" if header else ""
        checks.append(Check(component, Status.DRIFT, expected, "absent",
                            f"missing: no system {library} on the node{note}{where}", tuple(copies)))
    shadows = differing + [lib for lib in entries if lib.get("origin") == "python"
                           and not match_version(expected, _library_version(lib)[0] or "")]
    if shadows:
        described = [f"{_library_version(lib)[0] or lib.get('version')} at {lib.get('path')}"
                     + (f" (environment {lib['environment']})" if lib.get("environment") else "") for lib in shadows]
        checks.append(Check(f"{component}-shadow", Status.WARNING, expected,
                            ", ".join(sorted({str(_library_version(lib)[0] or lib.get("version")) for lib in shadows})),
                            f"other {library} copies differ from the pinned {expected}: {'; '.join(described)}. "
                            "A job that loads one of them runs a different version than its peers",
                            tuple(str(lib.get("path")) for lib in shadows)))
    return checks


def _header_version(headers: object) -> tuple[str, str] | None:
    for header in headers if isinstance(headers, list) else []:
        if isinstance(header, Mapping) and _is_version(header.get("version")):
            return str(header["version"]), str(header.get("path"))
    return None


# --- AMD ------------------------------------------------------------------------------


def _amd_checks(fleet: Fleet, node: Node, stack: StackTuple, facts: Mapping[str, Any], catalog: Catalog,
                found: dict[str, str]) -> list[Check]:
    amd = _section(facts, "amd")
    checks = []
    if stack.amdgpu:
        checks.append(_amdgpu_check(stack.amdgpu, amd, facts, found))
    if facts.get("standin") and amd.get("driver_version") == "absent":
        # As _standin_checks for NVIDIA: a lab host with stand-in packages has no amdgpu module
        # (/sys/module/amdgpu) and no GPU, so amd-smi and rocm-smi have nothing to list; what
        # the stand-ins carry (ROCm's .info/version, librccl, amdgpu-dkms's version) is checked.
        checks.append(Check("gpus", Status.NOT_APPLICABLE, None, "stand-in host",
                            "a lab host with fleetspec stand-in packages has no GPUs and no amdgpu module: model "
                            "and count are not checked"))
    else:
        checks += _gpu_checks(node, amd.get("gpus"), amd.get("gpu_source"), catalog, dict(fleet.site_gpu_names))
    if node.scheduler == "kubernetes":
        for key in ("rocm", "rccl"):
            if getattr(stack, key):
                checks.append(_in_images(key, getattr(stack, key)))
                found[key] = "image"
        return checks
    if stack.rocm:
        rocm = amd.get("rocm_version")
        found["rocm"] = at_precision(stack.rocm, str(rocm)) if _is_version(rocm) else str(rocm)
        checks.append(_version_check("rocm", stack.rocm, rocm, "/opt/rocm/.info/version"))
    if stack.rccl:
        checks += _library_checks("rccl", "librccl", stack.rccl, amd.get("rccl"), facts, found)
    return checks


def _amdgpu_check(expected: str, amd: Mapping[str, Any], facts: Mapping[str, Any], found: dict[str, str]) -> Check:
    """amdgpu-dkms's version encodes the release (``...30300300`` = 30.30.3); the module alone does not."""
    dkms = next((p for p in _installed(facts) if p.get("name") == "amdgpu-dkms"), None)
    if dkms is not None:
        release = _amdgpu_release(str(dkms.get("version")))
        found["amdgpu"] = release or str(dkms.get("version"))
        return _version_check("amdgpu", expected, release or "unknown", f"package amdgpu-dkms {dkms.get('version')}")
    if amd.get("driver_version") == "absent":
        found["amdgpu"] = "absent"
        return Check("amdgpu", Status.DRIFT, expected, "absent", "no amdgpu DKMS driver (/sys/module/amdgpu/version)")
    found["amdgpu"] = str(amd.get("driver_version"))
    return Check("amdgpu", Status.WARNING, expected, str(amd.get("driver_version")),
                 "the amdgpu module reports its kernel-module version, not the release; "
                 "no amdgpu-dkms package to read the release from")


def _amdgpu_release(version: str) -> str | None:
    """``1:6.16.13.30300300-2327507.22.04`` -> ``30.30.3`` (last field MMmmpp00)."""
    shown = upstream(version)
    last = shown.split(".")[-1] if shown else ""
    if len(last) != 8:
        return None
    return f"{int(last[0:2])}.{int(last[2:4])}.{int(last[4:6])}"


# --- package holds ----------------------------------------------------------------------


def _unread_packages(fleet: Fleet, facts: Mapping[str, Any]) -> str | None:
    """Why the node's package versions cannot be compared, or None: an EL fleet's are read
    from rpm (the collector's ``rpm -q``, epoch included), an apt fleet's from dpkg; a node
    whose collector read the other manager, or none, is not what the spec names."""
    want = "rpm" if fleet.os in EL_OS else "dpkg"
    manager = _section(facts, "packages").get("manager")
    if manager == want:
        return None
    return f"are read from {want} on a {fleet.os} fleet; the node's facts come from {manager}"


def _installed(facts: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    installed = _section(facts, "packages").get("installed")
    return [p for p in installed if isinstance(p, Mapping)] if isinstance(installed, list) else []


def _hold_checks(fleet: Fleet, node: Node, stack: StackTuple, facts: Mapping[str, Any]) -> list[Check]:
    """Pinned packages must be held, or the next ``apt upgrade`` moves the node off its tuple."""
    manager = _section(facts, "packages").get("manager")
    if manager == "rpm" and fleet.os in EL_OS and node.scheduler != "kubernetes":
        return _el_hold_checks(fleet, node, stack, facts)
    if manager != "dpkg":
        return [Check("package-holds", Status.NOT_APPLICABLE, None, str(manager),
                      f"package manager {manager}: holds are read from dpkg, and from rpm on an EL fleet")]
    if node.scheduler == "kubernetes":
        return []
    try:
        pins = packages_for(stack, fleet.os, [node.gpu])
    except PackageError as exc:
        return [Check("package-holds", Status.NOT_APPLICABLE, None, None, f"pinned packages unknown: {exc}")]
    installed = {str(p.get("name")): p for p in _installed(facts)}
    unheld = [pin.name for pin in pins if pin.name in installed and not installed[pin.name].get("held")]
    held = [pin.name for pin in pins if pin.name in installed and installed[pin.name].get("held")]
    if unheld:
        return [Check("package-holds", Status.WARNING, "held", f"not held: {', '.join(unheld)}",
                      f"pinned packages not held ({', '.join(unheld)}): an apt upgrade would move them")]
    return [Check("package-holds", Status.OK, "held", f"held: {', '.join(held)}" if held else "none installed",
                  "every installed pinned package is held" if held else "no pinned package installed by dpkg")]


def _el_hold_checks(fleet: Fleet, node: Node, stack: StackTuple, facts: Mapping[str, Any]) -> list[Check]:
    """An EL node holds its tuple with dnf's versionlock (one ``name-E:V-R.*`` line per pin)
    and, on EL9 for NVIDIA, the branch's ``nvidia-driver`` stream. Read by the collector with
    ``rpm -q`` (epoch included), the versionlock list and /etc/dnf/modules.d: a pin at another
    EVR, a lock missing or at another build, and another enabled stream are drift."""
    try:
        pins = packages_for(stack, fleet.os, [node.gpu])
    except PackageError as exc:
        return [Check("package-holds", Status.NOT_APPLICABLE, None, None, f"pinned packages unknown: {exc}")]
    packages = _section(facts, "packages")
    installed = {str(p.get("name")): p for p in _installed(facts)}
    locks = packages.get("versionlock")
    lock_list = [str(x) for x in locks] if isinstance(locks, list) else []
    checks = []
    moved = [f"{p.name} {installed[p.name].get('version')} (pin {p.version})" for p in pins
             if p.name in installed and installed[p.name].get("version") != p.version]
    absent = [p.name for p in pins if p.name not in installed]
    if moved or absent:
        checks.append(Check("el-packages", Status.DRIFT, "every pin at its EVR",
                            "; ".join(moved + [f"{n} not installed" for n in absent]),
                            "pinned packages off their EVR (rpm -q): re-apply the stack's pins"))
    else:
        checks.append(Check("el-packages", Status.OK, "every pin at its EVR", f"{len(pins)} at their EVR",
                            "every pinned package is installed at its EVR (rpm -q)"))
    if locks is None:
        checks.append(Check("package-holds", Status.DRIFT, "versionlock", "no versionlock list",
                            "dnf's versionlock list is missing: a dnf upgrade would move every pin"))
    else:
        wanted = [versionlock_line(p) for p in pins]
        missing = [w for w in wanted if w not in lock_list]
        other = [x for x in lock_list if x not in wanted and any(x.startswith(p.name + "-") and
                 re.match(r"^[0-9]+:", x[len(p.name) + 1:]) for p in pins)]
        if missing or other:
            found = ", ".join([f"missing {m}" for m in missing] + [f"locked at {o}" for o in other])
            checks.append(Check("package-holds", Status.DRIFT, "versionlock of every pin", found,
                                "dnf's versionlock does not hold the tuple (" + found + "): re-apply the stack's pins"))
        else:
            checks.append(Check("package-holds", Status.OK, "versionlock of every pin", f"{len(wanted)} locked",
                                "every pin is held by dnf's versionlock at its build"))
    if EL_OS[fleet.os] == 9 and stack.vendor == "nvidia" and stack.driver:
        want = driver_module_stream(stack.driver, kernel_module_flavor([node.gpu]))
        streams = packages.get("module_streams")
        have = streams.get("nvidia-driver") if isinstance(streams, Mapping) else None
        status = Status.OK if have == want else Status.DRIFT
        checks.append(Check("driver-stream", status, want, have or "none enabled",
                            f"nvidia-driver:{want} is enabled" if status is Status.OK else
                            f"nvidia-driver:{have or 'no stream'} is enabled, the tuple needs {want}: another branch's "
                            "packages are what dnf sees (dnf module reset nvidia-driver, then re-apply)"))
    return checks
