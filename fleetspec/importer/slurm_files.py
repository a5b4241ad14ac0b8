"""slurm.conf, gres.conf and topology.conf/topology.yaml as records with their places.

`read_slurm_conf` turns the logical lines of slurm.conf (fleetspec.importer.conf) into
global settings, one `NodeRecord` per host and one `PartitionRecord` per partition, with
``NodeName=DEFAULT`` / ``PartitionName=DEFAULT`` applied as slurmctld applies them (to
the lines after them). Every key is checked against Slurm's parameter lists (the catalog's
``slurm_parameters.yaml``, which `validate` uses for site settings): an unknown key is an
error at its place, with a did-you-mean, never a silent drop.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from fleetspec.importer.conf import (
    Line,
    Pair,
    Problem,
    Where,
    is_full,
    iter_lines,
    read_lines,
    shown_key,
    source_refused,
)
from fleetspec.importer.programs import check_programs
from fleetspec.importer.removed import Implied, read_removed, removed
from fleetspec.node_side.hostlist import HostlistError, expand

# The most hosts one import expands (all hostlists together): the spec's own bound
# (fleetspec.node_side.hostlist.MAX_HOSTS) would let a single line cost seconds.
MAX_IMPORT_HOSTS = 100_000

# slurm.conf line kinds that are not global settings.
_RECORDS = ("nodename", "partitionname", "downnodes", "nodeset", "frontendname", "switchname")


@dataclass
class NodeRecord:
    name: str
    at: Where
    attrs: dict[str, Pair] = field(default_factory=dict)  # canonical key -> pair (DEFAULT ones included)
    # NodeAddr / NodeHostname where they differ from the name (slurm.conf(5): "By default,
    # the NodeAddr will be identical in value to NodeHostname", which defaults to NodeName).
    address: Pair | None = None
    hostname: Pair | None = None


@dataclass
class PartitionRecord:
    name: str
    at: Where
    nodes: list[str] | None  # None: no Nodes= key
    all_nodes: bool
    attrs: dict[str, Pair] = field(default_factory=dict)


@dataclass(frozen=True)
class Controller:
    """A controller line: the host slurmctld runs on (short or long hostname, slurm.conf(5)
    SlurmctldHost) and the address it is reached at, where the file gives one."""

    name: str
    address: str | None
    at: Pair


@dataclass
class SlurmConf:
    settings: dict[str, Pair] = field(default_factory=dict)  # canonical key -> last pair
    controllers: list[Pair] = field(default_factory=list)
    controller_hosts: list[Controller] = field(default_factory=list)  # the same lines, read
    nodes: dict[str, NodeRecord] = field(default_factory=dict)
    partitions: dict[str, PartitionRecord] = field(default_factory=dict)
    records: list[Line] = field(default_factory=list)  # DownNodes, NodeSet, ... (refused by the builder)
    warnings: list[Problem] = field(default_factory=list)  # obsolete keys mapped or dropped


def _spelling(kind: str, key: str) -> str | None:
    from fleetspec.site.slurm import OWNED, parameters

    table = parameters().files[kind]
    owned = {k.lower(): k for k in OWNED[kind]}
    return table.known.get(key.lower()) or (table.added.get(key.lower()) or (None,))[0] or owned.get(key.lower())


def _unknown(kind: str, pair: Pair, what: str, problems: list[Problem]) -> Problem:
    from fleetspec.site.slurm import parameters

    hint = ""
    if not is_full(problems):  # past the cap the problem is only counted: no did-you-mean
        table = parameters().files[kind]
        close = difflib.get_close_matches(pair.key.lower(), list(table.known) + list(table.added), n=1, cutoff=0.8)
        if close:
            hint = f" Did you mean {table.known.get(close[0]) or table.added[close[0]][0]}?"
    return Problem(pair.key_at, f"{shown_key(pair.key)} is not a {what} parameter Slurm knows (slurm.conf(5)); "
                   f"slurmctld would stop on it.{hint} Fix or remove it, then import again")


class _HostBudget:
    def __init__(self) -> None:
        self.left = MAX_IMPORT_HOSTS

    def expand(self, pair: Pair, problems: list[Problem]) -> list[str] | None:
        try:
            hosts = expand(pair.value, limit=self.left)
        except HostlistError as exc:
            problems.append(Problem(pair.value_at, f"{pair.key}={_clip(pair.value)}: {exc}"))
            return None
        self.left -= len(hosts)
        return hosts


def _clip(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def read_slurm_conf(path: Path, problems: list[Problem], release: str | None = None) -> SlurmConf:
    """slurm.conf (and its Includes) as records; ``release`` is the site's Slurm release
    where known: keys it still takes that later Slurm removed are kept (importer.removed)."""
    return slurm_conf_of(iter_lines(path, problems, includes=True, display=str(path)), problems, release)


def slurm_conf_of(lines: Iterable[Line], problems: list[Problem], release: str | None = None) -> SlurmConf:
    """slurm.conf's records from its logical lines (`read_lines`, `text_lines`)."""
    conf = SlurmConf()
    budget = _HostBudget()
    node_default: dict[str, Pair] = {}
    part_default: dict[str, Pair] = {}
    part_lines: list[tuple[Line, dict[str, Pair]]] = []
    implied: list[Implied] = []  # what removed keys stand for (importer.removed)
    for line in lines:
        if is_full(problems):
            break  # the cap (conf.MAX_PROBLEMS): stop reading, the rest is not looked at
        head = line.first().key.lower()
        if head == "nodename":
            _node_line(line, conf, node_default, budget, problems)
        elif head == "partitionname":
            attrs = _attrs(line, "partition", "PartitionName", problems)
            if line.first().value.upper() == "DEFAULT":
                part_default.update(attrs)
            else:
                part_lines.append((line, {**part_default, **attrs}))
        elif head in _RECORDS:
            conf.records.append(line)
        else:
            for pair in line.pairs:
                if pair.key.lower() == "include":
                    problems.append(Problem(pair.key_at, "Include must start its own line: 'Include other.conf'"))
                    continue
                row = removed(pair.key)
                if row is not None:
                    stands_for = read_removed(pair, release, conf.warnings)
                    if stands_for is None:  # the site's release still takes it: kept as written
                        conf.settings[row.key] = pair
                    else:
                        implied += stands_for
                    continue
                canonical = _spelling("slurm.conf", pair.key)
                if canonical is None:
                    problems.append(_unknown("slurm.conf", pair, "slurm.conf", problems))
                elif canonical in ("SlurmctldHost", "ControlMachine", "BackupController"):
                    conf.controllers.append(pair)
                else:
                    conf.settings[canonical] = pair
    for item in implied:
        pair = item.pair
        if pair.key not in conf.settings:
            conf.settings[pair.key] = pair
        elif item.flag and pair.value.lower() not in conf.settings[pair.key].value.lower().split(","):
            old = conf.settings[pair.key]
            conf.settings[pair.key] = Pair(old.key, f"{old.value},{pair.value}", old.key_at, old.value_at)
    _defaults(conf)
    _values(conf, release, problems)
    check_programs(conf.settings, problems, conf.warnings)
    # Partitions last: Nodes= may name hosts defined after the partition line (slurmctld
    # reads the whole file before it builds partitions).
    for line, attrs in part_lines:
        _partition(line, attrs, conf, budget, problems)
    return conf


# src/common/read_config.h: #define DEFAULT_STORAGE_HOST "localhost", which the slurmdbd
# agent (src/plugins/accounting_storage/slurmdbd) connects to when AccountingStorageHost is
# unset: "if (!slurmdbd_conn->rem_host) slurmdbd_conn->rem_host = xstrdup(DEFAULT_STORAGE_HOST)".
DEFAULT_STORAGE_HOST = "localhost"


def _defaults(conf: SlurmConf) -> None:
    """What slurmctld assumes where the file is silent, and what it does to names, each
    with a note at the line it follows from."""
    kind = conf.settings.get("AccountingStorageType")
    if kind is not None and kind.value == "accounting_storage/slurmdbd" and "AccountingStorageHost" not in conf.settings:
        conf.settings["AccountingStorageHost"] = Pair("AccountingStorageHost", DEFAULT_STORAGE_HOST, kind.key_at,
                                                      kind.value_at)
        conf.warnings.append(Problem(kind.value_at, "accounting through slurmdbd without AccountingStorageHost: "
                                     f"slurmctld connects to {DEFAULT_STORAGE_HOST} (Slurm's DEFAULT_STORAGE_HOST), "
                                     "so slurmdbd runs on the controller; read as AccountingStorageHost="
                                     f"{DEFAULT_STORAGE_HOST}", "warning"))
    name = conf.settings.get("ClusterName")
    if name is not None and name.value != name.value.lower():
        conf.warnings.append(Problem(name.value_at, f"ClusterName={name.value}: slurmctld and slurmdbd know this "
                                     f"cluster as {name.value.lower()} (slurm.conf(5): \"any upper case letters in "
                                     "the name will be silently mapped to lower case\"); sacct -M and sacctmgr "
                                     f"name it {name.value.lower()}", "warning"))
    # SlurmctldHost=name(addr), or ControlMachine + ControlAddr, BackupController + BackupAddr.
    addr = {"ControlMachine": conf.settings.get("ControlAddr"), "BackupController": conf.settings.get("BackupAddr")}
    for pair in conf.controllers:
        host, _, rest = pair.value.partition("(")
        if rest:
            given: str | None = rest.rstrip(")")
        else:
            beside = addr.get(_spelling("slurm.conf", pair.key) or "")
            given = beside.value if beside is not None else None
        conf.controller_hosts.append(Controller(host, given or None, pair))


# slurm.conf(5) of 22.05.8, AccountingStorageEnforce: "Valid options are any combination of
# associations, limits, nojobs, nosteps, qos, safe, and wckeys, or all"; 22.05.8 stops on
# any other word ("Invalid parameter for AccountingStorageEnforce: limit", SLAC's 2020
# file). Older releases are not checked: no artefact read here says what they took.
def _task_plugin_param(conf: SlurmConf, release: str | None) -> None:
    from dataclasses import replace

    from fleetspec.versions import parse_version

    pair = conf.settings.get("TaskPluginParam")
    if pair is None or (release and (parse_version(release) or (0,))[:2] < _ENFORCE_FROM):
        return  # an older release's file keeps what that release took
    words = [w for w in pair.value.split(",") if w.strip()]
    kept = [w for w in words if w.strip().split("=", 1)[0].lower() in _TASK_PARAMS]
    if len(kept) == len(words):
        return
    gone = ", ".join(_clip(w, 20) for w in words if w not in kept)
    conf.warnings.append(Problem(pair.value_at, f"TaskPluginParam={_clip(pair.value)}: {gone} dropped: Slurm 22.05 "
                                 "and later stop on it (\"Bad TaskPluginParam\"; slurm.conf(5) takes None, Sockets, "
                                 "Cores, Threads, SlurmdOffSpec, Verbose, Autobind); "
                                 + ("the rest is kept" if kept else "the key is left to Slurm's default"),
                                 "warning"))
    if kept:
        conf.settings["TaskPluginParam"] = replace(pair, value=",".join(kept))
    else:
        del conf.settings["TaskPluginParam"]


_ENFORCE = ("associations", "limits", "nojobs", "nosteps", "qos", "safe", "wckeys", "all")
_ENFORCE_FROM = (22, 5)


# slurm.conf(5) of 22.05.8 (Debian's slurm-client), TaskPluginParam: None, Sockets, Cores,
# Threads, SlurmdOffSpec, Verbose and Autobind=...; 22.05.8, 24.11.5 and 26.05.5 each stop on
# the older "Sched" ("Bad TaskPluginParam: Sched": BioMedIA's and NVIDIA circe's files, run
# on their real slurmctld). The render targets 22.05 or later, so the word is dropped there
# with a warning at its place, never passed on.
_TASK_PARAMS = ("none", "sockets", "cores", "threads", "slurmdoffspec", "verbose", "autobind")


def _values(conf: SlurmConf, release: str | None, problems: list[Problem]) -> None:
    """Values the site's release refuses, where the importer knows the release's list."""
    from fleetspec.versions import parse_version

    _task_plugin_param(conf, release)
    pair = conf.settings.get("AccountingStorageEnforce")
    if pair is None or (release and (parse_version(release) or (0,))[:2] < _ENFORCE_FROM):
        return
    for word in pair.value.split(","):
        if word.strip().lower() not in _ENFORCE:
            close = difflib.get_close_matches(word.strip().lower(), _ENFORCE, n=1, cutoff=0.6)
            hint = f" Did you mean {close[0]}?" if close else ""
            said = (f"AccountingStorageEnforce={_clip(pair.value)}: '{_clip(word, 20)}' is not one of "
                    f"{', '.join(_ENFORCE)}; slurmctld 22.05 and later stop on it (\"Invalid parameter for "
                    f"AccountingStorageEnforce\").{hint}")
            if release:  # the site's release is 22.05 or later: it would not start
                problems.append(Problem(pair.value_at, said))
            else:
                conf.warnings.append(Problem(pair.value_at, said + " Which release runs this file decides", "warning"))
            return


def _attrs(line: Line, kind: str, head: str, problems: list[Problem]) -> dict[str, Pair]:
    attrs: dict[str, Pair] = {}
    for pair in line.pairs[1:]:
        canonical = _spelling(kind, pair.key)
        if canonical is None:
            problems.append(_unknown(kind, pair, f"{head}", problems))
            continue
        attrs[canonical] = pair
    return attrs


def _node_line(line: Line, conf: SlurmConf, default: dict[str, Pair], budget: _HostBudget,
               problems: list[Problem]) -> None:
    attrs = _attrs(line, "node", "NodeName", problems)
    head = line.first()
    if head.value.upper() == "DEFAULT":
        default.update(attrs)
        return
    hosts = budget.expand(head, problems)
    if hosts is None:
        return
    merged = {**default, **attrs}
    where_to = {key: _addresses(merged.pop(key), hosts, budget, problems)
                for key in ("NodeAddr", "NodeHostname") if key in merged}
    if any(v is None for v in where_to.values()):
        return
    for i, host in enumerate(hosts):
        if host in conf.nodes:
            problems.append(Problem(head.value_at, f"node {host} is defined twice (first at "
                                    f"{conf.nodes[host].at}); slurmctld refuses that. Keep one NodeName line "
                                    "for it"))
            continue
        rec = conf.nodes[host] = NodeRecord(host, head.value_at, dict(merged))
        for key, pairs in where_to.items():
            pair = pairs[i]  # type: ignore[index]
            if pair.value == host:
                continue  # NodeAddr=gpu01 on gpu01: what Slurm assumes anyway
            if key == "NodeAddr":
                rec.address = pair
            else:
                rec.hostname = pair
            conf.warnings.append(Problem(pair.value_at, f"{key}={pair.value}: slurmctld reaches node {host} "
                                         f"{'at' if key == 'NodeAddr' else 'as'} {pair.value}, not by its name "
                                         "(slurm.conf(5)). The spec has no field for a node's address yet: the "
                                         f"rendered slurm.conf names {host} only, so make {host} resolve to "
                                         f"{pair.value} (DNS or /etc/hosts) on the controller and nodes before the "
                                         "first apply", "warning"))


# A host as slurm.conf(5) lets NodeAddr/NodeHostname, controllers and the accounting
# host name it: a short name, a fully qualified domain name or an IP address (v4 or v6).
_HOST = re.compile(r"^(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9._:-]*[A-Za-z0-9])?$")


def is_host(text: str) -> bool:
    """A short name, FQDN or IP address: what Slurm hands getaddrinfo()."""
    return _HOST.match(text) is not None


def _addresses(pair: Pair, hosts: list[str], budget: _HostBudget, problems: list[Problem]) -> list[Pair] | None:
    """One address per host of the NodeName line, in order. slurmctld stops on fewer
    (src/common/read_config.c: fatal "At least as many NodeAddr are required as
    NodeName", the same for NodeHostname) and takes the first ones of more."""
    values: list[str] = []
    for part in _split_nodes(pair.value):
        if "[" not in part:  # an FQDN or an IP address is not a hostlist: taken as written
            values.append(part)
            budget.left -= 1
            if budget.left < 0:
                problems.append(Problem(pair.value_at, f"{pair.key}: more than {MAX_IMPORT_HOSTS:,} hosts in one "
                                        "import"))
                return None
            continue
        more = budget.expand(Pair(pair.key, part, pair.key_at, pair.value_at), problems)
        if more is None:
            return None
        values += more
    if len(values) < len(hosts):
        problems.append(Problem(pair.value_at, f"{pair.key}={_clip(pair.value)} names {len(values)} host(s) for "
                                f"{len(hosts)} node(s); slurmctld stops on that (\"At least as many {pair.key} are "
                                "required as NodeName\"): give one per node, in the NodeName's order"))
        return None
    bad = [v for v in values if not is_host(v)]
    if bad:
        problems.append(Problem(pair.value_at, f"{pair.key}={_clip(pair.value)}: {_clip(bad[0])} is not a host "
                                "name, domain name or IP address"))
        return None
    return [Pair(pair.key, v, pair.key_at, pair.value_at) for v in values]


def _partition(line: Line, attrs: dict[str, Pair], conf: SlurmConf, budget: _HostBudget,
               problems: list[Problem]) -> None:
    head = line.first()
    name = head.value
    if name in conf.partitions:
        problems.append(Problem(head.value_at, f"partition {name} is defined twice (first at "
                                f"{conf.partitions[name].at}); keep one line"))
        return
    nodes_pair = attrs.pop("Nodes", None)
    members: list[str] | None = None
    all_nodes = False
    if nodes_pair is not None:
        if nodes_pair.value.upper() == "ALL":
            # Charged like any hostlist (#41 item 7): 300 Nodes=ALL partitions over 100,000
            # nodes would otherwise make an 8.6 KB file cost 30 million memberships.
            if len(conf.nodes) > budget.left:
                problems.append(Problem(nodes_pair.value_at, f"Nodes=ALL: partition {name} takes all "
                                        f"{len(conf.nodes):,} nodes, past the {MAX_IMPORT_HOSTS:,} hosts one import "
                                        "expands (node and partition hostlists together); write fewer partitions "
                                        "over all nodes"))
                return
            budget.left -= len(conf.nodes)
            members, all_nodes = list(conf.nodes), True
        else:
            members = []
            for part in _split_nodes(nodes_pair.value):
                if part in conf.partitions or part.upper() == "ALL":
                    problems.append(Problem(nodes_pair.value_at, f"Nodes={_clip(nodes_pair.value)} names a "
                                            "NodeSet or ALL inside a list; write the hosts"))
                    return
            hosts = budget.expand(nodes_pair, problems)
            if hosts is None:
                return
            unknown = [h for h in hosts if h not in conf.nodes]
            if unknown:
                problems.append(Problem(nodes_pair.value_at, f"partition {name} names "
                                        f"{len(unknown)} host(s) no NodeName line defines ({', '.join(unknown[:5])}"
                                        f"{', ...' if len(unknown) > 5 else ''}); slurmctld refuses that "
                                        "(\"Invalid node names in partition\"). Fix the hostlist"))
                return
            members = list(dict.fromkeys(hosts))
    conf.partitions[name] = PartitionRecord(name, head.value_at, members, all_nodes, attrs)


def _split_nodes(value: str) -> list[str]:
    depth, start, parts = 0, 0, []
    for i, ch in enumerate(value):
        depth += ch == "["
        depth -= ch == "]"
        if ch == "," and depth == 0:
            parts.append(value[start:i])
            start = i + 1
    parts.append(value[start:])
    return parts


# ---------------------------------------------------------------------------------
# gres.conf


@dataclass(frozen=True)
class GresLine:
    at: Where
    name: str  # gpu, mps, shard, ...
    type: str | None
    count: int | None
    files: tuple[str, ...]
    hosts: tuple[str, ...] | None  # None: every node
    autodetect: str | None


# gres.conf(5) keys; "CPUs" is the older name of Cores: src/common/gres.c's option table
# once read {"CPUs", S_P_STRING}, /* CPUs to bind to Gres resource */ and slurmd still
# takes it (real files: yyuzhongpv/GPU-Cluster-Configuration's gres.conf, in
# shared/brownfield/dgx1-cluster-2017).
_GRES_KEYS = {"nodename": "NodeName", "name": "Name", "type": "Type", "file": "File", "count": "Count",
              "cores": "Cores", "cpus": "Cores", "corespecs": "CoreSpecs", "autodetect": "AutoDetect",
              "links": "Links", "flags": "Flags", "multiplefiles": "MultipleFiles"}
# Device files a GPU's File= may name: NVIDIA character devices and AMD render nodes.
_DEVICE_PREFIXES = ("/dev/nvidia", "/dev/dri/renderD")


def read_gres_conf(path: Path, problems: list[Problem]) -> list[GresLine]:
    budget = _HostBudget()
    out: list[GresLine] = []
    for line in read_lines(path, problems):
        attrs: dict[str, Pair] = {}
        for pair in line.pairs:
            canonical = _GRES_KEYS.get(pair.key.lower())
            if canonical is None:
                problems.append(Problem(pair.key_at, f"{shown_key(pair.key)} is not a gres.conf parameter (gres.conf(5): "
                                        f"{', '.join(sorted(set(_GRES_KEYS.values())))}); fix or remove it"))
                continue
            attrs[canonical] = pair
        hosts = None
        if "NodeName" in attrs:
            expanded = budget.expand(attrs["NodeName"], problems)
            if expanded is None:
                continue
            hosts = tuple(expanded)
        auto = attrs.get("AutoDetect")
        if "Name" not in attrs:
            if auto is not None and len(attrs) <= 2:
                out.append(GresLine(line.at, "", None, None, (), hosts, auto.value))
                continue
            problems.append(Problem(line.at, "a gres.conf line without Name= (gpu, mps, shard, ...); add it"))
            continue
        count = None
        if "Count" in attrs:
            text = attrs["Count"].value
            multiplier = {"k": 1024, "m": 1024**2, "g": 1024**3}.get(text[-1:].lower(), 1)
            digits = text[:-1] if multiplier > 1 else text
            if not digits.isdigit() or len(digits) > 12:
                problems.append(Problem(attrs["Count"].value_at, f"Count={_clip(text)} is not a count; write a "
                                        "number"))
                continue
            count = int(digits) * multiplier
        files: tuple[str, ...] = ()
        if "File" in attrs:
            pair = attrs["File"]
            files = tuple(_expand_files(pair, problems) or ())
            if not files:
                continue
        out.append(GresLine(line.at, attrs["Name"].value, attrs["Type"].value if "Type" in attrs else None, count,
                            files, hosts, auto.value if auto else None))
    return out


def _expand_files(pair: Pair, problems: list[Problem]) -> list[str] | None:
    """``/dev/nvidia[0-3]`` -> four paths; only NVIDIA and AMD GPU device files."""
    out: list[str] = []
    for part in _split_nodes(pair.value):
        if not part.startswith(_DEVICE_PREFIXES) and not part.startswith("/dev/"):
            problems.append(Problem(pair.value_at, f"File={_clip(part)} is not a device file under /dev"))
            return None
        head, _, rest = part.partition("[")
        if not rest:
            out.append(part)
            continue
        body, _, tail = rest.partition("]")
        numbers: list[int] = []
        for item in body.split(","):
            lo, _, hi = item.partition("-")
            if not lo.isdigit() or (hi and not hi.isdigit()) or len(lo) > 4 or len(hi) > 4:
                problems.append(Problem(pair.value_at, f"File={_clip(part)}: '{item}' is not a number or range"))
                return None
            numbers += range(int(lo), int(hi or lo) + 1)
        if len(numbers) > 1024:
            problems.append(Problem(pair.value_at, f"File={_clip(part)} names {len(numbers)} devices; at most 1024"))
            return None
        out += [f"{head}{n}{tail}" for n in numbers]
    return out


# ---------------------------------------------------------------------------------
# topology.conf (tree) and topology.yaml (block)


@dataclass(frozen=True)
class Switch:
    name: str
    at: Where
    nodes: tuple[str, ...]
    switches: tuple[str, ...]


def read_topology_conf(path: Path, problems: list[Problem]) -> list[Switch]:
    budget = _HostBudget()
    out: list[Switch] = []
    for line in read_lines(path, problems):
        attrs = {p.key.lower(): p for p in line.pairs}
        unknown = [p for p in line.pairs if p.key.lower() not in ("switchname", "nodes", "switches", "linkspeed",
                                                                  "blockname", "blocksizes")]
        if unknown:
            problems.append(Problem(unknown[0].key_at, f"{shown_key(unknown[0].key)} is not a topology.conf parameter "
                                    "(SwitchName, Switches, Nodes, LinkSpeed); fix or remove it"))
            continue
        if "switchname" not in attrs:
            problems.append(Problem(line.at, "fleetspec reads tree topologies (SwitchName= lines) from "
                                    "topology.conf; for blocks give topology.yaml"))
            continue
        nodes = budget.expand(attrs["nodes"], problems) if "nodes" in attrs else []
        switches = budget.expand(attrs["switches"], problems) if "switches" in attrs else []
        if nodes is None or switches is None:
            continue
        out.append(Switch(attrs["switchname"].value, line.at, tuple(nodes), tuple(switches)))
    return out


@dataclass(frozen=True)
class Block:
    name: str
    at: Where
    nodes: tuple[str, ...]


def read_topology_yaml(path: Path, problems: list[Problem]) -> tuple[list[Switch], list[Block]]:
    """topology.yaml(5) (Slurm 25.05+): tree switches (``nodes`` or ``children``) and blocks.
    Read with the spec loader (bounded, no object tags, alias bombs refused), so every
    problem has its line."""
    from fleetspec.spec.loader import SpecLoadError, load_file

    name = str(path)
    refused = source_refused(path, top=True, suffixes=(".yaml", ".yml"))
    if refused:
        problems.append(Problem(Where(name, 1, 1), refused))
        return [], []
    try:
        loaded = load_file(path)
    except SpecLoadError as exc:
        problems.append(Problem(Where(exc.file, exc.line, exc.column), exc.message))
        return [], []

    def at(*where: str | int, prefer: str = "value") -> Where:
        pos = loaded.source.locate(where, prefer=prefer)
        return Where(name, pos.line, pos.column)

    budget = _HostBudget()
    switches: list[Switch] = []
    blocks: list[Block] = []
    if not isinstance(loaded.data, list):
        problems.append(Problem(Where(name, 1, 1), "topology.yaml is a list of topologies (topology.yaml(5))"))
        return [], []
    for i, topo in enumerate(loaded.data):
        if not isinstance(topo, dict) or not isinstance(topo.get("topology"), str):
            problems.append(Problem(at(i), "each topology is a mapping that starts with 'topology: NAME'"))
            continue
        unknown = sorted(set(topo) - {"topology", "cluster_default", "tree", "block", "flat"})
        if unknown:
            problems.append(Problem(at(i, unknown[0], prefer="key"), f"'{unknown[0]}' is not a topology.yaml attribute "
                                    "(topology, cluster_default, tree, block, flat); fix or remove it"))
            continue
        tree, block = topo.get("tree"), topo.get("block")
        for j, sw in enumerate((tree or {}).get("switches") or [] if isinstance(tree, dict) else []):
            if not isinstance(sw, dict) or not isinstance(sw.get("switch"), str):
                problems.append(Problem(at(i, "tree", "switches", j), "a switch is a mapping with 'switch: NAME'"))
                continue
            nodes = _yaml_hosts(sw.get("nodes"), at(i, "tree", "switches", j, "nodes"), budget, problems)
            children = _yaml_hosts(sw.get("children"), at(i, "tree", "switches", j, "children"), budget, problems)
            switches.append(Switch(sw["switch"], at(i, "tree", "switches", j), tuple(nodes), tuple(children)))
        for j, b in enumerate((block or {}).get("blocks") or [] if isinstance(block, dict) else []):
            if not isinstance(b, dict) or not isinstance(b.get("block"), str):
                problems.append(Problem(at(i, "block", "blocks", j), "a block is a mapping with 'block: NAME'"))
                continue
            nodes = _yaml_hosts(b.get("nodes"), at(i, "block", "blocks", j, "nodes"), budget, problems)
            blocks.append(Block(b["block"], at(i, "block", "blocks", j), tuple(nodes)))
    return switches, blocks


def _yaml_hosts(value: object, where: Where, budget: _HostBudget, problems: list[Problem]) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, str):
        problems.append(Problem(where, "write a hostlist string (node[01-04])"))
        return []
    return budget.expand(Pair("nodes", value, where, where), problems) or []
