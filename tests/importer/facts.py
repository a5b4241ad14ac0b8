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
BOARDS = {"NVIDIA GeForce RTX 2080 Ti": {"architecture": "Turing", "memory_mib": 11264, "compute_capability": "7.5"}}


def nvidia_facts(host: str, gpu_name: str, count: int) -> dict[str, Any]:
    data = json.loads(H200.read_text())
    data["hostname"] = host
    gpu = {**copy.deepcopy(data["nvidia"]["gpus"][0]), "name": gpu_name, **BOARDS.get(gpu_name, {})}
    data["nvidia"]["gpus"] = [{**gpu, "index": i} for i in range(count)]
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
