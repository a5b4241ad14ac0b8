"""A running Slurm cluster's files (and its nodes' facts) to a fleet spec.

`import_slurm` reads slurm.conf (with its Includes), gres.conf and topology.conf, takes
what the files cannot say from the fact collector's documents, and returns the spec as
YAML text. It never guesses: every host whose GPU model, stack, OS or Slurm release is
neither in the files nor in the facts is named in an `ImportRefused` problem, at the
line that defines it, with what to supply. docs/import.md has the mapping.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args

import yaml

from fleetspec.catalog import mig as catalog_mig
from fleetspec.importer import facts as factdoc
from fleetspec.importer.conf import ImportRefused, Pair, Problem, Problems, Where
from fleetspec.importer.keep import adoption, conf_file_lines, gres_conf_lines, topology_conf_lines
from fleetspec.importer.node_state import node_state
from fleetspec.importer.slurm_files import (
    Block,
    GresLine,
    NodeRecord,
    SlurmConf,
    Switch,
    read_gres_conf,
    read_slurm_conf,
    read_topology_conf,
    read_topology_yaml,
)
from fleetspec.node_side.hostlist import compress, expand, is_valid_hostname
from fleetspec.spec.model import SITE_GRES, SLURM_CLUSTER, SLURM_FEATURE, SLURM_PARTITION, NodeOs

_DNS = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
_FEATURE = re.compile(SLURM_FEATURE)
# slurm.conf(5) NodeName State= (IDLE as older sites write it; slurmctld 22.05 reads it).
_ARCH = re.compile(r"^[A-Za-z0-9._-]+( [A-Za-z0-9._-]+)*$")  # as nvidia-smi prints it: Ada Lovelace
_PARTITION = re.compile(SLURM_PARTITION)
# NodeName keys the spec models itself; every other node key becomes slurm_settings.
_NODE_MODELLED = {"NodeName", "CPUs", "Procs", "Boards", "SocketsPerBoard", "Sockets", "CoresPerSocket",
                  "ThreadsPerCore", "RealMemory", "Gres", "Feature", "Features", "State", "Reason"}
# PartitionName keys the spec models itself.
_PART_MODELLED = {"Nodes", "Default", "MaxTime", "State"}
# slurm.conf keys the importer reads into spec fields (not site settings).
_CONF_MODELLED = {"ClusterName", "AccountingStorageType", "AccountingStorageHost", "GresTypes", "TopologyPlugin",
                  "StateSaveLocation"}


@dataclass(frozen=True)
class ImportResult:
    spec_text: str
    fleet: Any  # the compiled spec (fleetspec.compile.ir.Fleet)
    warnings: tuple[Problem, ...]
    tuples: Mapping[str, Mapping[str, str]]  # host -> the stack tuple its facts report (for state adopt)


@dataclass(frozen=True)
class _Gpu:
    model: str  # catalog id
    count: int
    gres: str | bool | None = None  # the spec's gres: the site's type, False untyped, None the model's
    others: tuple[tuple[str, int, Any], ...] = ()  # further models of a mixed node (other_gpus), device order
    mig: tuple[tuple[str, int], ...] = ()  # one GPU's MIG instances (gpu.mig), from MIG-typed GRES


def _gpu_ref(model: str, count: int, gres: str | bool | None) -> dict[str, Any]:
    ref: dict[str, Any] = {"model": model, "count": count}
    if gres is False:
        ref["typed"] = False
    elif gres:
        ref["gres"] = gres
    return ref


def _may_name(gres_type: str, boards: list[str]) -> bool:
    """Whether a site's GRES type can be its own name for these boards: a family nickname
    without a model number (volta, titan), or a type whose letters and digits occur in the
    board's name (tesla_v100-sxm2-32gb in Tesla V100-SXM2-32GB). geforce_rtx_2080_ti on an
    H100 is neither: the file or the facts are wrong."""
    if not re.search("[0-9]", gres_type):
        return True
    compact = re.sub("[^a-z0-9]", "", gres_type.lower())
    return all(compact in re.sub("[^a-z0-9]", "", b.lower()) for b in boards)


def _type_of_board(name: str) -> str:
    """A GRES type for a board the site left untyped, as NVML autodetection would name it
    (gres.conf(5), AutoDetect: the device name lower-cased, blanks as '_'), without the
    vendor: NVIDIA GeForce GTX 1080 Ti -> geforce_gtx_1080_ti."""
    bare = re.sub(r"^(nvidia|amd)\s+", "", name.strip(), flags=re.I)
    return re.sub("[^a-z0-9]+", "_", bare.lower()).strip("_")


def import_slurm(conf: Path, gres: Path | None = None, topology: Path | None = None,
                 facts: Mapping[str, Mapping[str, Any]] | None = None, slurm_version: str | None = None,
                 fabric: str | None = None, live: Any = None, cgroup: Path | None = None,
                 slurmdbd: Path | None = None) -> ImportResult:
    """The spec for the cluster these files describe; raises `ImportRefused`. ``live``: a
    `fleetspec.importer.live.LiveCluster`, whose values win over the files' (``--live``).
    ``cgroup``, ``slurmdbd``: the site's cgroup.conf and slurmdbd.conf, kept as written."""
    from fleetspec.catalog import load_catalog

    problems: list[Problem] = Problems()
    warnings: list[Problem] = []
    # The site's release decides which removed keys its file may still carry (importer.removed).
    reported = {factdoc.slurm_version(f) for f in (facts or {}).values()} - {None}
    release = slurm_version or (reported.pop() if len(reported) == 1 else None)
    parsed = read_slurm_conf(conf, problems, release)
    gres_lines = read_gres_conf(gres, problems) if gres else []
    switches: list[Switch] = []
    blocks: list[Block] = []
    if topology is not None and topology.suffix in (".yaml", ".yml"):
        switches, blocks = read_topology_yaml(topology, problems)
    elif topology is not None:
        switches = read_topology_conf(topology, problems)
    if problems:
        raise ImportRefused(problems)
    warnings += parsed.warnings
    if live is not None:
        from fleetspec.importer.live import overlay

        warnings += overlay(parsed, live, conf)
    facts = dict(facts or {})
    catalog = load_catalog()
    builder = _Builder(parsed, gres_lines, switches, facts, catalog, problems, warnings, conf)
    builder.blocks = blocks
    spec = builder.spec(slurm_version, fabric)
    if problems:
        raise ImportRefused(problems)
    head = "# Imported by `fleetspec import slurm` from " + str(conf) + "; docs/import.md says how each key maps.\n"
    fleet = _check_spec(head + _dump(spec), problems)
    if problems or fleet is None:
        raise ImportRefused(problems)
    kept_gres = gres_conf_lines(gres, problems)
    if gres is None and fleet.nodes:
        warnings.append(Problem(Where(str(conf), 1, 1), "no gres.conf given (--gres): the adopted spec keeps none "
                                "(spec.slurm.adopted.gres_conf: []), as a site without one has; give --gres with the "
                                "site's gres.conf, or delete gres_conf to have fleetspec write device files",
                                "warning"))
    kept_topology = topology_conf_lines(topology, problems)
    kept_files: dict[str, list[str]] = {}
    if cgroup is not None and fleet.slurm is not None:
        kept_files["cgroup_conf"] = conf_file_lines(cgroup, "cgroup.conf", fleet.slurm.version, problems, warnings)
    if slurmdbd is not None and fleet.slurm is not None and fleet.slurm.accounting_host:
        kept_files["slurmdbd_conf"] = conf_file_lines(slurmdbd, "slurmdbd.conf", fleet.slurm.version, problems,
                                                      warnings)
    elif slurmdbd is not None:
        warnings.append(Problem(Where(str(slurmdbd), 1, 1), "slurmdbd.conf is not kept: slurm.conf names no slurmdbd "
                                "(AccountingStorageType=accounting_storage/slurmdbd), so fleetspec renders none",
                                "warning"))
    if problems:
        raise ImportRefused(problems)
    from fleetspec.render.slurm import render_slurm_conf

    spec["spec"]["slurm"]["adopted"] = adoption(
        parsed, render_slurm_conf(fleet), fleet, builder.kept,
        {k.lower() for k in spec["spec"]["slurm"].get("settings", {})}, kept_gres, kept_topology, kept_files)
    text = head + _dump(spec)
    fleet = _check_spec(text, problems)
    if problems or fleet is None:
        raise ImportRefused(problems)
    warnings += _managed_differences(parsed, fleet, builder.dropped)
    return ImportResult(text, fleet, tuple(warnings), builder.tuples)


def _dump(spec: dict[str, Any]) -> str:
    return yaml.dump(spec, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=120)


class _Dumper(yaml.SafeDumper):
    """Every node group written out in full: no YAML anchors and aliases."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _check_spec(text: str, problems: list[Problem]) -> Any:
    """The written spec must validate like any other; what fails is the importer's problem.
    Returns the compiled fleet."""
    from fleetspec.findings import Severity
    from fleetspec.pipeline import compile_text

    result = compile_text(text, "imported spec")
    for f in result.located():
        if f.severity >= Severity.ERROR:
            problems.append(Problem(None, f"the imported spec does not validate at {f.path}: {f.message} "
                                    f"(rule {f.rule})"))
    return result.fleet


# Keys the importer reads into spec fields, so the rendered value is the site's in other words.
_MAPPED = {"ClusterName", "SlurmctldHost", "ControlMachine", "BackupController", "AccountingStorageHost",
           "StateSaveLocation", "GresTypes"}


def _managed_differences(source: SlurmConf, fleet: Any, dropped: set[str]) -> list[Problem]:
    """A warning for every slurm.conf key fleetspec manages whose rendered value is still not
    the site's (the adoption keeps the site's value of each, keep.py; ``dropped``: keys the
    release no longer takes, named by their own warning): the first apply changes it."""
    from fleetspec.importer.conf import text_lines
    from fleetspec.importer.slurm_files import slurm_conf_of
    from fleetspec.render.slurm import render_slurm_conf
    from fleetspec.site.slurm import OWNED, owner_text

    owned = OWNED["slurm.conf"]
    rendered = slurm_conf_of(text_lines(render_slurm_conf(fleet), "rendered slurm.conf", []), []).settings
    out = []
    for key, pair in source.settings.items():
        if key not in owned or key in _MAPPED or key in dropped:
            continue
        again = rendered.get(key)
        if again is not None and again.value.lower() == pair.value.lower():
            continue
        now = f"becomes {key}={again.value}" if again is not None else "is not written"
        out.append(Problem(pair.key_at, f"{key}={pair.value} {now}: fleetspec manages it "
                           f"({owner_text(owned[key])}); the first apply changes it", "warning"))
    return out


class _Builder:
    def __init__(self, conf: SlurmConf, gres: list[GresLine], switches: list[Switch],
                 facts: dict[str, Mapping[str, Any]], catalog: Any, problems: list[Problem],
                 warnings: list[Problem], path: Path) -> None:
        self.conf, self.gres, self.switches, self.facts = conf, gres, switches, facts
        self.catalog, self.problems, self.warnings, self.path = catalog, problems, warnings, path
        self.tuples: dict[str, dict[str, str]] = {}
        self.gpus: dict[str, _Gpu | None] = {}
        self.site_models: dict[str, dict[str, Any]] = {}
        self.blocks: list[Block] = []
        self.other_gres: dict[str, dict[str, int]] = {}  # host -> mps/shard counts
        self.site_gres: dict[str, list[str]] = {}  # host -> GPU GRES no catalog model describes (_site_gres)
        self.kept: dict[str, str] = {}  # keys fleetspec manages, at the site's value (keep.py)
        self.dropped: set[str] = set()  # keys the target release no longer takes
        self._declared_warned: set[str] = set()
        self.site_cluster_name: str | None = None  # ClusterName where it is no DNS label (_cluster_name)
        self.group_partition: dict[str, str] = {}  # host -> a site partition with a generated name (_named_like_generated)
        # gres.conf's GPU lines by host, in file order: a node's lines are looked up per node,
        # and scanning every line's hosts for each node grew as nodes x lines (#45 item 3).
        self._gpu_gres_for: dict[str, list[int]] = {}
        self._gpu_gres_all: list[int] = []
        for i, g in enumerate(gres):
            if g.name != "gpu":
                continue
            if g.hosts is None:
                self._gpu_gres_all.append(i)
            else:
                for host in dict.fromkeys(g.hosts):
                    self._gpu_gres_for.setdefault(host, []).append(i)

    # -- the whole spec -------------------------------------------------------------

    def spec(self, slurm_version: str | None, fabric: str | None) -> dict[str, Any]:
        name = self._cluster_name()
        for line in self.conf.records:
            self.problems.append(Problem(line.at, f"{line.first().key} lines are not imported: fleetspec "
                                         f"{'drains through apply' if line.first().key.lower() == 'downnodes' else 'has no field for them'}; "
                                         "remove the line and import again"))
        gpus = self.gpus = {host: self._gpu(rec) for host, rec in self.conf.nodes.items()}
        stacks, stack_of = self._stacks([h for h, g in gpus.items() if g is not None])
        # Never a default: spec.os decides every package name and the package manager (apt or
        # dnf, #42), so an OS no fact names refuses the import rather than adopt a guess.
        os_name = self._one_of("OS", factdoc.os_name, "nothing else: the OS comes from the facts (os.id, os.version_id)",
                               f" (spec.os is one of {', '.join(get_args(NodeOs))}; fleetspec never assumes one)")
        version = slurm_version or self._one_of("Slurm release", factdoc.slurm_version, "--slurm-version")
        self.group_partition = self._named_like_generated(stack_of)
        racks = self._racks(gpus, stack_of)
        slurm: dict[str, Any] = {"version": version or "0", "controllers": self._controllers()}
        if self.site_cluster_name:
            slurm["cluster_name"] = self.site_cluster_name
        detect = {g.autodetect.lower() for g in self.gres if g.autodetect}
        if detect - {"off"}:
            slurm["gres_autodetect"] = True  # gres.conf AutoDetect=nvml/rsmi/nvidia
        state = self.conf.settings.get("StateSaveLocation")
        if state is not None:
            slurm["state_save_location"] = state.value
        accounting = self._accounting()
        if accounting:
            slurm["accounting"] = {"host": accounting}
        partitions = self._partitions()
        if partitions:
            slurm["partitions"] = partitions
        settings = self._settings(version)
        if settings:
            slurm["settings"] = settings
        body: dict[str, Any] = {"os": os_name}
        if stacks:
            body["stacks"] = stacks
        if self.site_models:
            body["gpu_models"] = self.site_models
        fab = self._fabric(fabric)
        if fab:
            body["fabric"] = fab
        body["racks"] = racks
        body["slurm"] = slurm
        return {"apiVersion": "fleetspec.io/v1alpha1", "kind": "Fleet", "metadata": {"name": name}, "spec": body}

    def _cluster_name(self) -> str:
        """metadata.name, a DNS label; a ClusterName that is none once lower-cased
        (HAL9000_v2) is kept as written in slurm.cluster_name (`self.site_cluster_name`)."""
        pair = self.conf.settings.get("ClusterName")
        if pair is None:
            self.problems.append(Problem(Where(str(self.path), 1, 1), "slurm.conf has no ClusterName; add the "
                                         "one slurmctld and slurmdbd use"))
            return "cluster"
        name = pair.value.lower()
        if _DNS.match(name):
            if name != pair.value:
                self.warnings.append(Problem(pair.value_at, f"ClusterName={pair.value} becomes metadata.name {name} "
                                             "(Slurm folds cluster names to lower case)", "warning"))
            return name
        if not re.match(SLURM_CLUSTER, pair.value):
            shown = pair.value if len(pair.value) <= 60 else pair.value[:57] + "..."
            self.problems.append(Problem(pair.value_at, f"ClusterName={shown} is not a cluster name "
                                         "fleetspec keeps: letters, digits, '_' and '-', at most 40 (slurm.conf(5): "
                                         "a MySQL table name). Rename the cluster"))
            return "cluster"
        label = re.sub(r"-+", "-", re.sub(r"[^a-z0-9]", "-", name)).strip("-")[:63].strip("-") or "cluster"
        self.site_cluster_name = pair.value
        # The parser's warning at the same value says what slurmctld and slurmdbd see.
        self.warnings.append(Problem(pair.value_at, f"ClusterName={pair.value} is kept as spec.slurm.cluster_name "
                                     f"and rendered as written (slurmdbd's records stay {name}'s); metadata.name, "
                                     f"a DNS label, is {label}", "warning"))
        return label

    def _one_of(self, what: str, read: Any, supply: str, hint: str = "") -> str | None:
        """A value every node's facts agree on (the OS, the Slurm release); else a problem."""
        values = {h: read(f) for h, f in self.facts.items()}
        distinct = sorted({v for v in values.values() if v})
        if len(distinct) == 1:
            return distinct[0]
        if not distinct:
            self.problems.append(Problem(None, f"the {what} is not in Slurm's files and no facts say it: collect "
                                         f"the nodes' facts (python3 collector.py > HOST.json) into --facts"
                                         + (f", or give {supply}" if supply.startswith("--") else "") + hint))
        else:
            self.problems.append(Problem(None, f"the nodes' facts disagree on the {what} ({', '.join(distinct)}); "
                                         "a fleet has one: bring the nodes to one, or import them separately" + hint))
        return None

    # -- nodes ------------------------------------------------------------------------

    def _gpu(self, rec: NodeRecord) -> _Gpu | None:
        """The node's GPU model and count, from Gres=, gres.conf and the facts."""
        pair = rec.attrs.get("Gres")
        entries = []
        for item in (pair.value.split(",") if pair and pair.value and pair.value.lower() != "(null)" else []):
            parts = item.split("(")[0].split(":")
            name = parts[0]
            if name in ("mps", "shard") and len(parts) == 2 and parts[1].isdigit() and len(parts[1]) < 8:
                self.other_gres.setdefault(rec.name, {})[name] = int(parts[1])
                continue
            if name != "gpu":
                self.problems.append(Problem(pair.value_at, f"Gres={item} on {rec.name}: fleetspec's spec says GPUs, "
                                             f"mps:N and shard:N ('{item}' is not one of them); remove it or import "
                                             "without it"))
                continue
            if len(parts) == 2 and parts[1].isdigit():
                entries.append((None, int(parts[1])))
            elif len(parts) == 3 and parts[2].isdigit():
                entries.append((parts[1], int(parts[2])))
            elif len(parts) == 2:
                entries.append((parts[1], 1))
            else:
                self.problems.append(Problem(pair.value_at, f"Gres={item}: not 'gpu:COUNT' or 'gpu:TYPE:COUNT'"))
        if entries and self._site_gres(rec, entries, pair):  # type: ignore[arg-type]
            return None  # a CPU node group that keeps the site's GRES
        if not entries and rec.name in self.other_gres:
            self.problems.append(Problem(pair.value_at, f"{rec.name} has {pair.value} but no GPU: MPS and shards "  # type: ignore[union-attr]
                                         "share GPUs. Declare its GPUs (gpu:TYPE:N)"))
            return None
        if not entries:
            reported = factdoc.gpu_names(self.facts[rec.name]) if rec.name in self.facts else []
            if reported:
                self._defer("gpu-undeclared", rec, None, f"slurm.conf declares no GPU GRES, but the node's facts "
                            f"report {len(reported)} GPU(s) ({', '.join(sorted(set(reported)))}): Slurm does not "
                            "schedule them. Declare them (Gres=gpu:TYPE:N and gres.conf) or import without facts "
                            "for these nodes to keep them CPU-only")
            return None  # a CPU-only node (cpu_nodes)
        if all(t is not None and catalog_mig.PROFILE.match(t) for t, _ in entries):
            return self._mig(rec, entries, pair)  # type: ignore[arg-type]
        types = {t for t, _ in entries}
        if len(types) > 1:
            return self._mixed(rec, entries, pair)  # type: ignore[arg-type]
        gres_type = next(iter(types)) or self._gres_conf_type(rec.name)
        count = sum(c for _, c in entries)
        files = [f for g in self._gpu_gres(rec.name) for f in g.files]
        if files and len(set(files)) != count:
            line = next(g for g in self._gpu_gres(rec.name) if g.files)
            found = len(set(files))
            if found < count:  # slurmctld drains it: "gres/gpu count reported lower than configured"
                self._defer("gres-files", rec, pair, f"slurm.conf gives {count} GPU(s) but gres.conf's File= lines "
                            f"(from {line.at}) name {found} device(s); slurmctld drains such a node. Make them agree")
            else:
                self.warnings.append(Problem(pair.value_at, f"{rec.name}: gres.conf's File= lines (from {line.at}) "  # type: ignore[union-attr]
                                             f"name {found} devices, slurm.conf {count} GPUs; Slurm schedules "
                                             f"{count}, and so does the spec (the render writes {count} files)",
                                             "warning"))
        found = self._model(rec, gres_type, pair)  # type: ignore[arg-type]
        return _Gpu(found[0], count, found[1]) if found else None

    def _mig(self, rec: NodeRecord, entries: list[tuple[str, int]], pair: Pair) -> _Gpu | None:
        """A MIG node (Gres=gpu:1g.18gb:16,gpu:3g.71gb:8, the types NVML gives MIG instances):
        the GPUs and their model come from the node's facts (slurm.conf counts instances, and
        a profile name such as 1g.10gb fits several models); the instances split evenly over
        the GPUs are the group's ``gpu.mig``, checked against the catalog under the node's
        driver from its facts (4g + 3g refused before R510: docs/mig.md), as the compile of
        the imported spec checks it, so the import stops where that compile would."""
        names = factdoc.gpu_names(self.facts[rec.name]) if rec.name in self.facts else []
        models = {m.id for m in (self.catalog.gpu(n) for n in names) if m is not None}
        if not names or len(models) != 1 or any(self.catalog.gpu(n) is None for n in names):
            self._defer("gpu-mig", rec, pair, f"Gres={pair.value} names MIG instances: which GPUs they are cut from "
                        "(model, count) comes from the node's facts. Collect them (python3 collector.py > "
                        "HOST.json, docs/facts.md) into --facts")
            return None
        model, count = models.pop(), len(names)
        per_node: dict[str, int] = {}
        for t, c in entries:
            per_node[t] = per_node.get(t, 0) + c
        if any(c % count for c in per_node.values()):
            self._defer("gpu-mig", rec, pair, f"Gres={pair.value} does not split evenly over the node's {count} GPUs: "
                        "fleetspec declares one geometry for every GPU of a node. Give each GPU the same instances")
            return None
        geometry = tuple(sorted((t, c // count) for t, c in per_node.items()))
        catalogued = catalog_mig.model_mig(model)
        problem = (f"the catalog has no MIG profiles for {model}" if catalogued is None
                   else catalog_mig.check(catalogued, geometry, factdoc.nvidia_driver(self.facts[rec.name])))
        if problem is not None:
            self._defer("gpu-mig", rec, pair, f"Gres={pair.value}: {problem}")
            return None
        return _Gpu(model, count, None, mig=geometry)

    def _mixed(self, rec: NodeRecord, entries: list[tuple[str | None, int]], pair: Pair) -> _Gpu | None:
        """A node with several GPU models (gpu:a100:2,gpu:t4:1): each typed, one model per
        type; the spec's ``gpu`` is the model gres.conf gives the first device file (else the
        most numerous), ``other_gpus`` the rest in device order, as the render writes them."""
        if any(t is None for t, _ in entries):
            self.problems.append(Problem(pair.value_at, f"{rec.name}: Gres={pair.value} mixes typed and untyped "
                                         "GPUs; give each its type (gpu:TYPE:N)"))
            return None
        counts: dict[str, int] = {}
        for t, c in entries:
            counts[str(t)] = counts.get(str(t), 0) + c
        first = {t: self._first_device(rec.name, t) for t in counts}
        order = sorted(counts, key=lambda t: (first[t] if first[t] is not None else 1 << 30, -counts[t],
                                              list(counts).index(t)))
        models = [self._model(rec, t, pair, mixed=True) for t in order]
        if None in models:
            return None
        files = {f for g in self._gpu_gres(rec.name) for f in g.files}
        if files and len(files) != sum(counts.values()):
            self._defer("gres-files", rec, pair, f"slurm.conf gives {sum(counts.values())} GPU(s) but gres.conf's "
                        f"File= lines name {len(files)} device(s); make them agree")
            return None
        known = {m[0] for m in models if m is not None}
        reported = {m.id for m in (self.catalog.gpu(n) for n in (factdoc.gpu_names(self.facts[rec.name])
                                                                  if rec.name in self.facts else [])) if m}
        if reported - known:
            self._defer("gpu-disagree", rec, pair, f"the node's facts report {', '.join(sorted(reported - known))}, "
                        f"which Gres={pair.value} does not name; fix the file or the node")
            return None
        return _Gpu(models[0][0], counts[order[0]], models[0][1],  # type: ignore[index]
                    tuple((m[0], counts[t], m[1]) for m, t in zip(models[1:], order[1:])))  # type: ignore[index]

    def _first_device(self, host: str, gres_type: str) -> int | None:
        numbers = [int(m.group(1)) for g in self._gpu_gres(host) if g.type == gres_type
                   for f in g.files if (m := re.search(r"([0-9]+)$", f))]
        return min(numbers) if numbers else None

    def _declare(self, rec: NodeRecord, gres_type: str | None, pair: Pair | None) -> str | None:
        """A site GPU model (``spec.gpu_models``) for a board the catalog lacks, from what the
        node's facts report (name, architecture as nvidia-smi prints it, memory), named after
        the site's GRES type (or, untyped, after the board); None when they do not describe
        one board, "" when they contradict each other (a problem says so)."""
        entries = factdoc.gpu_entries(self.facts[rec.name]) if rec.name in self.facts else []
        described = {(v, e.get("name"), e.get("architecture"), e.get("memory_mib")) for v, e in entries}
        if len(described) > 1 and gres_type:  # a mixed node: the board whose name carries the type (gtx970)
            compact = re.sub("[^a-z0-9]", "", gres_type.lower())
            described = {d for d in described if isinstance(d[1], str)
                         and compact in re.sub("[^a-z0-9]", "", d[1].lower())}
        if len(described) != 1:
            return None
        vendor, name, arch, memory = described.pop()
        if not (isinstance(name, str) and isinstance(arch, str) and _ARCH.match(arch)
                and isinstance(memory, int) and memory > 0):
            return None
        gres = gres_type or _type_of_board(name)
        gpu_id = gres.replace("_", "-").replace(".", "-")
        if not _DNS.match(gpu_id):
            return None
        entry = {"vendor": vendor, "name": name, "generation": re.sub("[^a-z0-9]+", "-", arch.lower()).strip("-"),
                 "architecture": arch, "memory_gb": max(1, round(memory / 1024)), "form_factor": "other",
                 "gres": gres}
        known = self.site_models.setdefault(gpu_id, entry)
        if known != entry:
            self._defer("gpu-site-disagree", rec, pair, f"nodes typed {gres} report different GPUs in their "
                        f"facts ({known['name']} and {name}); give them different GRES types")
            return ""
        if gpu_id not in self._declared_warned:
            self._declared_warned.add(gpu_id)
            what = f"GRES type {gres_type}" if gres_type else f"the untyped GPUs' board ({name})"
            self.warnings.append(Problem(pair.value_at if pair else rec.at, f"{what} is not a catalog GPU model: "
                                         f"declared as spec.gpu_models.{gpu_id} from the node's facts ({name}, "
                                         f"{arch}, {entry['memory_gb']} GB); no sourced facts check its stack "
                                         "(rule site-gpu-model)", "warning"))
        return gpu_id

    def _site_gres(self, rec: NodeRecord, entries: list[tuple[str | None, int]], pair: Pair) -> bool:
        """Whether the node's GPU GRES are a GPU no catalog model describes and its facts
        cannot see (HAL9000's Intel iGPU, ``gpu:iris:1``: the collector reads NVIDIA and AMD
        GPUs only). Real Slurm schedules it, so the import keeps it as the site's own
        (``cpu_nodes[].site_gres``), written back as is, with a warning: fleetspec installs
        and verifies no stack on it. An untyped GPU, a catalog type or a MIG profile is none."""
        facts = self.facts.get(rec.name)
        if facts is None or factdoc.gpu_names(facts) or rec.name in self.other_gres:
            return False
        if any(t is None or self.catalog.gpu(t) is not None or catalog_mig.PROFILE.match(t)
               or not re.match(SITE_GRES, f"gpu:{t}:{n}") for t, n in entries):
            return False
        self.site_gres[rec.name] = [f"gpu:{t}:{n}" for t, n in entries]
        self.warnings.append(Problem(pair.value_at, f"{rec.name}: Gres={pair.value} names a GPU no catalog model "
                                     "describes, and the node's facts report no NVIDIA or AMD GPU (the collector "
                                     "reads those only): kept as the site's own GRES (cpu_nodes site_gres) and "
                                     "written back as is. fleetspec manages no driver or stack on it, and verify "
                                     "does not check it", "warning"))
        return True

    def _gpu_gres(self, host: str) -> list[GresLine]:
        """gres.conf's ``Name=gpu`` lines that apply to ``host`` (its own and those for every
        node), in file order."""
        own = self._gpu_gres_for.get(host, [])
        if not self._gpu_gres_all:
            return [self.gres[i] for i in own]
        return [self.gres[i] for i in sorted((*own, *self._gpu_gres_all))]

    def _gres_conf_type(self, host: str) -> str | None:
        types = {g.type for g in self._gpu_gres(host) if g.type}
        return types.pop() if len(types) == 1 else None

    def _model(self, rec: NodeRecord, gres_type: str | None, pair: Pair,
               mixed: bool = False) -> tuple[str, str | bool | None] | None:
        """(model id, the spec's ``gres``: None where the site's type is the model's own, the
        site's type where it names the model otherwise (``volta`` for v100), False for untyped
        GRES). The site's name is kept: jobs' --gres and accounting use it."""
        names = factdoc.gpu_names(self.facts[rec.name]) if rec.name in self.facts else []
        from_facts = {m.id for m in (self.catalog.gpu(n) for n in names) if m is not None}
        unknown_facts = sorted({n for n in names if self.catalog.gpu(n) is None})
        if gres_type:
            model = self.catalog.gpu(gres_type)
            alias = None if model is not None and model.gres == gres_type else gres_type
            if model is None and from_facts and not unknown_facts and len(from_facts) == 1 and not mixed:
                board = self.catalog.gpu(from_facts.pop())
                if board is not None and not _may_name(gres_type, names):
                    self._defer("gpu-disagree", rec, pair, f"the files say {gres_type} but the node's facts report "
                                f"{', '.join(sorted(set(names)))}, the catalog's {board.id}: fix the GRES type or "
                                "the facts")
                    return None
                model = board  # volta: the board the facts name, the site's type kept beside it
                from_facts = {model.id} if model else set()
            if model is None:
                declared = self._declare(rec, gres_type, pair)
                if declared is not None:
                    return (declared, None) if declared else None  # "": refused, with its problem
                self._defer("gpu-type", rec, pair, f"GRES type '{gres_type}' names no catalog GPU model and the "
                            "node's facts do not say which board it is: collect them (python3 collector.py > "
                            "HOST.json, docs/facts.md) into --facts. The type stays as the site wrote it")
                return None
            if len(from_facts) == 1 and from_facts != {model.id} and not mixed and _may_name(gres_type, names):
                board = self.catalog.gpu(next(iter(from_facts)))
                if board is not None:  # h100 on an H100 PCIe: the site's type, the board the facts name
                    model, alias = board, (None if board.gres == gres_type else gres_type)
            if from_facts and from_facts != {model.id} and not mixed:
                self._defer("gpu-disagree", rec, pair, f"the files say {gres_type} but the node's facts report "
                            f"{', '.join(sorted(names))}; fix the file or the node")
                return None
            return model.id, alias
        if len(from_facts) == 1 and not unknown_facts:
            return from_facts.pop(), False
        if unknown_facts and not from_facts:
            declared = self._declare(rec, None, pair)
            if declared is not None:
                return (declared, False) if declared else None
        if unknown_facts:
            self._defer("gpu-unknown", rec, pair, f"the facts report {', '.join(unknown_facts)}, not a GPU model "
                        "in fleetspec's catalog (`fleetspec catalog`), and not one board (name, architecture, "
                        "memory) a site model can be declared from")
        else:
            self._defer("gpu-untyped", rec, pair, "Gres=gpu:N has no type and no gres.conf Type= names one: the "
                        "GPU model needs the node's facts. Collect them (python3 collector.py > HOST.json, "
                        "docs/facts.md) into --facts, or write the type in slurm.conf")
        return None

    def _defer(self, kind: str, rec: NodeRecord, pair: Pair | None, message: str) -> None:
        """One problem per (kind, line, message), naming every host it covers."""
        key = (kind, message)
        if not hasattr(self, "_deferred"):
            self._deferred: dict[tuple[str, str], list[str]] = {}
        if key not in self._deferred:
            self._deferred[key] = []
            self.problems.append(_HostsProblem(pair.value_at if pair else rec.at, message, self._deferred[key]))
        self._deferred[key].append(rec.name)

    def _stacks(self, gpu_hosts: list[str]) -> tuple[dict[str, dict[str, str]], dict[str, str]]:
        names: dict[tuple[tuple[str, str], ...], str] = {}
        stack_of: dict[str, str] = {}
        missing: dict[str, list[str]] = defaultdict(list)
        for host in gpu_hosts:
            if host not in self.facts:
                missing["no facts document (HOST.json in --facts)"].append(host)
                continue
            tup, why = factdoc.stack_tuple(self.facts[host])
            if why:
                missing["; ".join(why)].append(host)
                continue
            self.tuples[host] = tup
            key = tuple(sorted(tup.items()))
            if key not in names:
                names[key] = f"imported-{len(names) + 1}"
            stack_of[host] = names[key]
        for why, hosts in missing.items():
            first = self.conf.nodes[hosts[0]].at
            self.problems.append(Problem(first, f"the stack tuple of {compress(hosts)} is not in Slurm's files and "
                                         f"the facts do not give it: {why}. Collect each node's facts "
                                         "(python3 collector.py > HOST.json, docs/facts.md) into --facts"))
        return {name: dict(key) for key, name in names.items()}, stack_of

    def _racks(self, gpus: dict[str, _Gpu | None], stack_of: dict[str, str]) -> list[dict[str, Any]]:
        """Leaf switches become racks; without a topology, one rack. Within a rack, hosts
        with the same attributes form one node group."""
        leaf_of: dict[str, str] = {}
        for sw in self.switches:
            for host in sw.nodes:
                leaf_of.setdefault(host, sw.name)
        block_of = {host: b.name for b in self.blocks for host in b.nodes}
        leaf_of = {**leaf_of, **{h: f"\0{b}" for h, b in block_of.items()}}  # a block is a rack of its own
        groups: dict[tuple[str | None, tuple[Any, ...]], list[str]] = defaultdict(list)
        fields: dict[tuple[Any, ...], dict[str, Any]] = {}
        for host, rec in self.conf.nodes.items():
            gpu = gpus.get(host)
            if gpu is not None and host not in stack_of:
                continue  # reported: no stack
            if not is_valid_hostname(host):
                self.problems.append(Problem(rec.at, f"node name {host} is not a DNS label (lower-case letters, "
                                             "digits, '-'); fleetspec names nodes by hostname. Rename it"))
                continue
            group = self._group_fields(rec, gpu, stack_of.get(host))
            key = tuple((k, repr(v)) for k, v in group.items())
            fields[key] = group
            groups[(leaf_of.get(host), key)].append(host)
        racks: dict[str | None, dict[str, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
        for (leaf, key), hosts in groups.items():
            kind = "nodes" if "gpu" in fields[key] else "cpu_nodes"
            racks[leaf][kind].append({"hosts": compress(hosts), **fields[key]})
        out = []
        for i, (leaf, kinds) in enumerate(sorted(racks.items(), key=lambda kv: kv[0] or ""), 1):
            if leaf and leaf.startswith("\0"):  # an NVLink domain (topology.yaml block)
                block = leaf[1:]
                rack: dict[str, Any] = {"name": block}
                leaves = {next((sw.name for sw in self.switches if h in sw.nodes), None)
                          for g in kinds.get("nodes", []) for h in expand(g["hosts"])}
                if len(leaves) == 1 and None not in leaves:
                    rack["leaf"] = leaves.pop()
                rack["nvlink_domain"] = "rack"
            else:
                rack = {"name": leaf or f"r{i:02d}"}
                if leaf:
                    rack["leaf"] = leaf
            rack.update(kinds)
            out.append(rack)
        return out

    def _group_fields(self, rec: NodeRecord, gpu: _Gpu | None, stack: str | None) -> dict[str, Any]:
        """A node group's fields (a GPU group with ``gpu``, else a cpu_nodes group)."""
        a = rec.attrs
        out: dict[str, Any] = {}
        if gpu is not None:
            out = {"gpu": _gpu_ref(gpu.model, gpu.count, gpu.gres), "stack": stack, "scheduler": "slurm"}
            if gpu.mig:
                out["gpu"]["mig"] = dict(gpu.mig)
            if gpu.others:
                out["other_gpus"] = [_gpu_ref(m, c, g) for m, c, g in gpu.others]
            if rec.name in self.other_gres:
                out["other_gres"] = dict(sorted(self.other_gres[rec.name].items()))
            if rec.name in self.group_partition:
                out["partition"] = self.group_partition[rec.name]
        elif rec.name in self.site_gres:
            out["site_gres"] = list(self.site_gres[rec.name])
        cpus = a.get("CPUs") or a.get("Procs")
        if "CPUs" in a and "Procs" in a:
            self.warnings.append(Problem(a["Procs"].key_at, f"Procs={a['Procs'].value} beside CPUs={a['CPUs'].value}"
                                         ": Procs is the old spelling of CPUs; CPUs is kept", "warning"))
            cpus = a["CPUs"]
        sockets = a.get("Sockets")
        socket_count = self._int(sockets) if sockets else None
        # slurm.conf(5): Sockets = Boards x SocketsPerBoard; with Boards, Sockets means per board.
        per_board = a.get("SocketsPerBoard") or (a.get("Sockets") if "Boards" in a else None)
        if per_board is not None:
            socket_count = (self._int(a.get("Boards")) or 1) * (self._int(per_board) or 1)
        for key, value in (("cpus", self._int(cpus) if cpus else None), ("sockets", socket_count),
                           ("cores_per_socket", self._int(a.get("CoresPerSocket"))),
                           ("threads_per_core", self._int(a.get("ThreadsPerCore"))),
                           ("real_memory_mb", self._int(a.get("RealMemory")))):
            if value is not None:
                out[key] = value
        feats = a.get("Features") or a.get("Feature")
        if feats and feats.value:
            bad = [f for f in feats.value.split(",") if not _FEATURE.match(f)]
            if bad:
                self.problems.append(Problem(feats.value_at, f"feature(s) {', '.join(bad)}: a feature is letters, "
                                             "digits and _ . : + - (the other characters are --constraint "
                                             "operators). Rename them (and the jobs' --constraint)"))
            else:
                out["features"] = feats.value.split(",")
        state = node_state(a, self.problems, self.warnings)  # State/Reason: the file's, or what slurmctld runs
        if state is not None:
            out["slurm_state"] = state
        extra = {k: self._setting(p.value) for k, p in a.items() if k not in _NODE_MODELLED and k not in ("Boards", "SocketsPerBoard")}
        if extra:
            out["slurm_settings"] = extra
        return out

    def _int(self, pair: Pair | None) -> int | None:
        if pair is None:
            return None
        if not pair.value.isdigit() or len(pair.value) > 12 or int(pair.value) < 1:
            self.problems.append(Problem(pair.value_at, f"{pair.key}={pair.value} is not a positive number"))
            return None
        return int(pair.value)

    @staticmethod
    def _setting(value: str) -> str | int:
        return int(value) if value.isdigit() and len(value) < 16 and str(int(value)) == value else value

    # -- controllers, accounting, partitions, settings ------------------------------------------

    def _controllers(self) -> str:
        hosts = []
        for ctl in self.conf.controller_hosts:
            host = ctl.name
            short = host.split(".")[0]
            if not is_valid_hostname(host) and "." in host and is_valid_hostname(short) and not _is_ip(host):
                # slurm.conf(5) SlurmctldHost: "The short, or long, hostname of the machine".
                self.warnings.append(Problem(ctl.at.value_at, f"controller {host} is a long hostname; the spec "
                                             f"names it {short} (slurm.conf(5) takes the short or the long name "
                                             f"for the same machine: `hostname -s` on it must say {short})",
                                             "warning"))
                host = short
            if not is_valid_hostname(host):
                self.problems.append(Problem(ctl.at.value_at, f"controller {host} is not a host name (letters, "
                                             "digits and '-'); name the controller by its hostname"))
                continue
            hosts.append(host)
        if not hosts and not self.conf.controller_hosts:
            self.problems.append(Problem(Where(str(self.path), 1, 1), "no SlurmctldHost (or ControlMachine) line: "
                                         "add the controller's hostname"))
        if not hosts:
            return "controller"
        return ",".join(dict.fromkeys(hosts))

    def _accounting(self) -> str | None:
        kind = self.conf.settings.get("AccountingStorageType")
        if kind is None or kind.value != "accounting_storage/slurmdbd":
            return None
        host = self.conf.settings.get("AccountingStorageHost")
        if host is None:  # slurm_files._defaults sets Slurm's default; kept for records built by hand
            self.problems.append(Problem(kind.value_at, "accounting through slurmdbd without "
                                         "AccountingStorageHost: add the slurmdbd host"))
            return None
        if is_valid_hostname(host.value):
            return host.value
        for ctl in self.conf.controller_hosts:  # the controller's address or long name
            if host.value in (ctl.address, ctl.name) and is_valid_hostname(ctl.name.split(".")[0]) \
                    and not _is_ip(ctl.name):
                name = ctl.name.split(".")[0]
                self.warnings.append(Problem(host.value_at, f"AccountingStorageHost={host.value} is the controller "
                                             f"{ctl.name}'s {'address' if host.value == ctl.address else 'name'}: "
                                             f"slurmdbd is read as running on {name}", "warning"))
                return name
        self.problems.append(Problem(host.value_at, f"AccountingStorageHost={host.value}: the spec names the "
                                     "slurmdbd host by its hostname, and this address is no controller's; write "
                                     "the host's name"))
        return None

    def _partitions(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        imported = {h for h in self.conf.nodes}
        for name, part in self.conf.partitions.items():
            if not _PARTITION.match(name):
                self.problems.append(Problem(part.at, f"partition name {name}: fleetspec takes letters, digits, "
                                             "'-' and '_' (not first or last). Rename it (and the jobs' "
                                             "--partition)"))
                continue
            entry: dict[str, Any] = {}
            members = [h for h in (part.nodes or []) if h in imported]
            if members and name not in self.group_partition.values():  # else its node groups name it
                entry["nodes"] = compress(members)
            default = part.attrs.get("Default")
            if default is not None and default.value.upper() == "YES":
                entry["default"] = True
            if "MaxTime" in part.attrs:
                value = part.attrs["MaxTime"].value
                entry["max_time"] = "INFINITE" if value.lower() in ("infinite", "unlimited") else value
            if "State" in part.attrs:
                entry["state"] = part.attrs["State"].value.upper()
            settings = {k: self._setting(p.value) for k, p in part.attrs.items() if k not in _PART_MODELLED}
            if settings:
                entry["settings"] = settings
            if len({self._generation(h) for h in members} - {None}) > 1:
                entry["allow_mixed_generations"] = True
            out[name] = entry
        return out

    def _named_like_generated(self, stack_of: dict[str, str]) -> dict[str, str]:
        """host -> X for a site partition X that bears the name fleetspec generates for its
        GPU nodes (``nvidia-hopper``: a cluster fleetspec rendered, or a site that chose the
        same name). Its node groups name it (``partition: X``), as the generated one would
        otherwise be built from them and clash with the site's. A partition with that name
        but other members is a problem at its line: fleetspec would build its own X too."""
        generated: dict[str, set[str]] = defaultdict(set)
        for host in stack_of:
            name = self._generated_name(host)
            if name:
                generated[name].add(host)
        out: dict[str, str] = {}
        for name, part in self.conf.partitions.items():
            hosts = generated.get(name)
            if not hosts:
                continue
            members = set(part.nodes or [])
            if members == hosts:
                out.update(dict.fromkeys(sorted(hosts), name))
                continue
            self.problems.append(Problem(part.at, f"partition {name} has the name fleetspec generates for the "
                                         f"{compress(sorted(hosts))} nodes (vendor-generation), but other members "
                                         f"({compress(sorted(members)) or 'none'}): the spec would hold two partitions "
                                         f"{name}. Rename the partition (and the jobs' --partition), or make its "
                                         "members exactly those nodes"))
        return out

    def _generated_name(self, host: str) -> str | None:
        """The partition fleetspec would generate for ``host`` (compile.partitions.generated_name):
        vendor-generation, with the CPU architecture where it is not x86_64."""
        base = self._generation(host)
        gpu = self.gpus.get(host)
        model = self.catalog.gpu(gpu.model) if gpu is not None and gpu.model not in self.site_models else None
        arch = model.cpu_arch if model is not None else "x86_64"
        return base if base is None or arch == "x86_64" else f"{base}-{arch}"

    def _generation(self, host: str) -> str | None:
        gpu = self.gpus.get(host)
        if gpu is not None and gpu.model in self.site_models:
            site = self.site_models[gpu.model]
            return f"{site['vendor']}-{site['generation']}"
        model = self.catalog.gpu(gpu.model) if gpu else None
        return f"{model.vendor}-{model.generation}" if model else None

    def _settings(self, version: str | None) -> dict[str, Any]:
        """Every other key as a site setting, except keys the target release no longer
        takes (the catalog's `defunct` list, dated by SchedMD's changelog: dropped with a
        warning at the site's line) and the keys fleetspec manages (OWNED, and the classes
        site.slurm.owner names: plugins, ports, trust): those the adoption keeps at the
        site's value (``self.kept``, keep.py), and validate proposes fleetspec's."""
        from fleetspec.site.slurm import OWNED, UNCONFIRMED, owner, parameters
        from fleetspec.versions import parse_version

        owned = {k.lower() for k in OWNED["slurm.conf"]}
        defunct = parameters().files["slurm.conf"].defunct
        out: dict[str, Any] = {}
        for key, pair in self.conf.settings.items():
            if key == "TopologyPlugin":
                self.kept[key] = pair.value  # the adoption keeps it where the render would not write it
            if key in _CONF_MODELLED:
                continue
            gone = defunct.get(key)
            if gone is not None and (gone == UNCONFIRMED or (parse_version(version or "") or (0,))[:2] >=
                                     (parse_version(gone) or (0,))[:2]):
                self.dropped.add(key)
                since = "in current Slurm" if gone == UNCONFIRMED else f"since Slurm {gone}"
                self.warnings.append(Problem(pair.key_at, f"{key}={pair.value} is dropped: defunct {since} "
                                             f"(slurm_parameters.yaml, SchedMD's changelog); Slurm {version} "
                                             "ignores or refuses it", "warning"))
                continue
            if key.lower() in owned or owner("slurm.conf", key):
                self.kept[key] = pair.value
                continue
            out[key] = self._setting(pair.value)
        return out

    def _fabric(self, fabric: str | None) -> dict[str, Any] | None:
        if not self.switches:
            return None
        spines = [sw.name for sw in self.switches if sw.switches and sw.name not in
                  {c for other in self.switches for c in other.switches}] or \
            [sw.name for sw in self.switches if sw.switches]
        if fabric is None:
            self.problems.append(Problem(self.switches[0].at, "the topology names switches, but not what they "
                                         "carry: give --fabric infiniband, roce or ethernet"))
            return None
        out: dict[str, Any] = {"type": fabric}
        if spines:
            out["spines"] = spines
        return out


class _HostsProblem(Problem):
    """A problem whose message ends with the hosts it covers (filled in as they are found)."""

    def __init__(self, where: Where, message: str, hosts: list[str]) -> None:
        super().__init__(where, message)
        object.__setattr__(self, "hosts", hosts)

    def __str__(self) -> str:
        hosts = compress(h for h in self.hosts if is_valid_hostname(h)) or ",".join(self.hosts)
        return f"{self.where}: error: {hosts}: {self.message}"


def _is_ip(text: str) -> bool:
    import ipaddress

    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True
