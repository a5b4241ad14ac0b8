"""Facts documents for the import tests: the real H200 node's collector output
(tests/data/fixtures/h200-node/collector.json) per host, with the GPU name each test
cluster carries; for AMD hosts, the AMD section the collector writes (docs/facts.md)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

H200 = Path(__file__).parents[1] / "data" / "fixtures" / "h200-node" / "collector.json"


# What nvidia-smi reports for boards the catalog does not know (architecture, memory).
BOARDS = {"NVIDIA GeForce RTX 2080 Ti": {"architecture": "Turing", "memory_mib": 11264, "compute_capability": "7.5"},
          "NVIDIA GeForce GTX 970": {"architecture": "Maxwell", "memory_mib": 4096, "compute_capability": "5.2"},
          "NVIDIA GeForce GTX 1060 6GB": {"architecture": "Pascal", "memory_mib": 6144, "compute_capability": "6.1"},
          "Tesla T4": {"architecture": "Turing", "memory_mib": 15360, "compute_capability": "7.5"},
          # Boards of the brownfield clusters (shared/brownfield/README.md), as nvidia-smi
          # --query-gpu=name,memory.total and its architecture field print them (illustrative:
          # none of those clusters publishes its facts).
          "NVIDIA GeForce RTX 3090": {"architecture": "Ampere", "memory_mib": 24576, "compute_capability": "8.6"},
          "NVIDIA GeForce RTX 2080": {"architecture": "Turing", "memory_mib": 8192, "compute_capability": "7.5"},
          "NVIDIA GeForce RTX 4080 SUPER": {"architecture": "Ada Lovelace", "memory_mib": 16376,
                                            "compute_capability": "8.9"},
          "NVIDIA GeForce GTX 1080 Ti": {"architecture": "Pascal", "memory_mib": 11264, "compute_capability": "6.1"},
          "NVIDIA TITAN Xp": {"architecture": "Pascal", "memory_mib": 12288, "compute_capability": "6.1"},
          "NVIDIA TITAN RTX": {"architecture": "Turing", "memory_mib": 24576, "compute_capability": "7.5"},
          "Quadro RTX 6000": {"architecture": "Turing", "memory_mib": 24576, "compute_capability": "7.5"},
          "Quadro RTX 5000": {"architecture": "Turing", "memory_mib": 16384, "compute_capability": "7.5"},
          "Tesla V100-SXM2-32GB": {"architecture": "Volta", "memory_mib": 32768, "compute_capability": "7.0"},
          "NVIDIA GeForce GTX TITAN X": {"architecture": "Maxwell", "memory_mib": 12288, "compute_capability": "5.2"},
          "NVIDIA GeForce GTX 1080": {"architecture": "Pascal", "memory_mib": 8192, "compute_capability": "6.1"},
          "Tesla K40m": {"architecture": "Kepler", "memory_mib": 11520, "compute_capability": "3.5"},
          "Tesla K20m": {"architecture": "Kepler", "memory_mib": 5120, "compute_capability": "3.5"},
          "Tesla M2070-Q": {"architecture": "Fermi", "memory_mib": 6144, "compute_capability": "2.0"},
          "Tesla V100-PCIE-32GB": {"architecture": "Volta", "memory_mib": 32768, "compute_capability": "7.0"},
          # Jetsons (brownfield/hal9000-homelab-2026): the GPU shares the module's memory.
          "Orin (nvgpu)": {"architecture": "Ampere", "memory_mib": 7619, "compute_capability": "8.7"},
          "NVIDIA Tegra X1": {"architecture": "Maxwell", "memory_mib": 1979, "compute_capability": "5.3"}}

# A tuple Volta-to-Ada boards run (CUDA 13 dropped Volta and older: the catalog's
# cuda-unsupported-gpu): driver R535 with CUDA 12.2, NCCL 2.18.3, cuDNN 8.9.7.
CUDA12 = {"driver": "535.183.01", "cuda": "12.2", "nccl": "2.18.3", "cudnn": "8.9.7"}


def nvidia_facts(host: str, gpu_name: str | list[tuple[str, int]], count: int = 0) -> dict[str, Any]:
    """One host's facts with ``count`` GPUs named ``gpu_name``, or, for a node with
    several models, the (name, count) pairs in device order."""
    data = json.loads(H200.read_text())
    data["hostname"] = host
    boards = [(gpu_name, count)] if isinstance(gpu_name, str) else gpu_name
    template = data["nvidia"]["gpus"][0]
    listed = [{**copy.deepcopy(template), "name": name, **BOARDS.get(name, {})} for name, n in boards for _ in range(n)]
    data["nvidia"]["gpus"] = [{**gpu, "index": i} for i, gpu in enumerate(listed)]
    return data


def with_tuple(data: dict[str, Any], tup: dict[str, str]) -> dict[str, Any]:
    """The same facts with another stack tuple (driver, CUDA toolkit, system NCCL and cuDNN)."""
    data = copy.deepcopy(data)
    data["nvidia"]["driver_version"] = data["nvidia"]["smi_driver_version"] = tup["driver"]
    data["cuda"]["toolkits"] = [{"components": {}, "path": "/usr/local/cuda", "version": tup["cuda"]}]
    data["cuda"]["default_toolkit"] = "/usr/local/cuda"
    for key in ("nccl", "cudnn"):  # a tuple without cuDNN: no cuDNN library on the node
        data[key]["libraries"] = [{"origin": "system", "environment": None, "version": tup[key],
                                   "path": f"/usr/lib/x86_64-linux-gnu/lib{key}.so.{tup[key]}"}] if key in tup else []
    return data


def cpu_facts(host: str) -> dict[str, Any]:
    """A node without GPUs: no NVIDIA or AMD stack (the collector's absent sections)."""
    data = json.loads(H200.read_text())
    data["hostname"] = host
    data["nvidia"] = {"present": False, "gpus": [], "driver_version": "absent"}
    return data


def amd_facts(host: str, gpu_name: str, count: int) -> dict[str, Any]:
    data = json.loads(H200.read_text())
    data["hostname"] = host
    data["nvidia"] = {"present": False, "gpus": [], "driver_version": "absent"}
    data["amd"] = {"present": True, "driver_version": "6.12.12", "rocm_version": "6.4.1",
                   "rccl_versions": ["2.22.3"], "gpus": [{"index": i, "name": gpu_name} for i in range(count)]}
    return data


def write_facts(directory: Path, docs: dict[str, dict[str, Any]]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for host, doc in docs.items():
        (directory / f"{host}.json").write_text(json.dumps(doc))
    return directory
