"""Render the Slurm side of a fleet: slurm.conf, gres.conf, topology, cgroup, Pyxis,
slurmdbd, or the Slinky chart values.

`render_slurm` is a pure function of the compiled Fleet: no I/O, no clock, sorted
output, so the same fleet always gives the same bytes and golden files can be diffed
like code. Only Slurm-owned nodes and partitions appear; Kubernetes-owned GPUs are
never offered to Slurm (one allocation owner per device).

The spec's Slurm version picks the syntax (block topology needs 23.11, topology.yaml
25.05). Where the version cannot express what the fleet needs, the renderer writes
the best form that version does read and `topology_problems` (layout/slurm.py,
which plans the topology for both) says what is missing and which version can, so that
the rules layer raises an error instead of letting a weaker topology through silently.

Secrets never appear: slurmdbd.conf carries ``@@secret:<name>@@`` placeholders that
the apply step fills from the secret source, and the munge key is installed by apply.
"""

from __future__ import annotations

import functools
import json
import math
from pathlib import PurePosixPath

import yaml

from fleetspec.compile.ir import Adoption, CpuNode, Fleet, GpuSpec, Node
from fleetspec.layout.slurm import (
    SLINKY_AUTODETECT,
    TopologyPlan,
    grouped,
    plan_topology,
    slinky_image,
    slinky_nodesets,
    slurm_gpu_types,
    slurm_nodes,
    slurm_partitions,
    tenant_accounts,
)
from fleetspec.node_side.hostlist import compress
from fleetspec.render.health import slurm_health_lines
from fleetspec.site import slurm as site
from fleetspec.slurm_syntax import slurm_time_minutes
from fleetspec.versions import at_least

ROOT = PurePosixPath("slurm")

AUTODETECT_SINCE = {"nvidia": "19.05", "amd": "20.02"}  # AutoDetect=nvml / rsmi
AUTODETECT_PLUGIN = {"nvidia": "nvml", "amd": "rsmi"}
DEVICE_FILES = {"nvidia": ("/dev/nvidia", 0), "amd": ("/dev/dri/renderD", 128)}
# DRM render minors per physical GPU. amdgpu reserves 8 per MI300-class device (one per
# possible compute partition) even in the default SPX mode, so GPU n is renderD(128+8n):
# ROCm/rocDecode#38 ("MI300A/MI300X uses ... 8 render names per physical device") and
# #310 ("the kernel driver always creates 8 render nodes per MI3xx family").
RENDER_MINORS_PER_GPU = {"cdna3": 8, "cdna4": 8}

# DefaultTime for partitions with a MaxTime: long enough for an interactive or test job,
# short enough that a job without --time does not hold GPUs for days and that backfill
# can plan around it. Longer jobs say --time, up to MaxTime.
DEFAULT_TIME_MINUTES = 60
# RDMA fabrics (InfiniBand, RoCE): verbs register (pin) job memory, so a job needs the
# node's unlimited RLIMIT_MEMLOCK (slurmd's unit sets LimitMEMLOCK=infinity), not the
# submit host's limit, which srun propagates by default. slurm.conf(5),
# PropagateResourceLimitsExcept: "MEMLOCK ... useful for ... InfiniBand".
# https://slurm.schedmd.com/slurm.conf.html#OPT_PropagateResourceLimitsExcept
RDMA_FABRICS = ("infiniband", "roce")
# MPI launch: PMIx, which Open MPI 5, MPICH, NCCL's MPI launchers and Enroot/Pyxis jobs use
# (srun --mpi=pmix); the node layer installs the PMIx library the mpi/pmix plugin loads.
# https://slurm.schedmd.com/mpi_guide.html#pmix
MPI_DEFAULT = "pmix"
# Pyxis: the nvslurm-plugin-pyxis package (pyxis `make deb`; debian/rules installs with
# libdir=/usr/lib/$(DEB_HOST_MULTIARCH)) puts the plugin at
# /usr/lib/<multiarch>/slurm/spank_pyxis.so and writes its plugstack line, with that
# path, to /usr/share/pyxis/pyxis.conf (pyxis Makefile: $(datadir)/pyxis).
PYXIS_CONF_GLOB = "/usr/share/pyxis/*.conf"

# Backfill (slurm.conf(5) SchedulerParameters): bf_window "at least as long as the highest
# allowed time limit is generally advisable to prevent job starvation" (default 1440, max
# 43200 minutes); "if the value of bf_window is increased, then it is generally advisable to
# also increase bf_resolution" (default 60 s, max 3600). bf_continue: a backfill cycle that
# yields its locks goes on where it stopped instead of starting over, so on a long queue the
# jobs at its tail are considered at all.
BF_WINDOW_MIN, BF_WINDOW_MAX = 1440, 43200
BF_RESOLUTION_MAX = 3600
# GPU teardown (CUDA contexts of large-memory GPUs, NCCL/RDMA deregistration) outlives
# Slurm's 60 s default, after which slurmd drains the node as "Kill task failed".
UNKILLABLE_STEP_TIMEOUT = 180
# Prolog/Epilog and SPANK job prolog/epilog (Pyxis) wait forever by default; a hung one
# holds the node. slurm.conf(5): a Prolog timeout requeues the job and drains the node.
PROLOG_EPILOG_TIMEOUT = 600

# Fair-share billing units per GPU where slurm.gpu_billing_weights does not name the type.
GPU_BILLING_DEFAULT = 1.0

# Installed memory minus what the kernel and firmware keep: slurmd reports less than
# the DIMM total, and a node whose RealMemory exceeds what slurmd sees is drained.
REAL_MEMORY_SHARE = 0.95

SECRET_DB_PASSWORD = "@@secret:slurmdbd_password@@"
# Slinky: the Secret the ``slurm`` chart's accounting reads the database password from
# (accounting.storageConfig.passwordKeyRef); the Kubernetes layer creates it from the
# spec's ``slurmdbd_password`` reference.
SLINKY_DB_SECRET = "slurmdbd-password"
SLINKY_DB_SECRET_KEY = "password"

HEADER = (
    "# Generated by fleetspec from fleet {name!r} (Slurm {version} syntax).\n"
    "# Do not edit: change the fleet spec and render again.\n"
)


# ---------------------------------------------------------------------------------
# Entry point


def render_slurm(fleet: Fleet) -> dict[PurePosixPath, str]:
    """{path under ``slurm/``: text} for the fleet's Slurm configuration, sorted by path.

    Empty when the fleet has no ``slurm`` section. ``mode: slinky`` gives one
    ``slurm/slinky-values.yaml`` for the slurm-operator ``slurm`` chart instead of
    host files.
    """
    if fleet.slurm is None:
        return {}
    if fleet.slurm.mode == "slinky":
        files = {ROOT / "slinky-values.yaml": render_slinky_values(fleet)}
    else:
        files = _host_files(fleet)
    return dict(sorted(files.items()))


def _host_files(fleet: Fleet) -> dict[PurePosixPath, str]:
    assert fleet.slurm is not None
    header = _header(fleet)
    topology = plan_topology(fleet)
    files = {
        ROOT / "slurm.conf": header + site.apply_to_conf(
            render_slurm_conf(fleet, topology), site.conf_settings(fleet, "slurm.conf"), "spec.slurm.settings"),
        ROOT / "gres.conf": header + render_gres_conf(fleet),
    }
    adopted = adoption(fleet)
    files[ROOT / "cgroup.conf"] = header + site.apply_to_conf(
        _adopted_file(adopted.cgroup_conf, "cgroup") if adopted is not None and adopted.cgroup_conf is not None
        else render_cgroup_conf(), site.conf_settings(fleet, "cgroup.conf"), "spec.slurm.cgroup_settings")
    if adopted is not None and adopted.topology_conf is not None:
        files[ROOT / "topology.conf"] = header + "".join(f"{line}\n" for line in adopted.topology_conf)
    elif topology.conf_text is not None:
        files[ROOT / "topology.conf"] = header + topology.conf_text
    if topology.yaml_text is not None:
        files[ROOT / "topology.yaml"] = header + topology.yaml_text
    if fleet.slurm.containers == "pyxis":
        files[ROOT / "plugstack.conf"] = header + render_plugstack_conf()
    if fleet.slurm.accounting_host:
        files[ROOT / "slurmdbd.conf"] = header + site.apply_to_conf(
            _adopted_file(adopted.slurmdbd_conf, "slurmdbd") if adopted is not None and adopted.slurmdbd_conf
            is not None else render_slurmdbd_conf(fleet),
            site.conf_settings(fleet, "slurmdbd.conf"), "spec.slurm.slurmdbd_settings")
        if fleet.slurm.tenants:
            files[ROOT / "accounts.json"] = render_accounts(fleet)
    return files


def adoption(fleet: Fleet) -> Adoption | None:
    """The adopted cluster's own values (spec ``slurm.adopted``), or None."""
    return fleet.site.adoption if fleet.site is not None else None


def declines(fleet: Fleet, default: str) -> bool:
    """Whether an adopted cluster declines one of fleetspec's defaults (model.ADOPTED_DEFAULTS)."""
    adopted = adoption(fleet)
    return adopted is not None and default in adopted.declines


def _adopt_conf(text: str, adopted: Adoption | None) -> str:
    """slurm.conf with the adopted cluster's values: each replaces fleetspec's line of that
    key in place, a key the site leaves unset (None) is not written, and the site's keys
    fleetspec does not write follow under a comment. A comment says why the settings below
    it (up to the next comment or blank line) are there: when none of them is written, the
    comment goes too (an adopted cluster without ``SwitchType=switch/nvidia_imex`` gets no
    "one IMEX channel per job")."""
    if adopted is None or not adopted.conf:
        return text
    pinned = {k.lower(): (k, v) for k, v in adopted.conf}
    rows: list[tuple[str, str | None]] = []  # (kind: comment, blank, setting, dropped; the line)
    for line in text.splitlines():
        key = line.split("=", 1)[0] if "=" in line and not line.startswith("#") else None
        if line.startswith("#") or not line.strip():
            rows.append(("comment" if line.strip() else "blank", line))
        elif key is not None and " " not in key and key.lower() in pinned:
            k, v = pinned.pop(key.lower())
            rows.append(("dropped", None) if v is None else ("setting", f"{k}={v}"))
        else:
            rows.append(("setting", line))
    lines: list[str] = []
    i = 0
    while i < len(rows):
        j = i
        while j < len(rows) and rows[j][0] == "comment":
            j += 1
        k = j
        while k < len(rows) and rows[k][0] in ("setting", "dropped"):
            k += 1
        under = [kind for kind, _ in rows[j:k]]
        if j > i and under and "setting" not in under:  # a comment whose settings all went
            i = k
            continue
        lines += [line for kind, line in rows[i:max(k, i + 1)] if kind != "dropped" and line is not None]
        i = max(k, i + 1)
    # A paragraph left empty leaves one blank line, not two (the render writes no two in a row).
    lines = [line for n, line in enumerate(lines) if line.strip() or not n or lines[n - 1].strip()]
    rest = [f"{k}={v}" for k, v in pinned.values() if v is not None]
    if rest:
        lines += ["", "# The adopted cluster's own values (spec.slurm.adopted.conf)", *rest]
    return "\n".join(lines) + "\n"


def _header(fleet: Fleet) -> str:
    assert fleet.slurm is not None
    return HEADER.format(name=fleet.name, version=fleet.slurm.version)


# ---------------------------------------------------------------------------------
# What Slurm sees of the fleet


def node_features(node: Node) -> tuple[str, ...]:
    """Features a job can ``--constraint`` on: vendor, generation, model, rack, stack,
    then the user's own, without repeats."""
    return _features(node.gpu, node.rack, node.stack, node.features, node.other_gpus)


def _features(gpu: GpuSpec, rack: str, stack: str, extra: tuple[str, ...],
              other_gpus: tuple[GpuSpec, ...] = ()) -> tuple[str, ...]:
    more = (f for o in other_gpus for f in (o.generation, o.model))
    return tuple(dict.fromkeys((gpu.vendor, gpu.generation, gpu.model, *more, rack, stack, *extra)))


def real_memory_mb(memory_gb: int) -> int:
    """RealMemory for a node with ``memory_gb`` installed (see REAL_MEMORY_SHARE)."""
    return int(memory_gb * 1024 * REAL_MEMORY_SHARE)


def node_real_memory(node: Node) -> int | None:
    """The node's RealMemory: as written (``real_memory_mb``), else derived from ``memory_gb``."""
    if node.real_memory_mb is not None:
        return node.real_memory_mb
    return real_memory_mb(node.memory_gb) if node.memory_gb is not None else None


def _node_attributes(node: Node, site_features: bool = False) -> tuple[tuple[str, str], ...]:
    """The NodeName attributes of one node, in slurm.conf's usual order (nodes of one
    group share them: computed once per distinct shape). ``site_features``: the node's
    own features only (an adopted cluster that declines fleetspec's)."""
    return _attributes_of(node.cpus, node.sockets, node.cores_per_socket, node.threads_per_core,
                          node_real_memory(node), node.gpu, node.rack, node.stack, node.features, node.other_gres,
                          node.other_gpus, site_features, node.mig)


@functools.lru_cache(maxsize=4096)
def _attributes_of(cpus: int | None, sockets: int | None, cores_per_socket: int | None,
                   threads_per_core: int | None, memory_mb: int | None, gpu: GpuSpec, rack: str, stack: str,
                   features: tuple[str, ...], other_gres: tuple[tuple[str, int], ...] = (),
                   other_gpus: tuple[GpuSpec, ...] = (), site_features: bool = False,
                   mig: tuple[tuple[str, int], ...] = ()) -> tuple[tuple[str, str], ...]:
    attrs: list[tuple[str, str]] = []
    for key, value in (
        ("CPUs", cpus),
        ("Sockets", sockets),
        ("CoresPerSocket", cores_per_socket),
        ("ThreadsPerCore", threads_per_core),
    ):
        if value is not None:
            attrs.append((key, str(value)))
    if memory_mb is not None:
        attrs.append(("RealMemory", str(memory_mb)))
    gpus = mig_gres(gpu, mig) if mig else [gres_item(g) for g in (gpu, *other_gpus)]
    attrs.append(("Gres", ",".join([*gpus, *(f"{k}:{v}" for k, v in other_gres)])))
    if not site_features:
        attrs.append(("Features", ",".join(_features(gpu, rack, stack, features, other_gpus))))
    elif features:
        attrs.append(("Features", ",".join(features)))
    return tuple(attrs)


def mig_gres(gpu: GpuSpec, mig: tuple[tuple[str, int], ...]) -> list[str]:
    """A MIG node's GPU GRES: one type per instance profile, counting the instances of all
    its GPUs (gpu:1g.10gb:16,gpu:3g.40gb:8 for eight GPUs of {1g.10gb: 2, 3g.40gb: 1}), as
    Slurm's GRES guide writes MIG nodes (slurm.schedmd.com/gres.html#MIG_Management: the
    type is the profile NVML reports, "gpu:1g.5gb")."""
    return [f"gpu:{profile}:{count * gpu.count}" for profile, count in mig]


def slurm_gpus(node: Node) -> int:
    """The GPU GRES a node offers Slurm: its GPUs, or its MIG instances."""
    return node.gpu.count * sum(c for _, c in node.mig) if node.mig else node.gpu.count


def gres_item(gpu: GpuSpec) -> str:
    """``gpu:TYPE:N``, or ``gpu:N`` for untyped GRES (an adopted cluster's, spec ``typed: false``)."""
    return f"gpu:{gpu.gres_type}:{gpu.count}" if gpu.gres_type else f"gpu:{gpu.count}"


def _type_field(gres_type: str) -> str:
    return f" Type={gres_type}" if gres_type else ""


# ---------------------------------------------------------------------------------
# slurm.conf


def _imex_switch_lines(fleet: Fleet) -> list[str]:
    """``SwitchType=switch/nvidia_imex`` where Slurm owns multi-node NVLink (NVL72) nodes:
    slurmctld gives each job its own IMEX channel, so one job cannot map another's GPU
    memory across the rack (Slurm 24.05+, slurm.conf(5) SwitchType)."""
    from fleetspec.catalog import load_catalog
    from fleetspec.packages import needs_imex

    assert fleet.slurm is not None
    if not any(n.scheduler == "slurm" and needs_imex(n.gpu) for n in fleet.nodes):
        return []
    if not load_catalog().slurm_supports(fleet.slurm.version, "switch_nvidia_imex"):
        return ["", f"# NVL72 nodes: per-job IMEX channels (switch/nvidia_imex) need Slurm 24.05+, not "
                    f"{fleet.slurm.version}."]
    return ["", "# NVL72 racks: one IMEX channel per job (multi-node NVLink memory stays inside the job).",
            "SwitchType=switch/nvidia_imex"]


def cluster_name(fleet: Fleet) -> str:
    """slurm.conf's ClusterName: the site's own where the spec keeps one, else the fleet's
    name. slurmctld and slurmdbd use it lower-cased (slurm.conf(5))."""
    assert fleet.slurm is not None
    return fleet.slurm.cluster_name or fleet.name


def render_slurm_conf(fleet: Fleet, topology: TopologyPlan | None = None) -> str:
    """slurm.conf for native (host) mode."""
    slurm = fleet.slurm
    assert slurm is not None
    topology = topology or plan_topology(fleet)
    out: list[str] = [f"ClusterName={cluster_name(fleet)}"]
    out += [f"SlurmctldHost={c}" for c in slurm.controllers]
    out += [
        "",
        "# Authentication: the munge key is installed by the apply step, never rendered.",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        "SlurmUser=slurm",
        "SlurmctldPort=6817",
        "SlurmdPort=6818",
    ]
    if fleet.baremetal is not None and fleet.baremetal.pxe is not None:
        out += ["# Nodes boot golden images whose slurmd fetches this configuration from slurmctld",
                "# (slurmd --conf-server): nothing on a node to keep in step.",
                "SlurmctldParameters=enable_configless"]
    if len(slurm.controllers) > 1:
        out.append("# HA controllers: StateSaveLocation must be storage every controller shares.")
    out += [
        "# Created by the slurm role, owned by SlurmUser (slurmctld runs as slurm).",
        f"StateSaveLocation={slurm.state_save_location}",
        "SlurmdSpoolDir=/var/spool/slurmd",
        "SlurmctldPidFile=/run/slurmctld/slurmctld.pid",
        "SlurmdPidFile=/run/slurmd.pid",
        "SlurmctldLogFile=/var/log/slurm/slurmctld.log",
        "SlurmdLogFile=/var/log/slurm/slurmd.log",
        "",
        "# Scheduling: cores, memory and typed GPUs are consumable; jobs that can never",
        "# fit a partition are refused at submission instead of pending forever.",
        "SchedulerType=sched/backfill",
        f"SchedulerParameters={','.join(scheduler_parameters(fleet) + _prolog_requeue(fleet))}",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core_Memory",
        *([f"GresTypes={','.join(gres_types(fleet))}"]  # none: CPU nodes only, without a site's GPU GRES
          if slurm_nodes(fleet) or any(n.site_gres for n in fleet.cpu_nodes) else []),
        "EnforcePartLimits=ALL",
        "ReturnToService=1",
        f"MpiDefault={MPI_DEFAULT}",
        *_rdma_lines(fleet),
        *_imex_switch_lines(fleet),
        "",
        "# GPU teardown outlives the 60 s default before a step counts as unkillable (and the node",
        "# drains); a hung prolog or epilog (health checks, Pyxis) is stopped instead of holding the node.",
        f"UnkillableStepTimeout={UNKILLABLE_STEP_TIMEOUT}",
        f"PrologEpilogTimeout={PROLOG_EPILOG_TIMEOUT}",
        "",
        "# Jobs are confined to their cores, memory and GPUs (cgroup.conf: ConstrainDevices).",
        "ProctrackType=proctrack/cgroup",
        "TaskPlugin=task/cgroup,task/affinity",
        "JobAcctGatherType=jobacct_gather/cgroup",
    ]
    if slurm.containers == "pyxis":
        out.append("PrologFlags=Contain")
    if health := slurm_health_lines(fleet):
        out += ["", *health]
    out += ["", *_accounting_lines(fleet)]
    out += ["", *topology.slurm_conf_lines]
    out += ["", *_node_lines(fleet)]
    out += ["", *_partition_lines(fleet, topology)]
    return _adopt_conf("\n".join(out) + "\n", adoption(fleet))


def gres_types(fleet: Fleet) -> list[str]:
    """GresTypes: gpu, and the GPU-sharing GRES (mps, shard) a node group declares."""
    return ["gpu", *sorted({name for n in slurm_nodes(fleet) for name, _ in n.other_gres})]


def _rdma_lines(fleet: Fleet) -> list[str]:
    if fleet.fabric is None or fleet.fabric.type not in RDMA_FABRICS:
        return []
    return [
        "# RDMA memory registration needs the node's unlimited memlock, not the submit host's.",
        "PropagateResourceLimitsExcept=MEMLOCK",
    ]


def backfill_window(fleet: Fleet) -> int:
    """bf_window in minutes: the longest finite MaxTime of a Slurm partition, at least the
    default day and at most Slurm's 30 days; 30 days where a partition has no MaxTime."""
    longest = BF_WINDOW_MIN
    for p in slurm_partitions(fleet):
        minutes = slurm_time_minutes(p.max_time) if p.max_time else None
        if minutes is None or minutes < 0:
            return BF_WINDOW_MAX
        longest = max(longest, minutes)
    return min(longest, BF_WINDOW_MAX)


def _prolog_requeue(fleet: Fleet) -> list[str]:
    """``nohold_on_prolog_fail`` with the GPU prolog (spec.health): slurm.conf(5) Prolog, a failed
    prolog requeues the job "in a held state unless nohold_on_prolog_fail is configured in
    SchedulerParameters"; with it "the job will be requeued but not held so that the scheduler
    can dispatch it to another host" (slurm.conf(5), Slurm 22.05)."""
    return ["nohold_on_prolog_fail"] if fleet.health is not None else []


def scheduler_parameters(fleet: Fleet) -> list[str]:
    """SchedulerParameters: bf_continue, bf_window sized to MaxTime and bf_resolution grown
    with it (one minute per day of window: the same number of time slots as the default)."""
    window = backfill_window(fleet)
    resolution = min(BF_RESOLUTION_MAX, 60 * -(-window // BF_WINDOW_MIN))
    return ["bf_continue", f"bf_window={window}", f"bf_resolution={resolution}"]


def _accounting_lines(fleet: Fleet) -> list[str]:
    assert fleet.slurm is not None
    host = fleet.slurm.accounting_host
    if not host:
        return [
            "# No accounting: jobs are ordered by submission time.",
            "AccountingStorageType=accounting_storage/none",
            "PriorityType=priority/basic",
        ]
    return [
        "# Accounting through slurmdbd, and fair-share priority over its usage records.",
        "# Typed GPU TRES where GPU models share a partition, so usage and billing tell them apart.",
        "# Billing (each partition's TRESBillingWeights) counts GPUs; MAX_TRES bills a job per node",
        "# by whichever of its GPUs, CPUs or memory is the larger share of that node.",
        "AccountingStorageType=accounting_storage/slurmdbd",
        f"AccountingStorageHost={host}",
        "AccountingStoragePort=6819",
        f"AccountingStorageTRES={','.join(accounting_tres(fleet))}",
        "AccountingStorageEnforce=associations,limits,qos",
        "PriorityType=priority/multifactor",
        "PriorityFlags=MAX_TRES",
        "PriorityDecayHalfLife=7-0",
        "PriorityMaxAge=7-0",
        "PriorityWeightFairshare=100000",
        "PriorityWeightAge=1000",
        "PriorityWeightPartition=1000",
        "PriorityWeightJobSize=0",
    ]


def _node_lines(fleet: Fleet) -> list[str]:
    lines = [
        "# Nodes: one line per group of identical nodes. RealMemory is "
        f"{int(REAL_MEMORY_SHARE * 100)}% of installed memory",
        "# (slurmd sees less than the DIMM total; a node below RealMemory is drained).",
    ]
    extra = site.node_settings(fleet)  # the site's NodeName parameters (slurm_settings)
    own = declines(fleet, "node-features")
    for attrs, hosts in grouped(slurm_nodes(fleet), lambda n: _node_attributes(n, own) + extra.get(n.hostname, ())):
        fields = " ".join(f"{k}={v}" for k, v in attrs)  # type: ignore[union-attr]
        lines.append(f"NodeName={compress(hosts)} {fields}{_unknown_state(attrs)}")
    if fleet.cpu_nodes:
        lines.append("# Nodes without GPUs (login, service, CPU partitions): no GRES."
                     if not any(n.site_gres for n in fleet.cpu_nodes) else
                     "# Nodes without GPUs fleetspec manages (login, service, CPU partitions); a GPU no catalog\n"
                     "# model describes keeps the site's GRES (site_gres), with no stack from fleetspec.")
    for attrs, hosts in grouped(fleet.cpu_nodes, lambda n: _cpu_attributes(n, own) + extra.get(n.hostname, ())):
        fields = " ".join(f"{k}={v}" for k, v in attrs)  # type: ignore[union-attr]
        lines.append(f"NodeName={compress(hosts)} {fields}{_unknown_state(attrs)}".replace("  ", " "))
    return lines


def _unknown_state(attrs: object) -> str:
    """`` State=UNKNOWN`` (in service, as slurmctld finds it), unless the node group's
    ``slurm_state`` already wrote the site's State (a drained or down node)."""
    return "" if any(k == "State" for k, _ in attrs) else " State=UNKNOWN"  # type: ignore[attr-defined]


def _cpu_attributes(node: CpuNode, site_features: bool = False) -> tuple[tuple[str, str], ...]:
    attrs = [(key, str(value)) for key, value in (
        ("CPUs", node.cpus), ("Sockets", node.sockets), ("CoresPerSocket", node.cores_per_socket),
        ("ThreadsPerCore", node.threads_per_core)) if value is not None]
    memory = node.real_memory_mb if node.real_memory_mb is not None else (
        real_memory_mb(node.memory_gb) if node.memory_gb is not None else None)
    if memory is not None:
        attrs.append(("RealMemory", str(memory)))
    if node.site_gres:
        attrs.append(("Gres", ",".join(node.site_gres)))
    features = node.features if site_features else tuple(dict.fromkeys((node.rack, *node.features)))
    if features:
        attrs.append(("Features", ",".join(features)))
    return tuple(attrs)


def _partition_lines(fleet: Fleet, topology: TopologyPlan) -> list[str]:
    owned = {n.hostname: n for n in slurm_nodes(fleet)}
    lines = [
        "# Partitions: one vendor and one generation each, so every job can form one NCCL/RCCL communicator.",
        "# DefMemPerGPU/DefCpuPerGPU: a job's share per GPU on the partition's smallest node, so a",
        "# 1-GPU job without --mem/--cpus-per-gpu leaves room for the others.",
        f"# DefaultTime: {DEFAULT_TIME_MINUTES} minutes (at most MaxTime) for a job without --time,",
        "# on every partition with a finite MaxTime.",
    ]
    proposal = declines(fleet, "generated-partitions")
    per_gpu = not declines(fleet, "per-gpu-defaults")
    default_times = not declines(fleet, "default-time")
    bills = not declines(fleet, "billing")
    for p in slurm_partitions(fleet):
        if p.generated and proposal:
            continue  # an adopted cluster's partitions are the site's (rule adopted-declines-default)
        nodes = [h for h in p.nodes if h in owned]
        fields = [f"PartitionName={p.name}"]
        if nodes or p.cpu_nodes:
            fields.append(f"Nodes={compress([*nodes, *p.cpu_nodes])}")
        if p.default:
            fields.append("Default=YES")
        if per_gpu:
            fields += [f"{k}={v}" for k, v in per_gpu_defaults([owned[h] for h in nodes])]
        fields.append(f"MaxTime={p.max_time or 'INFINITE'}")
        default_time = default_time_for(p.max_time) if default_times else None
        if default_time:
            fields.append(f"DefaultTime={default_time}")
        fields.append(f"State={(p.state or 'UP').upper()}")
        billing = tres_billing_weights(fleet, [owned[h] for h in nodes]) if bills else None
        if billing:
            fields.append(f"TRESBillingWeights={billing}")
        if p.name in topology.partition_topology:
            fields.append(f"Topology={topology.partition_topology[p.name]}")
        pairs = site.merge_fields((f.split("=", 1) for f in fields[1:]), site.partition_settings(fleet, p.name))
        lines.append(" ".join([fields[0], *(f"{k}={v}" for k, v in pairs)]))
    return lines


def accounting_tres(fleet: Fleet) -> list[str]:
    """AccountingStorageTRES: gres/gpu, and gres/gpu:<type> for every type in a partition
    that mixes GPU models (a typed TRES weight or limit needs the typed TRES tracked;
    slurm.schedmd.com/tres.html, AccountingStorageTRES=gres/gpu:tesla), and for every type
    with ``slurm.tenants``, whose accounts cap each type (GrpTRES=gres/gpu:<type>=N: sacctmgr
    refuses a limit on a TRES slurmdbd does not track, "no TRES known by type gres/gpu:h100")."""
    assert fleet.slurm is not None
    owned = {n.hostname: n for n in slurm_nodes(fleet)}
    typed: set[str] = set(slurm_gpu_types(fleet)) if fleet.slurm.tenants else set()
    for p in slurm_partitions(fleet):
        types = {owned[h].gpu.gres_type for h in p.nodes if h in owned}
        if len(types) > 1:
            typed |= types
    typed |= {profile for n in slurm_nodes(fleet) for profile, _ in n.mig}  # instances, counted per profile
    return ["gres/gpu", *(f"gres/gpu:{t}" for t in sorted(typed - {""}))]


def _weight(value: float, up: bool = False) -> str:
    """A weight in 6 significant digits; ``up``: rounded up, so that a share it prices at
    exactly n units is billed n, not n - 1 (slurmctld truncates the billing TRES: a real
    slurmctld billed 8 GPUs' memory at a rounded-down weight 7)."""
    if up and value > 0:
        step = 10.0 ** (math.floor(math.log10(value)) - 5)
        value = math.ceil(value / step - 1e-6) * step
    return f"{value:.6g}"


def tres_billing_weights(fleet: Fleet, nodes: list[Node]) -> str | None:
    """TRESBillingWeights for a partition of ``nodes``: fair share bills GPUs.

    Without it Slurm bills allocated CPUs (slurm.conf(5) TRESBillingWeights: "If
    TRESBillingWeights is not defined then the job is billed against the total number of
    allocated CPUs"): an 8-GPU job at --cpus-per-gpu=1 costs 8, a default 1-GPU job 28. Here
    a GPU costs its type's ``slurm.gpu_billing_weights`` (1 by default), typed
    (GRES/gpu:<type>) where models share the partition, and CPUs and memory are weighted so
    one GPU's share of the roomiest node's CPUs or memory costs one (cheapest) GPU. With
    PriorityFlags=MAX_TRES the bill per node is the largest of the three, so a job that
    takes a node's CPUs or memory without its GPUs pays for the GPUs it blocks.
    """
    assert fleet.slurm is not None
    if not nodes or not fleet.slurm.accounting_host:
        return None
    types = sorted({n.gpu.gres_type for n in nodes})
    given = dict(fleet.slurm.gpu_billing_weights)
    per_gpu = {t: given.get(t, GPU_BILLING_DEFAULT) for t in types}
    cheapest = min(per_gpu.values())
    parts = []
    cpus = [node_cpus(n) for n in nodes]
    if all(c is not None for c in cpus):
        # Whole CPUs and MB per GPU, as DefCpuPerGPU and DefMemPerGPU give them.
        most_cpus = max(c // slurm_gpus(n) for c, n in zip(cpus, nodes))  # type: ignore[operator]
        parts.append(f"CPU={_weight(cheapest / max(most_cpus, 1), up=True)}")
    if all(node_real_memory(n) is not None for n in nodes):
        most_mb = max(node_real_memory(n) // slurm_gpus(n) for n in nodes)  # type: ignore[operator]
        parts.append(f"Mem={_weight(cheapest * 1024 / most_mb, up=True)}G")
    if len(types) == 1:
        parts.append(f"GRES/gpu={_weight(per_gpu[types[0]])}")
    else:
        parts += [f"GRES/gpu{':' + t if t else ''}={_weight(per_gpu[t])}" for t in types]
    return ",".join(parts)


def node_cpus(node: Node) -> int | None:
    """CPUs slurmd counts on ``node`` (threads), from CPUs= or the socket layout."""
    if node.cpus is not None:
        return node.cpus
    if node.sockets and node.cores_per_socket:
        return node.sockets * node.cores_per_socket * (node.threads_per_core or 1)
    return None


def per_gpu_defaults(nodes: list[Node]) -> list[tuple[str, str]]:
    """DefMemPerGPU (MB) and DefCpuPerGPU for a partition: RealMemory/GPUs and CPUs/GPUs of
    its smallest node, rounded down; each left out when a node does not declare it."""
    if not nodes:
        return []
    out = []
    if all(node_real_memory(n) is not None for n in nodes):
        out.append(("DefMemPerGPU", str(min(node_real_memory(n) // slurm_gpus(n) for n in nodes))))  # type: ignore[operator]
    cpus = [node_cpus(n) for n in nodes]
    if all(c is not None for c in cpus):
        per_gpu = min(c // slurm_gpus(n) for c, n in zip(cpus, nodes))  # type: ignore[operator]
        if per_gpu >= 1:
            out.append(("DefCpuPerGPU", str(per_gpu)))
    return out


def default_time_for(max_time: str | None) -> str | None:
    """DefaultTime for a partition: DEFAULT_TIME_MINUTES, or MaxTime when shorter; None
    without a finite MaxTime (a job then runs until it ends, as the partition allows)."""
    if max_time is None:
        return None
    minutes = slurm_time_minutes(max_time)
    if minutes is None or minutes < 0:
        return None
    if minutes <= DEFAULT_TIME_MINUTES:
        return max_time
    return f"{DEFAULT_TIME_MINUTES // 60:d}:{DEFAULT_TIME_MINUTES % 60:02d}:00"


# ---------------------------------------------------------------------------------
# gres.conf


def device_numbers(vendor: str, generation: str, count: int) -> list[int]:
    """Minor numbers of a node's GPU device files, GPU 0 first."""
    _, first = DEVICE_FILES[vendor]
    stride = RENDER_MINORS_PER_GPU.get(generation, 1) if vendor == "amd" else 1
    return [first + i * stride for i in range(count)]


def device_files(vendor: str, count: int, generation: str = "") -> list[str]:
    """File= values for a node's GPUs: one contiguous range (``/dev/nvidia[0-7]``,
    ``/dev/dri/renderD[128-135]``), or one file per GPU where the minors are strided
    (MI300-class: renderD128, renderD136, ...)."""
    return _file_patterns(vendor, device_numbers(vendor, generation, count))


def autodetect_for(vendor: str, version: str) -> str | None:
    """The AutoDetect plugin for ``vendor`` GPUs under Slurm ``version``, or None."""
    since = AUTODETECT_SINCE.get(vendor)
    if since is None or not at_least(version, since):
        return None
    return AUTODETECT_PLUGIN[vendor]


def render_gres_conf(fleet: Fleet) -> str:
    """gres.conf: explicit File= lines per node group; with ``slurm.gres_autodetect``
    also AutoDetect=nvml/rsmi where the version has the vendor's plugin.

    Why File= by default: AutoDetect needs a slurmd built with NVML/ROCm SMI, which
    SchedMD's own debian packaging is not. Older Slurm (src/common/gpu.c) calls fatal()
    when AutoDetect names a plugin the build lacks; current releases log it and use
    gpu/generic, that is, these File= lines. Explicit files work with every build.
    """
    assert fleet.slurm is not None
    adopted = adoption(fleet)
    if adopted is not None and adopted.gres_conf is not None:
        return "".join(f"{line}\n" for line in ("# The adopted cluster's gres.conf as it wrote it "
                                                "(spec.slurm.adopted.gres_conf).", *adopted.gres_conf))
    version = fleet.slurm.version
    if fleet.slurm.gres_autodetect:
        out = [
            "# AutoDetect (slurm.gres_autodetect) finds the GPUs, links and core affinity through",
            "# NVML / ROCm SMI and needs a slurmd built with that plugin (older Slurm stops with a",
            "# fatal error without it). The File= lines must match what it detects.",
        ]
    elif all(n.mig for n in slurm_nodes(fleet)):
        out = []
    else:
        out = [
            "# Explicit device files, which every slurmd build reads. AMD MI300-class GPUs in the",
            "# default SPX mode have 8 DRM render minors each (GPU n = renderD(128+8n)); other",
            "# compute-partition modes change the GPU count and need a new spec.",
        ]
    if not fleet.slurm.gres_autodetect and any(
            gpu_core_ranges(n.gpu.count, n.sockets, n.cores_per_socket) for n in slurm_nodes(fleet) if not n.mig):
        out += [
            "# Cores=: GPUs split evenly over the sockets in index order (GPU 0 on socket 0), each",
            "# bound to its socket's cores, as HGX/OAM boards attach them; so --gres-flags=enforce-binding",
            "# and task/affinity keep a task on the cores local to its GPU.",
        ]
    mig_nodes = [n for n in slurm_nodes(fleet) if n.mig]
    if mig_nodes:
        out += [
            "# MIG nodes: AutoDetect=nvml finds each instance and its device files (the GPU's",
            "# /dev/nvidiaN and the instance's /dev/nvidia-caps/nvidia-capM, whose minor the driver",
            "# picks when the instance is made), so slurmd there must be built with NVML",
            "# (slurm.schedmd.com/gres.html#MIG_Management; gres.conf(5), MultipleFiles).",
            *(f"NodeName={compress(hosts)} AutoDetect=nvml" for _, hosts in grouped(mig_nodes, lambda n: n.mig)),
        ]
    key = lambda n: (n.gpu.vendor, n.gpu.generation, n.gpu.gres_type, n.gpu.count,  # noqa: E731
                     n.sockets, n.cores_per_socket, n.other_gres, n.other_gpus)
    for (vendor, generation, gres_type, count, sockets, cores, other, more), hosts in grouped(  # type: ignore[misc]
            [n for n in slurm_nodes(fleet) if not n.mig], key):
        hostlist = compress(hosts)
        plugin = autodetect_for(vendor, version) if fleet.slurm.gres_autodetect else None
        if plugin:
            out.append(f"NodeName={hostlist} AutoDetect={plugin}")
        if more:  # several models: each type's devices in turn, `gpu` first (spec other_gpus)
            numbers = device_numbers(vendor, generation, count + sum(g.count for g in more))
            start = 0
            for g_type, g_count in ((gres_type, count), *((g.gres_type, g.count) for g in more)):
                for files in _file_patterns(vendor, numbers[start:start + g_count]):
                    out.append(f"NodeName={hostlist} Name=gpu{_type_field(g_type)} File={files}")
                start += g_count
            continue
        binding = None if plugin else gpu_core_ranges(count, sockets, cores)
        numbers = device_numbers(vendor, generation, count)
        if binding is None:
            for files in device_files(vendor, count, generation):
                out.append(f"NodeName={hostlist} Name=gpu{_type_field(gres_type)} File={files}")
        else:
            for first, last, core_range in binding:
                for files in _file_patterns(vendor, numbers[first:last + 1]):
                    out.append(f"NodeName={hostlist} Name=gpu{_type_field(gres_type)} File={files} "
                               f"Cores={core_range}")
        # MPS and shards: each GPU's device file with its share of the node's count (gres.conf(5),
        # File: "For either of these GRES, each GPU would be identified by device file using the File
        # parameter and Count would specify the number of entries that would correspond to that GPU").
        for name, total in other:
            out += [f"NodeName={hostlist} Name={name} Count={total // count} File={_file_patterns(vendor, [n])[0]}"
                    for n in numbers]
    return "\n".join(out) + "\n"


def gpu_core_ranges(gpus: int, sockets: int | None, cores_per_socket: int | None
                    ) -> list[tuple[int, int, str]] | None:
    """[(first GPU, last GPU, Cores= range)] per socket, or None without a socket layout.

    GPU i sits on socket ``i * sockets // gpus`` (GPUs in index order over the sockets, as
    ``nvidia-smi topo -m`` shows on HGX H100/H200: GPUs 0-3 on NUMA node 0, 4-7 on 1). Cores=
    counts Slurm's core ids (not CPU ids), socket s holding cores s*C .. s*C+C-1
    (gres.conf(5), Cores: "the core index numbers ... Slurm's abstract core numbering").
    """
    if not sockets or not cores_per_socket or sockets < 2 or gpus < sockets:
        return None
    out = []
    for socket in range(sockets):
        members = [i for i in range(gpus) if i * sockets // gpus == socket]
        lo = socket * cores_per_socket
        out.append((members[0], members[-1], f"{lo}-{lo + cores_per_socket - 1}"))
    return out


def _file_patterns(vendor: str, numbers: list[int]) -> list[str]:
    """File= values for these device minors: one range when contiguous, else one each."""
    base, _ = DEVICE_FILES[vendor]
    if len(numbers) == 1:
        return [f"{base}{numbers[0]}"]
    if numbers[-1] - numbers[0] == len(numbers) - 1:
        return [f"{base}[{numbers[0]}-{numbers[-1]}]"]
    return [f"{base}{n}" for n in numbers]


# ---------------------------------------------------------------------------------
# cgroup.conf, plugstack.conf, slurmdbd.conf


def _adopted_file(lines: tuple[str, ...], what: str) -> str:
    """An adopted cluster's cgroup.conf or slurmdbd.conf as it wrote it (a StoragePass is
    the secret's placeholder, filled by apply)."""
    return "".join(f"{line}\n" for line in (f"# The adopted cluster's {what}.conf as it wrote it "
                                             f"(spec.slurm.adopted.{what}_conf).", *lines))


def render_cgroup_conf() -> str:
    """cgroup.conf: a job sees only its own cores, memory and GPU device files."""
    return (
        "CgroupPlugin=autodetect\n"
        "ConstrainCores=yes\n"
        "ConstrainRAMSpace=yes\n"
        "ConstrainDevices=yes\n"
    )


def render_plugstack_conf() -> str:
    """plugstack.conf for Pyxis (``srun --container-image``) on Enroot: an include of
    the plugstack line the Pyxis package itself ships.

    The package's line carries the arch-specific plugin path and ``required``, so a node
    where Pyxis fails to load runs no job rather than running it outside its container.
    Where the package is absent the include matches nothing and loads nothing (spank.c:
    GLOB_NOMATCH), so srun keeps working there. The same include serves Slinky's
    slurmd-pyxis/login-pyxis images, which install the same package (slurm-operator's
    own e2e tests use ``include /usr/share/pyxis/*``).
    """
    return (
        "# Pyxis from the nvslurm-plugin-pyxis package: its own plugstack line, with the\n"
        "# plugin path it installed (/usr/lib/<multiarch>/slurm/spank_pyxis.so).\n"
        f"include {PYXIS_CONF_GLOB}\n"
    )


def render_accounts(fleet: Fleet) -> str:
    """``accounts.json``: the accounts ``slurm.tenants`` makes, as the controller's
    reconciler (node_side/slurm_accounts.py) reads them. Invalid tenants (the
    ``slurm-tenants`` rule refuses them) are left out."""
    assert fleet.slurm is not None
    accounts, _ = tenant_accounts(fleet)
    return json.dumps({
        "cluster": cluster_name(fleet).lower(),  # the name slurmdbd registered
        "accounts": [
            {"name": a.name, "users": list(a.users), "groups": list(a.groups), "fairshare": a.fairshare,
             "grp_tres": ",".join(f"{tres}={gpus}" for tres, gpus in a.grp_tres)}
            for a in accounts
        ],
    }, indent=1, sort_keys=True) + "\n"


def render_slurmdbd_conf(fleet: Fleet) -> str:
    """slurmdbd.conf; the database password is a placeholder the apply step fills."""
    assert fleet.slurm is not None and fleet.slurm.accounting_host
    return (
        "AuthType=auth/munge\n"
        f"DbdHost={fleet.slurm.accounting_host}\n"
        "DbdPort=6819\n"
        "SlurmUser=slurm\n"
        "LogFile=/var/log/slurm/slurmdbd.log\n"
        "PidFile=/run/slurmdbd.pid\n"
        "StorageType=accounting_storage/mysql\n"
        "StorageHost=localhost\n"
        "StoragePort=3306\n"
        "StorageLoc=slurm_acct_db\n"
        "StorageUser=slurm\n"
        "# Filled by `fleetspec apply` from the secret source; never rendered.\n"
        f"StoragePass={SECRET_DB_PASSWORD}\n"
        "PurgeJobAfter=12month\n"
        "PurgeStepAfter=6month\n"
    )


# ---------------------------------------------------------------------------------
# Slinky (slurm-operator v1.2 ``slurm`` chart)


def render_slinky_values(fleet: Fleet) -> str:
    """Helm values for the ``slurm`` chart of SlinkyProject/slurm-operator v1.2.x."""
    slurm = fleet.slurm
    assert slurm is not None
    nodesets: dict[str, object] = {}
    partitions: dict[str, object] = {"all": {"enabled": False}}
    for p in slurm_partitions(fleet):
        if not p.generated:
            continue
        members = slinky_nodesets(fleet)[p.name]
        for name, node, hosts in members:
            resource = "nvidia.com/gpu" if node.gpu.vendor == "nvidia" else "amd.com/gpu"
            selector = {"fleetspec.io/partition": p.name}
            if name != p.name:
                selector["fleetspec.io/gpu-model"] = node.gpu.model
            nodesets[name] = {
                "enabled": True,
                "scalingMode": "DaemonSet",
                "replicas": len(hosts),
                # slurmd --conf: the NodeName parameters of a dynamic node (slurmd(8)); the
                # site's slurm_settings follow fleetspec's (slinky_problems refuses a
                # NodeSet whose hosts disagree on them).
                "extraConfMap": {
                    "Gres": [gres_item(node.gpu)],
                    "Features": list(_without_rack(node)),
                    **dict(site.node_settings(fleet).get(hosts[0], ())),
                },
                "partition": {"enabled": False},
                "slurmd": {"image": slinky_image(fleet, "slurmd"),
                           "resources": {"limits": {resource: node.gpu.count}}},
                "podSpec": {"nodeSelector": selector},
            }
        config: dict[str, str] = {"MaxTime": p.max_time or "UNLIMITED", "State": (p.state or "UP").upper()}
        default_time = default_time_for(p.max_time)
        if default_time:
            config["DefaultTime"] = default_time
        if p.default:
            config["Default"] = "YES"
        billing = tres_billing_weights(fleet, [m[1] for m in members for _ in m[2]])
        if billing:
            config["TRESBillingWeights"] = billing
        config.update(dict(site.partition_settings(fleet, p.name)))
        partitions[p.name] = {"enabled": True, "nodesets": [m[0] for m in members], "configMap": config}
    values: dict[str, object] = {
        # The chart's clusterName becomes the Controller's spec.clusterName (slinky.slurm.net
        # Controller CRD v1beta1: "The Slurm ClusterName"); unset, the chart derives one from
        # the Controller object, so it is always written: the spec's cluster name, as native.
        "clusterName": cluster_name(fleet),
        "configFiles": _slinky_config_files(fleet),
        "controller": {
            # Every Slurm image at the spec's series (the chart defaults to its own).
            "slurmctld": {"image": slinky_image(fleet, "slurmctld")},
            "reconfigure": {"image": slinky_image(fleet, "slurmctld")},
            "extraConfMap": _slinky_controller_conf(fleet),
        },
        "restapi": {"slurmrestd": {"image": slinky_image(fleet, "slurmrestd")}},
    }
    if slurm.accounting_host:
        values["accounting"] = {
            "enabled": True,
            "storageConfig": {
                "host": slurm.accounting_host,
                "port": 3306,
                "database": "slurm_acct_db",
                "username": "slurm",
                # The Secret the Kubernetes layer creates from the secret source.
                "passwordKeyRef": {"name": SLINKY_DB_SECRET, "key": SLINKY_DB_SECRET_KEY},
            },
            "slurmdbd": {"image": slinky_image(fleet, "slurmdbd")},
        }
    # A submit host: users need somewhere to run sbatch/srun (chart `loginsets`, a LoginSet
    # with sackd, sshd and sssd), on the spec's Slurm series (Pyxis variant with Pyxis).
    # Who may log in is the site's directory: the chart's sssd.conf (`sssd`, a values
    # overlay); the chart's default lists no users.
    values["loginsets"] = {"login": {
        "enabled": True,
        "replicas": 1,
        "login": {"image": slinky_image(fleet, "login")},
    }}
    values["nodesets"] = nodesets
    values["partitions"] = partitions
    header = _header(fleet).replace("Do not edit", "Helm values for slurm-operator v1.2 `slurm` chart. Do not edit")
    return header + yaml.dump(values, Dumper=_LiteralDumper, sort_keys=False, default_flow_style=False)


class _LiteralDumper(yaml.SafeDumper):
    """Multi-line strings (embedded config files) as ``|`` blocks a reviewer can read."""


def _represent_str(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
    style = "|" if "\n" in text else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style=style)


_LiteralDumper.add_representer(str, _represent_str)


def _without_rack(node: Node) -> tuple[str, ...]:
    """Features for a NodeSet: the rack is per host, and a NodeSet spans racks."""
    return tuple(f for f in node_features(node) if f != node.rack)


def _slinky_controller_conf(fleet: Fleet) -> dict[str, object]:
    assert fleet.slurm is not None
    conf: dict[str, object] = {
        "GresTypes": ["gpu"],
        "SelectType": "select/cons_tres",
        "SelectTypeParameters": ["CR_Core_Memory"],
        "EnforcePartLimits": "ALL",
        "ProctrackType": "proctrack/cgroup",
        "TaskPlugin": ["task/cgroup", "task/affinity"],
        "JobAcctGatherType": "jobacct_gather/cgroup",
        "MpiDefault": MPI_DEFAULT,
        "SchedulerParameters": scheduler_parameters(fleet),
        "UnkillableStepTimeout": UNKILLABLE_STEP_TIMEOUT,
        "PrologEpilogTimeout": PROLOG_EPILOG_TIMEOUT,
    }
    if fleet.fabric is not None and fleet.fabric.type in RDMA_FABRICS:
        conf["PropagateResourceLimitsExcept"] = ["MEMLOCK"]
    if fleet.slurm.accounting_host:
        conf["AccountingStorageTRES"] = accounting_tres(fleet)
        conf["PriorityType"] = "priority/multifactor"
        conf["PriorityFlags"] = ["MAX_TRES"]
        conf["PriorityWeightFairshare"] = 100000
        conf["PriorityDecayHalfLife"] = "7-0"
    if fleet.slurm.containers == "pyxis":
        conf["PrologFlags"] = ["Contain"]
    conf.update(dict(site.conf_settings(fleet, "slurm.conf")))
    return conf


def _slinky_config_files(fleet: Fleet) -> dict[str, str]:
    assert fleet.slurm is not None
    vendors = sorted({n.gpu.vendor for n in slurm_nodes(fleet)})
    # Pod names are not the fleet's hostnames, so gres.conf cannot scope by NodeName:
    # one vendor autodetects cluster-wide; two vendors are a slinky problem. NVIDIA with
    # gpu/nvidia, not nvml: Slinky's images lack NVML (layout/slurm.py SLINKY_AUTODETECT;
    # a Slurm older than 24.11 is a slinky problem).
    if len(vendors) == 1:
        gres = f"AutoDetect={SLINKY_AUTODETECT[vendors[0]]}\n"
    else:
        gres = "# NodeSets of several GPU vendors share this file: see `fleetspec validate`.\n"
    files = {"cgroup.conf": site.apply_to_conf(render_cgroup_conf(), site.conf_settings(fleet, "cgroup.conf"),
                                               "spec.slurm.cgroup_settings"), "gres.conf": gres}
    if fleet.slurm.containers == "pyxis":
        files["plugstack.conf"] = render_plugstack_conf()
    return files
