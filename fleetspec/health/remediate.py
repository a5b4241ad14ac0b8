"""Act on Kubernetes-owned nodes' verdicts through the normal eviction path.

Slurm-owned nodes act for themselves (the node check drains through slurmctld). For
Kubernetes-owned nodes, ``fleetspec health --remediate`` does what the node check cannot
from the host: a node whose verdict calls for an action is cordoned, annotated with the
reason (``fleetspec.io/drain-reason: fleetspec-health: ...``, the annotation apply's
drain uses) and drained with ``kubectl drain`` (the Eviction API: PodDisruptionBudgets
hold, DaemonSets stay); a node the check cordoned is uncordoned once its verdict needs
no action. A node cordoned by anyone else is left alone, as on Slurm. Device-plugin
pools cannot take one GPU out of service, so ``quarantine-device`` cordons the node too.

On a DRA-managed pool (``kubernetes.dra.gpus``, Kubernetes 1.33+) a ``quarantine-device``
fault taints only its GPU: a DeviceTaintRule (``fleetspec.node_side.device_taints``) selecting
the device the NVIDIA DRA driver publishes at that PCI address; the node stays schedulable
for its other GPUs. A rule is deleted once its device no longer has such a fault. A device
the node's ResourceSlices do not show falls back to the node path.

The blast-radius limit (``spec.health.min_healthy``, ``fleetspec.node_side.min_healthy``, the
in-cluster remediator's decision): while fewer of the fleet's Kubernetes-owned nodes than
that have a healthy verdict and some need an action, no node is acted on but to release a
recovered one; the run says so in one line and fails.

A MIG node (``nvidia.com/mig.config``, where the fleet has Kubernetes-owned MIG nodes) that the
check cordoned is released only after the GPU Operator's MIG manager re-applied its geometry
(a GPU reset destroys the instances): the in-cluster remediator's steps
(``k8s_remediator.mig_step``) through kubectl.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass

from fleetspec.apply.control import ControlError, KubernetesControl, Runner, checked
from fleetspec.compile.ir import Fleet
from fleetspec.health.fleet import FleetHealth
from fleetspec.node_side import device_taints, k8s_remediator, min_healthy
from fleetspec.node_side.classify import reason
from fleetspec.node_side.contract import DRAIN_REASON
from fleetspec.node_side.faults import strongest
from fleetspec.node_side.node_check import LEADER


@dataclass(frozen=True)
class Remedy:
    node: str
    done: str  # what was done, in words
    ok: bool = True  # False: kubectl failed on this node ("not acted on" / "stopped")


@dataclass(frozen=True)
class Remediation:
    remedies: list[Remedy]
    held: str | None = None  # the blast-radius limit held remediation back: why, in one line

    @property
    def ok(self) -> bool:
        return self.held is None and all(r.ok for r in self.remedies)


def _acts(verdict: dict) -> bool:
    return verdict.get("action", "none") != "none"


def remediate_kubernetes(fleet: Fleet, health: FleetHealth, run: Runner, deadline_s: float = 1800) -> Remediation:
    from fleetspec.render.kubernetes.common import NAMESPACES
    from fleetspec.render.kubernetes.dra import dra_gpu_partitions

    control = KubernetesControl(run)
    k8s_mig = any(n.mig for n in fleet.nodes if n.scheduler == "kubernetes")
    mig_namespace = NAMESPACES["gpu-operator"] if k8s_mig else None
    dra = {p.name for p in dra_gpu_partitions(fleet)}
    api = device_taints.api_version(fleet.kubernetes.version) if fleet.kubernetes else None
    # the pool the in-cluster remediator selects: every Kubernetes-owned node; one without a
    # verdict (unreachable, or no file in --facts) is not counted healthy
    pool = [n.hostname for n in fleet.nodes if n.scheduler == "kubernetes"]
    verdicts = [health.verdicts.get(h) for h in pool]
    healthy = sum(1 for v in verdicts if v is not None and not _acts(v) and v.get("status") in ("healthy", "degraded"))
    sick = sum(1 for v in verdicts if v is not None and _acts(v))
    floor = fleet.health.min_healthy if fleet.health else min_healthy.DEFAULT
    held = min_healthy.hold(floor, len(pool), healthy, sick)
    out: list[Remedy] = []
    for host, verdict in health.verdicts.items():
        node = fleet.node(host)
        if node is None or node.scheduler != "kubernetes":
            continue
        if held and _acts(verdict):
            continue  # the limit: nothing new on a sick node, and what is in place stays
        done: list[str] = []
        try:  # one node the API refuses (RBAC, an admission webhook, gone) never stops the others
            _remediate_node(control, run, host, verdict, api if node.partition in dra else None, deadline_s, done,
                            mig_namespace)
        except (ControlError, ValueError) as exc:
            out += [Remedy(host, line) for line in done]
            out.append(Remedy(host, f"{'stopped' if done else 'not acted on'}: {exc}", ok=False))
            continue
        out += [Remedy(host, line) for line in done]
    return Remediation(out, held)


def _remediate_node(control: KubernetesControl, run: Runner, host: str, verdict: dict, api: str | None,
                    deadline_s: float, out: list[str], mig_namespace: str | None = None) -> None:
    """One Kubernetes node: device taints on a DRA pool (``api`` given), then cordon and drain,
    or uncordon what this cordoned; what was done goes to ``out`` as it happens. Raises
    ControlError when kubectl fails."""
    obj = json.loads(checked(run, ["kubectl", "get", "node", host, "-o", "json"]))
    acting = [f for f in verdict.get("faults", []) if f.get("action", "none") != "none"]
    if api is not None:
        try:
            acting, done = _device_taints(run, api, host, acting)
        except ControlError as exc:
            done = [f"device taints not applied ({exc}): the node path instead"]
        out += done
    cordoned = bool(obj.get("spec", {}).get("unschedulable"))
    current = (obj.get("metadata", {}).get("annotations") or {}).get(DRAIN_REASON, "")
    ours = current.startswith(LEADER)
    if strongest([f["action"] for f in acting]) != "none":
        if cordoned and not ours:
            out.append(f"left cordoned by someone else ({current or 'no reason given'})")
            return
        node_verdict = dict(verdict, faults=acting, action=strongest([f["action"] for f in acting]))
        control.drain([host], f"{LEADER} {reason(node_verdict)}")
        if k8s_remediator.MIG_REAPPLY in (obj["metadata"].get("annotations") or {}):  # sick again: a new re-apply later
            checked(run, ["kubectl", "annotate", "node", host, f"{k8s_remediator.MIG_REAPPLY}-"])
        busy = control.wait_drained([host], deadline_s)
        out.append("cordoned, eviction blocked (a PodDisruptionBudget or a timeout): retried on the next run"
                   if busy else "cordoned and drained")
    elif cordoned and ours:
        if mig_namespace and (obj["metadata"].get("labels") or {}).get(k8s_remediator.MIG_CONFIG_LABEL):
            if not _mig_released(run, host, obj["metadata"], mig_namespace, out):
                return
            checked(run, ["kubectl", "annotate", "node", host, f"{k8s_remediator.MIG_REAPPLY}-"])
        control.resume([host])
        out.append(f"uncordoned (was: {current})")


def _mig_released(run: Runner, host: str, meta: dict, namespace: str, out: list[str]) -> bool:
    """The MIG re-apply before a MIG node is released (k8s_remediator.mig_step) through
    kubectl: True once the MIG manager reported success. ControlError when it failed, or when
    no mig-manager pod runs there."""
    step, line = k8s_remediator.mig_step(meta)
    if step == "failed":
        raise ControlError(line)
    if step != "restart":
        out.append(line)
        return step == "release"
    listed = json.loads(checked(run, ["kubectl", "get", "pods", "-n", namespace, "-l", k8s_remediator.MIG_MANAGER_SELECTOR,
                                      "--field-selector", f"spec.nodeName={host}", "-o", "json"]))
    names = sorted(p["metadata"]["name"] for p in listed.get("items", []))
    if not names:
        raise ControlError(k8s_remediator.no_mig_manager(namespace))
    checked(run, ["kubectl", "label", "--overwrite", "node", host, f"{k8s_remediator.MIG_STATE_LABEL}=pending"])
    checked(run, ["kubectl", "annotate", "--overwrite", "node", host, f"{k8s_remediator.MIG_REAPPLY}={','.join(names)}"])
    checked(run, ["kubectl", "delete", "pod", "-n", namespace, *names])
    out.append(k8s_remediator.restarted(names, meta["labels"][k8s_remediator.MIG_CONFIG_LABEL]))
    return False


def _device_taints(run: Runner, api: str, host: str, acting: list[dict]) -> tuple[list[dict], list[str]]:
    """Taint the GPUs of ``quarantine-device`` faults, untaint those that recovered.
    Returns the faults still for the node path and what was done."""
    slices = json.loads(checked(run, ["kubectl", "get", "resourceslices", "-o", "json", "--field-selector",
                                      f"spec.nodeName={host},spec.driver={device_taints.DRIVER}"])).get("items", [])
    wanted, rest = device_taints.plan(api, host, slices, acting)
    existing = json.loads(checked(run, ["kubectl", "get", "devicetaintrules", "-o", "json", "-l",
                                        f"{device_taints.NODE_LABEL}={host}"])).get("items", [])
    have = {item["metadata"]["name"] for item in existing}
    done: list[str] = []
    for name, rule in wanted.items():
        if name in have:
            continue
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
            json.dump(rule, handle)
        try:
            checked(run, ["kubectl", "apply", "-f", handle.name])
        finally:
            os.unlink(handle.name)
        done.append(device_taints.tainted(rule))
    for name in sorted(have - set(wanted)):
        checked(run, ["kubectl", "delete", "devicetaintrule", name])
        done.append(device_taints.untainted(name))
    return rest, done
