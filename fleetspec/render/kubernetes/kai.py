"""NVIDIA's KAI Scheduler from the fleet's tenants: ``kubernetes.queueing: kai``.

What KAI does with the objects rendered here (KAI Scheduler v0.17.0, docs in the repository,
the CRDs in tests/data/crds/kai-scheduler):

* **One scheduling shard per partition.** The chart's ``global.nodePoolLabelKey`` is set to
  ``fleetspec.io/partition``; a ``SchedulingShard`` per NVIDIA partition has that partition
  as its ``partitionLabelValue``. Each shard runs its own scheduler that sees only the nodes,
  queues and PodGroups labelled with its partition (docs/operator/scheduling-shards.md), so
  a queue's quota is quota on that one partition: one job, one generation.
* **Queues, two levels** (docs/queues/README.md: only leaf queues take jobs): a parent per
  partition, ``<fleet>-<partition>``, capped at the partition's GPUs, and under it a child
  per tenant with quota on it, ``<tenant>-<partition>`` (the Kueue ClusterQueue's name):
  ``quota`` the tenant's GPUs, ``overQuotaWeight`` its share of idle GPUs, ``limit`` its cap
  (-1: none). Without tenants one child, named after the partition, holds the partition.
  CPU and memory are unlimited (-1): quota is in GPUs, as with Kueue.
* **Gang scheduling** is KAI's own: its pod-grouper makes a PodGroup per workload (Job,
  JobSet, RayJob, ...) and schedules it all-or-nothing; nothing to render.
* **Topology**: a ``Topology`` (kai.scheduler/v1alpha1) with the fabric's levels (leaf,
  rack/NVLink domain, host), the same levels as Kueue's; workloads name it in
  ``kai.scheduler/topology`` annotations or PodGroup ``topologyConstraint``.

KAI queue quota counts ``nvidia.com/gpu`` (and MIG) only: its Queue has fixed cpu/gpu/memory
fields (docs/queues/README.md; arbitrary resources are only a proposal,
docs/developer/designs/accounted-resource-api.md). AMD partitions therefore get no KAI
queue, and the ``quota-engine-coverage`` rule refuses tenant quota on them under KAI.

**MIG and time-slicing** (#46): KAI's ``gpu`` is not a count of boards. A MIG instance
counts as its compute slices (``nvidia.com/mig-3g.71gb`` is 3: catalog/mig.py
``kai_gpus`` cites KAI's code), a time-sliced replica as one ``nvidia.com/gpu``. A tenant's
quota of N GPUs on such a partition is therefore N times what one of its GPUs counts (7
for an H200 of all-balanced, 6 for all-3g.71gb, 4 replicas for time_slicing: 4), the same
GPUs Kueue and Volcano give it in instances. A partition with a ``+me`` profile, which
KAI counts as 0, gets no queue and the rule refuses its quota.
"""

from __future__ import annotations

from typing import Any

from fleetspec.catalog import mig as catalog_mig
from fleetspec.compile.ir import Fleet, Partition
from fleetspec.layout.kubernetes import kubernetes_nodes, kubernetes_partitions
from fleetspec.render.kubernetes import common as k8s

KAI_CHART = "oci://ghcr.io/kai-scheduler/kai-scheduler/kai-scheduler"  # README, Installation
KAI_DEFAULT_VERSION = "v0.17.0"  # the release whose CRDs are in tests/data/crds/kai-scheduler
KAI_NAMESPACE = "kai-scheduler"
KAI_SCHEDULER_NAME = "kai-scheduler"  # the pods' schedulerName
KAI_RELEASE = "kai-scheduler"  # the Helm release (README, Installation: helm upgrade -i kai-scheduler -n kai-scheduler)
KAI_QUEUE_LABEL = "kai.scheduler/queue"  # values.yaml podgrouper.queueLabelKey
QUEUE_API = "scheduling.run.ai/v2"
UNLIMITED = {"quota": -1, "limit": -1, "overQuotaWeight": 1}


def kai_partitions(fleet: Fleet) -> tuple[Partition, ...]:
    """The partitions KAI can hold quota on: Kubernetes-owned, NVIDIA, and GPUs KAI can count."""
    units = gpu_units(fleet)
    return tuple(p for p in kubernetes_partitions(fleet) if p.vendor == "nvidia" and units.get(p.name))


def gpu_units(fleet: Fleet) -> dict[str, int | None]:
    """Per Kubernetes-owned partition: what one of its GPUs counts in a KAI queue's ``gpu``
    quota (1 whole, the time-slicing replicas, or the MIG geometry's compute slices); None
    where KAI cannot count its instances. One geometry per partition (compile/mig.py)."""
    by_host = {n.hostname: n for n in kubernetes_nodes(fleet)}
    out: dict[str, int | None] = {}
    for p in kubernetes_partitions(fleet):
        node = next((by_host[h] for h in p.nodes if h in by_host), None)
        if node is not None and node.mig:
            out[p.name] = catalog_mig.kai_gpus(node.mig)
        else:
            out[p.name] = node.time_slicing if node is not None and node.time_slicing else 1
    return out


def parent_queue_name(fleet: Fleet, partition: str) -> str:
    return f"{fleet.name}-{partition}"


def kai(fleet: Fleet, holds_quota: bool, label_keys: tuple[str, ...]):
    """([release], [objects]) for KAI when it queues, gang-schedules or holds quota."""
    cfg = fleet.kubernetes
    assert cfg is not None
    if "kai" not in (cfg.queueing, cfg.gang) and not holds_quota:
        return [], []
    ns = KAI_NAMESPACE
    values: dict[str, Any] = {}
    if holds_quota:
        values = {
            "global": {"nodePoolLabelKey": k8s.PARTITION_LABEL},
            # Every GPU workload names a fleetspec queue; no catch-all queue outside quota.
            "defaultQueue": {"createDefaultQueue": False},
        }
    release = k8s.HelmRelease(
        name=KAI_RELEASE,
        namespace=ns,
        chart=KAI_CHART,
        repo=None,
        version=k8s.v_prefixed(cfg.kai_version or KAI_DEFAULT_VERSION),
        values=values,
        depends_on=(k8s.namespace_key(ns),),
    )
    if not holds_quota:
        return [release], []
    rk = release.key
    objs: list[k8s.Manifest] = []
    topo = k8s.Manifest(
        k8s.obj("kai.scheduler/v1alpha1", "Topology", f"{fleet.name}-fabric",
                 {"levels": [{"nodeLabel": lvl} for lvl in k8s.kueue_topology_levels(fleet)]}),
        "20-kai-topology", (rk,))
    objs.append(topo)
    parts = {p.name: p for p in kai_partitions(fleet)}
    for name in sorted(parts):
        objs.append(k8s.Manifest(
            k8s.obj("kai.scheduler/v1", "SchedulingShard", name,
                     {"partitionLabelValue": name},
                     labels={k8s.PARTITION_LABEL: name}),
            "21-kai-shards", (rk, *label_keys)))
    units = gpu_units(fleet)
    rows = _rows(fleet, parts, units)
    parent_keys: dict[str, str] = {}
    for name in sorted({r[1] for r in rows}):
        gpus = parts[name].gpus * (units[name] or 0)
        parent = k8s.Manifest(
            k8s.obj(QUEUE_API, "Queue", parent_queue_name(fleet, name), {
                "displayName": f"{name} (all tenants)",
                "resources": {
                    "gpu": {"quota": gpus, "limit": gpus, "overQuotaWeight": 1},
                    "cpu": dict(UNLIMITED), "memory": dict(UNLIMITED)},
            }, labels={k8s.PARTITION_LABEL: name}),
            "22-kai-queues", (rk,))
        parent_keys[name] = parent.key
        objs.append(parent)
    for queue, partition, gpu, who in rows:
        objs.append(k8s.Manifest(
            k8s.obj(QUEUE_API, "Queue", queue, {
                "displayName": f"{who} on {partition}",
                "parentQueue": parent_queue_name(fleet, partition),
                "resources": {"gpu": gpu, "cpu": dict(UNLIMITED), "memory": dict(UNLIMITED)},
            }, labels={k8s.PARTITION_LABEL: partition}),
            "22-kai-queues", (rk, parent_keys[partition])))
    return [release], objs


def _rows(fleet: Fleet, parts: dict[str, Partition], units: dict[str, int | None]
          ) -> list[tuple[str, str, dict[str, int], str]]:
    """(leaf queue, partition, gpu terms, who) per tenant and KAI partition it has quota on
    (the names of ``queue_rows``), or per partition without tenants. The spec's GPUs times
    what one GPU of the partition counts to KAI (``gpu_units``)."""
    cfg = fleet.kubernetes
    assert cfg is not None
    if not cfg.tenants:
        return [(p, p, {"quota": parts[p].gpus * (units[p] or 0), "limit": -1, "overQuotaWeight": 1}, "all")
                for p in sorted(parts)]
    rows = []
    for t in sorted(cfg.tenants, key=lambda t: t.name):
        limits = dict(t.limit)
        for p, gpus in t.quota:
            if p in parts:
                per_gpu = units[p] or 0
                limit = limits.get(p, -1)
                rows.append((f"{t.name}-{p}", p, {"quota": gpus * per_gpu,
                                                   "limit": limit * per_gpu if limit >= 0 else -1,
                                                   "overQuotaWeight": t.over_quota_weight},
                             t.name))
    return rows


def kai_queue_labels(queue: str, partition: str) -> dict[str, str]:
    """The labels a workload carries to run in ``queue`` on ``partition`` under KAI: the
    queue, and the partition that picks the scheduling shard."""
    return {KAI_QUEUE_LABEL: queue, k8s.PARTITION_LABEL: partition}
