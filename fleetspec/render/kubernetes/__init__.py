"""The Kubernetes layer: Fleet IR -> node labels, Helm releases and objects.

One package, one direction of imports: ``common`` holds what every part shares (the typed
objects, label keys, namespaces, queue rows, the YAML helpers); each engine or feature has
its module (``kai``, ``dra``, ``operators``, ``admission``, ``health``, ``ray``) importing
``common``; ``layer`` assembles them into :func:`kubernetes_resources` and
:func:`render_kubernetes`. Nothing imports ``layer`` but this face and callers above render.
"""

from fleetspec.render.kubernetes.common import (
    ClusterSecret,
    HelmRelease,
    KubernetesLayer,
    Manifest,
    NodeLabels,
    Prerequisite,
)
from fleetspec.render.kubernetes.layer import kubernetes_resources, render_kubernetes

__all__ = ["ClusterSecret", "HelmRelease", "KubernetesLayer", "Manifest", "NodeLabels", "Prerequisite",
           "kubernetes_resources", "render_kubernetes"]
