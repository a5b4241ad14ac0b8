"""A real slurmdbd on this machine: MariaDB in a scratch directory on 127.0.0.1, and
Debian's slurmdbd over it, for the accounting tests (accounts, GrpTRES, typed GPU TRES).

MariaDB runs with ``--skip-grant-tables`` (no user table to set up; it listens on
127.0.0.1 only, on a free port, for the life of one test module) and slurmdbd with
``auth/none``, like the localized slurmctld (fleetspec/lab/slurm.py). Both run in
sessions of their own and are stopped by pid. ``mariadb-server`` comes from scripts/test.
A newer release's slurmdbd and sacctmgr run inside its root (``prefix``,
`fleetspec.lab.slurm_releases.command_prefix`) over the host's MariaDB on 127.0.0.1: the
root shares the host's network, and its ``root`` must then lie under /tmp.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path

from fleetspec.lab.slurm import free_ports
from tests.conftest import unavailable

from .cluster import SlurmError

START_TIMEOUT_S = 30.0


def _wait(ready, what: str, log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if ready():
            return
        time.sleep(0.3)
    raise SlurmError(f"{what} did not come up in {START_TIMEOUT_S:.0f} s: {log.read_text()[-2000:] if log.exists() else ''}")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        with suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


@contextmanager
def mariadb(root: Path, grants: bool = False) -> Iterator[tuple[int, Path]]:
    """(port, socket) of a scratch MariaDB under ``root`` on 127.0.0.1. ``grants``: with its
    grant tables (root over the socket without a password, accounts checked as a real
    server checks them); without, any client may do anything."""
    if shutil.which("mariadbd") is None or shutil.which("mariadb-install-db") is None:
        unavailable("mariadb-server is needed for the database tests (scripts/test installs it)")
    for sub in ("db", "run", "log"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    (db_port,) = free_ports(1)
    done = subprocess.run(["mariadb-install-db", f"--datadir={root}/db", "--user=root", "--skip-test-db",
                           "--auth-root-authentication-method=normal"], capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise SlurmError(f"mariadb-install-db failed: {done.stderr[-1000:]}")
    log = root / "log" / "mariadb.out"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            ["mariadbd", "--no-defaults", f"--datadir={root}/db", "--user=root", "--bind-address=127.0.0.1",
             f"--port={db_port}", f"--socket={root}/run/mysqld.sock", f"--pid-file={root}/run/mysqld.pid",
             *(() if grants else ("--skip-grant-tables",)), "--innodb-buffer-pool-size=32M",
             "--innodb-lock-wait-timeout=900"],
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        _wait(lambda: "ready for connections" in log.read_text(), "MariaDB", log)
        yield db_port, root / "run" / "mysqld.sock"
    finally:
        _stop(proc)


@contextmanager
def slurmdbd(root: Path, cluster: str, prefix: Sequence[str] = ()) -> Iterator[tuple[int, Path]]:
    """(slurmdbd's port, a slurm.conf for sacctmgr) while MariaDB and slurmdbd run under
    ``root``, with ``cluster`` registered (``sacctmgr add cluster``, as the slurm role does).
    ``prefix``: what runs slurmdbd and sacctmgr (another release's root)."""
    if shutil.which("mariadbd") is None or (not prefix and (shutil.which("slurmdbd") is None
                                                             or shutil.which("sacctmgr") is None)):
        unavailable("mariadb-server and slurmdbd are needed for the accounting tests (scripts/test installs them)")
    (root / "etc").mkdir(parents=True, exist_ok=True)
    (dbd_port,) = free_ports(1)
    with mariadb(root) as (db_port, _socket):
        dbd_conf = root / "etc" / "slurmdbd.conf"
        dbd_conf.write_text(
            "AuthType=auth/none\nDbdHost=localhost\nDbdAddr=127.0.0.1\n"
            f"DbdPort={dbd_port}\nSlurmUser=root\nLogFile={root}/log/slurmdbd.log\nPidFile={root}/run/slurmdbd.pid\n"
            f"StorageType=accounting_storage/mysql\nStorageHost=127.0.0.1\nStoragePort={db_port}\n"
            "StorageLoc=slurm_acct_db\nStorageUser=root\n")
        dbd_conf.chmod(0o600)
        conf = root / "etc" / "slurm.conf"  # slurmdbd reads slurmdbd.conf next to SLURM_CONF
        conf.write_text(f"ClusterName={cluster}\nSlurmctldHost=localhost\nAuthType=auth/none\nCredType=cred/none\n"
                        "AccountingStorageType=accounting_storage/slurmdbd\nAccountingStorageHost=localhost\n"
                        f"AccountingStoragePort={dbd_port}\n")
        env = {**os.environ, "SLURM_CONF": str(conf)}
        with open(root / "log" / "slurmdbd.out", "w") as out:
            proc = subprocess.Popen([*prefix, "slurmdbd", "-D"], env=env, stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        try:
            def registered() -> bool:
                add = subprocess.run([*prefix, "sacctmgr", "-i", "add", "cluster", cluster], env=env, capture_output=True,
                                     text=True, timeout=30)
                return add.returncode == 0
            _wait(registered, "slurmdbd", root / "log" / "slurmdbd.out")
            yield dbd_port, conf
        finally:
            _stop(proc)
