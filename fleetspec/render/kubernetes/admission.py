"""GPU pods in tenant namespaces go through the engine that holds quota, in their own queues.

Kueue gates every workload of the tenants' namespaces itself (``manageJobsWithoutQueueName``)
and binds a namespace to its ClusterQueues through its LocalQueues. Volcano and KAI Scheduler
do neither, so two ValidatingAdmissionPolicies (GA in Kubernetes 1.30,
admissionregistration.k8s.io/v1) close the gaps:

* **scheduler gate**: a GPU pod that keeps the default scheduler would run outside their
  quota. Bound to the tenants' namespaces, it refuses at creation a pod with a GPU in any
  container, init container or native sidecar (an init container with
  ``restartPolicy: Always``) that does not name the engine's scheduler.
* **queue gate**: their queues are cluster-scoped and neither checks who submits to one, so
  any namespace could spend another tenant's quota. Each object that carries a queue is
  refused unless the queue is one of the tenant's whose label (``fleetspec.io/tenant``)
  its namespace carries; a namespace without that label may use no tenant's queue.
  Volcano: PodGroup and Job ``spec.queue`` (the CRDs default it to ``default``) and the pod
  annotation ``scheduling.volcano.sh/queue-name`` its PodGroup controller copies. KAI:
  PodGroup ``spec.queue`` and the ``kai.scheduler/queue`` label its pod-grouper reads from a
  workload's top owner (any kind, so every namespaced object with that label is checked).
"""

from __future__ import annotations

import json
from typing import NamedTuple

from fleetspec.compile.ir import Fleet
from fleetspec.render.kubernetes import common as k8s
from fleetspec.render.kubernetes import mig
from fleetspec.render.kubernetes.kai import (
    KAI_QUEUE_LABEL,
    KAI_RELEASE,
    KAI_SCHEDULER_NAME,
    kai_partitions,
)
from fleetspec.versions import at_least, parse_version

API = "admissionregistration.k8s.io/v1"
SINCE = "1.30"  # ValidatingAdmissionPolicy GA (KEP-3488)
TENANT_LABEL = k8s.LABEL_PREFIX + "tenant"  # on every tenant namespace (layer._namespaces)
# The engine's scheduler name, the release it comes with, and the GPU resources it counts.
ENGINES = {
    "volcano": ("volcano", "volcano", ("nvidia.com/gpu", "amd.com/gpu")),
    "kai": (KAI_SCHEDULER_NAME, KAI_RELEASE, ("nvidia.com/gpu",)),
}


def scheduler_gate(fleet: Fleet, releases: dict[str, str]) -> list[k8s.Manifest]:
    """The policy and its binding when Volcano or KAI holds quota over tenant namespaces.
    ``releases``: release name -> key (the scheduler runs before pods are sent to it)."""
    cfg = fleet.kubernetes
    if cfg is None or not cfg.tenants or not parse_version(cfg.version) \
            or not at_least(cfg.version, SINCE):
        return []
    owner = next((o for o in cfg.quota_owners if o in ENGINES), None)
    if owner is None or len(cfg.quota_owners) != 1:
        return []
    scheduler, release, resources = ENGINES[owner]
    namespaces = sorted({ns for t in cfg.tenants for ns in t.namespaces})
    gpu = " || ".join(f"'{r}' in c.resources.limits" for r in resources)
    if mig.partition_geometry(fleet):
        # MIG instances are GPUs too (both engines count nvidia.com/mig-<profile>: KAI as
        # its compute slices, kai.py), whatever the profile a pod names.
        gpu += f" || c.resources.limits.exists(r, r.startsWith('{mig.MIG_RESOURCE}'))"
    # Extended resources must be set in limits (requests alone are refused by the API
    # server). Init containers and native sidecars hold their GPUs as containers do.
    has_gpu = f"has(c.resources) && has(c.resources.limits) && ({gpu})"
    asks_gpu = (f"object.spec.containers.exists(c, {has_gpu}) || "
                f"(has(object.spec.initContainers) && "
                f"object.spec.initContainers.exists(c, {has_gpu}))")
    name = f"fleetspec-gpu-pods-use-{scheduler}"
    policy = k8s.Manifest(k8s.obj(API, "ValidatingAdmissionPolicy", name, {
        "failurePolicy": "Fail",
        "matchConstraints": {"resourceRules": [{
            "apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
            "resources": ["pods"]}]},
        "validations": [{
            "expression": f"!({asks_gpu}) || object.spec.schedulerName == '{scheduler}'",
            "message": (f"GPU pods in tenant namespaces are scheduled by {scheduler}, which holds "
                        f"their quota: set schedulerName: {scheduler} and the queue"),
            "reason": "Forbidden",
        }],
    }), "30-admission", tuple(k for k in (releases.get(release),) if k))
    binding = k8s.Manifest(k8s.obj(API, "ValidatingAdmissionPolicyBinding", name, {
        "policyName": name,
        "validationActions": ["Deny"],
        "matchResources": {"namespaceSelector": {"matchExpressions": [{
            "key": "kubernetes.io/metadata.name", "operator": "In", "values": namespaces}]}},
    }), "30-admission", (policy.key, *(k8s.namespace_key(ns) for ns in namespaces)))
    return [policy, binding]


VOLCANO_QUEUE_ANNOTATION = "scheduling.volcano.sh/queue-name"  # Volcano pkg/apis scheduling
_VOLCANO_ANNOTATED = (f"has(object.metadata.annotations) && "
                      f"'{VOLCANO_QUEUE_ANNOTATION}' in object.metadata.annotations")


class Carrier(NamedTuple):
    """Objects that carry a queue: which, and the CEL of the queue they name."""

    suffix: str  # of the policy's name
    rules: tuple[dict, ...]  # resourceRules, less the operations
    queue: str  # CEL: the queue the object names
    label: str | None = None  # only objects with this label (objectSelector)
    condition: str | None = None  # only objects for which this CEL holds (matchConditions)


CARRIERS = {
    "volcano": (
        # spec.queue is defaulted to "default" by both CRDs (tests/data/crds/volcano).
        Carrier("podgroups-jobs", (
            {"apiGroups": ["scheduling.volcano.sh"], "apiVersions": ["*"],
             "resources": ["podgroups"]},
            {"apiGroups": ["batch.volcano.sh"], "apiVersions": ["*"], "resources": ["jobs"]}),
            "has(object.spec.queue) ? object.spec.queue : 'default'"),
        Carrier("pods", ({"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]},),
                f"object.metadata.annotations['{VOLCANO_QUEUE_ANNOTATION}']",
                condition=_VOLCANO_ANNOTATED),
    ),
    "kai": (
        Carrier("podgroups", ({"apiGroups": ["scheduling.run.ai"], "apiVersions": ["*"],
                               "resources": ["podgroups"]},),
                "has(object.spec.queue) ? object.spec.queue : ''"),
        # The pod-grouper reads the label from a workload's top owner, whatever its kind.
        Carrier("labelled", ({"apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*"],
                              "scope": "Namespaced"},),
                f"object.metadata.labels['{KAI_QUEUE_LABEL}']", label=KAI_QUEUE_LABEL),
    ),
}
TENANT = (f"has(namespaceObject.metadata.labels) && '{TENANT_LABEL}' in "
          f"namespaceObject.metadata.labels ? namespaceObject.metadata.labels['{TENANT_LABEL}'] "
          f": ''")
# A tenant's namespace: one of its queues. Any other namespace: no tenant's queue.
QUEUE_RULE = ("variables.tenant in variables.queues ? "
              "variables.queue in variables.queues[variables.tenant] : "
              "!(variables.queue in variables.taken)")


def _cel_literal(value: object) -> str:
    return json.dumps(value, sort_keys=True).replace('"', "'")  # names are DNS labels


def tenant_queues(fleet: Fleet, engine: str) -> dict[str, list[str]]:
    """tenant -> the queues it may submit to under ``engine`` (``<tenant>-<partition>``)."""
    assert fleet.kubernetes is not None
    parts = {p.name for p in kai_partitions(fleet)} if engine == "kai" else None
    rows = k8s.queue_rows(fleet)
    return {t.name: [r.name for r in rows if r.name == f"{t.name}-{r.partition}"
                     and (parts is None or r.partition in parts)]
            for t in sorted(fleet.kubernetes.tenants, key=lambda t: t.name)}


def queue_gate(fleet: Fleet, releases: dict[str, str]) -> list[k8s.Manifest]:
    """A policy and binding per kind of object that carries a Volcano or KAI queue, when that
    engine holds quota over tenants."""
    cfg = fleet.kubernetes
    if cfg is None or not cfg.tenants or not parse_version(cfg.version) \
            or not at_least(cfg.version, SINCE):
        return []
    out: list[k8s.Manifest] = []
    for engine in sorted(set(cfg.quota_owners) & set(CARRIERS)):
        queues = tenant_queues(fleet, engine)
        taken = sorted({q for qs in queues.values() for q in qs})
        release = releases.get(ENGINES[engine][1])
        for carrier in CARRIERS[engine]:
            name = f"fleetspec-{engine}-queues-of-tenant-{carrier.suffix}"
            constraints: dict = {"resourceRules": [
                {**r, "operations": ["CREATE", "UPDATE"]} for r in carrier.rules]}
            if carrier.label:
                constraints["objectSelector"] = {"matchExpressions": [
                    {"key": carrier.label, "operator": "Exists"}]}
            spec: dict = {"failurePolicy": "Fail", "matchConstraints": constraints}
            if carrier.condition:
                spec["matchConditions"] = [{"name": "names-a-queue",
                                            "expression": carrier.condition}]
            spec["variables"] = [
                {"name": "tenant", "expression": TENANT},
                {"name": "queue", "expression": carrier.queue},
                {"name": "queues", "expression": _cel_literal(queues)},
                {"name": "taken", "expression": _cel_literal(taken)},
            ]
            spec["validations"] = [{
                "expression": QUEUE_RULE,
                "messageExpression": (
                    f"variables.tenant != '' ? '{engine} queue ' + variables.queue + "
                    f"' is not one of the queues of tenant ' + variables.tenant + "
                    f"' (<tenant>-<partition>)' : '{engine} queue ' + variables.queue + "
                    f"' belongs to a tenant, and this namespace has no {TENANT_LABEL} label'"),
                "message": (f"{engine} queues are per tenant and partition: in a namespace "
                            f"labelled {TENANT_LABEL}=<tenant> name one of that tenant's "
                            f"queues; other namespaces may use none"),
                "reason": "Forbidden",
            }]
            policy = k8s.Manifest(k8s.obj(API, "ValidatingAdmissionPolicy", name, spec),
                                  "30-admission", tuple(k for k in (release,) if k))
            # Every namespace: one without a tenant label must not use a tenant's queue.
            binding = k8s.Manifest(k8s.obj(API, "ValidatingAdmissionPolicyBinding", name, {
                "policyName": name,
                "validationActions": ["Deny"],
            }), "30-admission", (policy.key,))
            out += [policy, binding]
    return out
