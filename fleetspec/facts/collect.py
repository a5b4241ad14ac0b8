"""``fleetspec facts collect``: the fact collector on every node, one ``<host>.json`` each.

The collector is the file ``verify`` ships (`fleetspec.verify.run.COLLECTOR`), sent the
way ``verify --inventory`` sends it: one ad-hoc Ansible ``script`` run
(`fleetspec.ansible_adhoc.run_script`), ``forks`` nodes at a time, with Ansible's own
connection timeout and task timeout per node. No second SSH stack: the user's inventory
(or, for a bare hostlist, a generated one whose hosts use the SSH and Ansible settings
already in place: ``~/.ssh/config``, ``ansible.cfg``, ``ANSIBLE_*``) says how to reach
each node.

Each node's document is checked as every facts reader checks it (`fleetspec.verify.run.
node_document`: JSON, within `fleetspec.verify.facts_bounds`) before it is written. The
directory is written as ``render`` writes its tree (`fleetspec.render.writer.write_tree`):
staged beside DIR and swapped in whole, a link or a non-directory at DIR refused, a
non-empty DIR that fleetspec did not write refused. So DIR holds exactly this run's
facts: a node that could not be reached has no file (an older one would pass for today's).
When no node answered, DIR is left as it was.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from fleetspec.node_side.hostlist import is_valid_hostname

CONNECT_TIMEOUT_S = 10  # Ansible's own default (ansible-config list: DEFAULT_TIMEOUT)
# The collector runs its commands with 10 s timeouts each and loads each library in a
# child with a 10 s timeout (docs/facts.md); verify --local gives it 300 s.
COLLECT_TIMEOUT_S = 300
MAX_HOSTS = 100_000  # the importer's bound on the hosts of one cluster (docs/import.md)
INVENTORY_TIMEOUT_S = 120
MARKER = ("This directory is written by 'fleetspec facts collect' (one <host>.json per node that answered); it is "
          "replaced as a whole.\n")
_INVENTORY_NAME = re.compile(r"[A-Za-z0-9._-]{1,253}")


class CollectError(Exception):
    """Nothing could be collected (no hosts, an inventory Ansible cannot read, DIR refused)."""


@dataclass(frozen=True)
class Answer:
    """One node's outcome, as it arrives: ``ok`` with its facts, else why not."""

    host: str
    ok: bool
    why: str = ""
    total: int = 0  # the nodes of the run


@dataclass
class Collected:
    """What a run wrote (``written``: hosts) and which nodes gave no facts, with why."""

    out: Path
    written: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)


def file_name(host: str) -> str | None:
    """``<host>.json`` for a host named by DNS labels (``gpu-01``, ``gpu-01.example.org``);
    None for any other inventory name: it becomes no file name."""
    if not _INVENTORY_NAME.fullmatch(host) or not all(is_valid_hostname(label) for label in host.split(".")):
        return None
    return f"{host}.json"


def inventory_hosts(inventories: Sequence[Path]) -> list[str]:
    """Every host of the inventories, as Ansible reads them (``ansible-inventory --list``)."""
    program = shutil.which("ansible-inventory")
    if program is None:
        raise CollectError("ansible-inventory is not on PATH: install fleetspec's ansible extra")
    argv = [program, "--list"]
    for path in inventories:
        if not Path(path).is_file():
            raise CollectError(f"{path}: no such inventory file")
        argv += ["-i", str(path)]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=INVENTORY_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        raise CollectError(f"ansible-inventory did not list the hosts within {INVENTORY_TIMEOUT_S} s") from None
    try:
        listing = json.loads(proc.stdout) if proc.returncode == 0 else None
    except json.JSONDecodeError:
        listing = None
    if not isinstance(listing, dict):
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise CollectError(f"ansible-inventory could not read {', '.join(map(str, inventories))}: {tail[:200]}")
    hosts: dict[str, None] = {}
    for group, body in listing.items():
        if group != "_meta" and isinstance(body, dict):
            hosts.update(dict.fromkeys(h for h in body.get("hosts", []) if isinstance(h, str)))
    return list(hosts)


def collect(out: Path, *, inventories: Sequence[Path] = (), hosts: Sequence[str] | None = None, forks: int = 20,
            connect_timeout: int = CONNECT_TIMEOUT_S, timeout: int = COLLECT_TIMEOUT_S,
            on_answer: Callable[[Answer], None] | None = None,
            on_start: Callable[[int], None] | None = None) -> Collected:
    """Run the collector on ``hosts`` (default: every host of ``inventories``) and write
    ``out/<host>.json`` for each node that answered with a document within bounds.
    ``on_start`` gets the number of nodes the run reaches for, ``on_answer`` each one's outcome."""
    from fleetspec.ansible_adhoc import AdhocError, HostResult, run_script
    from fleetspec.render.writer import RenderWriteError, check_target, write_tree
    from fleetspec.verify.run import COLLECTOR, node_document

    try:
        check_target(out)  # before the run: a refused DIR costs no node a round trip
    except RenderWriteError as exc:
        raise CollectError(str(exc)) from None
    chosen = list(dict.fromkeys(hosts)) if hosts is not None else inventory_hosts(inventories)
    if not chosen:
        raise CollectError("no hosts to collect from" + (f" in {', '.join(map(str, inventories))}"
                                                          if inventories else ""))
    if len(chosen) > MAX_HOSTS:
        raise CollectError(f"{len(chosen):,} hosts; at most {MAX_HOSTS:,} in one run")
    result = Collected(Path(out))
    runnable = []
    for host in chosen:
        if file_name(host) is None:
            result.failed[host] = "not a host name fleetspec makes a file name of (DNS labels: letters, digits, '-')"
        else:
            runnable.append(host)
    documents: dict[str, str] = {}

    def answered(res: HostResult) -> None:
        why = ""
        if res.status == "unreachable":
            why = "unreachable: " + res.last_line()[:300]
        elif res.status == "failed":
            why = "the collector failed: " + res.last_line()[:300]
        else:
            data, why = node_document(res.stdout)
            if data is not None:
                documents[res.host] = json.dumps(data, indent=2, sort_keys=True) + "\n"
        if why:
            result.failed[res.host] = why
        if on_answer is not None:
            on_answer(Answer(res.host, not why, why, len(runnable)))

    with tempfile.TemporaryDirectory(prefix="fleetspec-facts-") as tmp:
        inventory = list(inventories) or [_hostlist_inventory(runnable, Path(tmp))]
        try:
            if runnable:
                if on_start is not None:
                    on_start(len(runnable))
                run_script(inventory, runnable, "fleetspec-collector.py", COLLECTOR.read_bytes(), forks=forks,
                           timeouts=(connect_timeout, timeout), on_result=answered)
        except AdhocError as exc:
            raise CollectError(str(exc)) from None
    for host in runnable:
        if host not in documents and host not in result.failed:
            result.failed[host] = "not in the inventory (or Ansible skipped it)"
    result.written = sorted(documents)
    if documents:
        try:
            write_tree({PurePosixPath(f"{host}.json"): text for host, text in documents.items()}, Path(out), MARKER)
        except (RenderWriteError, OSError) as exc:
            raise CollectError(f"cannot write {out}: {exc}") from None
    return result


def _hostlist_inventory(hosts: Sequence[str], directory: Path) -> Path:
    """An inventory of ``hosts`` and nothing else: each reached by its name, with the
    connection settings already in place for it (no variables set here)."""
    path = directory / "hosts.json"
    path.write_text(json.dumps({"all": {"hosts": dict.fromkeys(hosts, {})}}))
    return path
