"""An adopted cluster's own values (spec ``slurm.adopted``), checked into the IR.

`fleetspec import slurm` writes them so that the first plan after adoption changes
nothing (docs/import.md). They are a trust boundary like every site hatch: a key must be
a slurm.conf parameter of the spec's release and not one that names the cluster's
structure (controllers, nodes, partitions: those have spec fields); a value is one token;
a gres.conf line may hold only gres.conf(5)'s own keys (no ``Include``: it would read a file
the spec does not show), each value one token.
"""

from __future__ import annotations

import re

from fleetspec.compile import ir
from fleetspec.findings import Finding, Severity, SpecPath
from fleetspec.site.slurm import UNCONFIRMED, parameters, render_value
from fleetspec.spec import model as m
from fleetspec.spec.loader import is_secret_name
from fleetspec.versions import parse_version

RULE = "site-settings"
# Keys other spec fields say (metadata.name, slurm.controllers, the racks, slurm.partitions,
# slurm.state_save_location): an adopted value for them would contradict those fields.
STRUCTURAL = {"clustername", "slurmctldhost", "controlmachine", "controladdr", "backupcontroller", "backupaddr",
              "nodename", "partitionname", "downnodes", "nodeset", "frontendname", "statesavelocation", "include"}
# gres.conf(5) (Slurm 22.05 to 25.11): the keys a gres.conf line may carry.
TOPOLOGY_KEYS = {"switchname", "switches", "nodes", "linkspeed"}  # topology.conf(5), topology/tree
GRES_KEYS = {"autodetect", "count", "cores", "cpus", "file", "flags", "links", "multiplefiles", "name", "nodename",
             "type"}
_TOKEN = re.compile(r"^[A-Za-z0-9_.,:/@%+\-\[\]()]+$")


def check_adopted(adopted: m.SlurmAdopted, version: str, findings: list[Finding]) -> ir.Adoption:
    base: SpecPath = ("spec", "slurm", "adopted")
    table = parameters().files["slurm.conf"]
    conf: list[tuple[str, str | None]] = []
    for key, value in adopted.conf.items():
        where = base + ("conf", key)
        spelling = table.spelling(key)
        if spelling is None or key.lower() in STRUCTURAL:
            why = ("another spec field says it" if key.lower() in STRUCTURAL
                   else f"it is not a slurm.conf parameter ({table.manual})")
            findings.append(Finding(RULE, Severity.ERROR, f"adopted key {key}: {why}; remove it", where, "key"))
            continue
        if value is None:
            conf.append((spelling, None))
            continue
        text = render_value(value, spelling, where, findings)
        if text is not None:
            conf.append((spelling, text))
    gres: list[str] | None = None
    if adopted.gres_conf is not None:
        gres = []
        for i, line in enumerate(adopted.gres_conf):
            problem = gres_line_problem(line)
            if problem:
                findings.append(Finding(RULE, Severity.ERROR, f"gres.conf line {line[:80]!r}: {problem}",
                                        base + ("gres_conf", i)))
            else:
                gres.append(" ".join(line.split()))
    topology: list[str] | None = None
    if adopted.topology_conf is not None:
        topology = []
        for i, line in enumerate(adopted.topology_conf):
            problem = line_problem(line, TOPOLOGY_KEYS, "topology.conf")
            if problem:
                findings.append(Finding(RULE, Severity.ERROR, f"topology.conf line {line[:80]!r}: {problem}",
                                        base + ("topology_conf", i)))
            else:
                topology.append(" ".join(line.split()))
    files: dict[str, tuple[str, ...] | None] = {}
    for name, field, lines in (("cgroup.conf", "cgroup_conf", adopted.cgroup_conf),
                               ("slurmdbd.conf", "slurmdbd_conf", adopted.slurmdbd_conf)):
        if lines is None:
            files[field] = None
            continue
        kept = []
        for i, line in enumerate(lines):
            problem = conf_line_problem(line, name, version)
            if problem:
                findings.append(Finding(RULE, Severity.ERROR, f"{name} line {i + 1}: {problem}", base + (field, i)))
            else:
                kept.append(line.strip())
        files[field] = tuple(kept)
    return ir.Adoption(tuple(conf), tuple(dict.fromkeys(adopted.declines)), None if gres is None else tuple(gres),
                       None if topology is None else tuple(topology), files["cgroup_conf"], files["slurmdbd_conf"])


# The one secret an adopted slurmdbd.conf carries, as the reference apply fills from the
# secret source (spec.secrets.slurmdbd_password; docs/security.md): never the password.
STORAGE_PASS = "@@secret:slurmdbd_password@@"


def conf_line_problem(line: str, name: str, version: str | None = None) -> str | None:
    """Why ``line`` may not be written to cgroup.conf or slurmdbd.conf (``name``), or None:
    one ``Key=value`` of that file's parameters (cgroup.conf(5), slurmdbd.conf(5): the
    catalog's lists), the value one token; a secret only as its reference. The line is
    never quoted back (it may hold a password)."""
    key, eq, value = line.strip().partition("=")
    table = parameters().files[name]
    if not eq or not key or table.spelling(key) is None:
        shown = repr(key[:40]) if key.isalnum() else "its key"
        return f"{shown} is not a {name} parameter ({table.manual}); fleetspec writes only those"
    gone = defunct_since(key, name, version)
    if gone:
        return f"{table.spelling(key)} is defunct in Slurm's {name} since {gone}: Slurm {version} drops or ignores it"
    if is_secret_name(key):
        if key.lower() == "storagepass" and name == "slurmdbd.conf" and value == STORAGE_PASS:
            return None
        return (f"{key} holds a secret, which the spec never carries: write {key}={STORAGE_PASS} and give the "
                "password as spec.secrets.slurmdbd_password (docs/security.md)" if key.lower() == "storagepass"
                else f"{key} holds a secret, which the spec never carries; remove the line")
    if not value or not _TOKEN.match(value):
        return f"{key}'s value is not one token of letters, digits and _ . , : / @ % + - [ ] ( )"
    return None


def gres_line_problem(line: str) -> str | None:
    """Why ``line`` may not be written to gres.conf, or None: ``Key=value`` tokens of
    gres.conf(5)'s keys, each value one token (no quotes, '#', backslashes)."""
    return line_problem(line, GRES_KEYS, "gres.conf")


def line_problem(line: str, keys: set[str], name: str) -> str | None:
    """Why ``line`` may not be written to ``name``, or None (``keys``: the file's keys)."""
    tokens = line.split()
    if not tokens:
        return "an empty line; remove it"
    for token in tokens:
        key, eq, value = token.partition("=")
        if not eq or key.lower() not in keys:
            return f"'{key}' is not a {name} key ({name}(5): {', '.join(sorted(keys))}); fleetspec writes only those"
        if not value or not _TOKEN.match(value):
            return f"{key}={value!r} is not one token of letters, digits and _ . , : / @ % + - [ ] ( )"
    return None


def defunct_since(key: str, name: str, version: str | None) -> str | None:
    """The release since which ``name``'s ``key`` is defunct, where ``version`` is at or past
    it (the catalog's lists, as site settings use them); else None."""
    table = parameters().files[name]
    spelling = table.spelling(key)
    gone = table.defunct.get(spelling) if spelling else None
    if gone is None or version is None:
        return None
    if gone == UNCONFIRMED or (parse_version(version) or (0,))[:2] >= (parse_version(gone) or (0,))[:2]:
        return gone
    return None
