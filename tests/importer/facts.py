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
          "Tesla T4": {"architecture": "Turing", "memory_mib": 15360, "compute_capability": "7.5"}}


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
