"""How the spec model is built (fleetspec/spec/model.py, `_Model`): with pydantic plugins
disabled, without touching the environment anyone else sees, and with default factories
that make exactly what the models themselves would."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import typing
from pathlib import Path

import pydantic
import pytest
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
