"""The ways facts reach the comparison: a directory of files, this machine, an inventory.

Each mode gathers ``{hostname: facts}`` plus, per host that gave none, the reason, and
hands both to ``compare``. The collector is the one file ``collector.py``: run here with
``python3``, or copied to every node by Ansible's ``script`` module
(``fleetspec.ansible_adhoc``: one round trip per node, ``forks`` nodes at a time).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from fleetspec.compile.ir import Fleet
from fleetspec.node_side import collector
from fleetspec.safe_io import UnsafePathError, loads_json, read_bounded
from fleetspec.verify.compare import VerifyReport, compare
from fleetspec.verify.facts_bounds import facts_problem

COLLECTOR = Path(collector.__file__).resolve()
LOCAL_TIMEOUT_S = 300
Facts = dict[str, dict[str, Any]]


class VerifyError(RuntimeError):
    """The verification could not run at all (bad directory, unknown host, no Ansible)."""


def verify_facts_dir(fleet: Fleet, directory: Path) -> VerifyReport:
    """Offline: ``<hostname>.json`` files, one per node, as the collector printed them."""
    facts, problems = load_facts_dir(directory)
    return compare(fleet, facts, unreachable=problems)


MAX_FACTS_BYTES = 16 * 1024 * 1024  # one node's facts are a few kilobytes


def _clip(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def load_facts_dir(directory: Path) -> tuple[Facts, dict[str, str]]:
    """Read every ``*.json`` in ``directory``; a file that is not a JSON object is a problem
    for that host, not a crash."""
    directory = Path(directory)
    if not directory.is_dir():
        raise VerifyError(f"{directory}: not a directory of <hostname>.json facts files")
    facts: Facts = {}
    problems: dict[str, str] = {}
    for path in sorted(directory.glob("*.json")):
        try:
            data = loads_json(read_bounded(path, MAX_FACTS_BYTES))
        except (OSError, UnsafePathError, ValueError) as exc:
            problems[path.stem] = f"{path}: unreadable facts file ({_clip(str(exc))})"
            continue
        problem = facts_problem(data)
        if problem is None:
            facts[path.stem] = data
        else:
            problems[path.stem] = f"{path}: {problem}: the node's facts are refused"
    return facts, problems


def collect_local(timeout: float = LOCAL_TIMEOUT_S, root: str = "/") -> dict[str, Any]:
    """Run the collector on this machine exactly as on a node: ``python3 collector.py``
    (``--root``: the node's files under that directory, e.g. an image or a fixture tree)."""
    python = shutil.which("python3") or sys.executable
    argv = [python, str(COLLECTOR)] + (["--root", root] if root != "/" else [])
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise VerifyError(f"the fact collector did not run: {exc}") from None
    try:
        data = json.loads(proc.stdout)
    except json.JSONDecodeError:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise VerifyError(f"the fact collector printed no JSON (exit {proc.returncode}): {tail[0]}") from None
    problem = facts_problem(data)
    if problem is not None:
        raise VerifyError(f"the fact collector's document is refused: {problem}")
    return data


def verify_local(fleet: Fleet, hostname: str, root: str = "/") -> VerifyReport:
    """This machine, checked as node ``hostname`` of the spec (a Slurm health check/prolog):
    its tuple and, when the spec has ``spec.health``, the node check's verdict (``health``)."""
    if fleet.node(hostname) is None:
        raise VerifyError(f"{hostname!r} is not a node of fleet {fleet.name!r}; give --as one of the spec's hostnames")
    report = compare(fleet, {hostname: collect_local(root=root)}, hosts=[hostname])
    if fleet.health is None:
        return report
    from fleetspec.verify.health import health_check, node_verdict, with_check

    return with_check(report, hostname, health_check(node_verdict(fleet, hostname, root)))


def verify_inventory(fleet: Fleet, inventory_path: Path, forks: int = 20) -> VerifyReport:
    """Every node of the fleet through Ansible: inventory hostnames are the spec's hostnames."""
    facts, problems = collect_inventory(Path(inventory_path), [n.hostname for n in fleet.nodes], forks)
    for hostname in (n.hostname for n in fleet.nodes):
        if hostname not in facts and hostname not in problems:
            problems[hostname] = f"not in inventory {inventory_path} (or Ansible skipped it)"
    return compare(fleet, facts, unreachable=problems)


def verify_lab(fleet: Fleet, lab_dir: Path, forks: int = 20) -> VerifyReport:
    """The lab's hosts (a scaled-down subset of the fleet) through the lab's inventory."""
    from fleetspec.lab.fleet import LabHandle, LabSetupError

    try:
        handle = LabHandle.load(lab_dir)
    except LabSetupError as exc:
        raise VerifyError(str(exc)) from None
    hosts = [h for h in handle.hosts if fleet.node(h) is not None]
    facts, problems = collect_inventory(handle.inventory_overlay, hosts, forks)
    return compare(fleet, facts, hosts=hosts, unreachable=problems)


def attest_bmcs(fleet: Fleet, report: VerifyReport, base_dir: Path) -> VerifyReport:
    """``report`` with the firmware each checked node's BMC reports over Redfish attested
    against its stack's pins (`fleetspec.verify.bmc`); a BMC that cannot be read is a drift
    of its node saying why. ``base_dir``: where the spec's secret and CA file paths start."""
    from fleetspec.baremetal.run import observe
    from fleetspec.verify.bmc import with_bmc

    if fleet.baremetal is None or not fleet.baremetal.bmcs:
        raise VerifyError("--bmc: the spec names no BMC (a bmc section on a rack or node group): "
                          "there is no firmware to read over Redfish")
    observation = observe(fleet, base_dir, [n.hostname for n in report.nodes])
    return with_bmc(fleet, report, observation.seen, observation.unreachable)


def verify_joining(fleet: Fleet, hosts: list[str], inventory: list[Path], base_dir: Path,
                   forks: int = 20) -> VerifyReport:
    """What ``fleetspec baremetal join`` asks of booted nodes: their facts, collected through
    ``inventory``, against the tuple, and where the spec gives them a BMC the firmware it
    reports (`attest_bmcs`)."""
    facts, problems = collect_inventory(inventory, hosts, forks)
    report = compare(fleet, facts, hosts=hosts, unreachable=problems)
    if fleet.baremetal is None or not fleet.baremetal.bmcs:
        return report
    return attest_bmcs(fleet, report, base_dir)


def collect_inventory(inventory: Path | list[Path], hosts: list[str], forks: int) -> tuple[Facts, dict[str, str]]:
    """The collector run once on every host of ``hosts`` (one ad-hoc ``script`` run)."""
    from fleetspec.ansible_adhoc import AdhocError, run_script

    try:
        results = run_script(inventory, hosts, "fleetspec-collector.py", COLLECTOR.read_bytes(), forks=forks)
    except AdhocError as exc:
        raise VerifyError(str(exc)) from None
    facts: Facts = {}
    problems: dict[str, str] = {}
    for host, res in results.items():
        if res.status == "unreachable":
            problems[host] = res.last_line()
        elif res.status == "failed":
            problems[host] = "the collector failed: " + res.last_line()
        else:
            data, why = node_document(res.stdout)
            if data is None:
                problems[host] = why if res.stdout.strip() else "the collector printed nothing: " + res.last_line()
            else:
                facts[host] = data
    return facts, problems


def node_document(stdout: str) -> tuple[dict[str, Any] | None, str]:
    """The collector's document from what a node printed, within `facts_bounds`; else
    (None, why the node's facts are refused)."""
    if len(stdout) > MAX_FACTS_BYTES:
        return None, f"the collector printed {len(stdout):,} characters (at most {MAX_FACTS_BYTES:,})"
    try:
        data = loads_json(stdout)
    except ValueError as exc:
        return None, f"the collector printed no usable JSON ({_clip(str(exc))})"
    problem = facts_problem(data)
    if problem is not None:
        return None, f"facts refused: {problem}"
    return data, ""

