"""The in-cluster remediator: node-problem-detector's ``GPUProblem`` condition to cordon,
drain through the Eviction API, and uncordon. Stdlib only (Python 3.8 syntax).

Run by the ``fleetspec-health-remediator`` CronJob (``kubernetes/manifests/30-health.yaml``)
in the official ``python`` image, its modules from a ConfigMap, with a ServiceAccount that
may read and patch Nodes, list Pods and create ``pods/eviction``. Each run:

- a GPU node (``--selector``) whose ``GPUProblem`` condition is ``True`` (the node check,
  run by NPD, found a fault whose action is not ``none``) is cordoned and annotated
  ``fleetspec.io/drain-reason: fleetspec-health: <the condition's message>``; then every pod
  on it that is not a DaemonSet's or a mirror pod is evicted (``POST
  .../pods/NAME/eviction``, policy/v1): PodDisruptionBudgets hold (the API answers 429 and
  the pod stays until the next run), terminationGracePeriodSeconds is honoured;
- a node cordoned with such an annotation whose ``GPUProblem`` is ``False`` again is
  uncordoned and the annotation removed;
- a node cordoned by anyone else (no annotation of ours) is left alone, as on Slurm.

Source: https://kubernetes.io/docs/concepts/scheduling-eviction/api-eviction/ (the Eviction
API, 429 when a PodDisruptionBudget forbids it); NPD docs/custom_plugin_monitor.md (the
condition a custom plugin sets, its message the plugin's output).
"""

import argparse
import json
import os
import ssl
import sys
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Dict, List, Optional, Tuple

ANNOTATION = "fleetspec.io/drain-reason"
LEADER = "fleetspec-health:"
CONDITION = "GPUProblem"
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


class Api(object):
    """The few Kubernetes API calls the remediator makes, over HTTPS with the pod's token."""

    def __init__(self, server: str, token: Optional[str] = None, ca_file: Optional[str] = None) -> None:
        self.server = server.rstrip("/")
        self.token = token
        self.context = ssl.create_default_context(cafile=ca_file) if server.startswith("https") else None

    def call(self, method: str, path: str, body: Any = None,
             content_type: str = "application/json") -> Tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.server + path, data=data, method=method)
        request.add_header("Accept", "application/json")
        if data is not None:
            request.add_header("Content-Type", content_type)
        if self.token:
            request.add_header("Authorization", "Bearer " + self.token)
        try:
            with urllib.request.urlopen(request, timeout=30, context=self.context) as response:
                return response.status, json.loads(response.read().decode() or "{}")
        except urllib.error.HTTPError as exc:
            text = exc.read().decode("utf-8", "replace")
            try:
                return exc.code, json.loads(text)
            except ValueError:
                return exc.code, {"message": text[:200]}

    def get(self, path: str) -> Dict[str, Any]:
        code, body = self.call("GET", path)
        if code != 200:
            raise RuntimeError("GET %s: %d %s" % (path, code, body.get("message", "")))
        return body

    def patch_node(self, name: str, patch: Dict[str, Any]) -> None:
        path = "/api/v1/nodes/" + urllib.parse.quote(name)
        code, body = self.call("PATCH", path, patch, "application/merge-patch+json")
        if code != 200:
            raise RuntimeError("PATCH %s: %d %s" % (path, code, body.get("message", "")))


def condition(node: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    for cond in node.get("status", {}).get("conditions") or []:
        if cond.get("type") == CONDITION:
            return cond
    return None


def evictable(pod: Dict[str, Any]) -> bool:
    meta = pod.get("metadata", {})
    if "kubernetes.io/config.mirror" in (meta.get("annotations") or {}):
        return False  # a static pod: the kubelet owns it, the API cannot evict it
    if any(o.get("kind") == "DaemonSet" for o in meta.get("ownerReferences") or []):
        return False  # DaemonSet pods ignore cordons and come back: kubectl drain skips them too
    return pod.get("status", {}).get("phase") not in ("Succeeded", "Failed")


def drain(api: Api, node: str) -> Tuple[int, List[str]]:
    """Evict every evictable pod on ``node``: (evictions accepted, pods still there and why)."""
    query = urllib.parse.urlencode({"fieldSelector": "spec.nodeName=" + node})
    pods = api.get("/api/v1/pods?" + query).get("items", [])
    done, held = 0, []
    for pod in filter(evictable, pods):
        meta = pod["metadata"]
        path = "/api/v1/namespaces/%s/pods/%s/eviction" % (urllib.parse.quote(meta["namespace"]),
                                                            urllib.parse.quote(meta["name"]))
        code, body = api.call("POST", path, {"apiVersion": "policy/v1", "kind": "Eviction",
                                             "metadata": {"name": meta["name"], "namespace": meta["namespace"]}})
        if 200 <= code < 300 or code == 404:  # 404: gone already
            done += 1
        else:
            held.append("%s/%s: %d %s" % (meta["namespace"], meta["name"], code, body.get("message", "")))
    return done, held


def reconcile(api: Api, selector: str) -> List[str]:
    """One pass over the GPU nodes; returns what was done, one line per node acted on."""
    nodes = api.get("/api/v1/nodes?" + urllib.parse.urlencode({"labelSelector": selector})).get("items", [])
    out = []
    for node in nodes:
        name = node["metadata"]["name"]
        cond = condition(node)
        cordoned = bool(node.get("spec", {}).get("unschedulable"))
        current = (node["metadata"].get("annotations") or {}).get(ANNOTATION, "")
        ours = current.startswith(LEADER)
        if cond is not None and cond.get("status") == "True":
            if cordoned and not ours:
                out.append("%s: left cordoned by someone else (%s)" % (name, current or "no reason given"))
                continue
            wanted = "%s %s" % (LEADER, (cond.get("message") or cond.get("reason") or "GPU fault").strip()[:200])
            if not cordoned or current != wanted:
                api.patch_node(name, {"spec": {"unschedulable": True}, "metadata": {"annotations": {ANNOTATION: wanted}}})
            done, held = drain(api, name)
            line = "%s: cordoned (%s); %d pod(s) evicted" % (name, wanted, done)
            if held:
                line += "; held until the next run: " + "; ".join(held)
            out.append(line)
        elif cordoned and ours and cond is not None and cond.get("status") == "False":
            api.patch_node(name, {"spec": {"unschedulable": False}, "metadata": {"annotations": {ANNOTATION: None}}})
            out.append("%s: uncordoned (was: %s)" % (name, current))
    return out


def in_cluster() -> Api:
    host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT", "443")
    if not host:
        raise RuntimeError("not in a cluster (no KUBERNETES_SERVICE_HOST); give --server")
    with open(os.path.join(SA_DIR, "token")) as handle:
        token = handle.read().strip()
    server = "https://%s:%s" % ("[%s]" % host if ":" in host else host, port)
    return Api(server, token, os.path.join(SA_DIR, "ca.crt"))


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description="Cordon and drain GPU nodes whose GPUProblem condition is True.")
    parser.add_argument("--selector", required=True, help="label selector of the GPU nodes to watch")
    parser.add_argument("--server", help="the API server (default: the in-cluster service and token)")
    args = parser.parse_args(argv)
    try:
        api = Api(args.server) if args.server else in_cluster()
        for line in reconcile(api, args.selector):
            sys.stdout.write(line + "\n")
    except (RuntimeError, OSError, ValueError) as exc:
        sys.stderr.write("fleetspec-health-remediator: %s\n" % exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
