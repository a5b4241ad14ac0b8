"""Site Slurm settings: check each key against the parameter list of the spec's Slurm
release, refuse the keys fleetspec owns, keep values as written, and write them into
the rendered files.

The parameter lists are catalog data (``catalog/data/slurm_parameters.yaml``, with
their sources). Keys are case-insensitive, as slurm.conf(5) says; they are rendered in
Slurm's own spelling. A value is one token: Slurm splits a line at whitespace into
``key=value`` pairs and ends it at ``#``, so whitespace, ``#``, quotes and line breaks
in a value could smuggle in another key or cut the line; they are refused.
"""

from __future__ import annotations

import difflib
import functools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

import yaml

from fleetspec.findings import Finding, Severity, SpecPath
from fleetspec.spec.loader import is_secret_name
from fleetspec.versions import parse_version

try:  # libyaml when present: the same data, several times faster to read
    from yaml import CSafeLoader as _Loader
except ImportError:  # pragma: no cover
    from yaml import SafeLoader as _Loader  # type: ignore[assignment]

RULE = "site-settings"
E, W = Severity.ERROR, Severity.WARNING
UNCONFIRMED = "unconfirmed"
Pairs = tuple[tuple[str, str], ...]

# What fleetspec sets itself, per file, and the spec field (or reason) that owns it.
_ACCOUNTING = "spec.slurm.accounting"
_PATHS = "the slurm role (playbooks/roles/slurm) creates and owns this path"
_CGROUP = "jobs are confined by cgroup (tune cgroup.conf with spec.slurm.cgroup_settings)"
OWNED: dict[str, dict[str, str]] = {
    "slurm.conf": {
        "ClusterName": "metadata.name (spec.slurm.cluster_name for a name that is no DNS label)",
        "SlurmctldHost": "spec.slurm.controllers",
        "ControlMachine": "spec.slurm.controllers",
        "ControlAddr": "spec.slurm.controllers",
        "BackupController": "spec.slurm.controllers",
        "BackupAddr": "spec.slurm.controllers",
        "NodeName": "spec.racks[].nodes (NodeName parameters: slurm_settings on a node group)",
        "PartitionName": "spec.slurm.partitions (PartitionName parameters: spec.slurm.partitions.<name>.settings)",
        "DownNodes": "spec.racks[].nodes (fleetspec drains through apply)",
        "NodeSet": "spec.slurm.partitions",
        "GresTypes": "spec.racks[].nodes[].gpu",
        "AccountingStorageType": _ACCOUNTING,
        "AccountingStorageHost": _ACCOUNTING,
        "AccountingStorageBackupHost": _ACCOUNTING,
        "AccountingStoragePort": _ACCOUNTING,
        "AccountingStorageTRES": _ACCOUNTING,
        "AccountingStorageEnforce": _ACCOUNTING,
        "AccountingStorageExternalHost": _ACCOUNTING,
        "AccountingStorageParameters": _ACCOUNTING,
        "AccountingStoragePass": "spec.secrets.slurmdbd_password",
        "AccountingStorageUser": _ACCOUNTING,
        "AccountingStorageLoc": _ACCOUNTING,
        "PriorityType": "spec.slurm.accounting (multifactor with accounting, basic without)",
        "AuthType": "spec.secrets.munge_key (fleetspec runs munge)",
        "AuthInfo": "spec.secrets.munge_key (fleetspec runs munge)",
        "CredType": "spec.secrets.munge_key (fleetspec runs munge)",
        "SlurmUser": "spec.slurm.users.slurm",
        "SlurmdUser": "fleetspec runs slurmd as root, as its playbooks install it",
        "SlurmctldPort": "fleetspec's playbooks and lab use port 6817",
        "SlurmdPort": "fleetspec's playbooks and lab use port 6818",
        "StateSaveLocation": "spec.slurm.state_save_location",
        "SlurmdSpoolDir": _PATHS,
        "SlurmctldPidFile": _PATHS,
        "SlurmdPidFile": _PATHS,
        "SlurmctldLogFile": _PATHS,
        "SlurmdLogFile": _PATHS,
        "SelectType": "typed GPU GRES need select/cons_tres",
        "SelectTypeParameters": "per-GPU memory defaults need CR_Core_Memory",
        "ProctrackType": _CGROUP,
        "TaskPlugin": _CGROUP,
        "JobAcctGatherType": _CGROUP,
        "TopologyPlugin": "spec.fabric and spec.racks[].nvlink_domain",
        "PlugStackConfig": "spec.slurm.containers",
        "HealthCheckProgram": "spec.health",
        "HealthCheckInterval": "spec.health.interval",
        "HealthCheckNodeState": "spec.health.slurm_node_state",
    },
    "partition": {
        "PartitionName": "the key under spec.slurm.partitions",
        "Nodes": "spec.slurm.partitions.<name>.nodes (or the generated membership)",
        "Default": "spec.slurm.partitions.<name>.default",
        "MaxTime": "spec.slurm.partitions.<name>.max_time",
        "State": "spec.slurm.partitions.<name>.state",
        "Topology": "spec.fabric and spec.racks[].nvlink_domain",
    },
    "node": {
        "NodeName": "spec.racks[].nodes[].hosts",
        "NodeHostname": "spec.racks[].nodes[].hosts",
        "NodeAddr": "spec.racks[].nodes[].hosts (name resolution is the site's DNS)",
        "Port": "fleetspec's playbooks and lab use port 6818",
        "CPUs": "spec.racks[].nodes[].cpus",
        "Procs": "spec.racks[].nodes[].cpus",
        "Sockets": "spec.racks[].nodes[].sockets",
        "Boards": "spec.racks[].nodes[].sockets (fleetspec writes the node's board layout)",
        "SocketsPerBoard": "spec.racks[].nodes[].sockets (fleetspec writes the node's board layout)",
        "CoresPerSocket": "spec.racks[].nodes[].cores_per_socket",
        "ThreadsPerCore": "spec.racks[].nodes[].threads_per_core",
        "RealMemory": "spec.racks[].nodes[].memory_gb",
        "Gres": "spec.racks[].nodes[].gpu",
        "Feature": "spec.racks[].nodes[].features",
        "Features": "spec.racks[].nodes[].features",
        "State": "spec.racks[].nodes[].slurm_state (apply drains and resumes through scontrol)",
        "Reason": "spec.racks[].nodes[].slurm_state.reason",
    },
    "cgroup.conf": {
        "ConstrainDevices": "one allocation owner per GPU: a job sees only the GPUs Slurm granted it",
    },
    "slurmdbd.conf": {
        "DbdHost": "spec.slurm.accounting.host",
        "DbdAddr": "spec.slurm.accounting.host",
        "DbdPort": "fleetspec's slurm.conf points slurmctld at port 6819",
        "StorageType": "fleetspec runs MariaDB beside slurmdbd",
        "StorageHost": "fleetspec runs MariaDB beside slurmdbd",
        "StoragePort": "fleetspec runs MariaDB beside slurmdbd",
        "StorageLoc": "fleetspec runs MariaDB beside slurmdbd",
        "StorageUser": "fleetspec runs MariaDB beside slurmdbd",
        "StoragePass": "spec.secrets.slurmdbd_password",
        "StoragePassScript": "spec.secrets.slurmdbd_password",
        "AuthType": "spec.secrets.munge_key (fleetspec runs munge)",
        "AuthInfo": "spec.secrets.munge_key (fleetspec runs munge)",
        "SlurmUser": "spec.slurm.users.slurm",
        "LogFile": _PATHS,
        "PidFile": _PATHS,
    },
}

# What a key does decides whether fleetspec owns it, for every key of every release's
# parameter list (#27 item 4), beside the keys above that another spec field sets. The
# classes follow Slurm's own naming in slurm.conf(5), slurmdbd.conf(5) and cgroup.conf(5):
# - authentication: Auth*, Cred*, TLS*, Cert*, *HttpAuth* select and parameterise how daemons and
#   clients prove who they are (AuthType, AuthAltTypes, AuthAltParameters, TLSType,
#   CertmgrType, ...): fleetspec runs munge and owns that choice;
# - plugin loading: PluginDir (where every plugin is loaded from), PlugStackConfig and
#   *Plugstack (SPANK), and every *Plugin/*Plugins key (code loaded into slurmctld,
#   slurmd, slurmstepd or the clients: CgroupPlugin, JobSubmitPlugins, CliFilterPlugins);
# - addresses: *Addr, *Host, *Hostname, *Port (where daemons listen and whom they trust
#   as their controller or database: SlurmctldAddr, DbdBackupHost, BcastAddr, ...);
# - privilege and credentials: the daemons' and the databases' users (*User) and their
#   passwords (*Pass, *PassScript).
# A site that needs one of these changes the spec field, or fleetspec, in a reviewed change.
_CLASSES: tuple[tuple[re.Pattern[str], str, frozenset[str]], ...] = (
    (re.compile(r"^(Auth|Cred|TLS|Cert)|HttpAuth"), "it selects how Slurm authenticates (fleetspec runs munge: "
     "spec.secrets.munge_key)", frozenset({"slurm.conf", "slurmdbd.conf"})),
    (re.compile(r"(^PluginDir$|Plugins?$|^PlugStackConfig$|Plugstack$)"),
     "it loads code into Slurm's daemons or clients; fleetspec installs and configures Slurm's plugins "
     "(spec.slurm)", frozenset({"slurm.conf", "slurmdbd.conf", "cgroup.conf"})),
    (re.compile(r"(Addr|Host|Hostname|Port)$"), "it sets where Slurm's daemons listen or whom they trust "
     "(spec.slurm.controllers, spec.slurm.accounting, the racks' hosts)",
     frozenset({"slurm.conf", "slurmdbd.conf", "node"})),
    (re.compile(r"(User|Pass|PassScript)$"), "it sets the account or credential a Slurm daemon runs or "
     "connects as (spec.slurm.users, spec.secrets)", frozenset({"slurm.conf", "slurmdbd.conf"})),
)

# Keys fleetspec renders as a default a site may replace (merge_fields/apply_to_conf put
# the site's value on fleetspec's line), each with why that is safe. Every other key the
# renderer writes must be owned: tests/site/test_slurm_owned.py renders fleets of every
# supported release and fails on a rendered key that is in neither.
TUNABLE: dict[str, dict[str, str]] = {
    "slurm.conf": {
        "SchedulerType": "the scheduler's algorithm (backfill by default); no privilege or address",
        "SchedulerParameters": "backfill tuning (bf_window sized to MaxTime by default)",
        "ReturnToService": "when a DOWN node returns; apply drains and resumes explicitly either way",
        "PropagateResourceLimitsExcept": "limits jobs inherit (MEMLOCK kept for RDMA by default)",
        "PrologFlags": "job-start behaviour (Contain is kept where pyxis needs it)",
        "PrologEpilogTimeout": "a timeout",
        "UnkillableStepTimeout": "a timeout",
        "EnforcePartLimits": "which partition limits reject a job at submit",
        "MpiDefault": "the MPI a job gets without --mpi",
        "SwitchType": "the interconnect plugin (switch/nvidia_imex on NVL72 racks); a site may drop it",
        "PriorityFlags": "fair-share tuning",
        "PriorityDecayHalfLife": "fair-share tuning",
        "PriorityMaxAge": "fair-share tuning",
        "PriorityWeightAge": "fair-share tuning",
        "PriorityWeightFairshare": "fair-share tuning",
        "PriorityWeightJobSize": "fair-share tuning",
        "PriorityWeightPartition": "fair-share tuning",
    },
    "partition": {
        "DefCpuPerGPU": "a per-job default", "DefMemPerGPU": "a per-job default",
        "DefaultTime": "a per-job default", "TRESBillingWeights": "accounting weights",
    },
    "node": {},
    "cgroup.conf": {"ConstrainCores": "confinement a site may loosen or keep",
                    "ConstrainRAMSpace": "confinement a site may loosen or keep"},
    "slurmdbd.conf": {"PurgeJobAfter": "retention", "PurgeStepAfter": "retention"},
}


def owner(kind: str, key: str) -> tuple[str, str] | None:
    """(Slurm's spelling, why fleetspec owns it) for an owned key of ``kind``; None when a
    site may set it. Keys another spec field sets come first, then the classes above."""
    low = key.lower()
    for name, why in OWNED[kind].items():
        if name.lower() == low:
            return name, why
    spelling = parameters().files[kind].spelling(key)
    if spelling is None:
        return None
    for pattern, why, kinds in _CLASSES:
        if kind in kinds and pattern.search(spelling):
            return spelling, why
    return None


def owned_keys(kind: str, version: str) -> dict[str, str]:
    """Every key of ``kind`` that fleetspec owns in Slurm ``version`` (the keys that
    release parses, plus the explicitly owned ones), with why."""
    table = parameters().files[kind]
    out = dict(OWNED[kind])
    for spelling in table.known.values():
        found = owner(kind, spelling)
        if found:
            out[found[0]] = found[1]
    for spelling, since in table.added.values():
        if since == UNCONFIRMED or _series(version) >= _series(since):
            found = owner(kind, spelling)
            if found:
                out[found[0]] = found[1]
    return out


# Where each hatch lives in the spec, per parameter file.
FIELD = {"slurm.conf": "slurm.settings", "partition": "settings", "node": "slurm_settings",
         "cgroup.conf": "slurm.cgroup_settings", "slurmdbd.conf": "slurm.slurmdbd_settings"}
_FORBIDDEN = re.compile(r"[\s#\"'\\\x00-\x1f\x7f]")
# Keys whose value is a command line (slurm.conf(5): InteractiveStepOptions, default
# "--interactive --preserve-env --pty $SHELL"; its predecessor SallocDefaultCommand, shown as
# "srun -n1 -N1 --mem-per-cpu=0 --pty --preserve-env --mpi=none $SHELL"): blanks between the
# words are allowed and the value is written in double quotes, which Slurm's parser
# (parse_config.c) reads as one value. Nothing else may be quoted: a '#' still ends the line
# and Slurm has no escape for a '"' inside the quotes.
_COMMAND_LINES = frozenset({"interactivestepoptions", "sallocdefaultcommand"})
_IN_QUOTES_FORBIDDEN = re.compile(r"[\t\n\r\f\v#\"'\\\x00-\x1f\x7f]")


@dataclass(frozen=True)
class ParameterFile:
    """The parameters one Slurm configuration file (or line kind) accepts."""

    name: str
    known: dict[str, str]  # lower-case -> Slurm's spelling (every release from the verified one)
    added: dict[str, tuple[str, str]]  # lower-case -> (Slurm's spelling, release or "unconfirmed")
    defunct: dict[str, str]  # Slurm's spelling -> the release it went (or "unconfirmed")
    # release -> lower-case `unconfirmed` keys a real slurmctld of that release refuses
    refused_by: dict[str, frozenset[str]]
    restart_all: bool
    restart: frozenset[str]  # lower-case
    sources: tuple[str, ...]
    manual: str  # the current man page

    def spelling(self, key: str) -> str | None:
        low = key.lower()
        added = self.added.get(low)
        return self.known.get(low) or (added[0] if added else None) or next(
            (k for k in self.defunct if k.lower() == low), None)

    def names(self) -> list[str]:
        """Every key of this file in any release fleetspec knows (for did-you-mean)."""
        return sorted({*self.known.values(), *(k for k, _ in self.added.values())})

    def needs_restart(self, key: str) -> bool:
        return self.restart_all or key.lower() in self.restart


@dataclass(frozen=True)
class Parameters:
    """The shipped Slurm parameter lists, per file, and the release they were verified against."""

    verified: str
    files: dict[str, ParameterFile]


@functools.cache
def parameters() -> Parameters:
    """The parameter lists shipped in the catalog (parsed once per process)."""
    text = (resources.files("fleetspec.catalog") / "data" / "slurm_parameters.yaml").read_text()
    data = yaml.load(text, Loader=_Loader)
    urls: dict[str, str] = data["sources"]
    files = {}
    for name, entry in data["files"].items():
        restart = entry.get("restart") or []
        files[name] = ParameterFile(
            name=name,
            known={k.lower(): k for k in entry["known"]},
            added={k.lower(): (k, str(v)) for k, v in (entry.get("added") or {}).items()},
            defunct={k: str(v) for k, v in (entry.get("defunct") or {}).items()},
            refused_by={str(r): frozenset(k.lower() for k in keys) for r, keys in (entry.get("refused_by") or {}).items()},
            restart_all=restart == "all",
            restart=frozenset() if restart == "all" else frozenset(k.lower() for k in restart),
            sources=tuple(urls[s] for s in entry["source"]),
            manual=urls[entry["manual"]],
        )
    return Parameters(str(data["verified"]), files)


def check_settings(kind: str, settings: Mapping[str, Any], version: str, path: SpecPath,
                   findings: list[Finding]) -> Pairs:
    """The settings of one hatch as (Slurm spelling, value) pairs; a finding for each
    problem, at the key. Keys with errors are left out of the result."""
    if not settings:  # most specs set none: the parameter lists are not even read
        return ()
    table = parameters().files[kind]
    seen: dict[str, str] = {}
    out: list[tuple[str, str]] = []
    for key, value in settings.items():
        where = path + (key,)
        low = key.lower()
        found = owner(kind, key)
        if found:
            canonical, why = found
            findings.append(Finding(RULE, E, f"{canonical} is fleetspec's: {owner_text(why)}. Remove it from "
                                    f"{FIELD[kind]}", where, "key"))
            continue
        spelling = table.spelling(key)
        if spelling is None:
            findings.append(Finding(RULE, E, _unknown(kind, key, table, version), where, "key"))
            continue
        gone = table.defunct.get(spelling)
        if gone == UNCONFIRMED or (gone is not None and _series(version) >= _series(gone)):
            since = "" if gone == UNCONFIRMED else f" since Slurm {gone}"
            findings.append(Finding(RULE, E, f"{spelling} is defunct in Slurm's {_file_label(kind)}{since}: "
                                    f"Slurm {version} drops or ignores it; remove it", where, "key"))
            continue
        if low in seen:
            findings.append(Finding(RULE, E, f"{spelling} is given twice ('{seen[low]}' and '{key}'; Slurm keys "
                                    "ignore case); keep one", where, "key"))
            continue
        seen[low] = key
        if low in table.added:
            since = table.added[low][1]
            if since != UNCONFIRMED and _series(version) < _series(since):
                findings.append(Finding(RULE, E, f"{spelling} is a {_file_label(kind)} parameter from Slurm {since} "
                                        f"on (SchedMD's changelog); Slurm {version} does not parse it. Remove it or "
                                        "raise spec.slurm.version", where, "key"))
                continue
            if since == UNCONFIRMED:
                refusing = [r for r, keys in table.refused_by.items() if low in keys and _series(version) <= _series(r)]
                if not _after_verified(version, parameters().verified) or refusing:
                    seen_by = f": Slurm {max(refusing, key=_series)}'s slurmctld refuses it" if refusing else ""
                    findings.append(Finding(RULE, E, f"{spelling} is not a {_file_label(kind)} parameter of Slurm "
                                            f"{version} (it came later{seen_by}); remove it or raise "
                                            "spec.slurm.version", where, "key"))
                    continue
                findings.append(Finding(RULE, W, f"{spelling} is a {_file_label(kind)} parameter of recent Slurm, "
                                        f"but no SchedMD changelog says which release added it: check "
                                        f"{table.manual} for Slurm {version}", where, "key"))
        rendered = render_value(value, spelling, where, findings)
        if rendered is not None:
            out.append((spelling, rendered))
    return tuple(out)


def owner_text(why: str) -> str:
    """'it comes from spec.x; set it there' for a spec field, else the reason itself."""
    if why.startswith(("spec.", "metadata.", "kubernetes.")):
        return f"it comes from {why}; set it there"
    return why


def render_value(value: Any, key: str, where: SpecPath, findings: list[Finding]) -> str | None:
    """The value as Slurm reads it: strings and numbers as written, true/false as
    YES/NO, a list comma-joined. None (and a finding) when it could break the line."""
    if isinstance(value, bool):
        return "YES" if value else "NO"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, list):
        items = [render_value(v, key, where, findings) for v in value]
        if any(i is None for i in items):
            return None
        if not items or any("," in i for i in items):  # type: ignore[operator]
            findings.append(Finding(RULE, E, f"{key}: a list value needs at least one item and no item may "
                                    "hold a comma; write one comma-joined string instead", where))
            return None
        return ",".join(items)  # type: ignore[arg-type]
    text = str(value)
    if key.lower() in _COMMAND_LINES and " " in text.strip(" ") and not _IN_QUOTES_FORBIDDEN.search(text):
        return f'"{text}"'
    if not text or _FORBIDDEN.search(text):
        shown = "its value" if is_secret_name(key) else repr(text)  # a password is never echoed
        findings.append(Finding(RULE, E, f"{key}: {shown} cannot be written on a Slurm line: a value is one "
                                "token without whitespace, '#', quotes, backslashes or control characters "
                                "(they would start another key or end the line; blanks only in a command "
                                "line: InteractiveStepOptions, SallocDefaultCommand); fix the value", where))
        return None
    return text


def _unknown(kind: str, key: str, table: ParameterFile, version: str) -> str:
    names = table.names()
    lowered = {n.lower(): n for n in names}
    hint = difflib.get_close_matches(key.lower(), list(lowered), n=1, cutoff=0.75)
    did = f" Did you mean '{lowered[hint[0]]}'?" if hint else ""
    return (f"'{key}' is not a {_file_label(kind)} parameter of Slurm {version}.{did} "
            f"Remove it, or use a parameter listed in {table.manual}")


def _file_label(kind: str) -> str:
    return {"partition": "PartitionName", "node": "NodeName"}.get(kind, kind)


def _after_verified(version: str, verified: str) -> bool:
    return _series(version) > _series(verified)


def _series(version: str) -> tuple[int, ...]:
    return (parse_version(version) or (0,))[:2]


# --------------------------------------------------------------------------- rendering


def merge_fields(fields: Iterable[tuple[str, str]], site: Pairs) -> list[tuple[str, str]]:
    """Rendered ``key=value`` fields with the site's: a site key replaces fleetspec's
    default of that key in place; the others follow, in the order the site wrote them."""
    site_by_key = {k.lower(): (k, v) for k, v in site}
    out = []
    for key, value in fields:
        replaced = site_by_key.pop(key.lower(), None)
        out.append(replaced or (key, value))
    out.extend(site_by_key.values())
    return out


def apply_to_conf(text: str, site: Pairs, field: str) -> str:
    """A ``Key=value``-per-line file with the site's settings: each replaces fleetspec's
    line of that key in place; the rest are appended under a comment naming the field."""
    if not site:
        return text
    site_by_key = {k.lower(): (k, v) for k, v in site}
    lines = []
    for line in text.splitlines():
        key = line.split("=", 1)[0].strip() if "=" in line and not line.lstrip().startswith("#") else None
        if key is not None and " " not in key and key.lower() in site_by_key:
            k, v = site_by_key.pop(key.lower())
            lines.append(f"{k}={v}  # {field}")
        else:
            lines.append(line)
    if site_by_key:
        lines += ["", f"# Site settings ({field})", *(f"{k}={v}" for k, v in site_by_key.values())]
    return "\n".join(lines) + "\n"


def reconfigurable(key: str) -> bool:
    """A slurm.conf key whose change ``scontrol reconfigure`` applies (no daemon restart)."""
    table = parameters().files["slurm.conf"]
    spelling = table.spelling(key)
    return spelling is not None and spelling not in table.defunct and not table.needs_restart(spelling)


# --------------------------------------------------------------------------- from the IR


def conf_settings(fleet: Any, kind: str) -> Pairs:
    """The site's pairs for ``kind`` (slurm.conf, cgroup.conf, slurmdbd.conf) of ``fleet``."""
    site = fleet.site
    if site is None:
        return ()
    return {"slurm.conf": site.slurm_conf, "cgroup.conf": site.cgroup_conf, "slurmdbd.conf": site.slurmdbd_conf}[kind]


def partition_settings(fleet: Any, name: str) -> Pairs:
    site = fleet.site
    return dict(site.partitions).get(name, ()) if site is not None else ()


def state_pairs(state: Any) -> Pairs:
    """``State=`` and ``Reason="..."`` for a node group's ``slurm_state`` (the spec's
    pattern keeps quotes, '#' and control characters out of the reason); () without one."""
    if state is None:
        return ()
    return (("State", state.state),) + ((("Reason", f'"{state.reason}"'),) if state.reason else ())


def node_settings(fleet: Any) -> dict[str, Pairs]:
    """host -> the site's NodeName parameters for it."""
    return dict(fleet.site.nodes) if fleet.site is not None else {}
