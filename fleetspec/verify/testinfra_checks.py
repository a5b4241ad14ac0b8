"""Verify through a pytest-testinfra ``host``: the same collector and the same ``compare``.

Why the collector travels inside the command: testinfra backends (local, ssh, paramiko,
ansible, docker, ...) all run commands, but not all copy files. The collector is
compressed and base64-encoded into one ``python3 -c`` (about 20 kB, far below the
128 kB a single argument may have), so one command is one round trip on any backend.
"""

from __future__ import annotations

import base64
import functools
import json
import zlib
from typing import Any, Protocol

from fleetspec.compile.ir import Fleet
from fleetspec.verify.compare import NODE_CHECK_IDS, NodeReport, compare
from fleetspec.verify.run import COLLECTOR

# The components a node can be checked on: every node check id of compare.py's table, in its
# order; "<x>-shadow" checks belong to x, "module-signer:<module>" to module-signer.
COMPONENTS = tuple(c for c in NODE_CHECK_IDS if not c.endswith("-shadow"))


class CommandResult(Protocol):
    rc: int
    stdout: str
    stderr: str


class Host(Protocol):
    """What this module needs of testinfra's ``host`` fixture."""

    backend: Any

    def run(self, command: str, *args: Any) -> CommandResult: ...


class CollectError(RuntimeError):
    """The collector did not give a facts document on that host."""


@functools.cache
def collector_command() -> str:
    """A shell command that runs the collector with the host's python3, nothing copied."""
    payload = base64.b64encode(zlib.compress(COLLECTOR.read_bytes(), 9)).decode("ascii")
    code = (f"import base64,zlib;exec(compile(zlib.decompress(base64.b64decode('{payload}')),"
            "'fleetspec-collector.py','exec'))")
    return f'python3 -c "{code}"'


def collect_facts(host: Host) -> dict[str, Any]:
    result = host.run(collector_command())
    try:
        facts = json.loads(result.stdout)
    except json.JSONDecodeError:
        tail = (result.stderr or result.stdout or "no output").strip().splitlines()[-1:]
        raise CollectError(f"the collector printed no JSON (exit {result.rc}): {tail[0] if tail else ''}") from None
    if not isinstance(facts, dict):
        raise CollectError("the collector printed JSON that is not an object")
    return facts


def spec_hostname(fleet: Fleet, host: Host, facts: dict[str, Any], override: str | None = None) -> str:
    """Which spec node this host is: the override, the connection's name, or the name the
    host gives itself (full or short)."""
    if override:
        return override
    reported = str(facts.get("hostname", ""))
    for name in (str(host.backend.get_hostname()), reported, reported.split(".")[0]):
        if fleet.node(name) is not None:
            return name
    raise CollectError(f"host {host.backend.get_hostname()!r} (calls itself {reported!r}) is not a node of fleet "
                       f"{fleet.name!r}; name it with --fleet-node")


def node_report(fleet: Fleet, host: Host, override: str | None = None) -> NodeReport:
    """Collect on ``host`` and compare it, as its spec node, with the fleet."""
    facts = collect_facts(host)
    hostname = spec_hostname(fleet, host, facts, override)
    if fleet.node(hostname) is None:
        raise CollectError(f"--fleet-node {hostname!r} is not a node of fleet {fleet.name!r}")
    (report,) = compare(fleet, {hostname: facts}, hosts=[hostname]).nodes
    return report
