"""DRA device taints: a device-level fault on a DRA-managed pool taints that one device.

Pure. A ``quarantine-device`` fault names its GPU by PCI address (the kernel log's
``PCI:0000:5d:00``, nvidia-smi's ``00000000:18:00.0``); the NVIDIA DRA driver publishes
each full GPU in its node's ResourceSlice as device ``gpu-<minor>`` with attribute
``pcieBusID`` (kubernetes-sigs/dra-driver-nvidia-gpu, cmd/gpu-kubelet-plugin/deviceinfo.go:
``CanonicalName``, ``PartDevAttributes``); a GPU in MIG mode is published as its MIG
devices only, and a fault on it taints each of them (``find_devices``). The rule selects
exactly that device by driver, pool and name, and taints it ``NoSchedule``: no new claim gets
it, claims already on it keep running (their pods finish or checkpoint; ``NoExecute`` would delete them, ignoring
PodDisruptionBudgets). The effect is not user-settable; NoSchedule is one the API accepts in
every supported release: DeviceTaint.Effect's own documentation (kubernetes
staging/src/k8s.io/api/resource/*/types.go, in each release's OpenAPI) lists "NoSchedule and
NoExecute" in 1.33-1.34 and "None, NoSchedule and NoExecute" from 1.35
(tests/health/test_device_taints.py checks the rendered effect against each release's list).

API version per Kubernetes minor: DeviceTaintRule is ``resource.k8s.io/v1alpha3`` from 1.33
(KEP-5055, alpha, behind the ``DRADeviceTaints`` feature gate), ``v1beta2`` from 1.36 and
``v1`` from 1.37: the versions each release's OpenAPI schema (as kubernetes-validate ships
it) serves. Below 1.33 there are no device taints: the node path (cordon, drain) applies.
"""

from __future__ import annotations

import re
from typing import Any

from fleetspec.node_side.contract import DEVICE_ACTIONS

DRIVER = "gpu.nvidia.com"
TAINT_KEY = "fleetspec.io/gpu-fault"
NODE_LABEL = "fleetspec.io/node"
EFFECT = "NoSchedule"
_API = (((1, 37), "resource.k8s.io/v1"), ((1, 36), "resource.k8s.io/v1beta2"), ((1, 33), "resource.k8s.io/v1alpha3"))


def api_version(k8s_version: str) -> str | None:
    """The DeviceTaintRule apiVersion for a cluster of ``k8s_version``; None before 1.33."""
    parts = re.match(r"v?(\d+)\.(\d+)", k8s_version)
    if not parts:
        return None
    minor = (int(parts.group(1)), int(parts.group(2)))
    return next((api for since, api in _API if minor >= since), None)


def pci_address(address: str) -> tuple[int | None, str, str] | None:
    """(domain, bus, device) of a PCI address, bus and device lower case: ``0000:5D:00`` /
    ``00000018:01:00.0`` / ``0018:01:00.0`` -> (0, "5d", "00") / (24, "01", "00") / (24, "01", "00").
    The domain is None when the address has none (``5d:00``)."""
    match = re.search(r"(?:([0-9a-fA-F]{4,8}):)?([0-9a-fA-F]{2}):([0-9a-fA-F]{2})(?:\.[0-7])?$", address.strip())
    if not match:
        return None
    domain = int(match.group(1), 16) if match.group(1) else None
    return domain, match.group(2).lower(), match.group(3).lower()


def _same_gpu(a: tuple[int | None, str, str], b: tuple[int | None, str, str]) -> bool:
    """The same bus and device, in the same PCI domain where both name one. The domain counts:
    a GB200 tray's four GPUs are 0008:01:00, 0009:01:00, 0018:01:00 and 0019:01:00 (one
    domain each, every one at bus 01 device 00)."""
    return a[1:] == b[1:] and (a[0] is None or b[0] is None or a[0] == b[0])


def find_devices(slices: list[dict[str, Any]], node: str, address: str) -> list[tuple[str, str]]:
    """(pool, device) of every device ``node``'s ResourceSlices of the NVIDIA driver publish
    for the GPU at PCI ``address``: the full GPU (``type: gpu``), or, for a GPU in MIG mode,
    which the driver publishes as its MIG devices only, every one of them (``type: mig``,
    named ``gpu-<minor>-mig-<profile>-<profileID>-<placementStart>``, carrying the parent's
    ``parentUUID`` and standard ``resource.kubernetes.io/pciBusID``: kubernetes-sigs/
    dra-driver-nvidia-gpu cmd/gpu-kubelet-plugin/mig.go ``ToCanonicalName``,
    ``CommonAttributesMig``). A fault on a GPU is a fault on all its instances: the reset it
    needs takes them all (docs/health.md, *Xids on MIG instances*). Empty when no published
    GPU has that address, or when more than one could (an address without its domain on a
    multi-domain node): never a guess."""
    want = pci_address(address)
    if want is None:
        return []
    gpus: dict[tuple[str, str], list[tuple[str, str]]] = {}  # one GPU (pool, full device or parent UUID) -> devices
    for item in slices:
        spec = item.get("spec", {})
        if spec.get("driver") != DRIVER or spec.get("nodeName") != node:
            continue
        pool = spec["pool"]["name"]
        for device in spec.get("devices") or []:
            attrs = device.get("attributes") or {}
            kind = (attrs.get("type") or {}).get("string", "gpu")
            parent = (attrs.get("parentUUID") or {}).get("string") if kind == "mig" else device["name"]
            if kind not in ("gpu", "mig") or not parent:
                continue  # another kind of device (a VFIO passthrough GPU, a channel): not ours to taint
            found = (attrs.get("resource.kubernetes.io/pciBusID") or attrs.get("pcieBusID") or {}).get("string")
            published = pci_address(found) if found else None
            if published is not None and _same_gpu(published, want):
                gpus.setdefault((pool, parent), []).append((pool, device["name"]))
    return sorted(set(next(iter(gpus.values())))) if len(gpus) == 1 else []


def rule_name(node: str, device: str) -> str:
    return f"fleetspec-{node}-{device}".lower()[:253]


def device_taint_rule(api: str, node: str, pool: str, device: str, fault_class: str) -> dict[str, Any]:
    return {
        "apiVersion": api,
        "kind": "DeviceTaintRule",
        "metadata": {"name": rule_name(node, device),
                     "labels": {"app.kubernetes.io/managed-by": "fleetspec", NODE_LABEL: node}},
        "spec": {
            "deviceSelector": {"driver": DRIVER, "pool": pool, "device": device},
            "taint": {"key": TAINT_KEY, "value": fault_class, "effect": EFFECT},
        },
    }


def plan(api: str, node: str, slices: list[dict[str, Any]], faults: list[dict[str, Any]]
         ) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
    """The DeviceTaintRules ``faults`` call for on ``node`` (by name), and the faults left for
    the node path: every fault not ``quarantine-device`` and every one whose GPU the node's
    ResourceSlices do not show. Both remediators (``fleetspec health --remediate`` and the
    in-cluster CronJob) decide with this."""
    wanted: dict[str, dict[str, Any]] = {}
    rest: list[dict[str, Any]] = []
    for fault in faults:
        found = find_devices(slices, node, fault["device"]) if fault["action"] in DEVICE_ACTIONS else []
        if not found:
            rest.append(fault)
            continue
        for pool, device in found:
            rule = device_taint_rule(api, node, pool, device, fault["class"])
            wanted.setdefault(rule["metadata"]["name"], rule)
    return wanted, rest


def tainted(rule: dict[str, Any]) -> str:
    sel, taint = rule["spec"]["deviceSelector"], rule["spec"]["taint"]
    return (f"device {sel['pool']}/{sel['device']} tainted {TAINT_KEY}={taint['value']}:{taint['effect']} "
            f"(DeviceTaintRule {rule['metadata']['name']})")


def untainted(name: str) -> str:
    return f"DeviceTaintRule {name} deleted: its device has no fault now"


_NPD_DEVICES = re.compile(r" \[devices:((?: [^ =\]]+=[a-z0-9-]+)*)\]$")


def npd_faults(message: str) -> list[dict[str, Any]] | None:
    """The ``quarantine-device`` faults a sick node check put in NPD's condition message
    (``fleetspec.node_side.node_check.npd_devices``: `` [devices: 0000:5d:00=ecc-uncorrectable
    -=dcgm-diag-isolate]``), as fault dicts; None when the message carries no device list
    (then only the node path can act)."""
    match = _NPD_DEVICES.search(message.strip())
    if match is None:
        return None
    return [{"action": "quarantine-device", "device": address, "class": cls}
            for address, cls in (token.split("=", 1) for token in match.group(1).split())]
