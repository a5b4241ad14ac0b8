"""A sushy-emulator process for the tests: two GPU nodes and a spare behind one Redfish
service on 127.0.0.1, HTTP basic authentication with a bcrypt password file, state in a
directory of the test's own. `Emulator.system` reads a system's stored state back (the
harness driver's sqlite, tests/baremetal/bmc_emulator.py) for what Redfish does not show,
such as the boots a node made and from where."""

from __future__ import annotations

import contextlib
import os
import pickle
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

HARNESS = Path(__file__).with_name("bmc_emulator.py")
PASSWORD = "bmc-test-pw-7Qx"
USER = "admin"


def system(name: str, uuid_tail: int, mac: str, power: str = "On", inventory: dict | None = None) -> dict:
    """One fake system; ``inventory`` (key -> version: ``BMC``, ``GPU_SXM_1``, ``NVSwitch_0``)
    gives it FirmwareInventory members (bmc_emulator.py, with ``FLEETSPEC_PUSH``)."""
    extra = {"inventory": dict(inventory)} if inventory is not None else {}
    return {**extra, "uuid": f"6f0d5e2a-0000-4000-8000-{uuid_tail:012d}", "name": name, "power_state": power,
            "external_notifier": False, "nics": [{"mac": mac, "ip": "10.0.0.1"}],
            "bios": {"ProcTurboMode": "Disabled", "BootMode": "Uefi", "NicBoot1": "NetworkBoot"},
            "versions": {"BiosVersion": "2.4.1"}, "memory_gib": 2048, "cpus": 224, "sockets": 2}


SYSTEMS = [system("gpu-01", 1, "52:54:00:aa:00:01"), system("gpu-02", 2, "52:54:00:aa:00:02", power="Off"),
           system("spare-01", 3, "52:54:00:aa:00:03")]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Emulator:
    root: Path
    port: int
    process: subprocess.Popen

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def system(self, name: str) -> dict:
        with contextlib.closing(sqlite3.connect(self.root / "state" / "fakedriver.sqlite")) as db:
            for _, value in db.execute("select key, value from cache"):
                data = pickle.loads(value)
                if data.get("name") == name:
                    return data
        raise KeyError(name)

    def log(self) -> str:
        return (self.root / "emulator.log").read_text(errors="replace")


@contextlib.contextmanager
def running(root: Path, systems: list[dict] = SYSTEMS, config: str = "", stock: bool = False):
    """``config``: more lines for the emulator's config (the harness's FLEETSPEC_PUSH,
    FLEETSPEC_PUSH_MAX_BYTES, FLEETSPEC_BMC_RESET_S). ``stock``: the stock ``sushy-emulator``
    (PyPI sushy-tools, its fake driver as shipped), without the harness."""
    import bcrypt

    root.mkdir(parents=True, exist_ok=True)
    auth = root / "htpasswd"
    auth.write_text(f"{USER}:{bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=4)).decode()}\n")
    conf = root / "emulator.conf"
    conf.write_text(f"SUSHY_EMULATOR_FAKE_DRIVER = True\nSUSHY_EMULATOR_STATE_DIR = {str(root / 'state')!r}\n"
                    f"SUSHY_EMULATOR_AUTH_FILE = {str(auth)!r}\nSUSHY_EMULATOR_FAKE_SYSTEMS = {systems!r}\n{config}")
    port = free_port()
    log = open(root / "emulator.log", "wb")
    program = ["-m", "sushy_tools.emulator.main"] if stock else [str(HARNESS)]
    process = subprocess.Popen([sys.executable, *program, "--config", str(conf), "--interface", "127.0.0.1",
                                "--port", str(port)], stdout=log, stderr=subprocess.STDOUT, cwd=root,
                               env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    emulator = Emulator(root, port, process)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f"{emulator.endpoint}/redfish/v1/", timeout=2)
                break
            except urllib.error.HTTPError:
                break  # 401: it answers
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"sushy-emulator did not start:\n{emulator.log()[-2000:]}") from None
                time.sleep(0.2)
        yield emulator
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()
