"""The labels each node's kubelet registers its Node with (``--node-labels``).

A node that is deleted and rejoins comes back as a new Node object carrying only what its
kubelet registers; fleetspec's labels (the Pulumi stack's ``NodePatch``) would be missing
until the next apply. So the node layer also hands the same labels to kubelet: they are
the Kubernetes layer's own :attr:`KubernetesLayer.node_labels`, never a second list.

kubelet applies ``--node-labels`` only when it registers the Node (a running node's labels
are the stack's to change): https://kubernetes.io/docs/reference/command-line-tools-reference/kubelet/

A kubelet may set only some labels on its own Node. The NodeRestriction admission plugin
refuses ``node-restriction.kubernetes.io/`` keys and every other ``kubernetes.io``/``k8s.io``
key (subdomains included) except the kubelet's own set, and kubelet itself refuses to start
with such a key in ``--node-labels``:
https://kubernetes.io/docs/reference/access-authn-authz/admission-controllers/#noderestriction
https://github.com/kubernetes/kubernetes/blob/master/staging/src/k8s.io/kubelet/pkg/apis/well_known_labels.go
(``IsKubeletLabel``), plugin/pkg/admission/noderestriction/admission.go (``getForbiddenLabels``)
and cmd/kubelet/app/options/options.go (``ValidateKubeletFlags``: "unknown 'kubernetes.io' or
'k8s.io' labels specified with --node-labels", a start-up failure).
fleetspec's keys (``fleetspec.io/``, ``volcano.sh/``, ``nvidia.com/``) are outside those
namespaces; :func:`kubelet_may_set` keeps it that way should one ever be added there.
"""

from __future__ import annotations

import functools

from fleetspec.compile.ir import Fleet

NODE_RESTRICTION_NAMESPACE = "node-restriction.kubernetes.io"
# k8s.io/kubelet/pkg/apis: kubeletLabels and kubeletLabelNamespaces.
KUBELET_LABELS = frozenset({
    "kubernetes.io/hostname", "topology.kubernetes.io/zone", "topology.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/region",
    "beta.kubernetes.io/instance-type", "node.kubernetes.io/instance-type",
    "kubernetes.io/os", "kubernetes.io/arch", "beta.kubernetes.io/os", "beta.kubernetes.io/arch",
})
KUBELET_LABEL_NAMESPACES = ("kubelet.kubernetes.io", "node.kubernetes.io")


def _in(namespace: str, domain: str) -> bool:
    return namespace == domain or namespace.endswith("." + domain)


@functools.lru_cache(maxsize=1024)  # a few dozen keys, asked once per node and label
def kubelet_may_set(key: str) -> bool:
    """True when a kubelet under NodeRestriction may register its Node with label ``key``."""
    namespace = key.split("/", 1)[0] if "/" in key else ""
    if _in(namespace, NODE_RESTRICTION_NAMESPACE):
        return False
    if _in(namespace, "kubernetes.io") or _in(namespace, "k8s.io"):
        return key in KUBELET_LABELS or any(_in(namespace, ns) for ns in KUBELET_LABEL_NAMESPACES)
    return True


def registration_labels(fleet: Fleet) -> dict[str, str]:
    """``{hostname: "k=v,k=v"}``: the ``--node-labels`` value of every node the Kubernetes
    layer labels, from that layer's own labels; a key kubelet may not set is left to the
    stack alone (kubelet would refuse to start with it)."""
    from fleetspec.render.kubernetes import kubernetes_resources

    return {
        node.hostname: ",".join(f"{k}={v}" for k, v in sorted(node.labels.items()) if kubelet_may_set(k))
        for node in kubernetes_resources(fleet).node_labels
    }
