"""A facts document (docs/facts.md shape) built from the real H200 node's recorded outputs.

The fixture (tests/data/fixtures/h200-node) is what that node's own tools printed; the
package's parsers turn it into the collector's document, so the comparison tests run
on real values. Variations for drift cases are made by editing a deep copy.
"""

from __future__ import annotations

import copy
import os
import re

from fleetspec.node_side import collector as parsers
from tests.conftest import require_shared

FIXTURE = "fixtures/h200-node"
TRIPLET_LIB = "/usr/lib/x86_64-linux-gnu"
VENV = "/opt/torch/.venv"
VENV_NCCL = f"{VENV}/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2"


def _text(name: str) -> str:
    return (require_shared(FIXTURE) / name).read_text()


def _misc(title: str) -> str:
    for section in re.split(r"^## ", _text("misc.txt"), flags=re.MULTILINE):
        head, _, body = section.partition("\n")
        if head.strip() == title:
            return body
    raise AssertionError(f"misc.txt has no section {title!r}")


def _probe_values(prefix: str) -> dict[str, int]:
    """``ncclGetVersion PATH CODE`` lines of python.txt -> {path: code}."""
    values = {}
    for line in _text("python.txt").splitlines():
        if line.startswith(prefix + " "):
            _, path, code, *_ = line.split()
            values[path] = int(code)
    return values


def _library(path: str, version: str, aliases: list[str], package: object, environment: str | None = None) -> dict:
    return {
        "path": path,
        "aliases": sorted(aliases),
        "origin": "python" if environment else "system",
        "environment": environment,
        "version": version,
        "file_version": parsers.library_file_version(os.path.basename(path)),
        "package": package,
    }


def _nccl_libraries() -> list[dict]:
    codes = _probe_values("ncclGetVersion")
    system = [p for p in codes if p.startswith(TRIPLET_LIB)]
    real = max(system, key=len)  # libnccl.so.2.28.3: the file the links lead to
    system_version = parsers.decode_nccl_version(codes[real])
    assert {codes[p] for p in system} == {codes[real]}
    return [
        _library(real, system_version, system, "not-collected"),
        _library(VENV_NCCL, parsers.decode_nccl_version(codes[VENV_NCCL]), [VENV_NCCL],
                 {"manager": "pip", "name": "nvidia-nccl-cu13", "version": parsers.decode_nccl_version(codes[VENV_NCCL])},
                 VENV),
    ]


def _cudart_libraries() -> list[dict]:
    codes = _probe_values("cudart")
    real = "/usr/local/cuda-13.0/lib64/libcudart.so.13.0.96"
    system = [p for p in codes if p.startswith("/usr/local/cuda")]
    venv = next(p for p in codes if p.startswith(VENV))
    return [
        _library(real, parsers.decode_cudart_version(codes[real]), system, "not-collected"),
        _library(venv, parsers.decode_cudart_version(codes[venv]), [venv], "not-collected", VENV),
    ]


def _gpus() -> list[dict]:
    xml = parsers.parse_nvidia_smi_xml(_text("nvidia-smi-q.xml"))
    rows = {row["uuid"]: row for row in parsers.parse_query_gpu_csv(_text("query-gpu.csv"))}
    gpus = []
    for gpu in xml["gpus"]:
        merged = dict(gpu)
        merged["compute_capability"] = gpu["compute_capability"] or rows[gpu["uuid"]]["compute_capability"]
        gpus.append(merged)
    return gpus


def h200_facts(hostname: str = "h200-001") -> dict:
    """The fixture node as the collector would describe it (packages not recorded there)."""
    proc = parsers.parse_proc_driver_version(_misc("proc version"))
    xml = parsers.parse_nvidia_smi_xml(_text("nvidia-smi-q.xml"))
    nvcc = parsers.parse_nvcc_version(_misc("nvcc"))
    os_release = parsers.parse_os_release(_misc("uname").split("\n", 1)[1])
    cudnn_code = int(re.search(r"cudnn (\d+)", _text("python.txt")).group(1))
    cudnn_path = f"{TRIPLET_LIB}/libcudnn.so.9.19.0"
    nccl = _nccl_libraries()
    cudart = _cudart_libraries()
    return {
        "schema": "fleetspec.io/facts/v1",
        "hostname": hostname,
        "kernel": _misc("uname").split()[2],
        "os": os_release,
        "probe": {"root": "/", "commands": True, "load_libraries": True, "python": "3.12.3"},
        "nvidia": {
            "present": True,
            "driver_version": proc["version"],
            "kernel_module": proc["module"],
            "smi_driver_version": xml["driver_version"],
            "smi_cuda_version": xml["cuda_version"],
            "gpus": _gpus(),
            "fabric_manager": {"version": "absent", "service": "absent"},
            "errors": [],
        },
        "cuda": {
            "toolkits": [],
            "default_toolkit": "/usr/local/cuda-13.0",
            "nvcc": nvcc,
            "cudart": cudart,
            "cudart_versions": sorted({lib["version"] for lib in cudart}),
            "errors": [],
        },
        "cudnn": {
            "libraries": [_library(cudnn_path, parsers.decode_cudnn_version(cudnn_code),
                                   ["/lib/x86_64-linux-gnu/libcudnn.so.9", f"{TRIPLET_LIB}/libcudnn.so.9"],
                                   "not-collected")],
            "headers": [],
            "versions": [parsers.decode_cudnn_version(cudnn_code)],
            "errors": [],
        },
        "nccl": {"libraries": nccl, "versions": sorted({lib["version"] for lib in nccl}), "errors": []},
        "amd": {"present": False, "driver_version": "absent", "rocm_version": "absent", "rocm_path": "absent",
                "rocm_installs": [], "gpus": [], "gpu_source": "absent", "rccl": [], "rccl_versions": [],
                "errors": []},
        "packages": {"manager": "not-collected", "installed": [], "holds": [], "errors": []},
        "slurm": {"slurmd_version": "absent", "errors": []},
        "fabric": {"infiniband": [], "errors": []},
        "errors": [],
    }


def variant(facts: dict, **changes: object) -> dict:
    """A deep copy with dotted-path changes: ``variant(f, **{"nvidia.driver_version": "x"})``."""
    out = copy.deepcopy(facts)
    for dotted, value in changes.items():
        target = out
        *parents, last = dotted.split(".")
        for key in parents:
            target = target[int(key)] if isinstance(target, list) else target[key]
        if isinstance(target, list):
            target[int(last)] = value
        else:
            target[last] = value
    return out
