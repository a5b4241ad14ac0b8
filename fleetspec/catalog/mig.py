"""MIG geometry: the instance profiles each GPU model offers, and what one GPU can hold.

The data is ``data/mig.yaml`` (NVIDIA's MIG user guide tables and the named geometries
mig-parted ships). It is read only when a fleet asks for MIG, so ``validate`` of a fleet
without MIG never parses it.

A geometry here is one GPU's instances: ``((profile, count), ...)`` sorted by profile,
the same on every GPU of a node group. ``check`` proves what can be proved without a GPU:
the profiles exist on the model, no profile is asked for more often than one GPU holds
it, and the instances fit the GPU's 7 compute and 8 memory slices. Placement (which slice
each instance starts at) is the driver's: a geometry that passes can still be one that
NVIDIA's placement diagrams do not allow, which only a MIG-capable GPU shows (docs/mig.md).
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
    memory: int
    max: int


class ModelMig(NamedTuple):
    """The MIG profiles of one GPU model and their sources (URLs)."""

    model: str
    profiles: dict[str, Profile]
    balanced: Geometry
    sources: tuple[str, ...]


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
    profiles = {name: Profile(name, p["compute"], p["memory"], p["max"]) for name, p in entry["profiles"].items()}
    from fleetspec.catalog import load_catalog

    return ModelMig(model, profiles, tuple(sorted(entry["balanced"].items())),
                    tuple(load_catalog().source_urls(tuple(entry["source"]))))


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


def check(mig: ModelMig, geometry: Geometry) -> str | None:
    """Why ``geometry`` cannot be made on one GPU of this model, or None when it can."""
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
    if compute > COMPUTE_SLICES or memory > MEMORY_SLICES:
        return (f"the instances take {compute} of {COMPUTE_SLICES} compute slices and {memory} of "
                f"{MEMORY_SLICES} memory slices of one {mig.model} GPU. Drop instances or use smaller "
                f"profiles (source: {mig.sources[0]})")
    return None


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
