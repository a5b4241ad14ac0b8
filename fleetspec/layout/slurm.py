"""How a fleet lays out on Slurm, as the Slurm renderers and the rules both read it: the
nodes and partitions Slurm owns, the topology form the fleet's Slurm version can express
(tree, block or topology.yaml) and the NodeSets Slinky runs them as.

Where a version or Slinky cannot say what the fleet needs, ``topology_problems`` and
``slinky_problems`` say what is missing; the rules report each one and render/slurm.py
still writes the best form the version reads. Kept apart from the renderer so that
``fleetspec validate`` checks the layout without loading it (startup time;
tests/test_startup_imports.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

import yaml

from fleetspec.compile.ir import Fleet, Node, Partition, SlurmTenant, SpecPath
from fleetspec.node_side.hostlist import compress
from fleetspec.versions import at_least

# Versions that first read a piece of syntax (SchedMD NEWS / man pages).
BLOCK_TOPOLOGY_SINCE = "23.11"
BLOCK_SIZES_SINCE = "24.05"  # BlockSizes replaced BlockLevels
TOPOLOGY_YAML_SINCE = "25.05"
NVLINK_TOPOLOGY = "nvlink"  # topology.yaml name of the block topology
FABRIC_TOPOLOGY = "fabric"  # topology.yaml name of the tree topology

Problem = tuple[str, SpecPath]


# ---------------------------------------------------------------------------------
# What Slurm sees of the fleet


def slurm_nodes(fleet: Fleet) -> tuple[Node, ...]:
    """Nodes Slurm owns, in spec order."""
    return tuple(n for n in fleet.nodes if n.scheduler == "slurm")


def slurm_partitions(fleet: Fleet) -> tuple[Partition, ...]:
    """Partitions Slurm owns, in IR order (generated first, then the user's)."""
    return tuple(p for p in fleet.partitions if p.scheduler == "slurm")


def grouped(nodes: Iterable[Node], key) -> list[tuple[object, list[str]]]:
    """Hostnames grouped by ``key(node)``, groups in order of first appearance."""
    groups: dict[object, list[str]] = {}
    for node in nodes:
        groups.setdefault(key(node), []).append(node.hostname)
    return list(groups.items())


# ---------------------------------------------------------------------------------
# Topology


# A NamedTuple, immutable like a frozen dataclass but made at each start without compiling
# six generated methods (Python 3.11): tests/test_startup_imports.py counts what validate makes.
class TopologyPlan(NamedTuple):
    """The topology form chosen for a fleet and version, and what it could not say."""

    slurm_conf_lines: tuple[str, ...]
    conf_text: str | None  # topology.conf
    yaml_text: str | None  # topology.yaml
    partition_topology: dict[str, str]  # partition -> topology.yaml name
    problems: tuple[Problem, ...]


def leaf_groups(fleet: Fleet) -> list[tuple[str, list[str]]]:
    """(leaf, Slurm hostnames under it), leaves in fabric order; leafless racks left out.
    CPU nodes sit under their rack's leaf too: a node no switch reaches is one slurmctld
    cannot place beside others ("switches lack access to N nodes")."""
    rack_leaf = {r.name: r.leaf for r in fleet.racks}
    groups: dict[str, list[str]] = {}
    for node in slurm_nodes(fleet):
        leaf = node.leaf or rack_leaf.get(node.rack)
        if leaf:
            groups.setdefault(leaf, []).append(node.hostname)
    for cpu in fleet.cpu_nodes:
        leaf = rack_leaf.get(cpu.rack)
        if leaf:
            groups.setdefault(leaf, []).append(cpu.hostname)
    order = list(fleet.fabric.leaves) if fleet.fabric else []
    return sorted(groups.items(), key=lambda kv: (order.index(kv[0]) if kv[0] in order else len(order), kv[0]))


def nvlink_blocks(fleet: Fleet) -> list[tuple[str, list[str]]]:
    """(NVLink domain, Slurm hostnames in it): one Slurm block per NVLink domain."""
    nvl_racks = {r.name for r in fleet.racks if r.nvlink_domain}
    groups: dict[str, list[str]] = {}
    for node in slurm_nodes(fleet):
        if node.nvlink_domain or node.rack in nvl_racks:
            groups.setdefault(node.nvlink_domain or node.rack, []).append(node.hostname)
    return sorted(groups.items())


def _tree_switches(fleet: Fleet) -> list[tuple[str, str, str]]:
    """(switch, "Nodes"|"Switches", hostlist) for topology/tree: leaves with their
    nodes, then one top switch over every leaf.

    Every leaf of a fat tree reaches every spine, so the spines form one level, and
    Slurm's tree wants one parent per switch: several spines become one switch named
    ``spines`` (one spine keeps its name).
    """
    leaves = leaf_groups(fleet)
    rows = [(leaf, "Nodes", compress(hosts)) for leaf, hosts in leaves]
    if len(leaves) > 1:
        spines = fleet.fabric.spines if fleet.fabric else ()
        top = spines[0] if len(spines) == 1 else "spines"
        rows.append((top, "Switches", compress(leaf for leaf, _ in leaves)))
    return rows


def plan_topology(fleet: Fleet) -> TopologyPlan:
    """Choose tree, block or topology.yaml for the fleet at its Slurm version."""
    assert fleet.slurm is not None
    version = fleet.slurm.version
    path: SpecPath = fleet.slurm.path + ("version",)
    if fleet.fabric is None or not (slurm_nodes(fleet) or fleet.cpu_nodes):
        return TopologyPlan(("# No fabric in the spec: flat topology.",), None, None, {}, ())
    blocks = nvlink_blocks(fleet)
    in_blocks = {h for _, hosts in blocks for h in hosts}
    outside = [n.hostname for n in slurm_nodes(fleet) if n.hostname not in in_blocks]
    problems: list[Problem] = []
    if blocks and not outside:
        if at_least(version, BLOCK_TOPOLOGY_SINCE):
            return _block_plan(fleet, blocks)
        problems.append((
            f"NVLink-domain racks need Slurm's block topology, which Slurm {version} lacks; "
            f"use Slurm {BLOCK_TOPOLOGY_SINCE} or newer (rendered as a tree of leaf switches for now)",
            path,
        ))
    elif blocks:
        if at_least(version, TOPOLOGY_YAML_SINCE):
            return _yaml_plan(fleet, blocks)
        problems.append((
            "this fleet needs a tree (leaf switches) and blocks (NVLink-domain racks) at once, "
            f"which only topology.yaml expresses; Slurm {version} lacks it, use Slurm "
            f"{TOPOLOGY_YAML_SINCE} or newer (rendered as a tree of leaf switches for now)",
            path,
        ))
    switches = _tree_switches(fleet)
    if not switches:
        # No node names a leaf switch: a tree of no switches is fatal on 26.05.5's slurmctld
        # ("No switches configured, failed to create context for topology plugin", seen by
        # tests/slurm/test_health_real.py at 26.05, #47) and says nothing at any release.
        return TopologyPlan(("# No leaf switches in the spec: flat topology.",), None, None, {}, tuple(problems))
    conf = "\n".join(f"SwitchName={name} {kind}={members}" for name, kind, members in switches)
    return TopologyPlan(("TopologyPlugin=topology/tree",), conf + "\n", None, {}, tuple(problems))


def _block_sizes(blocks: list[tuple[str, list[str]]]) -> int:
    """The base block size: every block must hold at least that many nodes."""
    return min(len(hosts) for _, hosts in blocks)


def _block_plan(fleet: Fleet, blocks: list[tuple[str, list[str]]]) -> TopologyPlan:
    assert fleet.slurm is not None
    lines = [f"BlockName={name} Nodes={compress(hosts)}" for name, hosts in blocks]
    if at_least(fleet.slurm.version, BLOCK_SIZES_SINCE):
        lines.append(f"BlockSizes={_block_sizes(blocks)}")
    return TopologyPlan(("TopologyPlugin=topology/block",), "\n".join(lines) + "\n", None, {}, ())


def _yaml_plan(fleet: Fleet, blocks: list[tuple[str, list[str]]]) -> TopologyPlan:
    switches = []
    for name, kind, members in _tree_switches(fleet):
        key = "nodes" if kind == "Nodes" else "children"
        switches.append({"switch": name, key: members})
    doc = [
        {"topology": FABRIC_TOPOLOGY, "cluster_default": True, "tree": {"switches": switches}},
        {
            "topology": NVLINK_TOPOLOGY,
            "cluster_default": False,
            "block": {
                "block_sizes": [_block_sizes(blocks)],
                "blocks": [{"block": name, "nodes": compress(hosts)} for name, hosts in blocks],
            },
        },
    ]
    in_blocks = {h for _, hosts in blocks for h in hosts}
    per_partition = {
        p.name: NVLINK_TOPOLOGY
        for p in slurm_partitions(fleet)
        if p.nodes and all(h in in_blocks for h in p.nodes)
    }
    text = yaml.safe_dump(doc, sort_keys=False, default_flow_style=False)
    lines = ("# Topology: topology.yaml (tree over the leaf switches, blocks per NVLink domain).",)
    return TopologyPlan(lines, None, text, per_partition, ())


def topology_problems(fleet: Fleet) -> list[Problem]:
    """(message, spec path) for each topology the fleet's Slurm version cannot express.

    Empty when the rendered topology says everything the fleet needs. The rules layer
    reports each as an error; the renderer still writes the best form the version reads.
    """
    if fleet.slurm is None or fleet.slurm.mode == "slinky":
        return []
    return list(plan_topology(fleet).problems)


# ---------------------------------------------------------------------------------
# Slinky (slurm-operator v1.2 ``slurm`` chart)

# gres.conf AutoDetect under Slinky. Slinky's images are built from SchedMD's Debian
# packaging without NVML, so AutoDetect=nvml finds nothing there: slurmd falls back to
# gpu/generic and the NodeSet registers 0 GPUs ("gres/gpu count reported lower than
# configured (0 < 4)", SlinkyProject/containers#14). The gpu/nvidia plugin (Slurm 24.11+)
# needs no library: it reads /proc/driver/nvidia/gpus/<bus>/information (Device Minor,
# Model; src/plugins/gpu/nvidia/gpu_nvidia.c), and Slinky's own GPU guide uses it.
# AMD has no library-free plugin: rsmi (ROCm SMI) is the only AMD one.
SLINKY_AUTODETECT = {"nvidia": "nvidia", "amd": "rsmi"}

# Slinky's images (SlinkyProject/containers, schedmd/slurm/<series>/<os>/): one per Slurm
# release series and OS, tagged ``<series>-<os>`` (ghcr.io/slinkyproject/slurmd:25.11-ubuntu24.04),
# with ``slurmd-pyxis``/``login-pyxis`` variants (SlinkyProject/containers#14 runs
# slurmd-pyxis:25.11-ubuntu24.04). The chart's default is its own appVersion (26.05 for
# chart 1.2.1), whatever Slurm the spec pins, so every image is set from the spec. Series
# 24.11 onwards: the gpu/nvidia AutoDetect plugin Slinky's gres.conf needs starts there.
SLINKY_IMAGE_SERIES = ("24.11", "25.05", "25.11", "26.05")
SLINKY_IMAGE_OS = "ubuntu24.04"  # built for every series above, Pyxis variants included
SLINKY_REGISTRY = "ghcr.io/slinkyproject"


def slinky_image(fleet: Fleet, daemon: str) -> dict[str, str]:
    """``{repository, tag}`` of Slinky's ``daemon`` image (slurmctld, slurmd, slurmdbd,
    slurmrestd, login) at the spec's Slurm series; slurmd and login in their Pyxis
    variant when the spec runs Pyxis; under ``packages.registry_mirror`` with a mirror."""
    from fleetspec.layout.kubernetes import mirrored
    from fleetspec.versions import major_minor

    assert fleet.slurm is not None
    pyxis = fleet.slurm.containers == "pyxis" and daemon in ("slurmd", "login")
    name = f"{daemon}-pyxis" if pyxis else daemon
    return {"repository": mirrored(f"{SLINKY_REGISTRY}/{name}", fleet.registry_mirror),
            "tag": f"{major_minor(fleet.slurm.version)}-{SLINKY_IMAGE_OS}"}
SLINKY_AUTODETECT_FEATURE = {"nvidia": "gres_autodetect_nvidia", "amd": "gres_autodetect_rsmi"}


def detected_gpu_names(model: str) -> tuple[str, ...]:
    """The type names slurmd's AutoDetect gives a catalog GPU model: the name the driver
    reports (nvidia-smi's, which gpu/nvidia reads as ``Model:`` and gpu/nvml as
    nvmlDeviceGetName; ROCm SMI's for rsmi), lower-cased, spaces to underscores
    (gpu_common_underscorify_tolower): "NVIDIA H100 80GB HBM3" -> nvidia_h100_80gb_hbm3."""
    from fleetspec.catalog import load_catalog

    gpu = load_catalog().gpu(model)
    return tuple(n.lower().replace(" ", "_") for n in gpu.smi_names) if gpu else ()


def undetected_type_names(gres_type: str, model: str) -> tuple[str, ...]:
    """Detected names of ``model`` that do not contain ``gres_type``. gres.conf(5), Type:
    with AutoDetect the slurm.conf type "must match or be a substring of the GPU name
    reported by slurmd via the AutoDetect mechanism"; a GPU whose name does not contain
    it is detected but ignored, and the node registers fewer GPUs than configured."""
    return tuple(n for n in detected_gpu_names(model) if gres_type.lower() not in n)


def nodeset_name(partition: str, model: str | None) -> str:
    """NodeSet name for a partition (and GPU model when the partition mixes models)."""
    return partition if model is None else f"{partition}-{model}"


def slinky_nodesets(fleet: Fleet) -> dict[str, list[tuple[str, Node, tuple[str, ...]]]]:
    """partition -> [(nodeset name, a representative node, its hosts)]: one NodeSet
    per generated partition, split by GPU model where the partition mixes models
    (a NodeSet declares one Gres line for all its pods)."""
    owned = {n.hostname: n for n in slurm_nodes(fleet)}
    result: dict[str, list[tuple[str, Node, int]]] = {}
    for p in slurm_partitions(fleet):
        if not p.generated:
            continue
        nodes = [owned[h] for h in p.nodes if h in owned]
        by_model = grouped(nodes, lambda n: n.gpu.model)
        split = len(by_model) > 1
        result[p.name] = [
            (nodeset_name(p.name, model if split else None), owned[hosts[0]], tuple(hosts))  # type: ignore[arg-type]
            for model, hosts in by_model
        ]
    return result


def slinky_problems(fleet: Fleet) -> list[Problem]:
    """(message, spec path) for what Slinky mode cannot carry over from the spec."""
    if fleet.slurm is None or fleet.slurm.mode != "slinky":
        return []
    problems: list[Problem] = []
    for p in slurm_partitions(fleet):
        if not p.generated:
            problems.append((
                f"partition {p.name!r} names individual hosts, but Slinky builds partitions from "
                "whole NodeSets (one per generated partition); drop it or use mode: native",
                p.path,
            ))
    if len({n.gpu.vendor for n in slurm_nodes(fleet)}) > 1:
        problems.append((
            "Slinky shares one gres.conf across NodeSets and cannot scope it by host, so GPUs of "
            "two vendors cannot both be autodetected; run one vendor's partitions under Slinky "
            "and the other with mode: native (or as a second Slinky cluster)",
            fleet.slurm.path + ("mode",),
        ))
    owned = {n.hostname: n for n in slurm_nodes(fleet)}
    extra = dict(fleet.site.nodes) if fleet.site is not None else {}  # host -> the site's NodeName parameters
    for members in slinky_nodesets(fleet).values():
        for name, _, hosts in members:
            if len({extra.get(h, ()) for h in hosts}) > 1:
                odd = next(h for h in hosts if extra.get(h, ()) != extra.get(hosts[0], ()))
                problems.append((
                    f"NodeSet {name!r} runs hosts whose node groups carry different slurm_settings "
                    f"({hosts[0]} and {odd}); a NodeSet passes one --conf to all its slurmd pods, so "
                    "give those node groups the same slurm_settings, or use mode: native",
                    owned[odd].path + ("slurm_settings",),
                ))
    problems += _slinky_autodetect_problems(fleet)
    if fleet.slurm.accounting_host and not fleet.slurm.slinky_database_clients:
        problems.append((
            f"Slinky's slurmdbd runs in a pod and logs in to the MariaDB on "
            f"{fleet.slurm.accounting_host} over the network, from addresses the spec does not "
            "name; its database user is made for named networks only, never for any host ('%'). "
            "Set slurm.slinky.database_clients to the CIDRs it connects from: the pod network "
            "(e.g. [10.244.0.0/16]), or the nodes' network where pod traffic leaving the "
            "cluster is masqueraded",
            fleet.slurm.path + ("accounting",),
        ))
    from fleetspec.versions import major_minor

    if major_minor(fleet.slurm.version) not in SLINKY_IMAGE_SERIES:
        problems.append((
            f"Slinky publishes no images for Slurm {major_minor(fleet.slurm.version)} "
            f"(series with images: {', '.join(SLINKY_IMAGE_SERIES)}), so the cluster would run another Slurm "
            "than the spec pins. Pin a series Slinky builds, or use mode: native",
            fleet.slurm.path + ("version",),
        ))
    if len(leaf_groups(fleet)) > 1 or nvlink_blocks(fleet):
        problems.append((
            "Slinky names Slurm nodes after their pods, so the fabric topology (leaf switches, "
            "NVLink blocks) is not rendered; jobs will be placed without it. Use mode: native "
            "to keep topology-aware placement",
            fleet.slurm.path + ("mode",),
        ))
    return problems


def _slinky_autodetect_problems(fleet: Fleet) -> list[Problem]:
    """A Slurm too old for the AutoDetect plugin Slinky's gres.conf names, and NodeSets
    whose GRES type is not part of the name that plugin detects."""
    from fleetspec.catalog import load_catalog

    assert fleet.slurm is not None
    catalog = load_catalog()
    problems: list[Problem] = []
    for vendor in sorted({n.gpu.vendor for n in slurm_nodes(fleet)}):
        feature = SLINKY_AUTODETECT_FEATURE[vendor]
        if not catalog.slurm_supports(fleet.slurm.version, feature):
            problems.append((
                f"Slinky's slurmd images have no NVML or ROCm SMI build, so {vendor} GPUs are found by "
                f"gres.conf AutoDetect={SLINKY_AUTODETECT[vendor]}, which needs Slurm "
                f"{catalog.slurm_feature_since(feature)} or newer; Slurm {fleet.slurm.version} would register "
                "0 GPUs per NodeSet. Use a newer Slurm, or mode: native",
                fleet.slurm.path + ("version",),
            ))
    for members in slinky_nodesets(fleet).values():
        for name, node, _ in members:
            missing = undetected_type_names(node.gpu.gres_type, node.gpu.model)
            if missing:
                problems.append((
                    f"NodeSet {name!r} declares gres type {node.gpu.gres_type!r}, but AutoDetect="
                    f"{SLINKY_AUTODETECT[node.gpu.vendor]} names these GPUs {', '.join(missing)}: a type that is "
                    "not a substring of the detected name is ignored and the node registers 0 GPUs "
                    "(gres.conf(5) Type). Use mode: native for this model",
                    node.path + ("gpu", "model"),
                ))
    return problems


# ---------------------------------------------------------------------------------
# Tenants as Slurm accounts


class Account(NamedTuple):
    """One Slurm account made from a ``slurm.tenants`` entry: what sacctmgr is asked for."""

    name: str
    users: tuple[str, ...]
    groups: tuple[str, ...]  # site Unix groups whose members join at apply
    grp_tres: tuple[tuple[str, int], ...]  # (gres/gpu:<type>, GPUs) for every Slurm GPU type
    fairshare: int


# Accounts slurmdbd makes itself: a tenant of that name would rewrite the cluster's root.
RESERVED_ACCOUNTS = frozenset({"root"})


def slurm_gpu_types(fleet: Fleet) -> list[str]:
    """The GRES types of the GPUs Slurm owns, sorted (untyped GPUs, an adopted cluster's
    ``typed: false``, have none)."""
    return sorted({n.gpu.gres_type for n in slurm_nodes(fleet) if n.gpu.count and n.gpu.gres_type})


def _quota_types(fleet: Fleet, tenant: SlurmTenant, owned: dict[str, Node], types: list[str]
                 ) -> tuple[dict[str, int], list[Problem]]:
    """{GRES type: GPUs} from a tenant's quota keyed by partition or GRES type."""
    quota: dict[str, int] = {}
    where: dict[str, str] = {}
    problems: list[Problem] = []
    partitions = {p.name: p for p in slurm_partitions(fleet)}
    for key, gpus in tenant.quota:
        path = tenant.path + ("quota", key)
        if key in partitions:
            named = sorted({owned[h].gpu.gres_type for h in partitions[key].nodes if h in owned and owned[h].gpu.count})
            if len(named) != 1:
                problems.append((
                    f"tenant {tenant.name!r} has quota on partition {key!r}, which holds "
                    f"{'GPU types ' + ', '.join(named) if named else 'no GPUs'}; Slurm caps an account's GPUs per "
                    "GRES type (GrpTRES=gres/gpu:<type>=N), so give the quota per type instead "
                    f"({', '.join(f'{t}: N' for t in named) or 'a GPU partition'})", path))
                continue
            gres_type = named[0]
        elif key in types:
            gres_type = key
        else:
            problems.append((
                f"tenant {tenant.name!r} has quota on {key!r}, which is neither a Slurm partition "
                f"({', '.join(sorted(partitions)) or 'none'}) nor a GPU type Slurm schedules "
                f"({', '.join(types) or 'none'}). Fix the name", path))
            continue
        if gres_type in quota:
            problems.append((
                f"tenant {tenant.name!r} sets the quota of GPU type {gres_type!r} twice ({where[gres_type]!r} and "
                f"{key!r}); Slurm keeps one GrpTRES per type: keep one", path))
            continue
        quota[gres_type], where[gres_type] = gpus, key
    return quota, problems


def tenant_accounts(fleet: Fleet) -> tuple[list[Account], list[Problem]]:
    """The accounts ``slurm.tenants`` makes, and (message, spec path) for what cannot be made.

    Every account caps every GPU type Slurm schedules: the quota where the tenant names it,
    0 where it does not, so no tenant borrows GPUs it was not given (GrpTRES is a hard
    limit on all running jobs of the account together; sacctmgr(1), and
    https://sources.debian.org/src/slurm-wlm/22.05.8-4%2Bdeb12u3/doc/html/resource_limits.shtml).
    """
    s = fleet.slurm
    if s is None or not s.tenants:
        return [], []
    problems: list[Problem] = []
    if s.accounting_host is None:
        problems.append(("slurm.tenants makes accounts in the accounting database, but slurm has no accounting; "
                         "add slurm.accounting: {host: ...} (slurmdbd)", s.path + ("tenants",)))
    if s.mode != "native":
        problems.append(("slurm.tenants are applied with sacctmgr on the controller host, which Slinky does not "
                         "have; make the accounts in the slurmdbd pod yourself, or use mode: native",
                         s.path + ("tenants",)))
    owned = {n.hostname: n for n in slurm_nodes(fleet)}
    types = slurm_gpu_types(fleet)
    accounts: list[Account] = []
    seen: set[str] = set()
    for tenant in s.tenants:
        if tenant.name in RESERVED_ACCOUNTS or tenant.name in seen:
            why = "is slurmdbd's own root account" if tenant.name in RESERVED_ACCOUNTS else "is used twice"
            problems.append((f"tenant name {tenant.name!r} {why}; give the tenant another name", tenant.path + ("name",)))
            continue
        seen.add(tenant.name)
        quota, found = _quota_types(fleet, tenant, owned, types)
        problems += found
        accounts.append(Account(tenant.name, tuple(dict.fromkeys(tenant.users)), tuple(dict.fromkeys(tenant.groups)),
                                tuple((f"gres/gpu:{t}", quota.get(t, 0)) for t in types), tenant.fairshare))
    return accounts, problems
