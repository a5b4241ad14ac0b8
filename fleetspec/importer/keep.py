"""What an adopted cluster keeps: the spec's ``slurm.adopted`` for an imported cluster.

fleetspec's defaults (a DefaultTime, billing weights, memory as a consumable, cgroup
confinement, munge, its own partitions and features, gres.conf device files) are good for a
fleet it creates; on a fleet it adopts they would change how the cluster behaves on the
first apply. `adoption` compares what fleetspec would render for the imported spec with the
site's files and pins the site's value wherever they differ (docs/import.md, "What is
kept"); validate then names each as a proposal (rules adopted-site-value,
adopted-declines-default, adopted-gres-conf).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fleetspec.importer.conf import Problem, Where
from fleetspec.importer.slurm_files import SlurmConf

# Keys other spec fields carry, rendered from them (ClusterName is metadata.name, in lower
# case; the controllers; the state directory; GresTypes, the GRES the node groups declare):
# never pinned. A GresTypes the site left out while declaring GPUs would leave them
# unscheduled (slurmctld shows Gres=(null)); the render writes the GRES the nodes have.
_FROM_FIELDS = {"clustername", "slurmctldhost", "controlmachine", "controladdr", "backupcontroller", "backupaddr",
                "statesavelocation", "nodename", "partitionname", "include", "grestypes"}
# PartitionName keys each default adds (render/slurm.py _partition_lines).
_PARTITION_DEFAULTS = {"default-time": ("DefaultTime",), "billing": ("TRESBillingWeights",),
                       "per-gpu-defaults": ("DefMemPerGPU", "DefCpuPerGPU")}


def adoption(source: SlurmConf, rendered_conf: str, fleet: Any, kept: dict[str, str], site_settings: set[str],
             gres_lines: list[str] | None, topology_lines: list[str] | None = None,
             files: dict[str, list[str]] | None = None) -> dict[str, Any]:
    """The spec's ``slurm.adopted`` for the fleet imported from ``source``.

    ``rendered_conf``: fleetspec's slurm.conf for the spec without adoption (site settings
    not applied); ``kept``: the site's keys of a class fleetspec owns (AuthAltTypes,
    AccountingStorageEnforce, ...), as written, that the release still takes;
    ``site_settings``: keys already kept under ``slurm.settings`` (lower case);
    ``gres_lines``: the site's gres.conf lines ([] where it gave none)."""
    from fleetspec.importer.conf import text_lines
    from fleetspec.importer.slurm_files import slurm_conf_of

    back = slurm_conf_of(text_lines(rendered_conf, "rendered slurm.conf", []), [])
    site = {k.lower(): (k, p.value) for k, p in source.settings.items()}
    conf: dict[str, Any] = {}
    for key, pair in back.settings.items():
        low = key.lower()
        if low in _FROM_FIELDS or low in site_settings:
            continue
        if low in site:
            if site[low][1].lower() != pair.value.lower():
                conf[key] = _value(site[low][1])
        else:
            conf[key] = None  # the site leaves it to Slurm's default: fleetspec writes none
    rendered = {k.lower() for k in back.settings}
    for key, value in kept.items():
        if key.lower() not in rendered and key.lower() not in _FROM_FIELDS:
            conf[key] = _value(value)
    out: dict[str, Any] = {}
    if conf:
        out["conf"] = conf
    out["declines"] = _declines(source, back, fleet)
    if gres_lines is not None:
        out["gres_conf"] = gres_lines
    if topology_lines is not None:
        out["topology_conf"] = topology_lines
    out.update(files or {})  # cgroup_conf, slurmdbd_conf: the site's files read (conf_file_lines)
    return out


def _value(text: str) -> str | int:
    return int(text) if text.isdigit() and len(text) < 16 and str(int(text)) == text else text


def _declines(source: SlurmConf, back: SlurmConf, fleet: Any) -> list[str]:
    """The defaults that would change the site's partitions or nodes: a partition key the
    render adds where the site's partition (or its PartitionName=DEFAULT) has none."""
    out = []
    if any(p.generated and p.nodes for p in fleet.partitions):
        out.append("generated-partitions")
    for name, keys in _PARTITION_DEFAULTS.items():
        wanted = {k.lower() for k in keys}
        for part_name, part in back.partitions.items():
            site = source.partitions.get(part_name)
            own = {k.lower() for k in site.attrs} if site is not None else set()
            if any(k.lower() in wanted and k.lower() not in own for k in part.attrs):
                out.append(name)
                break
    out.append("node-features")  # fleetspec adds vendor, generation, model, rack and stack features
    return out


def gres_conf_lines(path: Path | None, problems: list[Problem]) -> list[str]:
    """gres.conf as the site wrote it, one entry per line (comments and blank lines left
    out, continuations joined, blanks collapsed); [] without a gres.conf. A line fleetspec
    could not write back (a key gres.conf(5) lacks, a quoted value) is a problem at it."""
    from fleetspec.site.adopted import GRES_KEYS

    return [] if path is None else _site_lines(path, GRES_KEYS, "gres.conf", problems)


def topology_conf_lines(path: Path | None, problems: list[Problem]) -> list[str] | None:
    """topology.conf as the site wrote it (as gres_conf_lines); None without one, or for a
    topology.yaml (its blocks are racks of the spec)."""
    from fleetspec.site.adopted import TOPOLOGY_KEYS

    if path is None or path.suffix in (".yaml", ".yml"):
        return None
    return _site_lines(path, TOPOLOGY_KEYS, "topology.conf", problems)


def _site_lines(path: Path, keys: set[str], name: str, problems: list[Problem]) -> list[str]:
    from fleetspec.site.adopted import line_problem

    out: list[str] = []
    pending = ""
    for number, raw in enumerate(path.read_text(errors="replace").splitlines(), 1):
        line = pending + raw.split("#", 1)[0]
        if line.rstrip().endswith("\\"):
            pending = line.rstrip()[:-1] + " "
            continue
        pending = ""
        line = " ".join(line.split())
        if not line:
            continue
        problem = line_problem(line, keys, name)
        if problem:
            problems.append(Problem(Where(str(path), number, 1), f"{problem}; an adopted {name} is kept as "
                                    "written, so fix the line"))
            continue
        out.append(line)
    return out


def conf_file_lines(path: Path, name: str, version: str, problems: list[Problem],
                    warnings: list[Problem]) -> list[str]:
    """cgroup.conf or slurmdbd.conf (``name``) as the site wrote it: one ``Key=value`` per
    entry, in order (comments and blank lines left out, quotes removed as Slurm removes
    them), each checked as validate checks ``slurm.adopted`` (site/adopted.py). slurmdbd's
    StoragePass becomes the secret reference apply fills; its value is never kept, shown or
    compared. A line that cannot be kept is a problem at it, without its value."""
    from fleetspec.importer.conf import read_lines
    from fleetspec.site.adopted import STORAGE_PASS, conf_line_problem, defunct_since

    out: list[str] = []
    said: list[Problem] = []
    lines = read_lines(path, said)
    for problem in said:
        # slurmdbd.conf holds the database password: a line the parser cannot read is
        # located, never quoted (a bare word after StoragePass=... is part of it).
        if name == "slurmdbd.conf" and problem.where is not None and problem.where.line >= 1:
            problem = Problem(Where(problem.where.file, problem.where.line, 1), "this line cannot be read as "
                              "Key=value (slurmdbd.conf(5)); its text is not shown, since the file holds the "
                              "database password: check its '=' and quotes")
        problems.append(problem)
    for line in lines:
        for pair in line.pairs:
            gone = defunct_since(pair.key, name, version)
            if gone:  # as the builder drops slurm.conf keys defunct at the release
                warnings.append(Problem(pair.key_at, f"{pair.key} is dropped: defunct in Slurm's {name} since {gone}, "
                                        f"and Slurm {version} drops or ignores it", "warning"))
                continue
            secret = name == "slurmdbd.conf" and pair.key.lower() == "storagepass"
            text = f"{pair.key}={STORAGE_PASS if secret else pair.value}"
            problem = conf_line_problem(text, name, version)
            if problem:
                problems.append(Problem(pair.key_at, f"{problem}; an adopted {name} is kept as written, so fix "
                                        "the line"))
                continue
            if secret:
                warnings.append(Problem(pair.value_at, f"{pair.key} is not copied into the spec: it is kept as "
                                        f"{STORAGE_PASS}, which apply fills from spec.secrets.slurmdbd_password "
                                        "(default file:.fleetspec/secrets/slurmdbd_password): put the site's "
                                        "database password there before apply (docs/security.md)", "warning"))
            out.append(text)
    return out
