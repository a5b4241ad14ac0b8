"""A static Redfish server for the tests, imitating DMTF's Redfish-Mockup-Server
(github.com/DMTF/Redfish-Mockup-Server, ``redfishMockupServer.py``): it serves a tree that
DMTF's Redfish-Mockup-Creator captured, ``GET /redfish/v1/<path>`` answering
``<folder>/redfish/v1/<path>/index.json``, and any other path in the folder's captured
trees the file itself or its ``index.json`` (a registry's ``Location.Uri``, such as
Supermicro's ``/registries/...json``), read-only, on 127.0.0.1.

Sessions as the mockup server answers them: ``POST /redfish/v1/SessionService/Sessions``
creates a session (201, an ``X-Auth-Token`` and a ``Location``) whatever the credentials, and
``DELETE`` of that location ends it; every other POST, PATCH or DELETE is refused (405), as a
capture cannot change. The trees are the captures in ``shared/redfish/mockups/``, served in
place (tests/data, copied with their source notes). A request that is not a GET of the tree, or that
leaves it, is 404 or 405."""

from __future__ import annotations

import contextlib
import json
import secrets
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

SESSIONS = "/redfish/v1/SessionService/Sessions"


def _handler(root: Path) -> type[BaseHTTPRequestHandler]:
    tree = root.resolve()
    sessions: set[str] = set()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"  # one request per connection, as simple as the mockup server

        def log_message(self, *args: object) -> None:  # quiet: the tests read answers, not logs
            pass

        def _send(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("OData-Version", "4.0")
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(body)

        def _path(self) -> str:
            return unquote(urlsplit(self.path).path).rstrip("/") or "/"

        def do_GET(self) -> None:
            path = self._path()
            if path == "/redfish":
                self._send(200, json.dumps({"v1": "/redfish/v1/"}).encode())
                return
            if path.startswith(SESSIONS + "/") and path.rsplit("/", 1)[1] in sessions:
                ident = path.rsplit("/", 1)[1]
                body = {"@odata.id": path, "@odata.type": "#Session.v1_0_0.Session", "Id": ident, "Name": "Session"}
                self._send(200, json.dumps(body).encode())
                return
            target = (tree / path.lstrip("/")).resolve()
            top = tree / path.lstrip("/").split("/", 1)[0]
            # the captured trees only (redfish/, registries/, schemas/), not the SOURCE notes beside them
            if not target.is_relative_to(tree) or target == tree or not top.is_dir():
                self._send(404)
                return
            found = target if target.is_file() else target / "index.json"
            if not found.is_file():
                self._send(404)
                return
            self._send(200, found.read_bytes())

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            self.rfile.read(length)
            if self._path() != SESSIONS:
                self._send(405)
                return
            ident = secrets.token_hex(8)
            sessions.add(ident)
            body = {"@odata.id": f"{SESSIONS}/{ident}", "@odata.type": "#Session.v1_0_0.Session", "Id": ident}
            self._send(201, json.dumps(body).encode(),
                       {"X-Auth-Token": secrets.token_hex(16), "Location": f"{SESSIONS}/{ident}"})

        def do_DELETE(self) -> None:
            path = self._path()
            ident = path.rsplit("/", 1)[1]
            if path.startswith(SESSIONS + "/") and ident in sessions:
                sessions.discard(ident)
                self._send(204)
                return
            self._send(405)

        def do_PATCH(self) -> None:
            self._send(405)

    return Handler


@contextlib.contextmanager
def serving(root: Path):
    """Serve the captured tree under ``root`` (the folder holding ``redfish/``) on 127.0.0.1;
    yields the endpoint (``http://127.0.0.1:<port>``)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(root))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
