"""The library behind each CLI command: each returns a typed result, prints nothing.

The CLI (and tests, and pipelines embedding fleetspec) call these; only the CLI turns
results into text and exit codes.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, NamedTuple

from fleetspec.compile.ir import Fleet
from fleetspec.pipeline import CompileResult, compile_file


def validate(spec: str | os.PathLike[str], charts: str | os.PathLike[str] | None = None) -> CompileResult:
    return compile_file(spec, charts=charts)


# A NamedTuple, immutable like a frozen dataclass but made at each start without compiling
# six generated methods (Python 3.11): tests/test_startup_imports.py counts what validate makes.
class PartitionsResult(NamedTuple):
    """``fleetspec partitions``: the compile result and one row per partition."""

    compiled: CompileResult
    partitions: list[dict[str, Any]]


def partitions(spec: str | os.PathLike[str]) -> PartitionsResult:
    compiled = compile_file(spec)
    if compiled.fleet is None:
        return PartitionsResult(compiled, [])
    return PartitionsResult(compiled, partition_table(compiled.fleet))


def partition_table(fleet: Fleet) -> list[dict[str, Any]]:
    rows = []
    for p in fleet.partitions:
        stack = fleet.stack(p.stack) if p.stack else None
        rows.append({
            "name": p.name,
            "scheduler": p.scheduler,
            "vendor": p.vendor,
            "generation": p.generation,
            "gpu_models": list(p.gpu_models),
            "nodes": list(p.nodes),
            "gpus": p.gpus,
            "stack": p.stack,
            "tuple": stack.versions() if stack else None,
            "generated": p.generated,
        })
    return rows


# A NamedTuple, like PartitionsResult.
class RenderResult(NamedTuple):
    """``fleetspec render``: the compile result, where it wrote and what."""

    compiled: CompileResult
    out: Path
    files: list[str]
    written: bool = False


def render(spec: str | os.PathLike[str], out: str | os.PathLike[str],
           charts: str | os.PathLike[str] | None = None) -> RenderResult:
    from fleetspec.render import renderers
    from fleetspec.render.writer import write_parts

    compiled = compile_file(spec, charts=charts)
    out_path = Path(out)
    if not compiled.valid or compiled.fleet is None:
        return RenderResult(compiled, out_path, [])
    fleet = compiled.fleet
    # Each renderer's files are written before the next renderer runs (peak memory).
    paths = write_parts((renderer(fleet) for renderer in renderers()), out_path)
    return RenderResult(compiled, out_path, [str(p) for p in paths], written=True)


def spec_json_schema() -> dict[str, Any]:
    from fleetspec.spec.model import FleetSpec

    schema = FleetSpec.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = "https://fleetspec.io/schemas/v1alpha1/fleet.json"
    schema["title"] = "fleetspec Fleet (v1alpha1)"
    return schema
