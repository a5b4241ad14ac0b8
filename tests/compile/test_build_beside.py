"""``plan --base`` compiles the base beside the spec (compiler.build_beside): when the two
differ only in what their stacks pin, the base's fleet is the spec's with its own stacks.
Whatever the pins are (valid, mismatched, another vendor's, firmware, keys added or left
out), the result must be the full compile's: the same fleet and the same findings."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from fleetspec.catalog import load_catalog
from fleetspec.compile.compiler import build_beside
from fleetspec.pipeline import compile_text
from fleetspec.spec.model import FleetSpec
from tests.conftest import EXAMPLES

NAMES = ("quickstart", "museum", "inference", "rocky9")
# Another value per key: some valid, some that the rules refuse (a CUDA the driver is too
# old for, an NCCL of another CUDA, a ROCm key on an NVIDIA stack).
OTHER = {"driver": "580.126.09", "cuda": "12.8.1", "cudnn": "9.17.0", "nccl": "2.26.2", "dcgm": "4.5.2",
         "rocm": "7.1.0", "rccl": "2.27.7", "amdgpu": "30.10"}


def _variants(data: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for name, stack in data["spec"]["stacks"].items():
        for key in (*stack, "dcgm", "rocm"):
            changed = copy.deepcopy(data)
            changed["spec"]["stacks"][name][key] = OTHER[key]
            yield f"{name}.{key}", changed
        for key in stack:
            if len(stack) > 1:
                changed = copy.deepcopy(data)
                del changed["spec"]["stacks"][name][key]
                yield f"{name}-{key}", changed
        changed = copy.deepcopy(data)
        changed["spec"]["stacks"][name]["firmware"] = {"vbios": "96.00.74.00.01"}
        yield f"{name}+firmware", changed


def _with_build_finding(data: dict[str, Any]) -> dict[str, Any]:
    """The spec with a finding of the build outside the stacks (an unknown GPU model)."""
    data = copy.deepcopy(data)
    data["spec"]["racks"][0]["nodes"][0]["gpu"]["model"] = "h100-sxn"
    return data


def _cases() -> Iterator[Any]:
    for example in NAMES:
        data = yaml.safe_load((EXAMPLES / f"{example}.yaml").read_text())
        for label, changed in _variants(data):
            yield pytest.param(data, changed, id=f"{example}:{label}")
    typo = _with_build_finding(yaml.safe_load((EXAMPLES / "quickstart.yaml").read_text()))
    for label, changed in _variants(typo):
        yield pytest.param(typo, changed, id=f"quickstart-typo:{label}")


@pytest.mark.parametrize(("data", "changed"), list(_cases()))
def test_a_base_that_moves_only_pins_compiles_as_a_whole_compile(data: dict[str, Any],
                                                                 changed: dict[str, Any]) -> None:
    spec = compile_text(yaml.safe_dump(data, sort_keys=False), "spec.yaml", keep=True)
    assert spec.built is not None
    text = yaml.safe_dump(changed, sort_keys=False)
    whole = compile_text(text, "base.yaml")
    beside = compile_text(text, "base.yaml", beside=spec.built)
    assert (beside.fleet, beside.findings, beside.suppressed) == (whole.fleet, whole.findings, whole.suppressed)
    if whole.fleet is not None:  # the schema refuses some pins before any build
        # Reused unless the spec's build looked into a stack the base moves (a MIG group reads
        # its stack's driver: inference's cu13), which builds the base whole.
        stacks, moved_to = data["spec"]["stacks"], changed["spec"]["stacks"]
        moved = {name for name in stacks if stacks[name] != moved_to.get(name)}
        reused = build_beside(FleetSpec.model_validate(changed), load_catalog(), spec.built)
        assert (reused is None) == bool(moved & spec.built.opened), (moved, spec.built.opened)


def test_a_base_that_moves_anything_else_is_built_whole() -> None:
    data = yaml.safe_load((EXAMPLES / "quickstart.yaml").read_text())
    spec = compile_text(yaml.safe_dump(data, sort_keys=False), "spec.yaml", keep=True)
    assert spec.built is not None
    catalog = load_catalog()
    rack = copy.deepcopy(data)
    rack["spec"]["racks"][0]["leaf"] = "leaf-99"
    renamed = copy.deepcopy(data)
    renamed["spec"]["stacks"]["hopper-cu13-new"] = renamed["spec"]["stacks"]["hopper-cu13"]
    other_name = copy.deepcopy(data)
    other_name["metadata"]["name"] = "other"
    for changed in (rack, renamed, other_name):
        assert build_beside(FleetSpec.model_validate(changed), catalog, spec.built) is None
        text = yaml.safe_dump(changed, sort_keys=False)
        beside = compile_text(text, "base.yaml", beside=spec.built)
        whole = compile_text(text, "base.yaml")
        assert (beside.fleet, beside.findings) == (whole.fleet, whole.findings)


def test_the_stack_index_notes_the_stacks_taken_out_not_the_names_asked() -> None:
    from fleetspec.compile.compiler import _StackIndex
    from fleetspec.compile.ir import StackTuple

    a, b, c = (StackTuple(name, "nvidia", driver="580.95.05") for name in ("a", "b", "c"))
    index = _StackIndex((a, b, c))
    assert "a" in index and "z" not in index and sorted(index) == ["a", "b", "c"] and index.opened == set()
    assert index["a"] is a and index.get("b") is b and index.get("z") is None
    assert index.opened == {"a", "b"}
    assert list(index.values()) == [a, b, c] and index.opened == {"a", "b", "c"}


def test_a_build_that_looked_into_a_moved_stack_is_not_reused() -> None:
    """A build step that reads what a stack pins (through the index) makes the base's build
    depend on it: moving that stack's pins then builds the base whole."""
    data = yaml.safe_load((EXAMPLES / "museum.yaml").read_text())
    spec = compile_text(yaml.safe_dump(data, sort_keys=False), "spec.yaml", keep=True)
    assert spec.built is not None and spec.built.opened == frozenset()  # names only, today
    changed = copy.deepcopy(data)
    changed["spec"]["stacks"]["hopper-cu13"]["driver"] = OTHER["driver"]
    base = FleetSpec.model_validate(changed)
    catalog = load_catalog()
    assert build_beside(base, catalog, spec.built._replace(opened=frozenset({"ampere-cu12"}))) is not None
    assert build_beside(base, catalog, spec.built._replace(opened=frozenset({"hopper-cu13"}))) is None
