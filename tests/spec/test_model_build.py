"""How the spec model is built (fleetspec/spec/model.py, `_Model`): with pydantic plugins
disabled, without touching the environment anyone else sees, and with default factories
that make exactly what the models themselves would."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

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
from fleetspec.compile import compile_file
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
