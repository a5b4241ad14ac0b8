"""A firmware image server on 127.0.0.1 for the tests: serves a directory, records each GET."""

from __future__ import annotations

import contextlib
import functools
import http.server
import threading
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Images:
    root: Path
    port: int = 0
    fetched: list[str] = field(default_factory=list)

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.port}/{name}"


@contextlib.contextmanager
def serving(root: Path):
    root.mkdir(parents=True, exist_ok=True)
    images = Images(root)

    class Handler(http.server.SimpleHTTPRequestHandler):
        def do_GET(self) -> None:
            images.fetched.append(self.path)
            super().do_GET()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=str(root)))
    images.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield images
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
