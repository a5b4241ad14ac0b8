"""The in-cluster remediator: node-problem-detector's ``GPUProblem`` condition to cordon,
drain through the Eviction API, and uncordon. Stdlib only (Python 3.8 syntax).

Run by the ``fleetspec-health-remediator`` CronJob (``kubernetes/manifests/30-health.yaml``)
in the official ``python`` image, its modules from a ConfigMap, with a ServiceAccount that
may read and patch Nodes, list Pods and create ``pods/eviction``. Each run:

- a GPU node (``--selector``) whose ``GPUProblem`` condition is ``True`` (the node check,
  run by NPD, found a fault whose action is not ``none``) is cordoned and annotated
  ``fleetspec.io/drain-reason: fleetspec-health: <the condition's message>``; then every pod
  on it that is not a DaemonSet's or a mirror pod is evicted (a pod no controller manages is
  left and named, as kubectl drain leaves it without --force) (``POST
  .../pods/NAME/eviction``, policy/v1): PodDisruptionBudgets hold (the API answers 429 and
  the pod stays until the next run), terminationGracePeriodSeconds is honoured;
- a node cordoned with such an annotation whose ``GPUProblem`` is ``False`` again is
  uncordoned and the annotation removed;
- a node cordoned by anyone else (no annotation of ours) is left alone, as on Slurm;
- on a DRA-managed pool (``--dra-partitions``, with ``--taint-api`` the DeviceTaintRule
  apiVersion the renderer chose for the cluster's Kubernetes version), the GPUs the message's
  ``[devices: ...]`` list names (the node check's ``quarantine-device`` faults) are tainted
  with the DeviceTaintRule ``fleetspec health --remediate`` writes
  (``fleetspec.node_side.device_taints.plan``, the same decision), and the node is cordoned
  only for what is left: a node-level fault, or a GPU its ResourceSlices do not show. A
  rule whose device is no longer listed (the condition ``False``, or other devices) is
  deleted; ``Unknown`` changes nothing;
- a MIG node (``nvidia.com/mig.config`` set: the GPU Operator's MIG manager owns its
  geometry) that we cordoned is released only after the MIG manager has re-applied its
  geometry (``--mig-manager-namespace``, the GPU Operator's namespace): a GPU reset destroys
  the instances (NVIDIA MIG user guide, *Getting Started*: "the created MIG devices are not
  persistent ... recreate the desired MIG configurations if the GPU or system is reset"), and
  the node's fault ends (GPUProblem False) exactly when a reset, a reboot or ``--clear`` ended
  it. See ``remake_mig``;
- the blast-radius limit (``--min-healthy``, spec.health.min_healthy, ``min_healthy``): while
  fewer of the selected nodes than that are healthy (``GPUProblem`` False) and some are sick,
  no sick node is acted on (cordons and taints in place stay, nothing new is evicted), a
  recovered node is still released, one line says so and the run exits 1.

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

from fleetspec.node_side import device_taints, min_healthy
from fleetspec.node_side.contract import DEVICE_ACTIONS, PARTITION_LABEL
from fleetspec.node_side.contract import DRAIN_REASON as ANNOTATION

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

    def ok(self, method: str, path: str, body: Any = None, accept: Tuple[int, ...] = ()) -> Any:
        code, got = self.call(method, path, body)
        if not (200 <= code < 300 or code in accept):
            raise RuntimeError("%s %s: %d %s" % (method, path, code, got.get("message", "")))
        return got

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
        if not any(o.get("controller") for o in meta.get("ownerReferences") or []):
            # kubectl drain (the --remediate path) refuses these without --force: nothing would
            # recreate the pod (kubectl/pkg/drain/filters.go, unreplicatedFilter)
            held.append("%s/%s: declares no controller, nothing would recreate it (kubectl drain refuses it "
                        "without --force): move or delete it" % (meta.get("namespace"), meta.get("name")))
            continue
        path = "/api/v1/namespaces/%s/pods/%s/eviction" % (urllib.parse.quote(meta["namespace"]),
                                                            urllib.parse.quote(meta["name"]))
        code, body = api.call("POST", path, {"apiVersion": "policy/v1", "kind": "Eviction",
                                             "metadata": {"name": meta["name"], "namespace": meta["namespace"]}})
        if 200 <= code < 300 or code == 404:  # 404: gone already
            done += 1
        else:
            held.append("%s/%s: %d %s" % (meta["namespace"], meta["name"], code, body.get("message", "")))
    return done, held


def taint_devices(api: Api, taint_api: str, node: str, faults: List[Dict[str, Any]]
                  ) -> Tuple[List[Dict[str, Any]], List[str]]:
    """Make ``node``'s DeviceTaintRules those ``faults`` call for: (faults left for the node
    path, what was done). ResourceSlices are read at resource.k8s.io's preferred version,
    the one kubectl uses (GET /apis/resource.k8s.io, its ``preferredVersion``)."""
    slices: List[Dict[str, Any]] = []
    if faults:
        group = api.get("/apis/resource.k8s.io")["preferredVersion"]["groupVersion"]
        query = urllib.parse.urlencode({"fieldSelector": "spec.nodeName=%s,spec.driver=%s" % (node, device_taints.DRIVER)})
        slices = api.get("/apis/%s/resourceslices?%s" % (group, query)).get("items", [])
    wanted, rest = device_taints.plan(taint_api, node, slices, faults)
    rules = "/apis/%s/devicetaintrules" % taint_api
    query = urllib.parse.urlencode({"labelSelector": "%s=%s" % (device_taints.NODE_LABEL, node)})
    have = {item["metadata"]["name"] for item in api.get(rules + "?" + query).get("items", [])}
    done = []
    for name, rule in wanted.items():
        if name not in have:
            api.ok("POST", rules, rule, accept=(409,))  # 409: another run made it already
            done.append(device_taints.tainted(rule))
    for name in sorted(have - set(wanted)):
        api.ok("DELETE", rules + "/" + urllib.parse.quote(name), accept=(404,))
        done.append(device_taints.untainted(name))
    return rest, done


NOT_ACTED = "not acted on: "

# The GPU Operator's MIG manager (NVIDIA/mig-parted, cmd/nvidia-mig-manager/main.go): it applies
# the node's nvidia.com/mig.config when it starts (the informer's AddFunc) and afterwards only
# when the label's VALUE changes (UpdateFunc compares old and new): setting the same value again
# re-applies nothing. Its script (deployments/gpu-operator/reconfigure-mig.sh) ends every run by
# setting nvidia.com/mig.config.state to success (also when `nvidia-mig-parted assert` finds the
# geometry already applied) or failed. So a re-apply is: state to pending (ours, so an old
# success is never read as the new one), then delete the node's mig-manager pod; its DaemonSet
# starts a new one, which applies the geometry and reports.
MIG_CONFIG_LABEL = "nvidia.com/mig.config"
MIG_STATE_LABEL = "nvidia.com/mig.config.state"
MIG_MANAGER_SELECTOR = "app=nvidia-mig-manager"  # the GPU Operator's mig-manager DaemonSet's pod label
MIG_REAPPLY = "fleetspec.io/mig-reapply"  # on the node while we wait: the mig-manager pod we restarted


def mig_step(meta: Dict[str, Any]) -> Tuple[str, str]:
    """Where a MIG node we cordoned, now healthy, stands (its metadata): ``restart`` (no
    re-apply asked yet), ``wait``, ``release`` (the MIG manager reported success) or
    ``failed``; and the line that says so. Both remediators decide with this."""
    state = (meta.get("labels") or {}).get(MIG_STATE_LABEL, "")
    config = (meta.get("labels") or {}).get(MIG_CONFIG_LABEL, "")
    if MIG_REAPPLY not in (meta.get("annotations") or {}):
        return "restart", ""
    if state == "success":
        return "release", "MIG geometry %s re-applied by the MIG manager (%s=success)" % (config, MIG_STATE_LABEL)
    if state == "failed":
        return "failed", ("the MIG manager failed to re-apply %s (%s=failed): left cordoned, see its pod's log"
                          % (config, MIG_STATE_LABEL))
    return "wait", "left cordoned: waiting for the MIG manager to re-apply %s (%s=%s)" % (
        config, MIG_STATE_LABEL, state or "unset")


def no_mig_manager(namespace: str) -> str:
    return ("no nvidia-mig-manager pod (%s) in namespace %s on this MIG node: nothing would re-apply its geometry "
            "after the GPU reset; left cordoned" % (MIG_MANAGER_SELECTOR, namespace))


def restarted(pods: List[str], config: str) -> str:
    return "left cordoned: MIG manager pod %s restarted to re-apply %s; uncordoned at %s=success" % (
        ", ".join(pods), config, MIG_STATE_LABEL)


def remake_mig(api: Api, node: Dict[str, Any], namespace: str) -> Tuple[bool, str]:
    """Before a MIG node we cordoned is released: (may it be uncordoned now, what was done).
    First pass: MIG_STATE_LABEL to pending, the node's mig-manager pod deleted, MIG_REAPPLY
    set. Later passes: ``success`` releases it; ``failed`` keeps it cordoned (RuntimeError: the
    pass fails, a human looks); anything else waits."""
    meta = node["metadata"]
    step, line = mig_step(meta)
    if step == "failed":
        raise RuntimeError(line)
    if step != "restart":
        return step == "release", line
    query = urllib.parse.urlencode({"labelSelector": MIG_MANAGER_SELECTOR, "fieldSelector": "spec.nodeName=" + meta["name"]})
    pods = api.get("/api/v1/namespaces/%s/pods?%s" % (urllib.parse.quote(namespace), query)).get("items", [])
    if not pods:
        raise RuntimeError(no_mig_manager(namespace))
    names = sorted(p["metadata"]["name"] for p in pods)
    api.patch_node(meta["name"], {"metadata": {"labels": {MIG_STATE_LABEL: "pending"},
                                               "annotations": {MIG_REAPPLY: ",".join(names)}}})
    for pod in names:
        api.ok("DELETE", "/api/v1/namespaces/%s/pods/%s" % (urllib.parse.quote(namespace), urllib.parse.quote(pod)),
               accept=(404,))
    return False, restarted(names, meta["labels"][MIG_CONFIG_LABEL])


def reconcile(api: Api, selector: str, dra_partitions: Tuple[str, ...] = (), taint_api: Optional[str] = None,
              partition_label: str = PARTITION_LABEL, healthy_floor: str = min_healthy.DEFAULT,
              mig_namespace: Optional[str] = None) -> List[str]:
    """One pass over the GPU nodes; returns what was done, one line per action. A node the
    API refuses (deleted since the list, a webhook, RBAC) gets a ``NODE: not acted on: ...``
    line and the pass goes on with the others; one that does not answer at all (OSError)
    ends the pass there, what was done before it still returned. Fewer healthy nodes (``GPUProblem`` False) than
    ``healthy_floor`` (spec.health.min_healthy) while some are sick: the first line is the
    ``HELD`` line, no sick node is acted on (what is in place stays), recovered ones are
    still released."""
    nodes = api.get("/api/v1/nodes?" + urllib.parse.urlencode({"labelSelector": selector})).get("items", [])
    status = {n["metadata"]["name"]: (condition(n) or {}).get("status") for n in nodes}
    held = min_healthy.hold(healthy_floor, len(nodes), sum(s == "False" for s in status.values()),
                            sum(s == "True" for s in status.values()))
    out = [held] if held else []  # type: List[str]
    for i, node in enumerate(nodes):
        name = node["metadata"]["name"]
        if held and status[name] == "True":
            continue  # the limit: nothing new on a sick node, and what is in place stays
        lines = []  # type: List[str]
        try:
            _reconcile_node(api, node, dra_partitions, taint_api, partition_label, lines, mig_namespace)
        except (RuntimeError, ValueError) as exc:
            lines.append(NOT_ACTED + str(exc))
        except OSError as exc:  # no answer at all (a restart, a reset, a timeout): the pass stops
            lines.append(NOT_ACTED + "the API server did not answer (%s)" % (exc,))
            out += ["%s: %s" % (name, line) for line in lines]
            rest = [n["metadata"]["name"] for n in nodes[i + 1:]]
            if rest:  # each would wait out its own timeout (30 s) while the Job's deadline runs
                out.append("%s: %snot reached, the pass stopped at %s; the next run goes on"
                           % (",".join(rest), NOT_ACTED, name))
            return out
        out += ["%s: %s" % (name, line) for line in lines]
    return out


def _reconcile_node(api: Api, node: Dict[str, Any], dra_partitions: Tuple[str, ...], taint_api: Optional[str],
                    partition_label: str, out: List[str], mig_namespace: Optional[str] = None) -> None:
    """One node; what was done goes to ``out`` as it happens (RuntimeError when the API refuses)."""
    name = node["metadata"]["name"]
    cond = condition(node)
    status = cond.get("status") if cond is not None else None
    message = (cond.get("message") or cond.get("reason") or "GPU fault").strip() if status == "True" else ""
    node_path = status == "True"
    dra = taint_api and (node["metadata"].get("labels") or {}).get(partition_label) in dra_partitions
    if dra and status in ("True", "False"):
        faults = device_taints.npd_faults(message) if status == "True" else []
        if faults is not None:
            try:
                rest, done = taint_devices(api, str(taint_api), name, faults)
                out += done
                # the node path only for a node-level fault or a GPU no slice shows
                node_path = status == "True" and (message.split(" ", 1)[0] not in DEVICE_ACTIONS or bool(rest))
            except RuntimeError as exc:
                out.append("device taints not applied (%s): the node path instead" % exc)
    cordoned = bool(node.get("spec", {}).get("unschedulable"))
    current = (node["metadata"].get("annotations") or {}).get(ANNOTATION, "")
    ours = current.startswith(LEADER)
    if node_path:
        if cordoned and not ours:
            out.append("left cordoned by someone else (%s)" % (current or "no reason given"))
            return
        wanted = "%s %s" % (LEADER, message[:200])
        waiting = MIG_REAPPLY in (node["metadata"].get("annotations") or {})  # sick again meanwhile: a new re-apply later
        if not cordoned or current != wanted or waiting:
            api.patch_node(name, {"spec": {"unschedulable": True},
                                  "metadata": {"annotations": {ANNOTATION: wanted, MIG_REAPPLY: None}}})
        done, held = drain(api, name)
        line = "cordoned (%s); %d pod(s) evicted" % (wanted, done)
        if held:
            line += "; held until the next run: " + "; ".join(held)
        out.append(line)
    elif cordoned and ours and status in ("True", "False"):
        if mig_namespace and (node["metadata"].get("labels") or {}).get(MIG_CONFIG_LABEL):
            release, line = remake_mig(api, node, mig_namespace)
            out.append(line)
            if not release:
                return
        api.patch_node(name, {"spec": {"unschedulable": False},
                              "metadata": {"annotations": {ANNOTATION: None, MIG_REAPPLY: None}}})
        out.append("uncordoned (was: %s)" % current)


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
    parser.add_argument("--dra-partitions", default="",
                        help="comma-separated partition label values of DRA-managed pools (device taints there)")
    parser.add_argument("--taint-api", help="the DeviceTaintRule apiVersion, e.g. resource.k8s.io/v1beta2")
    parser.add_argument("--min-healthy", default=min_healthy.DEFAULT,
                        help="act on sick nodes only while at least this many of the selected nodes are healthy: "
                             "a count or a percentage (default %(default)s, spec.health.min_healthy)")
    parser.add_argument("--mig-manager-namespace",
                        help="the GPU Operator's namespace: a MIG node we cordoned is released only after its "
                             "MIG manager re-applied the geometry (a GPU reset destroys the instances)")
    args = parser.parse_args(argv)
    try:
        min_healthy.needed(args.min_healthy, 0)  # a bad value is refused before anything is read
        api = Api(args.server) if args.server else in_cluster()
        dra = tuple(p for p in args.dra_partitions.split(",") if p)
        lines = reconcile(api, args.selector, dra, args.taint_api, healthy_floor=args.min_healthy,
                          mig_namespace=args.mig_manager_namespace)
    except (RuntimeError, OSError, ValueError) as exc:
        sys.stderr.write("fleetspec-health-remediator: %s\n" % exc)
        return 1
    for line in lines:
        sys.stdout.write(line + "\n")
    held = bool(lines) and lines[0].startswith(min_healthy.HELD)
    return 1 if held or any(line.split(": ", 1)[-1].startswith(NOT_ACTED) for line in lines) else 0


if __name__ == "__main__":
    sys.exit(main())
