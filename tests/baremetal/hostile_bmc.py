"""A hostile Redfish service on 127.0.0.1, for the transport's tests (#41 items 1, 6, 10;
#40 item 4).

It answers as DMTF's Redfish-Mockup-Server answers from a mockup (``GET <path>`` is
``<mockup><path>/index.json``), from the Supermicro HGX H100 capture in
``shared/redfish/mockups/supermicro-hgx-h100`` (DMTF Redfish-Mockup-Creator 1.1.9, served from
tests/data), behind HTTP Basic authentication and a session service that answers a
``POST`` to its Sessions collection with ``X-Auth-Token`` and ``Location`` (DSP0266
"Session management"), as the captured BMC did. A test then makes it hostile, path by path:
``rewrite`` changes an answer's JSON (a link to another host), ``special`` takes over the
answer whole (a redirect, a trickle, a huge body, a ``Location`` elsewhere). Optionally over
TLS, with the certificate and key a test made.

`Elsewhere` is "another host": a second listener, on another port, that answers every
request with a plausible System and records what it was sent (``Authorization``,
``X-Auth-Token``, how many body bytes), so a test can say nothing ever reached it.
"""

from __future__ import annotations

import base64
import json
import re
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from tests.conftest import shared_tree

USER, PASSWORD, TOKEN = "admin", "hostile-bmc-Pw-0451", "tok-5d1c2e"
MAC_FILE = re.compile(r"([0-9a-f]{2}-){5}[0-9a-f]{2}\.ipxe")  # a boot script's name: iPXE's ${net0/mac:hexhyp}
CAPTURE = "redfish/mockups/supermicro-hgx-h100"


@dataclass
class Seen:
    method: str
    path: str
    authorization: bool
    token: bool
    body_bytes: int


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False  # a trickling answer must not hold the test's teardown

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that hung up on a hostile answer is the point, not an error


@dataclass
class Service:
    url: str
    port: int
    seen: list[Seen] = field(default_factory=list)
    rewrite: dict[str, Callable[[dict], dict]] = field(default_factory=dict)
    special: dict[str, Callable[[BaseHTTPRequestHandler], None]] = field(default_factory=dict)
    sessions: bool = True
    delay_s: float = 0.0  # before every answer (a slow BMC)

    def reset(self) -> None:
        self.seen.clear()
        self.rewrite.clear()
        self.special.clear()
        self.sessions = True
        self.delay_s = 0.0


def _handler(service: Service, root: Path | None) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def _record(self) -> int:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            service.seen.append(Seen(self.command, self.path, "Authorization" in self.headers,
                                     "X-Auth-Token" in self.headers, len(body)))
            return len(body)

        def send_json(self, doc: dict, status: int = 200, headers: dict[str, str] | None = None) -> None:
            data = json.dumps(doc).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Connection", "close")
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)

        def _authorised(self) -> bool:
            if self.headers.get("X-Auth-Token") == TOKEN:
                return True
            wanted = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
            return self.headers.get("Authorization") == wanted

        def _answer(self) -> None:
            self._record()
            time.sleep(service.delay_s)
            path = self.path.split("?")[0].rstrip("/") or "/"
            if path in service.special:
                service.special[path](self)
                return
            if root is None:  # Elsewhere: a plausible System for whatever is asked
                self.send_json({"@odata.id": path, "Id": "1", "Name": "System", "PowerState": "On"})
                return
            if self.command == "POST" and path == "/redfish/v1/SessionService/Sessions":
                if not service.sessions:
                    self.send_json({"error": {"message": "sessions disabled"}}, 405)
                    return
                self.send_json({"@odata.id": f"{path}/7", "Id": "7", "UserName": USER}, 201,
                               {"X-Auth-Token": TOKEN, "Location": f"{path}/7"})
                return
            if self.command == "DELETE":
                self.send_json({}, 204 if self._authorised() else 401)
                return
            public = path in ("/redfish/v1", "/redfish")
            if not public and not self._authorised():
                self.send_json({"error": {"message": "unauthorised"}}, 401)
                return
            file = root / path.lstrip("/") / "index.json"
            if self.command != "GET" or not file.is_file():
                self.send_json({"error": {"message": f"no {path}"}}, 404)
                return
            doc = json.loads(file.read_text())
            if path in service.rewrite:
                doc = service.rewrite[path](doc)
            self.send_json(doc)

        do_GET = do_POST = do_PATCH = do_DELETE = _answer

    return Handler


@contextmanager
def serving(root: Path | None, cert: tuple[Path, Path] | None = None) -> Iterator[Service]:
    server = _Server(("127.0.0.1", 0), BaseHTTPRequestHandler)
    port = server.server_address[1]
    scheme = "https" if cert else "http"
    service = Service(f"{scheme}://127.0.0.1:{port}", port)
    server.RequestHandlerClass = _handler(service, root)
    if cert:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(str(cert[0]), str(cert[1]))
        server.socket = ctx.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    try:
        yield service
    finally:
        server.shutdown()
        server.server_close()


def capture() -> Path:
    return shared_tree(CAPTURE)


# --- hostile answers ----------------------------------------------------------------------

def trickle(every_s: float, for_s: float = 30.0) -> Callable[[BaseHTTPRequestHandler], None]:
    """Headers at once, then one byte of a (never finished) JSON body every ``every_s``."""
    def answer(h: BaseHTTPRequestHandler) -> None:
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", "1000000")
        h.end_headers()
        end = time.monotonic() + for_s
        try:
            h.wfile.write(b"{")
            h.wfile.flush()
            while time.monotonic() < end:
                time.sleep(every_s)
                h.wfile.write(b" ")
                h.wfile.flush()
        except OSError:
            pass
    return answer


def trickle_headers(every_s: float, for_s: float = 30.0) -> Callable[[BaseHTTPRequestHandler], None]:
    """The status line and headers themselves one byte every ``every_s``, never finished."""
    def answer(h: BaseHTTPRequestHandler) -> None:
        end = time.monotonic() + for_s
        try:
            for byte in b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Padding: " + b"a" * 10_000:
                if time.monotonic() > end:
                    break
                h.wfile.write(bytes([byte]))
                h.wfile.flush()
                time.sleep(every_s)
        except OSError:
            pass
    return answer


def huge(total: int = 256 << 20) -> Callable[[BaseHTTPRequestHandler], None]:
    """A ``total``-byte answer with no Content-Length (the body ends with the connection)."""
    def answer(h: BaseHTTPRequestHandler) -> None:
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Connection", "close")
        h.end_headers()
        h.close_connection = True
        chunk = b" " * (1 << 20)
        try:
            h.wfile.write(b'{"Members": [')
            for _ in range(total >> 20):
                h.wfile.write(chunk)
        except OSError:
            pass
    return answer


def moved(to: str) -> Callable[[BaseHTTPRequestHandler], None]:
    def answer(h: Any) -> None:
        h.send_json({}, 307, {"Location": to})
    return answer


def accepted(location: str) -> Callable[[BaseHTTPRequestHandler], None]:
    """An action's 202 Accepted with its task monitor elsewhere."""
    def answer(h: Any) -> None:
        h.send_json({}, 202, {"Location": location})
    return answer
