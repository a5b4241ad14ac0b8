"""A stand-in Kubernetes API server for the calls the in-cluster remediator makes.

No API server can run on the test machines (DESIGN.md). This one serves, on loopback,
exactly the endpoints ``fleetspec.node_side.k8s_remediator`` uses and answers as
kube-apiserver does:

- ``GET /api/v1/nodes?labelSelector=KEY in (A,B)`` -> a NodeList (set-based selector,
  https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#set-based-requirement);
- ``PATCH /api/v1/nodes/NAME`` with ``application/merge-patch+json`` (RFC 7386: ``null``
  removes a key), anything else 415; a node in ``gone`` (listed, then deleted before the
  patch, as a scale-down does) 404 with kube-apiserver's NotFound Status (``nodes "NAME" not
  found``); a node in ``dropped``: the connection closes with no answer (an API server
  restarting mid-pass, a load balancer in front of it resetting the connection);
- ``GET /api/v1/pods?fieldSelector=spec.nodeName=NAME`` -> a PodList; ``GET
  /api/v1/namespaces/NS/pods?labelSelector=K=V&fieldSelector=spec.nodeName=NAME`` -> that
  namespace's pods matching both; ``DELETE /api/v1/namespaces/NS/pods/NAME`` -> 200 and the pod
  is gone (what its DaemonSet does next is the test's to play), or 404;
- ``POST /api/v1/namespaces/NS/pods/NAME/eviction`` (policy/v1 Eviction) -> 201 and the pod
  is gone, or, for a pod a PodDisruptionBudget protects, 429 with the Status body
  kube-apiserver returns (pkg/registry/core/pod/storage/eviction.go: "Cannot evict pod as
  it would violate the pod's disruption budget.", reason TooManyRequests, cause
  DisruptionBudget); https://kubernetes.io/docs/concepts/scheduling-eviction/api-eviction/.

- DRA (resource.k8s.io), as a 1.36 server with the device-taint API on answers:
  ``GET /apis/resource.k8s.io`` -> the APIGroup discovery document (``preferredVersion`` v1,
  the most stable served version); ``GET /apis/resource.k8s.io/VERSION/resourceslices?
  fieldSelector=spec.nodeName=N,spec.driver=D`` (both fields ResourceSlice field selectors,
  pkg/registry/resource/resourceslice/strategy.go) at v1/v1beta2/v1beta1;
  ``/apis/resource.k8s.io/VERSION/devicetaintrules`` at v1beta2/v1alpha3 (the versions
  kubernetes-validate's 1.36 schemas serve it at): list with ``labelSelector=KEY=VALUE``,
  ``POST`` -> 201, or 409 AlreadyExists, or 400 when the body's apiVersion/kind is not that
  URL's; ``DELETE .../NAME`` -> 200, or 404.

Objects are plain dicts; every request is recorded in ``calls``.
"""

from __future__ import annotations

import json
import re
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def _merge(target: dict, patch: dict) -> dict:
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict):  # RFC 7386: a null inside a new object is dropped too
            target[key] = _merge(target[key] if isinstance(target.get(key), dict) else {}, value)
        else:
            target[key] = value
    return target


RESOURCE_GROUP = "resource.k8s.io"
SLICE_VERSIONS = ("v1", "v1beta2", "v1beta1")
TAINT_VERSIONS = ("v1beta2", "v1alpha3")


def _status(code: int, reason: str, message: str) -> dict:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "code": code}


def _selected(labels: dict, selector: str) -> bool:
    equal = re.fullmatch(r"\s*([\w./-]+)\s*==?\s*([\w.-]*)\s*", selector)
    if equal:
        return labels.get(equal.group(1)) == equal.group(2)
    match = re.fullmatch(r"\s*([\w./-]+)\s+in\s+\(([^)]*)\)\s*", selector)
    if not match:
        raise ValueError(f"unsupported selector {selector!r}")
    return labels.get(match.group(1)) in [v.strip() for v in match.group(2).split(",")]


class ApiServer:
    def __init__(self, nodes: list[dict], pods: list[dict], pdb_protected: set[str] = frozenset(),
                 resource_slices: list[dict] = (), gone: set[str] = frozenset(),
                 dropped: set[str] = frozenset()) -> None:
        self.gone = set(gone)
        self.dropped = set(dropped)
        self.nodes = {n["metadata"]["name"]: n for n in nodes}
        self.resource_slices = list(resource_slices)
        self.taint_rules: dict[str, dict] = {}
        self.pods = pods
        self.pdb_protected = set(pdb_protected)
        self.calls: list[tuple[str, str]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, code: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _body(self) -> dict:
                return json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")

            def do_GET(self) -> None:
                server.calls.append(("GET", self.path))
                url = urllib.parse.urlsplit(self.path)
                query = dict(urllib.parse.parse_qsl(url.query))
                if url.path == "/api/v1/nodes":
                    items = [n for n in server.nodes.values()
                             if _selected(n["metadata"].get("labels", {}), query.get("labelSelector", ""))]
                    return self._send(200, {"kind": "NodeList", "apiVersion": "v1", "items": items})
                if url.path == "/api/v1/pods":
                    node = query["fieldSelector"].split("=", 1)[1]
                    items = [p for p in server.pods if p["spec"].get("nodeName") == node]
                    return self._send(200, {"kind": "PodList", "apiVersion": "v1", "items": items})
                listed = re.fullmatch(r"/api/v1/namespaces/([^/]+)/pods", url.path)
                if listed:
                    node = query["fieldSelector"].split("=", 1)[1]
                    items = [p for p in server.pods if p["spec"].get("nodeName") == node
                             and p["metadata"]["namespace"] == listed.group(1)
                             and _selected(p["metadata"].get("labels", {}), query.get("labelSelector", ""))]
                    return self._send(200, {"kind": "PodList", "apiVersion": "v1", "items": items})
                if url.path == f"/apis/{RESOURCE_GROUP}":
                    versions = [{"groupVersion": f"{RESOURCE_GROUP}/{v}", "version": v}
                                for v in dict.fromkeys(SLICE_VERSIONS + TAINT_VERSIONS)]
                    return self._send(200, {"kind": "APIGroup", "apiVersion": "v1", "name": RESOURCE_GROUP,
                                            "versions": versions, "preferredVersion": versions[0]})
                parts = url.path.split("/")
                if url.path.startswith(f"/apis/{RESOURCE_GROUP}/") and len(parts) == 5:
                    version, resource = parts[3], parts[4]
                    if resource == "resourceslices" and version in SLICE_VERSIONS:
                        fields = dict(f.split("=", 1) for f in query.get("fieldSelector", "").split(",") if f)
                        items = [r for r in server.resource_slices
                                 if all(r["spec"].get(k.split(".", 1)[1]) == v for k, v in fields.items())]
                        return self._send(200, {"kind": "ResourceSliceList", "items": items})
                    if resource == "devicetaintrules" and version in TAINT_VERSIONS:
                        items = [r for r in server.taint_rules.values()
                                 if _selected(r["metadata"].get("labels", {}), query.get("labelSelector", ""))]
                        return self._send(200, {"kind": "DeviceTaintRuleList", "items": items})
                self._send(404, {"kind": "Status", "status": "Failure", "reason": "NotFound", "code": 404})

            def _taint_rule_path(self) -> tuple[str, str] | None:
                match = re.fullmatch(rf"/apis/{re.escape(RESOURCE_GROUP)}/([^/]+)/devicetaintrules(?:/([^/]+))?",
                                     self.path)
                if not match or match.group(1) not in TAINT_VERSIONS:
                    return None
                return match.group(1), match.group(2) or ""

            def do_DELETE(self) -> None:
                server.calls.append(("DELETE", self.path))
                pod = re.fullmatch(r"/api/v1/namespaces/([^/]+)/pods/([^/]+)", self.path)
                if pod:
                    kept = [p for p in server.pods if (p["metadata"]["namespace"], p["metadata"]["name"]) != pod.groups()]
                    if len(kept) == len(server.pods):
                        return self._send(404, _status(404, "NotFound", f'pods "{pod.group(2)}" not found'))
                    server.pods[:] = kept
                    return self._send(200, {"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 200})
                found = self._taint_rule_path()
                if found is None or not found[1]:
                    return self._send(404, _status(404, "NotFound", "the server could not find the requested resource"))
                if server.taint_rules.pop(found[1], None) is None:
                    return self._send(404, _status(404, "NotFound", f'devicetaintrules "{found[1]}" not found'))
                self._send(200, {"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 200})

            def do_PATCH(self) -> None:
                server.calls.append(("PATCH", self.path))
                name = self.path.rsplit("/", 1)[1]
                if self.headers.get("Content-Type") != "application/merge-patch+json":
                    return self._send(415, {"kind": "Status", "message": "unsupported patch type", "code": 415})
                if name in server.gone:
                    return self._send(404, _status(404, "NotFound", f'nodes "{name}" not found'))
                if name in server.dropped:
                    self._body()
                    self.close_connection = True  # no status line: the client sees the connection end
                    return None
                _merge(server.nodes[name], self._body())
                self._send(200, server.nodes[name])

            def do_POST(self) -> None:
                server.calls.append(("POST", self.path))
                found = self._taint_rule_path()
                if found is not None and not found[1]:
                    rule = self._body()
                    if rule.get("apiVersion") != f"{RESOURCE_GROUP}/{found[0]}" or rule.get("kind") != "DeviceTaintRule":
                        return self._send(400, _status(400, "BadRequest", "the API version in the data does not "
                                                                          "match the expected API version"))
                    name = rule["metadata"]["name"]
                    if name in server.taint_rules:
                        return self._send(409, _status(409, "AlreadyExists",
                                                       f'devicetaintrules.resource.k8s.io "{name}" already exists'))
                    server.taint_rules[name] = rule
                    return self._send(201, rule)
                match = re.fullmatch(r"/api/v1/namespaces/([^/]+)/pods/([^/]+)/eviction", self.path)
                body = self._body()
                if not match or body.get("kind") != "Eviction" or body.get("apiVersion") != "policy/v1":
                    return self._send(400, {"kind": "Status", "message": "bad eviction", "code": 400})
                ns, name = match.groups()
                if name in server.pdb_protected:
                    return self._send(429, {
                        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                        "message": "Cannot evict pod as it would violate the pod's disruption budget.",
                        "reason": "TooManyRequests",
                        "details": {"causes": [{"reason": "DisruptionBudget",
                                                "message": "The disruption budget db-pdb needs 1 healthy pods and "
                                                           "has 1 currently"}]},
                        "code": 429})
                server.pods[:] = [p for p in server.pods
                                  if not (p["metadata"]["namespace"] == ns and p["metadata"]["name"] == name)]
                self._send(201, {"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201})

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> ApiServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
