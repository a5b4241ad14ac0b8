"""The fleet's health: every node's verdict, gathered the way verify gathers facts.

``--facts DIR``: ``<hostname>.json`` files as the node check printed them (``--format
json``). ``--inventory``/``--lab``: the node check (the modules the ``fleet_health`` role
installs, with the spec's policy, as one zip Python runs) shipped to every node and run
once, read-only, through Ansible (``fleetspec.ansible_adhoc``: one round trip, ``forks``
at a time), the way verify ships its collector; it reads the node's own state file, so
faults the scheduled check latched show, and it never advances that check's cursors. A
node that gave no verdict is ``unknown`` with the reason: never healthy by default.
Reports: a table, JSON, JUnit (one test case per node; sick is a failure).
"""

from __future__ import annotations

import io
import json
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

from fleetspec.compile.ir import Fleet
from fleetspec.safe_io import UnsafePathError, loads_json, read_bounded
from fleetspec.text import printable, xml_safe_tree

PROGRAM_NAME = "fleetspec-health-check.pyz"
# Per node: its name as the inventory has it (the spec's hostname), JSON out, state untouched.
NODE_ARGS = "--node {{ inventory_hostname }} --format json --read-only"
STATUS_ORDER = ("sick", "unknown", "degraded", "healthy")


class HealthError(RuntimeError):
    """The verdicts could not be gathered at all."""


@dataclass
class FleetHealth:
    fleet: str
    verdicts: dict[str, dict[str, Any]]  # hostname -> the node check's verdict
    unknown: dict[str, str] = field(default_factory=dict)  # hostname -> why there is no verdict

    @property
    def quarantined(self) -> dict[str, dict[str, Any]]:
        """Nodes whose verdict acts (any action but ``none``): never a rollout canary."""
        return {h: v for h, v in self.verdicts.items() if v.get("action", "none") != "none"}

    @property
    def healthy(self) -> bool:
        return not self.quarantined and not self.unknown

    def rows(self) -> list[dict[str, Any]]:
        # superseded: kernel-log lines a live reading overrules (classify.supersede), shown as
        # the evidence they are: they give no action.
        rows = [{"node": h, "status": v.get("status", "unknown"), "action": v.get("action", "none"),
                 "faults": v.get("faults", []), "errors": v.get("errors", []),
                 "superseded": v.get("superseded", [])} for h, v in self.verdicts.items()]
        rows += [{"node": h, "status": "unknown", "action": "none", "faults": [], "errors": [why], "superseded": []}
                 for h, why in self.unknown.items()]
        return sorted(rows, key=lambda r: (STATUS_ORDER.index(r["status"]) if r["status"] in STATUS_ORDER else 9,
                                           r["node"]))


MAX_VERDICT_BYTES = 16 * 1024 * 1024  # one node's verdict is a few kilobytes
MAX_REPORT_BYTES = 1024 * 1024 * 1024  # a fleet's report (plan --health): as a state or a saved plan
FAULT_TEXT = ("class", "device", "detail", "action")
SUPERSEDED_TEXT = ("class", "device", "detail", "by")  # a fault a live reading overrules, and that reading


def verdict_problem(data: Any) -> str | None:
    """What makes ``data`` not a node check verdict the table, JSON and JUnit can show
    (node_side/classify.py ``verdict``), or None. A verdict comes from a node: any shape."""
    if not isinstance(data, dict) or "status" not in data:
        return "not a node check verdict (no status)"
    if data["status"] not in STATUS_ORDER:
        return f"status must be one of {', '.join(STATUS_ORDER)}"
    if not isinstance(data.get("action", "none"), str):
        return "action is not a string"
    faults, errors = data.get("faults", []), data.get("errors", [])
    if not isinstance(faults, list) or not all(
            isinstance(f, dict) and all(isinstance(f.get(k), str) for k in FAULT_TEXT) for f in faults):
        return "faults must be a list of records with class, device, detail and action strings"
    if not isinstance(errors, list) or not all(isinstance(e, str) for e in errors):
        return "errors must be a list of strings"
    superseded = data.get("superseded", [])
    if not isinstance(superseded, list) or not all(
            isinstance(f, dict) and all(isinstance(f.get(k), str) for k in SUPERSEDED_TEXT) for f in superseded):
        return "superseded must be a list of records with class, device, detail and by strings"
    return None


def from_dir(fleet: Fleet, directory: Path) -> FleetHealth:
    directory = Path(directory)
    if not directory.is_dir():
        raise HealthError(f"{directory}: not a directory of <hostname>.json verdicts")
    verdicts: dict[str, dict[str, Any]] = {}
    unknown: dict[str, str] = {}
    for path in sorted(directory.glob("*.json")):
        try:
            data = loads_json(read_bounded(path, MAX_VERDICT_BYTES))
        except (OSError, ValueError, UnsafePathError) as exc:  # JSON, UTF-8 and nesting errors are ValueErrors
            text = str(exc)
            unknown[path.stem] = f"{path}: unreadable verdict ({text if len(text) <= 200 else text[:197] + '...'})"
            continue
        problem = verdict_problem(data)
        if problem is not None:
            unknown[path.stem] = f"{path}: {problem}"
            continue
        verdicts[path.stem] = data
    # A fleet node without a verdict file is a finding (unknown), never dropped: a fleet
    # whose sick node printed nothing must not read as healthy (#26 item 8).
    return _against_fleet(fleet, verdicts, unknown, [n.hostname for n in fleet.nodes],
                          missing=f"no verdict: {directory}/<hostname>.json is absent (the node check did not run "
                                  "there, or its --format json output was not collected)")


def from_inventory(fleet: Fleet, inventory: Path | list[Path], hosts: list[str] | None = None,
                   forks: int = 20) -> FleetHealth:
    hosts = hosts if hosts is not None else [n.hostname for n in fleet.nodes]
    verdicts, unknown = _run_on_nodes(fleet, inventory, hosts, forks)
    return _against_fleet(fleet, verdicts, unknown, hosts,
                          missing="no verdict (not in the inventory, or Ansible skipped it)")


def from_lab(fleet: Fleet, lab_dir: Path, forks: int = 20) -> FleetHealth:
    from fleetspec.lab.fleet import LabHandle, LabSetupError

    try:
        handle = LabHandle.load(lab_dir)
    except LabSetupError as exc:
        raise HealthError(str(exc)) from None
    return from_inventory(fleet, handle.inventory_overlay, [h for h in handle.hosts if fleet.node(h)], forks)


def _against_fleet(fleet: Fleet, verdicts: dict, unknown: dict, hosts: list[str], missing: str) -> FleetHealth:
    for host in list(verdicts) + list(unknown):
        if fleet.node(host) is None:
            unknown[host] = f"{host} is not a node of fleet {fleet.name!r}"
            verdicts.pop(host, None)
    for host in hosts:
        if host not in verdicts and host not in unknown:
            unknown[host] = missing
    return FleetHealth(fleet.name, dict(sorted(verdicts.items())), dict(sorted(unknown.items())))


def _run_on_nodes(fleet: Fleet, inventory: Path | list[Path], hosts: list[str], forks: int) -> tuple[dict, dict]:
    from fleetspec.ansible_adhoc import AdhocError, run_script

    try:
        results = run_script(inventory, hosts, PROGRAM_NAME, node_check_program(fleet), NODE_ARGS, forks)
    except AdhocError as exc:
        raise HealthError(str(exc)) from None
    verdicts: dict[str, dict] = {}
    unknown: dict[str, str] = {}
    for host, res in results.items():
        # The node check exits 1 on a sick node: Ansible calls that failed, the JSON is still the verdict.
        try:
            verdict = json.loads(res.stdout) if res.status != "unreachable" else None
        except json.JSONDecodeError:
            verdict = None
        problem = verdict_problem(verdict) if verdict is not None else "no verdict"
        if problem is None:
            verdicts[host] = verdict  # type: ignore[assignment]
        elif isinstance(verdict, dict):
            unknown[host] = f"the node check's verdict is malformed: {problem}"
        elif res.status == "unreachable":
            unknown[host] = f"unreachable: {res.last_line()}"
        else:
            unknown[host] = f"the node check gave no verdict: {res.last_line()}"
    return verdicts, unknown


def node_check_program(fleet: Fleet) -> bytes:
    """The node check as one file Python runs (a zip application, PEP 441): the stdlib
    modules the ``fleet_health`` role installs and the spec's policy. Deterministic bytes."""
    from fleetspec.render.health import NODE_MODULES, node_config

    if fleet.health is None:
        raise HealthError(f"fleet {fleet.name!r} has no spec.health: there is no health policy to check nodes against")
    source = Path(__file__).resolve().parents[2]
    main = (
        '"""fleetspec health: the node check with the fleet\'s policy, run once, read-only."""\n'
        "import json\nimport sys\n\nfrom fleetspec.node_side import node_check\n\n"
        f"POLICY = {json.dumps(json.dumps(node_config(fleet), sort_keys=True))}\n"
        "sys.exit(node_check.main(sys.argv[1:], config=json.loads(POLICY)))\n"
    )
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in [("__main__.py", main.encode())] + [(m, (source / m).read_bytes()) for m in NODE_MODULES]:
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type, info.external_attr = zipfile.ZIP_DEFLATED, 0o644 << 16
            archive.writestr(info, data)
    return buffer.getvalue()


def quarantined_from_report(report: dict[str, Any]) -> dict[str, str]:
    """{node: "<action> <fault class>"} for every node a health report says needs an action."""
    if not isinstance(report, dict) or not isinstance(report.get("nodes"), list):
        raise ValueError("no 'nodes' list")
    out = {}
    for i, row in enumerate(report["nodes"]):
        if not (isinstance(row, dict) and isinstance(row.get("node"), str)
                and isinstance(row.get("action", "none"), str) and isinstance(row.get("faults", []), list)
                and all(isinstance(f, dict) for f in row.get("faults", []))):
            raise ValueError(f"nodes[{i}] is not a node row (node and action strings, faults records)")
        if row.get("action", "none") != "none":
            first = next((f for f in row.get("faults", []) if f.get("action") == row["action"]), {})
            out[row["node"]] = f"{row['action']} {first.get('class', '')}".strip()
    return out


# ---------------------------------------------------------------- reports


def to_json(health: FleetHealth) -> dict[str, Any]:
    return {"fleet": health.fleet, "healthy": health.healthy, "quarantined": sorted(health.quarantined),
            "nodes": health.rows()}


def to_text(health: FleetHealth) -> str:
    lines = [f"{'NODE':<20} {'STATUS':<9} {'ACTION':<18} FAULTS"]
    for row in health.rows():
        faults = "; ".join(f"{f['class']} {f['device']}: {f['detail']}" for f in row["faults"]) or "-"
        if row["errors"] and row["status"] == "unknown":
            faults = row["errors"][0]
        lines.append(f"{row['node']:<20} {row['status']:<9} {row['action']:<18} {faults}")
        lines += [f"{'':<20} {'':<9} {'superseded':<18} {_superseded(f)}" for f in row["superseded"]]
    q = health.quarantined
    lines.append(f"{len(health.verdicts) + len(health.unknown)} nodes: {len(q)} quarantined"
                 f"{' (' + ', '.join(sorted(q)) + ')' if q else ''}, {len(health.unknown)} without a verdict")
    return printable("\n".join(lines) + "\n")  # a verdict's text comes from the node: no ESC reaches the terminal


def to_junit(health: FleetHealth) -> str:
    rows = health.rows()
    suite = ET.Element("testsuite", name=f"fleetspec-health-{health.fleet}", tests=str(len(rows)),
                       failures=str(sum(r["action"] != "none" for r in rows)),
                       errors=str(sum(r["status"] == "unknown" for r in rows)))
    for row in rows:
        case = ET.SubElement(suite, "testcase", classname=f"health.{health.fleet}", name=row["node"])
        detail = "\n".join([*(f"{f['action']} {f['class']} {f['device']}: {f['detail']}" for f in row["faults"]),
                            *(f"superseded {_superseded(f)}" for f in row["superseded"])])
        if row["status"] == "unknown":
            ET.SubElement(case, "error", message="; ".join(row["errors"]) or "no verdict")
        elif row["action"] != "none":
            named = row["faults"][0]["class"] if row["faults"] else "no fault named"
            ET.SubElement(case, "failure", message=f"{row['action']}: {named}").text = detail
        elif detail:
            ET.SubElement(case, "system-out").text = detail
    xml_safe_tree(suite)  # a control character from a node would make the report unreadable XML
    return ET.tostring(suite, encoding="unicode") + "\n"


def _superseded(fault: dict[str, Any]) -> str:
    """A superseded kernel-log line and the live reading that overrules it."""
    return f"{fault['class']} {fault['device']}: {fault['detail']} [{fault['by']}]"
