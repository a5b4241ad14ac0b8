"""A ticket webhook on 127.0.0.1 for the tests: records each request; its answer is set per test."""

from __future__ import annotations

import contextlib
import http.server
import json
import threading
from dataclasses import dataclass, field


@dataclass
class Webhook:
    port: int = 0
    requests: list[dict] = field(default_factory=list)
    status: int = 201
    location: str | None = None
    delay: float = 0.0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/tickets"


@contextlib.contextmanager
def serving():
    hook = Webhook()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            body = self.rfile.read(length)
            hook.requests.append({"path": self.path, "headers": dict(self.headers), "body": json.loads(body)})
            if hook.delay:
                threading.Event().wait(hook.delay)
            try:
                self.send_response(hook.status)
                if hook.location:
                    self.send_header("Location", hook.location)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up first (the timeout test): nothing to answer

        def log_message(self, *args) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    hook.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield hook
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
