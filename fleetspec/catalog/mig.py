"""MIG geometry: the instance profiles each GPU model offers, and what one GPU can hold.

The data is ``data/mig.yaml`` (NVIDIA's MIG user guide tables and the named geometries
mig-parted ships). It is read only when a fleet asks for MIG, so ``validate`` of a fleet
without MIG never parses it.

A geometry here is one GPU's instances: ``((profile, count), ...)`` sorted by profile,
the same on every GPU of a node group. ``check`` proves what can be proved without a GPU:
the profiles exist on the model, no profile is asked for more often than one GPU holds
it, the instances fit the GPU's 7 compute and 8 memory slices, and they can be placed
together: each GPU instance occupies the memory slices ``start .. start + size - 1`` for
one of its profile's fixed starts (``nvidia-smi mig -lgipp``), and no two overlap.
``placement`` searches every assignment, as mig-parted tries every creation order until
one succeeds (``iteratePermutationsUntilSuccess``), so a geometry that only places in some
order passes. Combinations the driver refused before a release (4g + 3g before R510) are
refused where the node's driver is older.
"""

from __future__ import annotations

import functools
import re
from importlib import resources
from typing import Any, NamedTuple

COMPUTE_SLICES = 7
MEMORY_SLICES = 8
# A profile name as nvidia-smi and mig-parted spell it: 1g.10gb, 1g.10gb+me, 7g.141gb.
PROFILE = re.compile(r"^[1-8]g\.[0-9]{1,3}gb(\+me)?$")
# A named geometry: mig-parted's all-<profile> (".me" for "+me") and all-balanced.
NAMED = re.compile(r"^all-([1-8]g\.[0-9]{1,3}gb)(\.me)?$")

Geometry = tuple[tuple[str, int], ...]

# How KAI Scheduler counts a MIG instance in a queue's ``gpu`` quota: as many GPUs as the
# compute slices its resource name starts with (nvidia.com/mig-3g.71gb: 3). KAI reads them
# from the name, ExtractGpuAndMemoryFromMigResourceName's ``^nvidia.com/mig-(\d+)g\.(\d+)gb$``
# (kai-scheduler/KAI-Scheduler pkg/common/resources), for a node's capacity
# (pkg/scheduler/plugins/proportion/utils/utils.go QuantifyVector: ``gpuPortion * count``
# added to the node's GPUs) and for a pod's request (pkg/scheduler/api/resource_info
# GetSumGPUs, ResourceVector.TotalGPUs). A name outside the pattern (a ``+me`` profile) is
# logged and counted as 0 GPUs. Read on KAI-Scheduler's main branch after v0.17.0, whose
# Queue CRD (tests/data/crds/kai-scheduler) has the same fixed gpu field.
KAI_MIG_PROFILE = re.compile(r"^([0-9]+)g\.([0-9]+)gb$")


class Profile(NamedTuple):
    name: str
    compute: int
    memory: int  # memory slices: also the size of its placement
    max: int
    at: tuple[int, ...]  # the memory slices a GPU instance of it may start at


class ModelMig(NamedTuple):
    """The MIG profiles of one GPU model and their sources (URLs)."""

    model: str
    profiles: dict[str, Profile]
    balanced: Geometry
    sources: tuple[str, ...]
    unconfirmed: tuple[str, ...] = ()  # fields that rest on another board's data (``at``)
    # driver major -> profile combinations the driver refused below it
    refused_before_driver: tuple[tuple[int, tuple[str, ...]], ...] = ()


@functools.cache
def _data() -> dict[str, Any]:
    import yaml

    text = (resources.files("fleetspec.catalog") / "data" / "mig.yaml").read_text()
    return yaml.safe_load(text)  # type: ignore[no-any-return]


def model_mig(model: str) -> ModelMig | None:
    """The MIG profiles of catalog model ``model`` (an id), or None where MIG is not catalogued."""
    data = _data()
    entry = data["models"].get(model)
    if entry is None:
        return None
    profiles = {name: Profile(name, p["compute"], p["memory"], p["max"], tuple(p["at"]))
                for name, p in entry["profiles"].items()}
    from fleetspec.catalog import load_catalog

    refused = tuple((int(major), tuple(combo)) for major, combos in (entry.get("refused_before_driver") or {}).items()
                    for combo in combos)
    return ModelMig(model, profiles, tuple(sorted(entry["balanced"].items())),
                    tuple(load_catalog().source_urls(tuple(entry["source"]))),
                    tuple(entry.get("unconfirmed") or ()), refused)


def mig_models() -> tuple[str, ...]:
    """The catalog ids that have MIG profiles."""
    return tuple(sorted(_data()["models"]))


def named(mig: ModelMig, name: str) -> Geometry | None:
    """mig-parted's named geometry ``name`` for this model (all-1g.10gb: 7 x 1g.10gb;
    all-1g.10gb.me: 1 x 1g.10gb+me; all-balanced), or None where the model has no such one."""
    if name == "all-balanced":
        return mig.balanced
    m = NAMED.match(name)
    if m is None:
        return None
    profile = mig.profiles.get(m.group(1) + ("+me" if m.group(2) else ""))
    return ((profile.name, profile.max),) if profile else None


def check(mig: ModelMig, geometry: Geometry, driver: str | None = None) -> str | None:
    """Why ``geometry`` cannot be made on one GPU of this model (under ``driver``, the node's
    driver version where known), or None when it can."""
    compute = memory = 0
    for name, count in geometry:
        profile = mig.profiles.get(name)
        if profile is None:
            return (f"{mig.model} has no MIG profile {name}. Use one of its profiles: "
                    f"{', '.join(mig.profiles)} (source: {mig.sources[0]})")
        if count > profile.max:
            return (f"{count} x {name}: one {mig.model} GPU holds at most {profile.max}. Ask for "
                    f"{profile.max} or fewer (source: {mig.sources[0]})")
        compute += profile.compute * count
        memory += profile.memory * count
    if sum(c for n, c in geometry if n.endswith("+me")) > 1:
        return "one GPU has one set of media engines: give at most one +me instance"
    if compute > COMPUTE_SLICES or placement(mig, geometry) is None:
        starts = "; ".join(f"{n} at {' or '.join(map(str, mig.profiles[n].at))}" for n, _ in geometry)
        return (f"{_spelled(geometry)} cannot be placed together on one {mig.model} GPU: they take {compute} of "
                f"{COMPUTE_SLICES} compute slices and {memory} of {MEMORY_SLICES} memory slices, and each GPU "
                f"instance starts only at fixed memory slices ({starts}: nvidia-smi mig -lgipp) with no two "
                f"overlapping. Drop instances or use smaller profiles (sources: {mig.sources[0]} ; "
                f"{_placement_source(mig)})")
    major = _major(driver)
    for below, combo in mig.refused_before_driver:
        if major is not None and major < below and all(dict(geometry).get(p) for p in combo):
            return (f"{' with '.join(combo)} on one GPU: drivers before R{below} refuse that combination "
                    f"(this group's driver is {driver}). Use driver R{below} or later, or another geometry "
                    f"(source: {_source('MIG_CONCEPTS')})")
    return None


def placement(mig: ModelMig, geometry: Geometry) -> tuple[tuple[str, int], ...] | None:
    """One way to place ``geometry``'s GPU instances on one GPU: ``((profile, start memory
    slice), ...)`` in an order nvidia-smi can create them (each start among its profile's
    ``at``, no two overlapping), or None where there is none. A depth-first search, largest
    instances first (they have the fewest starts); at most 7 instances, so it is instant."""
    wanted = sorted((mig.profiles[n] for n, c in geometry for _ in range(c)), key=lambda p: (-p.memory, p.name))

    def place(i: int, used: int) -> tuple[tuple[str, int], ...] | None:
        if i == len(wanted):
            return ()
        profile = wanted[i]
        for start in profile.at:
            slices = ((1 << profile.memory) - 1) << start
            if start + profile.memory <= MEMORY_SLICES and not used & slices:
                rest = place(i + 1, used | slices)
                if rest is not None:
                    return ((profile.name, start), *rest)
        return None

    return place(0, 0)


def _spelled(geometry: Geometry) -> str:
    return ", ".join(f"{count} x {name}" for name, count in geometry)


def _major(driver: str | None) -> int | None:
    head = (driver or "").split(".", 1)[0]
    return int(head) if head.isdigit() else None


def _source(key: str) -> str:
    from fleetspec.catalog import load_catalog

    return load_catalog().source_urls((key,))[0]


def _placement_source(mig: ModelMig) -> str:
    where = _source("MIG_START")
    return where + (" (placements as published for the H100; not yet confirmed on this board)"
                    if "at" in mig.unconfirmed else "")


def instances(geometry: Geometry) -> int:
    """How many MIG instances one GPU with this geometry exposes."""
    return sum(count for _, count in geometry)


def kai_gpus(geometry: Geometry) -> int | None:
    """What one GPU cut into ``geometry`` counts in a KAI queue's ``gpu`` quota (the sum of
    its instances' compute slices: 7 for H200 all-balanced, 6 for all-3g.71gb, 4 for
    all-1g.35gb), or None where KAI cannot count one of its profiles (``+me``)."""
    total = 0
    for profile, count in geometry:
        m = KAI_MIG_PROFILE.match(profile)
        if m is None:
            return None
        total += int(m.group(1)) * count
    return total


def config_name(geometry: Geometry, named_as: str) -> str:
    """The mig-parted config name (the ``nvidia.com/mig.config`` label value): the named
    geometry as written, or ``fleetspec-`` and the instances (fleetspec-2x1g.10gb-1x3g.40gb)
    for an explicit one; at most 63 characters, a label value's limit."""
    if named_as:
        return named_as
    text = "fleetspec-" + "-".join(f"{c}x{n.replace('+', '.')}" for n, c in geometry)
    return text[:63].rstrip(".-")
