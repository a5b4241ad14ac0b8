"""``import slurm --live``: what the running slurmctld holds, over what its files say.

Read with Slurm's own clients, where apply and ``plan --live`` run them (here, or on the
first controller through Ansible: `fleetspec.apply.control`), argv lists, no shell:

- ``scontrol show config``: every setting slurmctld runs with, ``SLURM_VERSION`` and
  ``SLURM_CONF`` (the file it read);
- ``scontrol --all --future --oneliner show node``: each node's CPU layout, memory, GRES,
  features, ``State`` and ``Reason`` and the slurmd ``Version`` it registered with
  (scontrol(1) of 22.05.8: ``-a`` also shows hidden partitions' nodes, ``-F`` FUTURE ones);
- ``scontrol --all --oneliner show partition``: members, ``Default``, ``MaxTime``,
  ``State`` and every other option, hidden partitions included;
- ``slurmd -V`` where a slurmd is installed beside the controller.

22.05.8 has no JSON output (``scontrol show node --json``: "unrecognized option '--json'",
the Debian 12 slurmctld the tests run), so the ``--oneliner`` text is read: one record per
line, ``Key=Value`` fields. A ``Reason`` holds blanks and ``=``, so it is cut first by the
``[user@time]`` mark scontrol closes it with.

What only the files hold (gres.conf, topology, ``Include``d files, the controllers'
names) is still read from them. `overlay` puts the live value on the file's record where
the two differ, with a warning at the file's line: the spec then writes what runs.
Everything slurmctld prints is bounded (size, record count, field length) like any other
input: it is the word of a daemon on another machine.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from fleetspec.apply.control import ControlError
from fleetspec.importer.conf import Pair, Problem, Where
from fleetspec.importer.node_state import STATES, clean_reason
from fleetspec.importer.slurm_files import MAX_IMPORT_HOSTS, NodeRecord, PartitionRecord, SlurmConf
from fleetspec.node_side.hostlist import HostlistError, compress, expand

MAX_OUTPUT = 64 * 1024 * 1024  # one client's answer: 100,000 nodes of ~1 KB each
MAX_FIELD = 4096
_FIELD = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z0-9_]*)=")
# "Reason=disk replaced: RMA 4711 [root@2026-12-06T05:18:12]": scontrol prints who set a
# reason and when after it; a reason from slurm.conf has no such mark, and 22.05.8 prints
# Reason last on the line (both seen from the tests' slurmctld), so it then runs to the end.
_REASON = re.compile(r"(?:^|\s)Reason=(.*?)(?: \[([^\]\s]*)@([0-9T:-]+)\](?=\s|$)|$)")
_TIME = re.compile(r"^(?:(\d{1,5})-)?(\d{1,6})(?::(\d{1,6}))?(?::(\d{1,6}))?$")
_UNIT = re.compile(r"^(.*?)\s+(sec|min|nodes/min)$")
_UID = re.compile(r"^(.*?)\(\d+\)$")
# Keys scontrol prints in another shape than slurm.conf takes, or that name this run rather
# than the configuration (SlurmctldHost[0] is the controllers, read from the files).
_NOT_COMPARED = {"slurmctldhost", "controlmachine", "backupcontroller", "controladdr", "backupaddr", "include"}

Runner = Callable[[Sequence[str]], Any]  # argv -> CompletedProcess (fleetspec.apply.control.Runner)


class LiveError(Exception):
    """slurmctld could not be read (no client, no answer, an answer out of bounds)."""


@dataclass(frozen=True)
class LiveCluster:
    """What the running slurmctld holds, by key as scontrol prints it."""

    where: str  # "scontrol here", "scontrol on ctl-01"
    config: dict[str, str]
    nodes: dict[str, dict[str, str]]  # name -> fields (Reason cut out: reasons)
    reasons: dict[str, str]
    partitions: dict[str, dict[str, str]]
    slurmd_version: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def slurm_version(self) -> str | None:
        version = self.config.get("SLURM_VERSION", "")
        return version if re.fullmatch(r"[0-9]{1,4}(\.[0-9]{1,4}){1,3}", version) else None

    @property
    def slurm_conf(self) -> str | None:
        return self.config.get("SLURM_CONF") or None


def read_live(run: Runner, where: str) -> LiveCluster:
    """Ask slurmctld (through ``run``) for its configuration, nodes and partitions."""
    config = parse_config(_ask(run, ["scontrol", "show", "config"]))
    if "SLURM_VERSION" not in config:
        raise LiveError("scontrol show config printed no SLURM_VERSION: not a slurmctld's configuration")
    nodes, reasons = {}, {}
    for fields, reason in parse_records(_ask(run, ["scontrol", "--all", "--future", "--oneliner", "show", "node"]),
                                        "NodeName"):
        nodes[fields["NodeName"]] = fields
        if reason is not None:
            reasons[fields["NodeName"]] = reason
    partitions = {f["PartitionName"]: f for f, _ in parse_records(
        _ask(run, ["scontrol", "--all", "--oneliner", "show", "partition"]), "PartitionName")}
    slurmd = None
    try:
        done = run(["slurmd", "-V"])
        match = re.search(r"([0-9]{1,4}(?:\.[0-9]{1,4}){1,3})", str(done.stdout or "")[:200])
        slurmd = match.group(1) if done.returncode == 0 and match else None
    except (ControlError, OSError):  # no slurmd beside the controller is normal: nothing to compare
        slurmd = None
    return LiveCluster(where, config, nodes, reasons, partitions, slurmd)


def _ask(run: Runner, argv: list[str]) -> str:
    try:
        done = run(argv)
    except (ControlError, OSError) as exc:  # the runner says why (not on PATH, timed out, Ansible)
        raise LiveError(f"{' '.join(argv)}: {exc}") from None
    out = str(done.stdout or "")
    if done.returncode != 0:
        tail = (str(done.stderr or "").strip().splitlines() or ["no output"])[-1][:300]
        raise LiveError(f"{' '.join(argv)} failed (exit {done.returncode}): {tail}")
    if len(out) > MAX_OUTPUT:
        raise LiveError(f"{' '.join(argv)} printed {len(out):,} characters; fleetspec reads at most {MAX_OUTPUT:,}")
    return out


def parse_config(text: str) -> dict[str, str]:
    """``Key = Value`` lines of ``scontrol show config`` (the header and blank lines skipped)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        key = key.strip()
        if sep and re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*(\[[0-9]+\])?", key) and len(value) <= MAX_FIELD:
            out[key] = value.strip()
    return out


def parse_records(text: str, head: str) -> list[tuple[dict[str, str], str | None]]:
    """``--oneliner`` records that start with ``head=``: (fields, the Reason text or None)."""
    records = []
    for line in text.splitlines():
        if not line.startswith(f"{head}="):
            continue
        if len(records) >= MAX_IMPORT_HOSTS:
            raise LiveError(f"scontrol printed more than {MAX_IMPORT_HOSTS:,} {head} records; fleetspec imports "
                            "at most that many")
        reason = None
        match = _REASON.search(line)
        if match is not None:
            reason = match.group(1)
            line = line[: match.start()] + line[match.end():]
        marks = list(_FIELD.finditer(line))
        fields = {}
        for i, mark in enumerate(marks):
            end = marks[i + 1].start() if i + 1 < len(marks) else len(line)
            fields[mark.group(1)] = line[mark.end():end].strip()[:MAX_FIELD]
        if fields.get(head):
            records.append((fields, reason))
    return records


# --- live over files ------------------------------------------------------------------------


def overlay(conf: SlurmConf, live: LiveCluster, path: Path) -> list[Problem]:
    """Put what slurmctld runs on ``conf``'s records where it differs from the files; each
    such difference is a warning at the file's line. Returns the warnings."""
    notes: list[Problem] = []
    _settings(conf, live, notes)
    _nodes(conf, live, notes, path)
    _partitions(conf, live, notes, path)
    versions = {f.get("Version") for f in live.nodes.values() if f.get("Version") not in (None, "", "(null)")}
    if live.slurm_version and versions - {live.slurm_version}:
        notes.append(Problem(None, f"slurmctld runs Slurm {live.slurm_version}; its nodes' slurmd report "
                             f"{', '.join(sorted(v for v in versions if v))}: the spec's slurm.version is the "
                             "controller's", "warning"))
    if live.slurmd_version and live.slurm_version and live.slurmd_version != live.slurm_version:
        notes.append(Problem(None, f"slurmd -V beside the controller says {live.slurmd_version}, slurmctld "
                             f"{live.slurm_version}", "warning"))
    return notes


def _differs(file_value: str, live_value: str) -> bool:
    return _norm(file_value) != _norm(live_value)


def _norm(value: str) -> str:
    """One spelling for what slurm.conf and scontrol write differently: case, ``(null)``,
    units (``120 sec``), ``root(0)``, list order, time formats (``7-0`` and ``7-00:00:00``)."""
    text = value.strip().strip('"')
    if text in ("(null)", "NONE", "N/A"):
        return ""
    for pattern in (_UNIT, _UID):
        match = pattern.match(text)
        if match:
            text = match.group(1)
    seconds = _seconds(text)
    if seconds is not None:
        return f"{seconds}s"
    items = text.lower().split(",")
    return ",".join(sorted(items)) if len(items) > 1 else text.lower()


def _seconds(text: str) -> int | None:
    """A Slurm time (``minutes``, ``m:s``, ``h:m:s``, ``d-h``, ``d-h:m``, ``d-h:m:s``) in seconds."""
    match = _TIME.match(text)
    if match is None:
        return None
    days, a, b, c = match.groups()
    if days is None:
        if b is None:
            return int(a) * 60
        if c is None:
            return int(a) * 60 + int(b)
        return int(a) * 3600 + int(b) * 60 + int(c)
    return int(days) * 86400 + int(a) * 3600 + int(b or 0) * 60 + int(c or 0)


def _writable(value: str) -> str | None:
    """The live value as one slurm.conf token (units and uids dropped), or None."""
    text = value.strip()
    for pattern in (_UNIT, _UID):
        match = pattern.match(text)
        if match:
            text = match.group(1)
    return text if text and text != "(null)" and not re.search(r"[\s\"#\\]", text) else None


def _settings(conf: SlurmConf, live: LiveCluster, notes: list[Problem]) -> None:
    running = {k.lower(): v for k, v in live.config.items()}
    for key, pair in list(conf.settings.items()):
        if key.lower() in _NOT_COMPARED or key.lower() not in running:
            continue
        value = running[key.lower()]
        if not _differs(pair.value, value):
            continue
        token = _writable(value)
        if token is None:
            notes.append(Problem(pair.value_at, f"{key}: the file says {pair.value[:60]!r}, slurmctld shows "
                                 f"{value[:60]!r}; kept as the file says (the running value is not one slurm.conf "
                                 "token)", "warning"))
            continue
        conf.settings[key] = replace(pair, value=token)
        notes.append(Problem(pair.value_at, f"{key}={pair.value[:60]} in the file, {token[:60]} in the running "
                             "slurmctld: the spec takes what runs (the file was changed and not read since, or "
                             "the other way round: scontrol reconfigure reads it)", "warning"))


# slurm.conf NodeName key -> the scontrol field that shows it
_NODE_FIELDS = {"CPUs": "CPUTot", "RealMemory": "RealMemory", "CoresPerSocket": "CoresPerSocket",
                "ThreadsPerCore": "ThreadsPerCore", "Sockets": "Sockets", "Gres": "Gres",
                "Features": "AvailableFeatures", "Feature": "AvailableFeatures", "Weight": "Weight"}


def _gres_items(value: str) -> str:
    """``gpu:h100:2(S:0-1)`` -> ``gpu:h100:2``, the items sorted: what scontrol adds, dropped."""
    items = [re.sub(r"\(.*?\)", "", i).strip().lower() for i in value.split(",")]
    return ",".join(sorted(i for i in items if i and i != "(null)"))


def _nodes(conf: SlurmConf, live: LiveCluster, notes: list[Problem], path: Path) -> None:
    extra = sorted(set(live.nodes) - set(conf.nodes))
    if extra:
        notes.append(Problem(Where(str(path), 1, 1), f"slurmctld runs {len(extra)} node(s) no NodeName line "
                             f"declares ({', '.join(extra[:5])}{', ...' if len(extra) > 5 else ''}: dynamic nodes "
                             "or `scontrol create`); not imported", "warning"))
    said: dict[tuple[Where, str], list[str]] = {}  # one warning per place and difference, naming its hosts

    def say(at: Where, host: str, text: str) -> None:
        said.setdefault((at, text), []).append(host)

    for name, rec in conf.nodes.items():
        fields = live.nodes.get(name)
        if fields is None:
            say(rec.at, name, "in the file, not in the running slurmctld (the file was changed and not read "
                "since): imported from the file")
            continue
        for key, shown in _NODE_FIELDS.items():
            pair = rec.attrs.get(key)
            value = fields.get(shown)
            if pair is None or value is None or (key == "Sockets" and "Boards" in rec.attrs):
                continue
            same = (_gres_items(pair.value) == _gres_items(value) if key == "Gres" else
                    _norm(pair.value) == _norm(value) if key in ("Features", "Feature") else
                    pair.value.strip() == value.strip())
            token = _gres_items(value) if key == "Gres" else _writable(value)
            if same or token is None:
                continue
            rec.attrs[key] = replace(pair, value=token)
            say(pair.value_at, name, f"{key}={pair.value[:60]} in the file, {token[:60]} in the running slurmctld: "
                "the spec takes what runs")
        _node_state(rec, fields, live.reasons.get(name), say)
    for (at, text), hosts in said.items():
        notes.append(Problem(at, f"{compress(hosts)}: {text}", "warning"))


def live_state(shown: str) -> str | None:
    """scontrol's node State (``IDLE+DRAIN``, ``DOWN*``, ``MIXED+DRAIN``, ``IDLE+CLOUD+POWERED_DOWN``)
    as the NodeName State that keeps it (None: in service)."""
    words = [w.rstrip("*~#%!$@^-") for w in shown.upper().split("+")]
    flags = set(words[1:])
    base = words[0] if words else ""
    if "DRAIN" in flags or base in ("DRAIN", "DRAINED", "DRAINING"):
        return "DRAIN"
    if "FAIL" in flags or base in ("FAIL", "FAILING"):
        return "FAIL"
    for state in ("DOWN", "FUTURE"):
        if base == state:
            return state
    if "CLOUD" in flags or base == "CLOUD":
        return "CLOUD"
    return None


def _node_state(rec: NodeRecord, fields: dict[str, str], reason: str | None,
                say: Callable[[Where, str, str], None]) -> None:
    shown = fields.get("State", "")
    state = live_state(shown)
    assert state is None or state in STATES
    file_state = rec.attrs.get("State")
    file_value = file_state.value.upper() if file_state is not None else "UNKNOWN"
    at = file_state.value_at if file_state is not None else rec.at
    if state is None:
        if file_value not in ("UNKNOWN", "CLOUD", "FUTURE"):
            say(at, rec.name, f"State={file_value} in the file, {shown[:40]} in the running slurmctld (resumed "
                "since): the spec keeps it in service")
        rec.attrs.pop("State", None)
        rec.attrs.pop("Reason", None)
        return
    text = ""
    if reason:
        text, changed = clean_reason(reason)
        if changed:
            say(at, rec.name, "slurmctld's Reason holds characters a slurm.conf line cannot quote (a quote, '#', "
                f"a backslash, a control character) or more than 256: kept as {text[:80]!r}")
    rec.attrs["State"] = Pair("State", state, at, at)
    if text:
        rec.attrs["Reason"] = Pair("Reason", text, at, at)
    else:
        rec.attrs.pop("Reason", None)
    if file_value != state:
        say(at, rec.name, f"{shown[:40]} in the running slurmctld" + (f" (Reason: {text[:80]})" if text else "")
            + f", State={file_value} in the file: the spec keeps it {state}")


# slurm.conf PartitionName key -> how scontrol shows it, compared where the file sets it
_PART_ALWAYS = ("Default", "MaxTime", "State")


def _partitions(conf: SlurmConf, live: LiveCluster, notes: list[Problem], path: Path) -> None:
    extra = sorted(set(live.partitions) - set(conf.partitions))
    if extra:
        notes.append(Problem(Where(str(path), 1, 1), f"slurmctld runs partition(s) no PartitionName line declares "
                             f"({', '.join(extra[:5])}: `scontrol create partition`); not imported", "warning"))
    for name, rec in conf.partitions.items():
        fields = live.partitions.get(name)
        if fields is None:
            continue
        _members(rec, fields.get("Nodes", ""), conf, notes)
        keys = set(rec.attrs) | set(_PART_ALWAYS)
        for key in sorted(keys):
            if key in ("Nodes", "PartitionName") or key not in fields:
                continue
            value = fields[key]
            pair = rec.attrs.get(key)
            default = {"Default": "NO", "MaxTime": "UNLIMITED", "State": "UP"}.get(key)
            if pair is None and _norm(value) == _norm(default or ""):
                continue
            if pair is not None and not _differs(pair.value, value):
                continue
            token = _writable(value)
            if token is None:
                continue
            at = pair.value_at if pair is not None else rec.at
            rec.attrs[key] = Pair(key, token, at, at) if pair is None else replace(pair, value=token)
            notes.append(Problem(at, f"partition {name}: {key}={pair.value[:60] if pair else '(not set)'} in the "
                                 f"file, {token[:60]} in the running slurmctld: the spec takes what runs", "warning"))


def _members(rec: PartitionRecord, shown: str, conf: SlurmConf, notes: list[Problem]) -> None:
    if rec.all_nodes or not shown or shown == "(null)":
        return
    try:
        hosts = expand(shown, MAX_IMPORT_HOSTS)
    except HostlistError:
        return  # a shape fleetspec's hostlists do not take: the file's members stand
    hosts = [h for h in dict.fromkeys(hosts) if h in conf.nodes]
    if set(hosts) != set(rec.nodes or []):
        notes.append(Problem(rec.at, f"partition {rec.name}: {len(rec.nodes or [])} node(s) in the file, "
                             f"{len(hosts)} in the running slurmctld (scontrol update partition): the spec takes "
                             "the running members", "warning"))
        rec.nodes = hosts


def runner(mode: str, inventories: Sequence[Path], conf: Path | None) -> tuple[Runner, str]:
    """Where Slurm's clients run, as apply and ``plan --live`` choose (``--slurm-control``):
    ``local`` here, ``controller`` on the first controller the files name through Ansible
    (``-i``), ``auto`` here when scontrol is on PATH, else the controller."""
    import shutil

    from fleetspec.apply.control import ansible_runner_on, local_runner

    if mode == "local" or (mode == "auto" and shutil.which("scontrol")):
        return local_runner(timeout=120), "scontrol here"
    if conf is None or not inventories:
        raise LiveError("--live without scontrol here runs it on the first controller through Ansible: give "
                        "--conf (the controllers are read from it) and -i INVENTORY (how to reach it), or run "
                        "the import on a controller")
    problems: list[Problem] = []
    from fleetspec.importer.slurm_files import read_slurm_conf

    files = read_slurm_conf(conf, problems)
    if not files.controllers:
        raise LiveError(f"{conf}: no SlurmctldHost line names a controller to run scontrol on")
    host = files.controllers[0].value.split("(")[0].strip()
    return ansible_runner_on(list(inventories), host), f"scontrol on {host}"
