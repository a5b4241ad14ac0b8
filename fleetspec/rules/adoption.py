"""An adopted cluster's own values where fleetspec would decide otherwise (spec
``slurm.adopted``, written by `fleetspec import slurm`): each is a proposal the site has
not taken yet. The warnings say what fleetspec's default would change and the spec edit
that takes it; the edit then shows in `plan` as a change with its disruption.
"""

from __future__ import annotations

from collections.abc import Iterator

from fleetspec.catalog import Catalog
from fleetspec.compile.ir import Fleet
from fleetspec.findings import Finding
from fleetspec.rules.base import warning

# What fleetspec's value does, for the keys it writes by opinion rather than because another
# spec field says them (render/slurm.py says why at each).
WHY = {
    "MpiDefault": "srun starts MPI ranks through PMIx (Open MPI 5, MPICH, Pyxis jobs) without --mpi",
    "SchedulerParameters": "backfill continues where it stopped and its window covers the longest MaxTime",
    "EnforcePartLimits": "a job that can never fit a partition is refused at submission instead of pending forever",
    "ReturnToService": "a node that comes back healthy returns to service by itself",
    "UnkillableStepTimeout": "GPU teardown gets 180 s before the node drains as 'Kill task failed'",
    "PrologEpilogTimeout": "a hung prolog or epilog is stopped instead of holding the node",
    "PropagateResourceLimitsExcept": "RDMA jobs get the node's unlimited memlock, not the submit host's",
    "PriorityFlags": "fair share bills a job by the largest of its GPU, CPU and memory share",
    "PriorityDecayHalfLife": "past usage counts half after a week",
    "PriorityMaxAge": "waiting adds priority for up to a week",
    "PriorityWeightFairshare": "fair share orders the queue",
    "PriorityWeightAge": "waiting jobs move up",
    "PriorityWeightPartition": "partition priority counts",
    "PriorityWeightJobSize": "job size does not change priority",
    "SchedulerType": "backfill scheduling",
}
DECLINED = {
    "default-time": ("a job without --time gets its partition's MaxTime (up to INFINITE): backfill cannot plan "
                     "around it and it holds its GPUs until it ends; fleetspec gives such jobs 1 hour (at most "
                     "MaxTime)", "DefaultTime on every partition with a finite MaxTime"),
    "billing": ("fair share bills allocated CPUs, not GPUs (slurm.conf(5) TRESBillingWeights: without it a job "
                "is billed its CPUs)", "TRESBillingWeights on the GPU partitions"),
    "per-gpu-defaults": ("a 1-GPU job without --mem or --cpus-per-gpu may take a node's whole memory or CPUs "
                         "and block its other GPUs", "DefMemPerGPU and DefCpuPerGPU on the GPU partitions"),
    "generated-partitions": ("no partition holds one vendor and one GPU generation, so a job may span NVLink "
                             "generations or vendors, where NCCL/RCCL cannot build one communicator",
                             "the vendor+generation partitions beside the site's (users see them in sinfo)"),
    "node-features": ("jobs cannot --constraint on the GPU vendor, generation, model, rack or stack",
                      "those features on every node"),
}


def check_adopted_values(fleet: Fleet, catalog: Catalog) -> Iterator[Finding]:
    adopted = fleet.site.adoption if fleet.site is not None else None
    if adopted is None:
        return
    from fleetspec.site.slurm import owner, owner_text  # the parameter tables: only for an adopted fleet

    for key, value in adopted.conf:
        found = owner("slurm.conf", key)
        why = owner_text(found[1]) if found else WHY.get(key, "fleetspec's default for the fleets it creates")
        kept = f"{key}={value} is the adopted cluster's own value" if value is not None else \
            f"{key} is left to Slurm's default on the adopted cluster"
        yield warning("adopted-site-value", f"{kept}; fleetspec would write its own ({why}). Keep it, or remove "
                      f"spec.slurm.adopted.conf.{key} to take fleetspec's: plan then shows the slurm.conf change "
                      "and its disruption", adopted.path + ("conf", key), "key")


def check_declined_defaults(fleet: Fleet, catalog: Catalog) -> Iterator[Finding]:
    adopted = fleet.site.adoption if fleet.site is not None else None
    if adopted is None:
        return
    for i, default in enumerate(adopted.declines):
        then, what = DECLINED[default]
        yield warning("adopted-declines-default", f"the adopted cluster declines {default}: {then}. Remove "
                      f"'{default}' from spec.slurm.adopted.declines to add {what}; plan then shows the change "
                      "and its disruption", adopted.path + ("declines", i))


def check_site_files(fleet: Fleet, catalog: Catalog) -> Iterator[Finding]:
    adopted = fleet.site.adoption if fleet.site is not None else None
    if adopted is None:
        return
    if adopted.gres_conf is not None:
        yield warning("adopted-site-file", "gres.conf is the adopted cluster's, as it wrote it: fleetspec's device "
                      "files per node group, core bindings (Cores=) and MPS/shard lines are not written, and verify "
                      "cannot hold the nodes to them. Remove spec.slurm.adopted.gres_conf to have fleetspec write "
                      "gres.conf from the node groups (slurmd restarts)", adopted.path + ("gres_conf",), "key")
    if adopted.topology_conf is not None:
        yield warning("adopted-site-file", "topology.conf is the adopted cluster's, as it wrote it: fleetspec's "
                      "tree from racks, leaves and spines is not written. Remove spec.slurm.adopted.topology_conf "
                      "to have fleetspec write it (scontrol reconfigure; placement of new jobs changes)",
                      adopted.path + ("topology_conf",), "key")
    if adopted.cgroup_conf is not None:
        said = {line.replace(" ", "").lower() for line in adopted.cgroup_conf}
        devices = "" if "constraindevices=yes" in said else (
            " The site's does not say ConstrainDevices=yes: a job sees every GPU of its node.")
        yield warning("adopted-site-file", "cgroup.conf is the adopted cluster's, as it wrote it: fleetspec's "
                      f"confinement (ConstrainCores, ConstrainRAMSpace, ConstrainDevices=yes) is not written.{devices} "
                      "Remove spec.slurm.adopted.cgroup_conf to have fleetspec write its own (slurmd restarts; "
                      "jobs' cgroup limits change)", adopted.path + ("cgroup_conf",), "key")
    if adopted.slurmdbd_conf is not None:
        yield warning("adopted-site-file", "slurmdbd.conf is the adopted cluster's, as it wrote it (its StoragePass "
                      "the secret slurmdbd_password, filled by apply): fleetspec's DbdHost, storage and log settings "
                      "are not written. Remove spec.slurm.adopted.slurmdbd_conf to have fleetspec write its own "
                      "(slurmdbd restarts)", adopted.path + ("slurmdbd_conf",), "key")
