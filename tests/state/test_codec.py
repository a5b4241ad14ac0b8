"""The IR decoder (fleetspec/state/codec.py) checks every stored field against the IR's
own type hints: a damaged or hand-edited state is an error naming what is wrong, never
a wrongly typed fleet that plan and apply would then act on."""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from pathlib import Path
from typing import Any

import pytest

from fleetspec.compile import ir
from fleetspec.pipeline import compile_file
from fleetspec.state.codec import FleetDecodeError, decode, encode, fleet_from_dict

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))


def _instances() -> dict[type, Any]:
    """One instance of each IR class the examples compile to (the fleet itself included)."""
    found: dict[type, Any] = {}

    def walk(value: Any) -> None:
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            found.setdefault(type(value), value)
            for f in dataclasses.fields(value):
                walk(getattr(value, f.name))
        elif isinstance(value, tuple):
            for item in value:
                walk(item)

    for path in EXAMPLES:
        fleet = compile_file(path).fleet
        if fleet is not None:
            walk(fleet)
    return found


INSTANCES = _instances()


def _wrong_values(hint: Any) -> list[Any]:
    """Values of the wrong type for ``hint`` (what a damaged file might hold)."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(hint) if a is not type(None)]
        return [v for v in _wrong_values(options[0]) if v is not None]
    if origin is typing.Literal:
        return ["not-a-listed-value", ["a list"], 3]
    if origin is tuple:
        return [{"an": "object"}, "a string"]
    if dataclasses.is_dataclass(hint) or (isinstance(hint, type) and hasattr(hint, "_fields")):
        return ["a string", ["a list"]]
    return {str: [5, ["a list"], {"an": "object"}], int: ["5", True, 2.5, None], bool: [1, "true", None],
            float: ["1.5", True]}[hint]


CASES = [(cls, f.name, wrong)
         for cls, instance in sorted(INSTANCES.items(), key=lambda item: item[0].__name__)
         for f in dataclasses.fields(cls) if not f.metadata.get("location")
         for wrong in _wrong_values(typing.get_type_hints(cls, vars(ir))[f.name])]


def test_the_examples_reach_the_ir_classes_the_state_holds() -> None:
    assert {ir.Fleet, ir.Node, ir.GpuSpec, ir.StackTuple, ir.Partition, ir.Rack, ir.Fabric, ir.SlurmConfig,
            ir.KubernetesConfig} <= set(INSTANCES)
    assert len(CASES) > 300


@pytest.mark.parametrize(("cls", "name", "wrong"), CASES,
                         ids=[f"{c.__name__}.{n}={w!r}"[:60] for c, n, w in CASES])
def test_a_wrongly_typed_field_is_refused(cls: type, name: str, wrong: Any) -> None:
    stored = json.loads(json.dumps(encode(INSTANCES[cls])))
    assert decode(cls, stored) == INSTANCES[cls]  # the untouched object decodes (the case is not vacuous)
    stored[name] = wrong
    with pytest.raises(FleetDecodeError, match=f"stored {cls.__name__} does not match the IR"):
        decode(cls, stored)


@pytest.mark.parametrize("cls", sorted(INSTANCES, key=lambda c: c.__name__), ids=lambda c: c.__name__)
def test_a_missing_required_field_is_named_and_a_missing_default_is_the_default(cls: type) -> None:
    stored = json.loads(json.dumps(encode(INSTANCES[cls])))
    fields = [f for f in dataclasses.fields(cls) if not f.metadata.get("location")]
    required = [f for f in fields if f.default is dataclasses.MISSING]
    for f in required:
        damaged = {k: v for k, v in stored.items() if k != f.name}
        with pytest.raises(FleetDecodeError, match=f"{cls.__name__} lacks '{f.name}'"):
            decode(cls, damaged)
    defaulted = {k: v for k, v in stored.items() if k in {f.name for f in required}}
    assert decode(cls, defaulted) == cls(**{k: decode_field(cls, k, v) for k, v in defaulted.items()})


def decode_field(cls: type, name: str, value: Any) -> Any:
    """One field's value decoded the way the round trip does: through a whole object."""
    return getattr(decode(cls, {**json.loads(json.dumps(encode(INSTANCES[cls]))), name: value}), name)


def test_every_example_round_trips_and_unknown_keys_are_ignored() -> None:
    for path in EXAMPLES:
        fleet = compile_file(path).fleet
        if fleet is None:
            continue
        data = json.loads(fleet.to_json())
        assert fleet_from_dict(data) == fleet, path.name
        data["nodes"][0]["added_by_a_later_fleetspec"] = 1
        assert fleet_from_dict(data).nodes[0] == fleet.nodes[0]


def test_a_stored_object_that_is_not_an_object_is_named() -> None:
    with pytest.raises(FleetDecodeError, match="Node must be an object, got list"):
        decode(ir.Node, [])
