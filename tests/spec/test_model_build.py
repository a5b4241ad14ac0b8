"""How the spec model is built (fleetspec/spec/model.py, `_Model`): with pydantic plugins
disabled, without touching the environment anyone else sees, and with default factories
that make exactly what the models themselves would."""

from __future__ import annotations

import copy
import functools
import json
import os
import subprocess
import sys
import types
import typing
from pathlib import Path

import pydantic
import pytest
import yaml
from pydantic import Field, TypeAdapter, ValidationError

from fleetspec.spec import model as m

ROOT = Path(__file__).resolve().parents[2]

MODEL_FACTORIES = [
    (model_cls, name, field.default_factory)
    for model_cls in (getattr(m, n) for n in dir(m))
    if isinstance(model_cls, type) and issubclass(model_cls, m._Model)
    for name, field in model_cls.model_fields.items()
    if getattr(field.default_factory, "__self__", None) is not None
]


def test_there_are_model_default_factories():
    assert {(cls.__name__, name) for cls, name, _ in MODEL_FACTORIES} >= {
        ("Slurm", "users"), ("FleetBody", "secrets"), ("FleetBody", "packages"), ("Kubernetes", "gang_policy"),
        ("Kubernetes", "network_operator"), ("AnsibleSite", "hooks")}


@pytest.mark.parametrize(("cls", "name", "factory"), MODEL_FACTORIES,
                         ids=[f"{c.__name__}.{n}" for c, n, _ in MODEL_FACTORIES])
def test_a_model_default_is_what_the_model_makes(cls, name, factory):
    made, built = factory(), factory.__self__()
    assert type(made) is type(built)
    assert made == built and made.model_fields_set == built.model_fields_set == set()
    assert made.model_dump() == built.model_dump()


def _prebuilt(annotation: typing.Any) -> typing.Iterator[type[m.Prebuilt]]:
    if isinstance(annotation, type) and issubclass(annotation, m.Prebuilt):
        yield annotation
    for part in typing.get_args(annotation):
        yield from _prebuilt(part)


PREBUILT = list({id(p): p for model_cls in (getattr(m, n) for n in dir(m))
                 if isinstance(model_cls, type) and issubclass(model_cls, m._Model)
                 for field in model_cls.model_fields.values()
                 for p in _prebuilt(field.annotation)
                 }.values())
PLAIN = {str: pydantic.StrictStr, int: pydantic.StrictInt, bool: pydantic.StrictBool, float: pydantic.StrictFloat}
PROBES = ["", "ok", "a-b", "Bad_Name", "x" * 70, "x" * 5000, "v1.2.3", "1.2", "/var/spool/x", "env:A", "10m", " 1 ",
          "1", 0, 1, 64, 65, -1, 2**40, 1.0, 1.5, True, False, None, b"ok", ["ok"], {"a": 1}]


def _strip(schema: typing.Any) -> typing.Any:
    if isinstance(schema, dict):
        return {k: _strip(v) for k, v in schema.items() if k != "metadata"}
    return schema


def _outcome(adapter: TypeAdapter, value: typing.Any) -> typing.Any:
    try:
        return ("ok", adapter.validate_python(value))
    except ValidationError as exc:
        return ("error", exc.errors(include_url=False))


def test_the_spec_uses_prebuilt_strict_types():
    assert len(PREBUILT) >= 20 and {p.kind for p in PREBUILT} == {str, int, bool, float}


@pytest.mark.parametrize("prebuilt", PREBUILT, ids=[f"{p.kind.__name__}{p.constraints}"[:80] for p in PREBUILT])
def test_a_prebuilt_type_is_what_pydantic_builds_from_the_plain_spelling(prebuilt):
    plain = PLAIN[prebuilt.kind]
    reference = TypeAdapter(typing.Annotated[plain, Field(**prebuilt.constraints)] if prebuilt.constraints else plain)
    ours = TypeAdapter(prebuilt)
    assert _strip(ours.core_schema) == _strip(reference.core_schema)
    assert ours.json_schema() == reference.json_schema()
    assert [_outcome(ours, v) for v in PROBES] == [_outcome(reference, v) for v in PROBES]


def test_list_fields_default_to_a_new_empty_list():
    a, b = m.Fabric(type="ethernet"), m.Fabric(type="ethernet")
    assert a.spines == [] and a.spines is not b.spines


# A pydantic plugin, installed the way plugins are (an entry point in the `pydantic`
# group of an installed distribution), that records the types it is asked to watch.
PLUGIN = '''
import os
class Recorder:
    def new_schema_validator(self, schema, schema_type, schema_type_path, schema_kind, config, plugin_settings):
        with open(os.environ["RECORDED"], "a") as out:
            out.write(getattr(schema_type, "__name__", str(schema_type)) + "\\n")
        return None, None, None
plugin = Recorder()
'''
RUN = '''
import json, os, sys
from fleetspec.pipeline import compile_file
from fleetspec.spec.model import FleetSpec, Secrets
from pydantic import BaseModel
compiled = compile_file(sys.argv[1])
assert compiled.fleet is not None, compiled.findings
FleetSpec.model_json_schema()
Secrets(munge_key="env:KEY")
class Elsewhere(BaseModel):
    x: int
Elsewhere(x=1)
print(json.dumps(os.environ.get("PYDANTIC_DISABLE_PLUGINS")))
'''


@pytest.mark.parametrize("preset", [None, "some-other-plugin"])
def test_the_spec_model_is_built_without_pydantic_plugins_and_the_environment_is_restored(tmp_path, preset):
    (tmp_path / "recorder.py").write_text(PLUGIN)
    dist = tmp_path / "recorder-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: recorder\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[pydantic]\nrecorder = recorder:plugin\n")
    recorded = tmp_path / "recorded.txt"
    env = {k: v for k, v in os.environ.items() if k != "PYDANTIC_DISABLE_PLUGINS"}
    env.update(PYTHONPATH=f"{tmp_path}{os.pathsep}{ROOT}", RECORDED=str(recorded))
    if preset is not None:
        env["PYDANTIC_DISABLE_PLUGINS"] = preset
    proc = subprocess.run([sys.executable, "-c", RUN, str(ROOT / "examples" / "quickstart.yaml")],
                          capture_output=True, text=True, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == preset  # as it was, after every build
    seen = recorded.read_text().split() if recorded.exists() else []
    assert "Elsewhere" in seen  # the plugin is installed and works for other models
    assert not set(seen) & {"FleetSpec", "Secrets", "ServiceAccount"}, seen


# Sections built when a spec gives them (model.WHEN_GIVEN): the same checks, errors and JSON
# schema as pydantic's own model with every such section built in place, the reference below.
def _in_place(annotation: typing.Any) -> typing.Any:
    if typing.get_origin(annotation) is typing.Annotated:
        inner = _in_place(typing.get_args(annotation)[0])
        kept = tuple(meta for meta in annotation.__metadata__ if meta is not m.WHEN_GIVEN)
        return typing.Annotated[(inner, *kept)] if kept else inner
    if isinstance(annotation, type) and issubclass(annotation, m._Model):
        return _reference(annotation)
    args = typing.get_args(annotation)
    if not args or typing.get_origin(annotation) is typing.Literal:
        return annotation
    built = tuple(_in_place(a) for a in args)
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return typing.Union[built]  # noqa: UP007 - a union of computed members
    return typing.get_origin(annotation)[built]


def _field_in_place(field: typing.Any) -> typing.Any:
    """The field without WHEN_GIVEN (pydantic keeps an outermost Annotated's metadata on the field)."""
    if m.WHEN_GIVEN not in field.metadata:
        return field
    field = copy.copy(field)
    field.metadata = [meta for meta in field.metadata if meta is not m.WHEN_GIVEN]
    return field


@functools.cache
def _reference(cls: type[m._Model]) -> type[m._Model]:
    changed = {name: (_in_place(field.annotation), _field_in_place(field)) for name, field in cls.model_fields.items()
               if _in_place(field.annotation) != field.annotation or _field_in_place(field) is not field}
    if not changed:
        return cls
    return pydantic.create_model(cls.__name__, __base__=cls, __module__=cls.__module__, __doc__=cls.__doc__, **changed)


SECTION_VALUES = ["text", 3, [1], {"nope": 1}, None, {}]
GIVEN = {  # sections no example gives, written here to be checked too
    "health": {"interval": 60, "checks": ["kernel-log", "dcgm"], "min_healthy": "40%", "actions": {"nvlink-down": "drain"}},
    "packages": {"mirror": {"uri": "https://mirror.example.com/debian", "trusted": True},
                 "registry_mirror": "registry.example.com/mirror"},
    "secrets": {"munge_key": "env:MUNGE", "registry_password": "file:registry.txt"},
}
SPECS = [*sorted(ROOT.glob("examples/*.yaml")),
         *(ROOT / "tests" / "rules" / "fixtures" / case / f"{kind}.yaml" for case in
           ("baremetal", "site-gpu-model", "firmware-unconfirmed", "site-settings") for kind in ("pass", "fail")),
         ROOT / "tests" / "apply" / "specs" / "v2-hooks.yaml"]


def _sections(spec: dict) -> typing.Iterator[tuple[str | int, ...]]:
    """Where a spec gives (or could give) a section built when given."""
    yield from (("spec", name) for name in ("kubernetes", "baremetal", "health", "ansible", "packages", "secrets",
                                             "gpu_models"))
    for name, stack in spec["spec"].get("stacks", {}).items():
        yield from (("spec", "stacks", name, key) for key in ("firmware", "secure_boot") if isinstance(stack, dict))
    for r, rack in enumerate(spec["spec"]["racks"]):
        yield ("spec", "racks", r, "bmc")
        yield from (("spec", "racks", r, "nodes", g, "bmc") for g in range(len(rack["nodes"])))


def _variants() -> typing.Iterator[dict]:
    for path in SPECS:
        spec = yaml.safe_load(path.read_text())
        yield spec
        yield {**spec, "spec": {**spec["spec"], **GIVEN}}
        for where in _sections(spec):
            *parents, key = where
            given = functools.reduce(lambda node, part: node[part], parents, spec).get(key)
            changes = [(where, value) for value in SECTION_VALUES]
            if isinstance(given, dict):
                changes += [((*where, inner), value) for inner in given for value in SECTION_VALUES]
            for at, value in changes:
                changed = copy.deepcopy(spec)
                *parents, last = at
                functools.reduce(lambda node, part: node[part], parents, changed)[last] = value
                yield changed


def _validated(model: type[m._Model], data: dict) -> typing.Any:
    try:
        return ("ok", repr(model.model_validate(data)))
    except ValidationError as exc:
        return ("error", [{**e, "ctx": {k: repr(v) for k, v in e.get("ctx", {}).items()}}  # a ValueError: by repr
                          for e in exc.errors(include_url=False)], str(exc))


def test_a_section_built_when_given_checks_as_if_built_in_place():
    reference = _reference(m.FleetSpec)
    assert reference is not m.FleetSpec
    variants = list(_variants())
    assert len(variants) > 1000
    outcomes = [(_validated(m.FleetSpec, data), _validated(reference, data)) for data in variants]
    assert {ours[0] for ours, _ in outcomes} == {"ok", "error"}
    assert [ours for ours, _ in outcomes] == [theirs for _, theirs in outcomes]
    assert m.FleetSpec.model_json_schema() == reference.model_json_schema()


SECTIONS = {"Kubernetes", "BareMetal", "Health", "AnsibleSite", "Packages", "Secrets", "SiteGpuModel", "Bmc",
            "Firmware", "SecureBoot"}


def _models_in(schema: typing.Any) -> set[str]:
    """The models a core schema validates in place."""
    if isinstance(schema, dict):
        here = {schema["cls"].__name__} if schema.get("type") == "model" else set()
        return here.union(*(_models_in(value) for value in schema.values()))
    if isinstance(schema, list | tuple):
        return set().union(*(_models_in(value) for value in schema))
    return set()


def test_the_validator_every_start_builds_holds_none_of_those_sections():
    ours, reference = m.FleetSpec, _reference(m.FleetSpec)
    ours.model_rebuild(), reference.model_rebuild()  # built (deferred until first used)
    assert _models_in(ours.__pydantic_core_schema__) & SECTIONS == set()
    assert "Rack" in _models_in(ours.__pydantic_core_schema__)
    assert _models_in(reference.__pydantic_core_schema__) >= SECTIONS
