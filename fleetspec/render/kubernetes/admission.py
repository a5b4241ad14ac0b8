"""GPU pods in tenant namespaces go through the engine that holds quota, or are refused.

Kueue gates every workload of the tenants' namespaces itself (``manageJobsWithoutQueueName``).
Volcano and KAI Scheduler only see pods that name them (``schedulerName``), so a GPU pod that
keeps the default scheduler would run outside their quota. A ValidatingAdmissionPolicy (GA
in Kubernetes 1.30, admissionregistration.k8s.io/v1) bound to the tenants' namespaces
refuses such pods at creation, with a message that says which scheduler to name.
"""

from __future__ import annotations

from fleetspec.compile.ir import Fleet
from fleetspec.render.kubernetes import common as k8s
from fleetspec.render.kubernetes.kai import KAI_RELEASE, KAI_SCHEDULER_NAME
from fleetspec.versions import at_least, parse_version

API = "admissionregistration.k8s.io/v1"
SINCE = "1.30"  # ValidatingAdmissionPolicy GA (KEP-3488)
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
    asks_gpu = ("object.spec.containers.exists(c, has(c.resources.limits) && "
                f"({gpu}))")
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
