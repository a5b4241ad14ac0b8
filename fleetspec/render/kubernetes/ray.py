"""Example workloads in the rendered docs: a RayJob per tenant and NVIDIA partition, queued
through whichever engine owns quota, and a ComputeDomain where the partition is an NVLink
domain. Users copy them; fleetspec never applies them (``kubernetes/examples/``).

Each RayJob names its queue the way its engine reads it (Kueue: the LocalQueue label
``kueue.x-k8s.io/queue-name``; Volcano: ``ray.io/scheduler-name: volcano`` and
``volcano.sh/queue-name``; KAI: ``kai.scheduler/queue`` plus the partition label that
picks the scheduling shard), selects the partition's nodes, and asks for whole nodes'
GPUs (``nvidia.com/gpu``, or the partition's ResourceClaimTemplate with ``dra.gpus``).
The whole Ray cluster is admitted or scheduled as one gang by that engine.
Image: ``rayproject/ray:2.50.1-gpu``, the Ray release KubeRay's own v1.7 samples use
(ray-operator/config/samples/ray-cluster.kai-scheduler.yaml), GPU variant.
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any

from fleetspec.compile.ir import Fleet
from fleetspec.layout.kubernetes import kubernetes_nodes, kubernetes_partitions, mirrored_values
from fleetspec.render.kubernetes import common as k8s
from fleetspec.render.kubernetes import dra, kai, mig, operators

RAY_IMAGE = "docker.io/rayproject/ray:2.50.1-gpu"  # fully named: a registry mirror can take it
# Marks the workers of one example job's ComputeDomain, for their rack affinity.
COMPUTE_DOMAIN_LABEL = "fleetspec.io/compute-domain"
MAX_WORKERS = 2  # an example, not a benchmark: two nodes show the gang


def example_objects(fleet: Fleet) -> dict[str, list[dict[str, Any]]]:
    """``{file stem: [objects]}`` under ``kubernetes/examples/``."""
    cfg = fleet.kubernetes
    if cfg is None or not cfg.ray_version:
        return {}
    engine = operators.ray_gang_engine(fleet)
    parts = {p.name: p for p in kubernetes_partitions(fleet) if p.vendor == "nvidia"}
    per_node = {n.partition: n.gpu.count for n in kubernetes_nodes(fleet)}
    nvl = set(dra.nvl_partitions(fleet)) if cfg.dra_nvidia_version else set()
    dra_gpus = {p.name for p in dra.dra_gpu_partitions(fleet)}
    # The example's workers take whole GPUs; a MIG or time-sliced partition's GPUs are
    # instances or replicas (docs/mig.md), so it gets no example.
    shared = set(mig.partition_resources(fleet))
    out: dict[str, list[dict[str, Any]]] = {}
    for row in k8s.queue_rows(fleet):
        if row.partition not in parts or row.gpus == 0 or row.partition in shared:
            continue
        ns = row.namespaces[0]
        gpus = per_node[row.partition]
        workers = max(1, min(MAX_WORKERS, row.gpus // gpus))
        name = f"{row.name}-ray"[:63]
        objs: list[dict[str, Any]] = []
        channel = None
        if row.partition in nvl:
            channel = f"{name}-imex"
            objs.append(k8s.obj("resource.nvidia.com/v1beta1", "ComputeDomain", name, {
                "numNodes": 0,
                "channel": {"resourceClaimTemplate": {"name": channel}},
            }, namespace=ns))
        objs.append(_rayjob(fleet, engine, name, ns, row.name, row.partition, gpus, workers,
                            row.partition in dra_gpus, channel))
        out[f"{row.name}-rayjob"] = objs
    return out


def _rayjob(fleet: Fleet, engine: str | None, name: str, ns: str, queue: str, partition: str,
            gpus: int, workers: int, dra_gpus: bool, channel: str | None) -> dict[str, Any]:
    labels: dict[str, str] = {}
    if engine == "kueue":
        labels["kueue.x-k8s.io/queue-name"] = partition  # the LocalQueue in this namespace
    elif engine == "volcano":
        labels.update({"ray.io/scheduler-name": "volcano", "volcano.sh/queue-name": queue})
    elif engine == "kai":
        labels.update(kai.kai_queue_labels(queue, partition))
    worker_container: dict[str, Any] = {
        "name": "ray-worker", "image": RAY_IMAGE,
        "resources": {"requests": {"cpu": "8", "memory": "64Gi"},
                      "limits": {"cpu": "8", "memory": "64Gi"}},
    }
    claims: list[dict[str, Any]] = []
    if dra_gpus:
        claims.append({"name": "gpus",
                       "resourceClaimTemplateName": dra.claim_template(partition)})
    else:
        worker_container["resources"]["limits"][k8s.GPU_RESOURCE["nvidia"]] = gpus
    if channel:
        claims.append({"name": "imex", "resourceClaimTemplateName": channel})
    if claims:
        worker_container["resources"]["claims"] = [{"name": c["name"]} for c in claims]
    worker_pod: dict[str, Any] = {
        "nodeSelector": {k8s.PARTITION_LABEL: partition},
        "tolerations": [{"key": k8s.GPU_RESOURCE["nvidia"], "operator": "Exists",
                         "effect": "NoSchedule"}],
        "containers": [worker_container],
    }
    if claims:
        worker_pod["resourceClaims"] = claims
    if channel:
        # One ComputeDomain never straddles NVLink domains: every worker of the job in the
        # rack of the first (required pod affinity on the rack label; Kueue cannot place a
        # DRA workload by topology: "No DRA + Topology Aware Scheduling").
        worker_pod["affinity"] = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
            "labelSelector": {"matchLabels": {COMPUTE_DOMAIN_LABEL: name}}, "topologyKey": k8s.RACK_LABEL}]}}
    head_pod = {"containers": [{
        "name": "ray-head", "image": RAY_IMAGE,
        "resources": {"requests": {"cpu": "2", "memory": "8Gi"},
                      "limits": {"cpu": "2", "memory": "8Gi"}}}]}
    # KAI's pod-grouper takes the queue from the top owner; the pods carry it too.
    def meta(extra: dict[str, str] | None = None) -> dict[str, Any]:  # a fresh dict per template: no YAML anchors
        pod_labels = {**(labels if engine == "kai" else {}), **(extra or {})}
        return {"metadata": {"labels": pod_labels}} if pod_labels else {}
    spec = {
        "entrypoint": "python -c \"import ray; ray.init(); print(ray.cluster_resources())\"",
        "shutdownAfterJobFinishes": True,
        "ttlSecondsAfterFinished": 600,
        "rayClusterSpec": {
            "headGroupSpec": {"rayStartParams": {},
                              "template": {**meta(), "spec": head_pod}},
            "workerGroupSpecs": [{
                "groupName": "gpu",
                "replicas": workers, "minReplicas": workers, "maxReplicas": workers,
                "rayStartParams": {},
                "template": {**meta({COMPUTE_DOMAIN_LABEL: name} if channel else None), "spec": worker_pod},
            }],
        },
    }
    if engine == "kueue":
        spec["suspend"] = True  # Kueue unsuspends it on admission
    return k8s.obj("ray.io/v1", "RayJob", name, spec, namespace=ns, labels=labels)


def render_examples(fleet: Fleet) -> dict[PurePosixPath, str]:
    base = PurePosixPath("kubernetes") / "examples"
    return {base / f"{stem}.yaml": k8s.HEADER + k8s.dump_all(mirrored_values(objs, fleet.registry_mirror))
            for stem, objs in sorted(example_objects(fleet).items())}
