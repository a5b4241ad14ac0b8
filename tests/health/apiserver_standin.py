"""A stand-in Kubernetes API server for the calls the in-cluster remediator makes.

No API server can run on the test machines (DESIGN.md). This one serves, on loopback,
exactly the endpoints ``fleetspec.health.k8s_remediator`` uses and answers as
kube-apiserver does:

- ``GET /api/v1/nodes?labelSelector=KEY in (A,B)`` -> a NodeList (set-based selector,
  https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#set-based-requirement);
- ``PATCH /api/v1/nodes/NAME`` with ``application/merge-patch+json`` (RFC 7386: ``null``
  removes a key), anything else 415;
- ``GET /api/v1/pods?fieldSelector=spec.nodeName=NAME`` -> a PodList;
- ``POST /api/v1/namespaces/NS/pods/NAME/eviction`` (policy/v1 Eviction) -> 201 and the pod
  is gone, or, for a pod a PodDisruptionBudget protects, 429 with the Status body
  kube-apiserver returns (pkg/registry/core/pod/storage/eviction.go: "Cannot evict pod as
  it would violate the pod's disruption budget.", reason TooManyRequests, cause
  DisruptionBudget); https://kubernetes.io/docs/concepts/scheduling-eviction/api-eviction/.

Objects are plain Node/Pod dicts; every request is recorded in ``calls``.
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
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = value
    return target


def _selected(labels: dict, selector: str) -> bool:
    match = re.fullmatch(r"\s*([\w./-]+)\s+in\s+\(([^)]*)\)\s*", selector)
    if not match:
        raise ValueError(f"unsupported selector {selector!r}")
    return labels.get(match.group(1)) in [v.strip() for v in match.group(2).split(",")]


class ApiServer:
    def __init__(self, nodes: list[dict], pods: list[dict], pdb_protected: set[str] = frozenset()) -> None:
        self.nodes = {n["metadata"]["name"]: n for n in nodes}
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
                self._send(404, {"kind": "Status", "status": "Failure", "reason": "NotFound", "code": 404})

            def do_PATCH(self) -> None:
                server.calls.append(("PATCH", self.path))
                name = self.path.rsplit("/", 1)[1]
                if self.headers.get("Content-Type") != "application/merge-patch+json":
                    return self._send(415, {"kind": "Status", "message": "unsupported patch type", "code": 415})
                _merge(server.nodes[name], self._body())
                self._send(200, server.nodes[name])

            def do_POST(self) -> None:
                server.calls.append(("POST", self.path))
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
