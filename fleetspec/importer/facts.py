"""What the fact collector's documents (docs/facts.md) say that Slurm's files cannot:
the GPU model each node carries, its stack tuple, its OS and its Slurm release.

Each answer is read from one place of the document, the place `verify` reads it from,
and is None when the document does not say it or says several things (two system
NCCL libraries of different versions): the importer then stops and names the node,
it never picks one.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

_VERSION = re.compile(r"^[0-9]+(\.[0-9]+){1,3}$")
FACTS_SCHEMA = "fleetspec.io/facts/v1"


def _section(facts: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    value = facts.get(name)
    return value if isinstance(value, Mapping) else {}


def _items(section: Mapping[str, Any], name: str) -> list[Mapping[str, Any]]:
    value = section.get(name)
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, list) else []


def _version(value: object) -> str | None:
    return value if isinstance(value, str) and _VERSION.match(value) else None


def gpu_names(facts: Mapping[str, Any]) -> list[str]:
    """The GPU product names the node reports (nvidia-smi / amd-smi), one per GPU."""
    out = []
    for vendor in ("nvidia", "amd"):
        for gpu in _items(_section(facts, vendor), "gpus"):
            name = gpu.get("name") or gpu.get("product_name") or gpu.get("market_name")
            if isinstance(name, str) and name:
                out.append(name)
    return out


def gpu_entries(facts: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """(vendor, the collector's entry) for each GPU the node reports."""
    return [(vendor, gpu) for vendor in ("nvidia", "amd") for gpu in _items(_section(facts, vendor), "gpus")]


def os_name(facts: Mapping[str, Any]) -> str | None:
    """``ubuntu-24.04``, ``debian-12``, ``rocky-9``: the spec's ``os`` spelling, from /etc/os-release.

    The EL family (``ID=rocky``, ``rhel``, ``almalinux``) is named by its major release
    (``VERSION_ID=9.6`` -> ``rocky-9``): a point release shares the repositories and pins of
    its major (NVIDIA's rhel9 tree, AMD's el9), and os-release(5) gives the minor in VERSION_ID."""
    os_ = _section(facts, "os")
    ident, version = os_.get("id"), os_.get("version_id")
    if isinstance(ident, str) and isinstance(version, str) and re.fullmatch(r"[a-z]+", ident) \
            and re.fullmatch(r"[0-9.]+", version):
        if ident in _EL_IDS:
            return f"{ident}-{version.split('.', 1)[0]}"
        return f"{ident}-{version}"
    return None


_EL_IDS = frozenset({"rocky", "rhel", "almalinux"})


def slurm_version(facts: Mapping[str, Any]) -> str | None:
    return _version(_section(facts, "slurm").get("slurmd_version"))


def _single(versions: list[str]) -> tuple[str | None, str | None]:
    """(the one version, None) or (None, why not)."""
    distinct = sorted(set(versions))
    if len(distinct) > 1:
        return None, f"several versions ({', '.join(distinct)})"
    return (distinct[0] if distinct else None), None


def _libraries(facts: Mapping[str, Any], section: str) -> list[str]:
    """System copies only (the ones verify pins), not those inside Python environments."""
    out = []
    for lib in _items(_section(facts, section), "libraries"):
        if lib.get("origin") == "python" or lib.get("environment"):
            continue
        version = _version(lib.get("version")) or _version(lib.get("file_version"))
        if version:
            out.append(version)
    return out


def nvidia_driver(facts: Mapping[str, Any]) -> str | None:
    """The node's NVIDIA driver version (the kernel module's, else nvidia-smi's), or None."""
    nvidia = _section(facts, "nvidia")
    return _version(nvidia.get("driver_version")) or _version(nvidia.get("smi_driver_version"))


def stack_tuple(facts: Mapping[str, Any]) -> tuple[dict[str, str], list[str]]:
    """The node's tuple in the spec's ``stacks`` form, and what could not be read."""
    missing: list[str] = []
    nvidia, amd = _section(facts, "nvidia"), _section(facts, "amd")
    if nvidia.get("present") is True:
        out: dict[str, str] = {}
        driver = nvidia_driver(facts)
        if driver:
            out["driver"] = driver
        else:
            missing.append("the NVIDIA driver version (nvidia.driver_version)")
        cuda = _cuda(_section(facts, "cuda"))
        if cuda:
            out["cuda"] = cuda
        else:
            missing.append("the CUDA toolkit version (cuda.toolkits / cuda.nvcc)")
        for key in ("cudnn", "nccl"):
            value, why = _single(_libraries(facts, key))
            if why:
                missing.append(f"one system {key} version: the node has {why}")
            elif value:
                out[key] = value
        return out, missing
    if amd.get("present") is True:
        out = {}
        rocm = _version(amd.get("rocm_version"))
        if rocm:
            out["rocm"] = rocm
        else:
            missing.append("the ROCm version (amd.rocm_version)")
        value, why = _single([v for v in amd.get("rccl_versions") or [] if _version(v)])
        if why:
            missing.append(f"one RCCL version: the node has {why}")
        elif value:
            out["rccl"] = value
        driver = _version(amd.get("driver_version"))
        if driver:
            out["amdgpu"] = driver
        return out, missing
    return {}, ["a GPU driver: the facts show neither an NVIDIA nor an AMD GPU stack (nvidia.present, amd.present)"]


def _cuda(cuda: Mapping[str, Any]) -> str | None:
    """The default toolkit's version.json, else nvcc's release: what verify checks."""
    toolkits = _items(cuda, "toolkits")
    chosen = next((t for t in toolkits if t.get("path") == cuda.get("default_toolkit")), None)
    if chosen is None and len(toolkits) == 1:
        chosen = toolkits[0]
    if chosen is not None and _version(chosen.get("version")):
        return str(chosen["version"])
    return _version(_section(cuda, "nvcc").get("release"))
