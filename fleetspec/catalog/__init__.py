"""The catalog: what fleetspec knows about GPUs and their software stacks.

The knowledge lives in YAML data files beside this module (``data/``), every entry with
a ``source`` naming where the fact comes from (``data/sources.yaml`` maps keys to URLs).
This module gives typed, read-only access. Facts marked ``unconfirmed`` in the data
must only ever produce warnings.

The records are NamedTuples (``Release``, whose ``facts`` stay out of comparisons, a frozen
dataclass): immutable like frozen dataclasses, but each class is made at every start
without compiling six generated methods, which on Python 3.11 cost ``validate`` about
4 M instructions per class (tests/test_startup_imports.py lists the dataclasses it makes).
"""

from __future__ import annotations

import copy
import difflib
import functools
import re
import zlib
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, NamedTuple

from fleetspec.versions import major_minor, parse_version, series_matches, version_key


class GpuModel(NamedTuple):
    """A GPU model the catalog knows: vendor, generation, names it goes by, minimum stack."""

    id: str
    vendor: str  # "nvidia" | "amd"
    name: str
    generation: str
    gres: str
    memory_gb: int | None
    interconnect: str | None
    smi_names: tuple[str, ...]
    aliases: tuple[str, ...]
    sources: tuple[str, ...]
    compute_capability: str | None = None
    gfx_target: str | None = None
    nvswitch: bool = False
    rack_scale_nvlink: bool = False
    open_module_required: bool = False
    min_cuda: str | None = None
    max_cuda_major: int | None = None
    min_driver: str | None = None
    max_driver_branch: int | None = None
    min_nccl: str | None = None
    min_rocm: str | None = None
    gpu_operator_min_driver: str | None = None
    cpu_arch: str = "x86_64"  # the node's CPU architecture (Debian name: x86_64 or arm64)
    unconfirmed: tuple[str, ...] = ()
    max_gpus_per_node: int | None = None  # the most one node carries (its largest baseboard); None unknown
    ambiguous_aliases: tuple[tuple[str, tuple[str, ...]], ...] = ()  # alias -> other models it also names
    # the catalog id this model's boards resolved to before it had its own (a100-40gb: a100):
    # the same hardware, so a plan from a state written then does not replace them
    split_from: str | None = None

    def confirmed(self, fact: str) -> bool:
        return fact not in self.unconfirmed


class CudaRelease(NamedTuple):
    """A CUDA release series and the drivers it needs."""

    version: str  # "13.0"
    drivers: tuple[str, ...]  # GA minimum driver, then each update's
    sources: tuple[str, ...]

    def min_driver(self, update: int) -> str:
        """The minimum driver of update ``update`` (0 = GA); the last known beyond."""
        return self.drivers[min(update, len(self.drivers) - 1)]


class DriverBranch(NamedTuple):
    """An NVIDIA driver branch: its type, newest CUDA major and end of life."""

    branch: int
    type: str
    max_cuda_major: int
    eol: str | None
    sources: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Release:
    """A release known to the catalog, with optional facts attached."""

    version: str
    sources: tuple[str, ...]
    facts: dict[str, Any] = field(default_factory=dict, compare=False)
    unconfirmed: tuple[str, ...] = ()


class GpuOperatorRelease(NamedTuple):
    """A GPU Operator release: its default driver, the drivers it supports, its Kubernetes floor."""

    version: str
    driver: str
    drivers: tuple[str, ...]
    k8s_min: str | None
    k8s_max: str | None
    sources: tuple[str, ...]
    unconfirmed: tuple[str, ...] = ()


class DriverPackaging(NamedTuple):
    """How NVIDIA's CUDA repository names and versions one branch's driver packages on one OS family."""

    first_branch: int
    branch_in_name: bool
    revision: str
    tools_revision: str
    sources: tuple[str, ...]
    unconfirmed: tuple[str, ...] = ()
    tools_branch_in_name: bool = True
    revision_from: tuple[tuple[str, str], ...] = ()
    revision_seen_to: str | None = None
    tools_revision_from: tuple[tuple[str, str], ...] = ()
    tools_revision_unseen: tuple[str, str] | None = None

    def revision_for(self, driver: str) -> str:
        """The driver packages' Debian revision of build ``driver``: ``revision``, or the last
        ``revision_from`` entry at or below the build (580.126.09 on: ``1ubuntu1``)."""
        return _revision_at(driver, self.revision, self.revision_from)

    def tools_revision_for(self, driver: str) -> str:
        """The fabric manager's, NSCQ's and IMEX's Debian revision of build ``driver``
        (580.159.04 on: ``1ubuntu1``, before: ``1``)."""
        return _revision_at(driver, self.tools_revision, self.tools_revision_from)

    def tools_revision_unconfirmed(self, driver: str) -> bool:
        """Whether ``driver`` lies strictly between the last build an artefact shows with the
        tools' old revision and the first it shows with the new one."""
        if self.tools_revision_unseen is None:
            return False
        low, high = self.tools_revision_unseen
        return version_key(low) < version_key(driver) < version_key(high)


def _revision_at(driver: str, revision: str, changes: tuple[tuple[str, str], ...]) -> str:
    """``revision``, or the last of ``changes`` ({first build: revision}) at or below ``driver``."""
    found = revision
    for first, changed in sorted(changes, key=lambda kv: version_key(kv[0])):
        if version_key(first) <= version_key(driver):
            found = changed
    return found


class Nvlink5Packages(NamedTuple):
    """What HGX B200/B300 (NVLink 5) nodes need beside the driver: the NVLink Subnet Manager
    (``nvlsm``, NVIDIA's CUDA repository, versioned by date, not by the driver) at the
    version fleetspec pins, and the distribution's InfiniBand user space, unpinned."""

    nvlsm_version: str
    distro_packages: tuple[str, ...]
    management_bridge_vpd: str
    nvlsm_config: str
    sources: tuple[str, ...]
    unconfirmed: tuple[str, ...] = ()


class Catalog:
    """Typed access to the catalog data. Use `load_catalog()` for the shipped one."""

    def __init__(self, data: dict[str, Any]) -> None:
        self._data = data
        self.sources: dict[str, str] = data["sources"]
        self._driver_releases: dict[str, tuple[str, ...]] | None = None
        self.gpus: dict[str, GpuModel] = {}
        self._gpu_names: dict[str, str] = {}
        self.site_models: frozenset[str] = frozenset()  # ids the site declared (with_site_models)
        for vendor in ("nvidia", "amd"):
            for gpu_id, entry in data["gpus"][vendor].items():
                model = _gpu_model(gpu_id, vendor, entry)
                self.gpus[gpu_id] = model
                for name in (gpu_id, *model.aliases, *model.smi_names, model.name):
                    self._gpu_names.setdefault(_norm(name), gpu_id)

    # GPUs ---------------------------------------------------------------------------
    def gpu(self, name: str) -> GpuModel | None:
        """Look up a GPU by id, alias or the name nvidia-smi/amd-smi prints (any case)."""
        gpu_id = self._gpu_names.get(_norm(name))
        return self.gpus[gpu_id] if gpu_id else None

    def with_site_models(self, models: dict[str, dict[str, Any]]) -> Catalog:
        """This catalog and the site's own GPU models (``spec.gpu_models``: id -> vendor, name,
        generation, memory_gb, form_factor, gres). Nothing sourced stands behind them: every
        fact is marked unconfirmed, and no minimum or maximum stack is known."""
        extended = copy.copy(self)
        extended.gpus = dict(self.gpus)
        extended._gpu_names = dict(self._gpu_names)
        extended.site_models = frozenset(models)
        for gpu_id, e in models.items():
            model = GpuModel(id=gpu_id, vendor=e["vendor"], name=e["name"], generation=e["generation"],
                             gres=e["gres"], memory_gb=e["memory_gb"], interconnect=e["form_factor"],
                             smi_names=(e["name"],), aliases=(), sources=(),
                             unconfirmed=("generation", "memory_gb", "interconnect", "gres"))
            extended.gpus[gpu_id] = model
            for name in (gpu_id, model.name):
                extended._gpu_names.setdefault(_norm(name), gpu_id)
        return extended

    def suggest_gpu(self, name: str) -> list[str]:
        """Close catalog ids, preferring the same model family: 'H100-SXM5-80GB' must never
        suggest an A100 (that would move nodes into another generation's partition)."""
        ids = sorted({*self.gpus, *(a for g in self.gpus.values() for a in g.aliases)})
        wanted = _norm(name).replace(" ", "-")
        family = wanted.split("-")[0]
        same_family = [i for i in ids if i.split("-")[0] == family]
        if same_family:
            return difflib.get_close_matches(wanted, same_family, n=3, cutoff=0.3) or same_family[:3]
        return difflib.get_close_matches(wanted, ids, n=3, cutoff=0.75)

    # NVIDIA stack -------------------------------------------------------------------
    def cuda_release(self, version: str) -> CudaRelease | None:
        series = major_minor(version)
        entry = self._data["nvidia"]["cuda"]["releases"].get(series)
        if entry is None:
            return None
        return CudaRelease(series, tuple(entry["drivers"]), _sources(entry))

    def cuda_never_released(self, version: str) -> bool:
        return major_minor(version) in self._data["nvidia"]["cuda"]["never_released"]

    def cuda_compat_floor(self, cuda_major: int) -> tuple[str, tuple[str, ...]] | None:
        """The lowest driver branch that runs any CUDA ``cuda_major`` toolkit."""
        entry = self._data["nvidia"]["cuda"]["compat_floor"].get(cuda_major)
        return (str(entry["driver"]), _sources(entry)) if entry else None

    def driver_branch(self, driver: str) -> DriverBranch | None:
        branch = version_key(driver)[0]
        entry = self._data["nvidia"]["driver_branches"].get(branch)
        if entry is None:
            return None
        return DriverBranch(branch, entry["type"], entry["max_cuda_major"], entry.get("eol"), _sources(entry))

    def nic_firmware(self, version: str) -> list[tuple[str, str, tuple[str, ...]]]:
        """(DOCA release, adapter, sources) for each bundle that carries NIC firmware ``version``."""
        out = []
        for doca, entry in self._data["nvidia"]["nic_firmware"]["doca"].items():
            for adapter, bundled in entry.items():
                if adapter != "source" and str(bundled) == version:
                    out.append((str(doca), str(adapter), _sources(entry)))
        return out
    def driver_releases(self, branch: int) -> dict[str, tuple[str, ...]]:
        """The releases of driver ``branch`` that some catalog fact names, each with that
        fact's sources: a CUDA release's GA and update drivers, a GPU's first driver, a GPU
        Operator release's driver, a packaging revision change. Not every release of the
        branch: the catalog holds no complete list of any branch's point releases."""
        if self._driver_releases is None:
            found: dict[str, set[str]] = {}
            _collect_drivers(self._data, (), found)
            self._driver_releases = {v: tuple(sorted(srcs)) for v, srcs in found.items()}
        return {v: srcs for v, srcs in self._driver_releases.items() if version_key(v)[0] == branch}

    def driver_packaging(self, driver: str, os_family: str) -> DriverPackaging:
        """The packaging scheme of ``driver``'s branch on ``os_family`` (``ubuntu`` or ``debian``)."""
        branch = version_key(driver)[0]
        schemes = [e for e in self._data["nvidia"]["driver_packaging"][os_family] if e["branch"] <= branch]
        e = max(schemes, key=lambda x: x["branch"])
        return DriverPackaging(e["branch"], e["branch_in_name"], e["revision"], e["tools_revision"], _sources(e),
                               tuple(e.get("unconfirmed", ())), e["tools_branch_in_name"],
                               tuple((str(k), str(v)) for k, v in (e.get("revision_from") or {}).items()),
                               e.get("revision_seen_to"),
                               tuple((str(k), str(v)) for k, v in (e.get("tools_revision_from") or {}).items()),
                               _pair(e.get("tools_revision_unseen")))

    def nvlink5_packages(self) -> Nvlink5Packages:
        e = self._data["nvidia"]["nvlink5"]
        return Nvlink5Packages(e["nvlsm"]["version"], tuple(e["distro_packages"]), e["management_bridge_vpd"],
                               e["start_script"]["config"], _sources(e["nvlsm"]) + _sources(e["start_script"]),
                               tuple(e["nvlsm"].get("unconfirmed", ())))

    def nccl_release(self, version: str) -> Release | None:
        return _release(self._data["nvidia"]["nccl"]["releases"], version)

    def nccl_first_cuda13(self) -> Release:
        entry = self._data["nvidia"]["nccl"]["first_cuda13_release"]
        return Release(entry["version"], _sources(entry))

    def cudnn_release(self, version: str) -> Release | None:
        return _release(self._data["nvidia"]["cudnn"]["releases"], version)

    def cudnn_last_without_cuda13(self) -> Release:
        entry = self._data["nvidia"]["cudnn"]["last_without_cuda13"]
        return Release(entry["version"], _sources(entry))

    # AMD stack ----------------------------------------------------------------------
    def rocm_release(self, version: str) -> Release | None:
        """The ROCm release series ``version`` belongs to ("7.0.2" -> "7.0")."""
        return _release(self._data["amd"]["rocm"], major_minor(version))

    def amdgpu_release(self, version: str) -> Release | None:
        return _release(self._data["amd"]["amdgpu"], major_minor(version))

    # Platform -----------------------------------------------------------------------
    def gpu_operator_release(self, version: str) -> GpuOperatorRelease | None:
        releases = self._data["platform"]["gpu_operator"]["releases"]
        key = _release_key(releases, version)
        if key is None:
            return None
        entry = releases[key]
        k8s = entry.get("k8s") or [None, None]
        return GpuOperatorRelease(
            version=key,
            driver=entry["driver"],
            drivers=tuple(entry.get("drivers", [entry["driver"]])),
            k8s_min=k8s[0],
            k8s_max=k8s[1],
            sources=_sources(entry),
            unconfirmed=tuple(entry.get("unconfirmed", ())),
        )

    def amd_gpu_operator_release(self, version: str) -> Release | None:
        return _release(self._data["platform"]["amd_gpu_operator"]["releases"], version)

    def chart(self, component: str) -> dict[str, Any]:
        return dict(self._data["platform"][component]["chart"])

    def component(self, name: str) -> dict[str, Any]:
        """Kueue, Volcano, Slinky: latest version and chart location."""
        return dict(self._data["platform"]["components"][name])

    def slurm_series(self, version: str) -> Release | None:
        return _release(self._data["platform"]["slurm"]["series"], major_minor(version))

    def slurm_feature_since(self, feature: str) -> str:
        return str(self._data["platform"]["slurm"]["features"][feature]["since"])

    def slurm_supports(self, version: str, feature: str) -> bool:
        since = version_key(self.slurm_feature_since(feature))
        return version_key(version)[: len(since)] >= since

    def kubernetes_feature(self, name: str) -> dict[str, Any]:
        return dict(self._data["platform"]["kubernetes"][name])

    # Listing ------------------------------------------------------------------------
    def source_urls(self, keys: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(self.sources[k] for k in keys)

    def summary(self) -> dict[str, Any]:
        """Everything the catalog knows, for ``fleetspec catalog``."""
        nvidia = self._data["nvidia"]
        return {
            "gpus": [
                {
                    "id": g.id,
                    "vendor": g.vendor,
                    "name": g.name,
                    "generation": g.generation,
                    "arch": g.compute_capability or g.gfx_target,
                    "interconnect": g.interconnect,
                    "memory_gb": g.memory_gb,
                    "gres": g.gres,
                    "cpu_arch": g.cpu_arch,
                    "min_cuda": g.min_cuda,
                    "min_driver": g.min_driver,
                    "max_driver_branch": g.max_driver_branch,
                    "min_rocm": g.min_rocm,
                    "aliases": list(g.aliases),
                    "smi_names": list(g.smi_names),
                    "sources": list(self.source_urls(g.sources)),
                }
                for g in self.gpus.values()
            ],
            "cuda": sorted(nvidia["cuda"]["releases"], key=version_key),
            "driver_branches": sorted(nvidia["driver_branches"]),
            "nccl": sorted(nvidia["nccl"]["releases"], key=version_key),
            "cudnn": sorted(nvidia["cudnn"]["releases"], key=version_key),
            "rocm": {k: v.get("rccl") for k, v in self._data["amd"]["rocm"].items()},
            "gpu_operator": sorted(self._data["platform"]["gpu_operator"]["releases"], key=version_key),
            "slurm": sorted(self._data["platform"]["slurm"]["series"], key=version_key),
        }


def _norm(name: str) -> str:
    return " ".join(name.lower().replace("_", "-").split())


def _pair(values: list[Any] | None) -> tuple[str, str] | None:
    """A catalog list of two versions as a tuple, or None."""
    if not values:
        return None
    low, high = values
    return str(low), str(high)


def _sources(entry: dict[str, Any]) -> tuple[str, ...]:
    src = entry.get("source", ())
    return (src,) if isinstance(src, str) else tuple(src)


def _release_key(table: dict[str, Any], version: str) -> str | None:
    if version in table:
        return version
    wanted = parse_version(version)
    if wanted is None:
        return None
    return next((k for k in table if parse_version(str(k)) == wanted), None)


def _release(table: dict[str, Any], version: str) -> Release | None:
    key = _release_key(table, version)
    if key is None:
        return None
    entry = table[key]
    unconfirmed = entry.get("unconfirmed", ())
    if unconfirmed is True:
        unconfirmed = ("*",)
    facts = {k: v for k, v in entry.items() if k not in ("source", "unconfirmed")}
    return Release(str(key), _sources(entry), facts, tuple(unconfirmed))


def _gpu_model(gpu_id: str, vendor: str, e: dict[str, Any]) -> GpuModel:
    return GpuModel(
        id=gpu_id,
        vendor=vendor,
        name=e["name"],
        generation=e["generation"],
        gres=e["gres"],
        memory_gb=e.get("memory_gb"),
        interconnect=e.get("interconnect"),
        smi_names=tuple(e.get("smi_names", ())),
        aliases=tuple(e.get("aliases", ())),
        sources=_sources(e),
        compute_capability=e.get("compute_capability"),
        gfx_target=e.get("gfx_target"),
        nvswitch=bool(e.get("nvswitch", False)),
        rack_scale_nvlink=bool(e.get("rack_scale_nvlink", False)),
        open_module_required=bool(e.get("open_module_required", False)),
        min_cuda=e.get("min_cuda"),
        max_cuda_major=e.get("max_cuda_major"),
        min_driver=e.get("min_driver"),
        max_driver_branch=e.get("max_driver_branch"),
        min_nccl=e.get("min_nccl"),
        min_rocm=e.get("min_rocm"),
        gpu_operator_min_driver=e.get("gpu_operator_min_driver"),
        cpu_arch=e.get("cpu_arch", "x86_64"),
        unconfirmed=tuple(e.get("unconfirmed", ())),
        max_gpus_per_node=e.get("max_gpus_per_node"),
        ambiguous_aliases=tuple((a, tuple(o)) for a, o in (e.get("ambiguous_aliases") or {}).items()),
        split_from=e.get("split_from"),
    )


_FILES = {
    "sources": "sources.yaml",
    "gpus": "gpus.yaml",
    "nvidia": "nvidia_stack.yaml",
    "amd": "amd_stack.yaml",
    "platform": "platform.yaml",
}


@functools.cache
def load_catalog() -> Catalog:
    """The catalog shipped with fleetspec (read once per process)."""
    base = resources.files("fleetspec.catalog") / "data"
    return Catalog(catalog_data({name: (base / name).read_bytes() for name in _FILES.values()}))


def catalog_data(files: dict[str, bytes]) -> dict[str, Any]:
    """The data of the catalog files ``files`` (file name -> content, the ``_FILES``).

    The YAML files are the source of truth. ``_snapshot.py`` holds what they parse to, as
    a Python literal (loaded from its bytecode in well under a millisecond; parsing the
    YAML takes about 9 ms even with libyaml, at every start); it is used only while it
    was made from exactly these bytes (its checksum). Any edit to the YAML is read from
    the YAML until ``python3 -m fleetspec.catalog.snapshot`` writes the snapshot again
    (tests/test_catalog_snapshot.py fails until then)."""
    from fleetspec.catalog import _snapshot

    if checksum(files) == _snapshot.CHECKSUM:
        return _snapshot.DATA
    return parse(files)


def parse(files: dict[str, bytes]) -> dict[str, Any]:
    """Parse the catalog files (file name -> content) into the catalog's data."""
    import yaml

    try:
        from yaml import CSafeLoader as loader
    except ImportError:  # pragma: no cover
        from yaml import SafeLoader as loader  # type: ignore[assignment]
    return {key: yaml.load(files[name].decode(), Loader=loader) for key, name in _FILES.items()}


def checksum(files: dict[str, bytes]) -> int:
    """CRC-32 of the catalog files' names and bytes, in ``_FILES`` order: what tells a
    snapshot made from these files from one made before an edit."""
    crc = 0
    for name in _FILES.values():
        crc = zlib.crc32(files[name], zlib.crc32(name.encode() + b"\0", crc))
    return crc


__all__ = [
    "Catalog",
    "CudaRelease",
    "DriverBranch",
    "DriverPackaging",
    "GpuModel",
    "GpuOperatorRelease",
    "Nvlink5Packages",
    "Release",
    "catalog_data",
    "load_catalog",
    "series_matches",
]


_DRIVER_KEYS = frozenset({"driver", "drivers", "min_driver", "gpu_operator_min_driver", "revision_seen_to",
                          "drivers_supported", "driver_default"})
_DRIVER_VERSION = re.compile(r"[0-9]{3}\.[0-9]{1,3}(\.[0-9]{1,3})?")


def _collect_drivers(node: Any, sources: tuple[str, ...], found: dict[str, set[str]], key: str | None = None) -> None:
    """Every NVIDIA driver version a catalog fact names, with the sources of the entry it is in."""
    if isinstance(node, dict):
        source = node.get("source")
        here = tuple(source) if isinstance(source, list) else (source,) if isinstance(source, str) else sources
        for k, v in node.items():
            if k in ("revision_from", "tools_revision_from") and isinstance(v, dict):
                for version in v:
                    found.setdefault(str(version), set()).update(here)
            _collect_drivers(v, here, found, str(k))
    elif isinstance(node, list):
        for v in node:
            _collect_drivers(v, sources, found, key)
    elif isinstance(node, str) and key in _DRIVER_KEYS and _DRIVER_VERSION.fullmatch(node):
        found.setdefault(node, set()).update(sources)
