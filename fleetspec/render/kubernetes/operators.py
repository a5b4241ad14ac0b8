"""The workload operators behind the queueing engine's integrations: KubeRay, JobSet and
LeaderWorkerSet, each installed and pinned when the spec names it, and the integrations
Kueue manages narrowed to what is installed.

An integration Kueue is told to manage for an operator that is not installed is at best a
controller waiting for a CRD that never comes, and at worst a surprise when someone installs
that operator by hand outside the stack. So Kueue's ``integrations.frameworks`` lists the
built-in kinds plus exactly the operators this stack installs; the MPI Operator,
AppWrapper and Kubeflow Trainer are not installed by fleetspec and not enabled.

KubeRay gang-schedules through whichever engine owns quota: Kueue admits a RayJob or
RayCluster as one workload (its ``ray.io`` integrations); Volcano and KAI schedule its pods
as a PodGroup when the operator runs with ``batchScheduler.name`` set to them (KubeRay's
chart values; docs.ray.io "KubeRay integration with KAI Scheduler" and "... Volcano").
"""

from __future__ import annotations

from typing import Any

from fleetspec.compile.ir import Fleet
from fleetspec.render.kubernetes import common as k8s
from fleetspec.render.kubernetes.kai import KAI_SCHEDULER_NAME

# https://github.com/ray-project/kuberay helm-chart/kuberay-operator (the CRDs in
# tests/data/crds/kuberay are v1.7.0's)
KUBERAY_REPO = "https://ray-project.github.io/kuberay-helm/"
KUBERAY_DEFAULT_VERSION = "1.7.0"
# https://github.com/kubernetes-sigs/jobset (chart 0.12.0, tests/data/crds/SOURCES.md)
JOBSET_CHART = "oci://registry.k8s.io/jobset/charts/jobset"
JOBSET_VERSION = "0.12.0"
# https://github.com/kubernetes-sigs/lws docs/setup/install.md ("Install with Helm chart")
LWS_CHART = "oci://registry.k8s.io/lws/charts/lws"
LWS_VERSION = "0.9.0"

NAMESPACES = {"kuberay": "kuberay-system", "jobset": "jobset-system",
              "leaderworkerset": "lws-system"}

OPERATOR_FRAMEWORKS = {
    "kuberay": ("ray.io/rayjob", "ray.io/raycluster", "ray.io/rayservice"),
    "jobset": ("jobset.x-k8s.io/jobset",),
    "leaderworkerset": ("leaderworkerset.x-k8s.io/leaderworkerset",),
}
# KubeRay's batchScheduler.name per engine that gang-schedules pods itself.
RAY_BATCH_SCHEDULER = {"volcano": "volcano", "kai": KAI_SCHEDULER_NAME}


def installed_operators(fleet: Fleet) -> tuple[str, ...]:
    cfg = fleet.kubernetes
    if cfg is None:
        return ()
    ray = ("kuberay",) if cfg.ray_version else ()
    return tuple(sorted(set(ray) | set(cfg.integrations)))


def kueue_frameworks(fleet: Fleet) -> list[str]:
    """Kueue ``integrations.frameworks``: built-ins plus the installed operators' kinds."""
    out = list(k8s.KUEUE_BUILTIN_FRAMEWORKS)  # Kubernetes' own kinds, always there
    for op in installed_operators(fleet):
        out.extend(OPERATOR_FRAMEWORKS[op])
    return out


def ray_gang_engine(fleet: Fleet) -> str | None:
    """The engine that gang-schedules Ray pods: the quota owner, else the gang engine."""
    cfg = fleet.kubernetes
    assert cfg is not None
    owners = set(cfg.quota_owners)
    for engine in ("kueue", "volcano", "kai"):
        if engine in owners:
            return engine
    return cfg.gang if cfg.gang in ("kueue", "volcano", "kai") else None


def operators(fleet: Fleet, engine_releases: dict[str, str]):
    """([releases], []) for the operators the spec names. ``engine_releases``: the release
    key of each rendered queueing engine, which a batch-scheduler integration needs first
    (its PodGroup CRD)."""
    cfg = fleet.kubernetes
    assert cfg is not None
    releases = []
    for op in installed_operators(fleet):
        ns = NAMESPACES[op]
        after: tuple[str, ...] = (k8s.namespace_key(ns),)
        values: dict[str, Any] = {}
        if op == "kuberay":
            engine = ray_gang_engine(fleet)
            if engine in RAY_BATCH_SCHEDULER:
                values = {"batchScheduler": {"name": RAY_BATCH_SCHEDULER[engine]}}
                if engine in engine_releases:
                    after += (engine_releases[engine],)
            releases.append(k8s.HelmRelease(
                "kuberay-operator", ns, "kuberay-operator", KUBERAY_REPO,
                k8s.v_stripped(cfg.ray_version or KUBERAY_DEFAULT_VERSION), values, after))
        elif op == "jobset":
            releases.append(k8s.HelmRelease("jobset", ns, JOBSET_CHART, None, JOBSET_VERSION,
                                            values, after))
        elif op == "leaderworkerset":
            releases.append(k8s.HelmRelease("lws", ns, LWS_CHART, None, LWS_VERSION, values,
                                            after))
    return releases, []
