"""Node and partition changes: each compared field gets a disruption class and a reason
an SRE can approve or refuse ("driver 580.95.05 -> 580.173.02: kernel module change,
node must drain and reboot").

A node's "before" is its applied record: the per-node record an interrupted apply left
in the state when there is one, else its entry in the last applied fleet. Everything
here is linear in nodes: one dict lookup and one dataclass comparison per node when
nothing changed.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping
from typing import Any

from fleetspec.compile.ir import CpuNode, Fleet, Node, Partition
from fleetspec.node_side.hostlist import compress
from fleetspec.plan.model import Action, Change, Disruption, worst
from fleetspec.state.store import NodeRecord

D = Disruption
COMPONENT_NAMES = {"driver": "driver", "amdgpu": "amdgpu", "cuda": "CUDA", "cudnn": "cuDNN", "nccl": "NCCL",
                   "rocm": "ROCm", "rccl": "RCCL", "dcgm": "DCGM"}
KERNEL_COMPONENTS = ("driver", "amdgpu")
HOST_SHAPE = (("cpus", "CPUs"), ("sockets", "Sockets"), ("cores_per_socket", "CoresPerSocket"),
              ("threads_per_core", "ThreadsPerCore"), ("memory_gb", "memory (GB)"),
              ("real_memory_mb", "RealMemory (MB)"))

Baseline = Mapping[str, tuple[Node, dict[str, str]]]  # host -> (applied node, applied tuple versions)


def baseline(old: Fleet | None, records: Mapping[str, NodeRecord | None]) -> dict[str, tuple[Node, dict[str, str]]]:
    """Each applied node with its applied tuple; ``records`` override the applied fleet."""
    result: dict[str, tuple[Node, dict[str, str]]] = {}
    if old is not None:
        versions = {s.name: s.versions() for s in old.stacks}
        for n in old.nodes:
            result[n.hostname] = (n, versions.get(n.stack, {}))
    for host, record in records.items():
        if record is None:
            result.pop(host, None)
        else:
            result[host] = (record.node, record.stack.versions() if record.stack else {})
    return result


def node_changes(new: Fleet, before: Baseline) -> Iterator[Change]:
    versions = {s.name: s.versions() for s in new.stacks}
    for n in new.nodes:
        after_versions = versions.get(n.stack, {})
        applied = before.get(n.hostname)
        if applied is None:
            yield _created(n, after_versions)
        elif applied[0] != n or applied[1] != after_versions:
            change = _updated(applied[0], applied[1], n, after_versions)
            if change is not None:
                yield change
    for host, (n, old_versions) in before.items():
        if new.node(host) is None:
            yield _deleted(n, old_versions)


def _describe(n: Node, versions: dict[str, str]) -> dict[str, Any]:
    return {"gpu": f"{n.gpu.count}x {n.gpu.model}", "stack": n.stack, "tuple": versions, "partition": n.partition,
            "scheduler": n.scheduler, "rack": n.rack}


def _created(n: Node, versions: dict[str, str]) -> Change:
    if n.scheduler == "slurm":
        disruption, why = D.RESTART_DAEMON, ("new node: slurm.conf gains it, slurmctld and the slurmds restart; "
                                             "it is provisioned before it takes jobs")
    else:
        disruption, why = D.NONE, "new Kubernetes node: provisioned and labelled before it takes pods"
    return Change(f"node:{n.hostname}", Action.CREATE, disruption, None, _describe(n, versions), why,
                  n.partition, n.rack)


def _deleted(n: Node, versions: dict[str, str]) -> Change:
    owner = ("drain it in Slurm, then remove it from slurm.conf (slurmctld and the slurmds restart)"
             if n.scheduler == "slurm" else "cordon and drain it, then delete the Node object")
    return Change(f"node:{n.hostname}", Action.DELETE, D.DRAIN, _describe(n, versions), None,
                  f"node leaves the fleet: {owner}", n.partition, n.rack)


def _updated(old: Node, old_versions: dict[str, str], new: Node, new_versions: dict[str, str]) -> Change | None:
    found = list(_field_changes(old, old_versions, new, new_versions))
    if not found:
        return None
    before = {key: b for key, b, _, _, _ in found}
    after = {key: a for key, _, a, _, _ in found}
    disruption = worst(d for *_, d, _ in found)
    reason = "; ".join(why for *_, why in found)
    return Change(f"node:{new.hostname}", Action.UPDATE, disruption, before, after, reason, new.partition, new.rack)


FieldChange = tuple[str, Any, Any, Disruption, str]


def _split_from(model: str) -> str | None:
    """The catalog id ``model``'s boards had before the catalog named them apart (a100-40gb: a100)."""
    from fleetspec.catalog import load_catalog

    gpu = load_catalog().gpu(model)
    return gpu.split_from if gpu is not None and gpu.id == model else None


def _field_changes(old: Node, old_v: dict[str, str], new: Node, new_v: dict[str, str]) -> Iterator[FieldChange]:
    slurm = new.scheduler == "slurm"
    renamed = old.gpu.model != new.gpu.model and _split_from(new.gpu.model) == old.gpu.model
    if (old.gpu.count, old.gpu.vendor) != (new.gpu.count, new.gpu.vendor) or \
            (old.gpu.model != new.gpu.model and not renamed):
        b, a = f"{old.gpu.count}x {old.gpu.model}", f"{new.gpu.count}x {new.gpu.model}"
        yield "gpu", b, a, D.REPLACE, f"GPU {b} -> {a}: different hardware, the node is replaced " \
                                      f"(drain, remove, provision anew)"
    else:
        if renamed:
            yield ("gpu", old.gpu.model, new.gpu.model, D.RECONFIGURE if slurm else D.NONE,
                   f"GPU {old.gpu.model} -> {new.gpu.model}: the same boards under the catalog's own id for "
                   f"them (#46 named them apart from {old.gpu.model}): labels and features change, the node stays")
        if old.gpu.gres_type != new.gpu.gres_type:
            yield ("gres", old.gpu.gres_type, new.gpu.gres_type, D.RESTART_DAEMON if slurm else D.NONE,
                   f"GRES type {old.gpu.gres_type} -> {new.gpu.gres_type}: gres.conf and slurm.conf change, "
                   f"slurmctld and slurmd restart")
    if old.mig != new.mig and (old.gpu.model, old.gpu.count) == (new.gpu.model, new.gpu.count):
        yield _mig_change(old, new, slurm)
    if old.time_slicing != new.time_slicing:
        b, a = (f"{n.time_slicing} replicas" if n.time_slicing else "not shared" for n in (old, new))
        yield ("sharing", b, a, D.NONE, f"time-slicing {b} -> {a}: the node's nvidia.com/device-plugin.config "
                                        "label changes and the device plugin advertises the new count; running pods "
                                        "keep their GPUs")
    if old.scheduler != new.scheduler:
        yield ("scheduler", old.scheduler, new.scheduler, D.REPLACE,
               f"allocation owner {old.scheduler} -> {new.scheduler}: drained and removed from {old.scheduler}, "
               f"then joined to {new.scheduler}; its {old.scheduler} work ends there (a replace for workloads)")
    yield from _tuple_changes(old_v, new_v, slurm)
    if old.stack != new.stack and old_v == new_v:
        yield ("stack", old.stack, new.stack, D.RESTART_DAEMON if slurm else D.NONE,
               f"stack name {old.stack} -> {new.stack}, same versions: " +
               ("the node's Features in slurm.conf change, slurmd restarts" if slurm else "node labels change"))
    if old.partition != new.partition:
        yield ("partition", old.partition, new.partition, D.RECONFIGURE if slurm else D.NONE,
               f"partition {old.partition} -> {new.partition}: " +
               ("scontrol reconfigure; running jobs stay" if slurm else "its Kueue flavor changes"))
    yield from _placement_changes(old, new, slurm)


def _geometry(n: Node) -> str:
    return ",".join(f"{c}x{p}" for p, c in n.mig) if n.mig else "MIG off"


def _mig_change(old: Node, new: Node, slurm: bool) -> FieldChange:
    """A MIG geometry change (docs/mig.md). Instances can be destroyed and made only on an
    idle GPU, so the node drains; turning MIG mode on or off resets the GPU (NVIDIA's MIG
    user guide, "Enable MIG Mode": the GPU must be idle, and a reset may be needed, which a
    busy NVSwitch system or a driver holding the GPU can refuse): drain and reboot then."""
    b, a = _geometry(old), _geometry(new)
    owner = ("gres.conf and slurm.conf list the new instances, slurmd restarts" if slurm else
             "the MIG manager applies the node's new nvidia.com/mig.config")
    if bool(old.mig) != bool(new.mig):
        return ("mig", b, a, D.DRAIN_REBOOT,
                f"MIG {b} -> {a}: MIG mode changes, the GPU must be idle and reset (a reboot where the "
                f"reset is refused); {owner}")
    return ("mig", b, a, D.DRAIN, f"MIG geometry {b} -> {a}: instances are remade on idle GPUs, drain first; "
                                  f"{owner}")


def _tuple_changes(old_v: dict[str, str], new_v: dict[str, str], slurm: bool) -> Iterator[FieldChange]:
    for key in COMPONENT_NAMES:
        b, a = old_v.get(key), new_v.get(key)
        if b == a:
            continue
        what = f"{COMPONENT_NAMES[key]} {b or '(none)'} -> {a or '(none)'}"
        if key in KERNEL_COMPONENTS:
            how = ("kernel module change, node must drain and reboot" if slurm else
                   "kernel module change: cordon and drain, then the driver is reloaded or the node rebooted")
            yield key, b, a, D.DRAIN_REBOOT, f"{what}: {how}"
        elif slurm:
            yield key, b, a, D.DRAIN, f"{what}: user-space library under running jobs, drain first (no reboot)"
        else:
            yield key, b, a, D.NONE, f"{what}: lives in workload images on Kubernetes nodes, only node labels change"


def _placement_changes(old: Node, new: Node, slurm: bool) -> Iterator[FieldChange]:
    daemon = D.RESTART_DAEMON if slurm else D.NONE
    if old.rack != new.rack:
        yield "rack", old.rack, new.rack, daemon, f"rack {old.rack} -> {new.rack}: " + (
            "slurm.conf Features and topology.conf change, slurmctld and slurmd restart" if slurm
            else "topology labels change")
    for key, label in (("leaf", "leaf switch"), ("nvlink_domain", "NVLink domain")):
        b, a = getattr(old, key), getattr(new, key)
        if b != a and old.rack == new.rack:
            yield key, b, a, D.RECONFIGURE if slurm else D.NONE, f"{label} {b} -> {a}: " + (
                "topology.conf changes, scontrol reconfigure" if slurm else "topology labels change")
    for key, label in HOST_SHAPE:
        b, a = getattr(old, key), getattr(new, key)
        if b != a:
            yield key, b, a, daemon, f"{label} {b} -> {a}: " + (
                "the node's slurm.conf line changes, slurmctld and slurmd restart" if slurm
                else "the kubelet reports capacity itself; nothing restarts")
    if old.features != new.features:
        yield ("features", list(old.features), list(new.features), daemon,
               "node features change: " + ("slurm.conf line changes, slurmctld and slurmd restart" if slurm
                                           else "node labels change"))


def cpu_node_changes(new: Fleet, old: Fleet | None) -> Iterator[Change]:
    """CPU-only nodes (login, service, CPU partitions) created, removed or reshaped: the
    same per-node changes as GPU nodes, without GPU or tuple fields (they have neither)."""
    before = {n.hostname: n for n in old.cpu_nodes} if old is not None else {}
    for n in new.cpu_nodes:
        applied = before.get(n.hostname)
        if applied is None and old is not None and old.node(n.hostname) is not None:
            continue  # was a GPU node: node_changes removes it (drained), that change stands for the host
        if applied is None:
            yield Change(f"node:{n.hostname}", Action.CREATE, D.RESTART_DAEMON, None, _describe_cpu(n),
                         "new CPU node: slurm.conf gains it, slurmctld and the slurmds restart", None, n.rack)
        elif applied != n:
            found = list(_cpu_field_changes(applied, n))
            if found:
                yield Change(f"node:{n.hostname}", Action.UPDATE, worst(d for *_, d, _ in found),
                             {key: b for key, b, _, _, _ in found}, {key: a for key, _, a, _, _ in found},
                             "; ".join(why for *_, why in found), None, n.rack)
    hosts = {n.hostname for n in new.cpu_nodes}
    for host, n in before.items():
        if host not in hosts and new.node(host) is None:
            yield Change(f"node:{host}", Action.DELETE, D.DRAIN, _describe_cpu(n), None,
                         "CPU node leaves the fleet: drain it in Slurm, then remove it from slurm.conf "
                         "(slurmctld and the slurmds restart)", None, n.rack)


def _describe_cpu(n: CpuNode) -> dict[str, Any]:
    shape = {key: getattr(n, key) for key, _ in HOST_SHAPE if getattr(n, key) is not None}
    return {"gpu": "none (CPU node)", "rack": n.rack, **shape, "features": list(n.features)}


def _cpu_field_changes(old: CpuNode, new: CpuNode) -> Iterator[FieldChange]:
    daemon = D.RESTART_DAEMON
    if old.rack != new.rack:
        yield "rack", old.rack, new.rack, daemon, f"rack {old.rack} -> {new.rack}: slurm.conf and topology.conf " \
                                                  "change, slurmctld and slurmd restart"
    for key, label in HOST_SHAPE:
        b, a = getattr(old, key), getattr(new, key)
        if b != a:
            yield key, b, a, daemon, f"{label} {b} -> {a}: the node's slurm.conf line changes, slurmctld and " \
                                     "slurmd restart"
    if old.features != new.features:
        yield ("features", list(old.features), list(new.features), daemon,
               "node features change: slurm.conf line changes, slurmctld and slurmd restart")


PARTITION_SETTINGS = (("default", "Default"), ("max_time", "MaxTime"), ("state", "State"),
                      ("allow_mixed_generations", "mixed generations"), ("scheduler", "owner"))


def partition_changes(new: Fleet, old: Fleet | None) -> Iterator[Change]:
    before = {p.name: p for p in old.partitions} if old else {}
    after = {p.name: p for p in new.partitions}
    for name, p in after.items():
        o = before.get(name)
        if o is None:
            yield Change(f"partition:{name}", Action.CREATE, _partition_class(p), None, _partition_view(p),
                         f"new partition ({len(p.nodes)} nodes): " + _partition_how(p))
        elif o != p:
            change = _partition_update(o, p)
            if change is not None:
                yield change
    for name, o in before.items():
        if name not in after:
            yield Change(f"partition:{name}", Action.DELETE, _partition_class(o), _partition_view(o), None,
                         "partition removed: " + _partition_how(o) + "; jobs still queued in it are rejected")


def partition_digest(p: Partition) -> str:
    """What a limited apply records of a partition it converged (``LimitedApply.converged``)."""
    return hashlib.sha256(json.dumps(_partition_view(p), sort_keys=True, default=str).encode()).hexdigest()


def _partition_class(p: Partition) -> Disruption:
    return D.RECONFIGURE if p.scheduler == "slurm" else D.NONE


def _partition_how(p: Partition) -> str:
    return "scontrol reconfigure" if p.scheduler == "slurm" else "Kueue objects applied in place"


def _partition_view(p: Partition) -> dict[str, Any]:
    return {"nodes": compress(p.nodes), "default": p.default, "max_time": p.max_time, "state": p.state,
            "scheduler": p.scheduler}


def _partition_update(o: Partition, p: Partition) -> Change | None:
    before: dict[str, Any] = {}
    after: dict[str, Any] = {}
    reasons = []
    for key, label in PARTITION_SETTINGS:
        b, a = getattr(o, key), getattr(p, key)
        if b != a:
            before[key], after[key] = b, a
            reasons.append(f"{label} {_show(b)} -> {_show(a)}")
    if o.nodes != p.nodes:
        old_set, new_set = set(o.nodes), set(p.nodes)
        added, removed = sorted(new_set - old_set), sorted(old_set - new_set)
        before["nodes"], after["nodes"] = compress(o.nodes), compress(p.nodes)
        parts = ([f"+{len(added)} ({compress(added)})"] if added else []) + (
            [f"-{len(removed)} ({compress(removed)})"] if removed else [])
        reasons.append("nodes " + " ".join(parts or ["reordered"]))
    if not reasons:
        return None  # only derived fields (GPU counts, stacks) moved: the node changes say why
    suffix = ("running jobs keep their limits" if p.scheduler == "slurm" else "running workloads stay")
    return Change(f"partition:{p.name}", Action.UPDATE, _partition_class(p), before, after,
                  ", ".join(reasons) + f": {_partition_how(p)}; {suffix}")


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return "YES" if value else "NO"
    return "(unset)" if value is None else str(value)


def residual_changes(new: Fleet, old: Fleet | None) -> Iterator[Change]:
    """IR differences no node, partition or rendered file shows (kept in state all the same)."""
    if old is None or new == old:
        return
    before, after = old.to_dict(), new.to_dict()
    for key in after:
        if before.get(key) != after[key]:
            yield Change(f"fleet:{key}", Action.UPDATE, D.NONE, before.get(key), after[key],
                         f"'{key}' changes in the recorded fleet; nothing on the nodes changes")

