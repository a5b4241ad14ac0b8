"""A real PostgreSQL server for the tests: Debian's ``postgresql`` package (scripts/test
installs it), one data directory in a temp dir, listening only on a unix socket there.

Debian keeps the server binaries out of PATH, under /usr/lib/postgresql/<major>/bin
(https://wiki.debian.org/PostgreSql); postgres refuses to run as root ("root" execution
of the PostgreSQL server is not permitted), so as root initdb and the server run as the
``postgres`` user the package creates. The server is started directly (not through
pg_ctl) so the fixture holds its pid and stops exactly that process: SIGINT is
PostgreSQL's "fast shutdown" (https://www.postgresql.org/docs/15/server-shutdown.html).
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path


def server_bin() -> Path | None:
    """The newest installed server's bin directory."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"), key=lambda p: int(p.split("/")[4]))
    return Path(found[-1]).parent if found else None


@dataclass
class PostgresServer:
    root: Path
    process: subprocess.Popen
    user: str

    @property
    def socket_dir(self) -> Path:
        return self.root / "socket"

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{self.user}@/{database}?host={self.socket_dir}"

    def new_database(self) -> str:
        """A fresh database (one per test), returned as its URL."""
        import psycopg

        name = f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.root, ignore_errors=True)


def start_server(bin_dir: Path) -> PostgresServer:
    as_root = os.geteuid() == 0
    account = pwd.getpwnam("postgres") if as_root else pwd.getpwuid(os.geteuid())
    root = Path(tempfile.mkdtemp(prefix="fleetspec-pg-"))
    (root / "socket").mkdir()
    if as_root:
        for path in (root, root / "socket"):
            os.chown(path, account.pw_uid, account.pw_gid)
    run_as = {"user": account.pw_uid, "group": account.pw_gid} if as_root else {}
    data = root / "data"
    subprocess.run([bin_dir / "initdb", "-D", data, "-U", account.pw_name, "--auth=trust", "--no-sync",
                    "--encoding=UTF8", "--locale=C"], check=True, capture_output=True, cwd=root, **run_as)
    log = open(root / "server.log", "wb")  # the server writes it for its whole life
    process = subprocess.Popen([bin_dir / "postgres", "-D", data, "-k", root / "socket", "-c", "listen_addresses=",
                                "-c", "fsync=off", "-c", "max_connections=100"],
                               stdout=log, stderr=subprocess.STDOUT, cwd=root, **run_as)
    server = PostgresServer(root, process, account.pw_name)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            text = (root / "server.log").read_text(errors="replace")
            server.stop()
            raise RuntimeError(f"postgres exited ({process.returncode}):\n{text}")
        ready = subprocess.run([bin_dir / "pg_isready", "-h", root / "socket", "-U", account.pw_name],
                               capture_output=True)
        if ready.returncode == 0:
            return server
        time.sleep(0.2)
    server.stop()
    raise RuntimeError("postgres did not accept connections within 60 s")
