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
from fleetspec.site.slurm import parameters, render_value
from fleetspec.spec import model as m

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
    return ir.Adoption(tuple(conf), tuple(dict.fromkeys(adopted.declines)), None if gres is None else tuple(gres),
                       None if topology is None else tuple(topology))


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
