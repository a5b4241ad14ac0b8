"""Startup guard, not a timed test: each command imports what it uses and nothing else
(benchmarks/README.md measures the time; this keeps the reasons from coming back).

A real process runs the command and reports, at exit, which modules it loaded."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
QUICKSTART = ROOT / "examples" / "quickstart.yaml"

# What `validate` never needs: the other commands' packages (imported when they run or
# when help lists them: fleetspec/cli_lazy.py), the renderers (the rules read the Slurm
# layout from fleetspec/layout/slurm.py), and heavy dependencies.
NOT_FOR_VALIDATE = (
    "fleetspec.plan", "fleetspec.apply", "fleetspec.state", "fleetspec.lab", "fleetspec.verify",
    "fleetspec.health.cli", "fleetspec.health.fleet", "fleetspec.secrets", "fleetspec.render.kubernetes",
    "fleetspec.render.ansible", "fleetspec.render.writer", "fleetspec.render.slurm", "fleetspec.render.health",
    "fleetspec.sarif", "fleetspec.charts", "ansible_runner", "ansible", "pulumi", "rich.table", "json", "hashlib",
)
# A site hatch's module is loaded only for a spec that fills that hatch (fleetspec/site):
# quickstart has a slurm section without settings, and no helm values or ansible section.
SITE_HATCHES = ("fleetspec.site.slurm", "fleetspec.site.helm", "fleetspec.site.ansible")
# `--help` (which imports every command to list it) loads no spec model, compiler,
# catalog or YAML; `version` not even the other commands.
COMPILER = ("fleetspec.spec.model", "fleetspec.compile.compiler", "fleetspec.catalog", "fleetspec.rules",
            "fleetspec.site", "yaml")

REPORT = """
import atexit, sys
def report():
    modules = sorted(sys.modules)
    slurm = sys.modules.get('fleetspec.site.slurm')
    read = slurm.parameters.cache_info().currsize if slurm else 0
    catalog = sys.modules.get('fleetspec.catalog')
    snapshot = bool(catalog) and catalog.load_catalog()._data is catalog._snapshot.DATA
    plugins = sys.modules.get('pydantic.plugin._loader')
    scanned = plugins is not None and plugins._plugins is not None
    dataclasses = sorted(f'{name}.{value.__name__}' for name, module in list(sys.modules.items())
                         if name.startswith('fleetspec') for value in list(vars(module).values())
                         if isinstance(value, type) and value.__module__ == name and '__dataclass_fields__' in vars(value))
    import json  # after the modules are listed
    sys.__stderr__.write('MODULES ' + json.dumps({'modules': modules, 'slurm_parameters_read': read,
                                                  'catalog_from_snapshot': snapshot, 'plugins_scanned': scanned,
                                                  'dataclasses': dataclasses}))
atexit.register(report)
from fleetspec.cli import main
main()
"""


def loaded(*args: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONWARNINGS": "ignore"}
    proc = subprocess.run([sys.executable, "-c", REPORT, *args], capture_output=True, text=True, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stderr.rsplit("MODULES ", 1)[1])


# The dependencies doing their own work (a pydantic model validated, as the benchmark's
# reference app's dependencies would): what they load is theirs, whatever their version
# (pydantic 2.14 loads hashlib there, 2.13 does not); only fleetspec's own imports count.
DEPENDENCIES_AT_WORK = """
import json as _json, sys
before = set(sys.modules)
import typer, yaml, rich.console, pydantic
class Model(pydantic.BaseModel):
    name: pydantic.StrictStr
    count: int = pydantic.Field(ge=0)
Model.model_validate({"name": "x", "count": 1})
sys.stdout.write(_json.dumps(sorted(set(sys.modules) - before)))
"""


@functools.cache
def dependency_modules() -> set[str]:
    proc = subprocess.run([sys.executable, "-c", DEPENDENCIES_AT_WORK], capture_output=True, text=True, check=True)
    return set(json.loads(proc.stdout))


def unwanted(modules: list[str], prefixes: tuple[str, ...]) -> list[str]:
    theirs = dependency_modules()
    return [m for m in modules if any(m == p or m.startswith(p + ".") for p in prefixes) and m not in theirs]


def test_validate_imports_only_what_validation_needs():
    report = loaded("validate", str(QUICKSTART))
    assert "fleetspec.spec.model" in report["modules"]  # it did validate
    assert unwanted(report["modules"], NOT_FOR_VALIDATE) == []
    # quickstart has no site Slurm settings: no hatch module is loaded, no parameter list read
    assert unwanted(report["modules"], SITE_HATCHES) == []
    assert report["slurm_parameters_read"] == 0
    # a valid spec prints one plain line, written without Rich (fleetspec/console.py)
    assert [m for m in report["modules"] if m == "rich" or m.startswith("rich.")] == []
    # quickstart's nodes run Ubuntu: the EL package catalog is not read (fleetspec/packages.py)
    assert "fleetspec.catalog.el" not in report["modules"]
    # the catalog comes from its snapshot, not from parsing its YAML (tests/test_catalog_snapshot.py)
    assert report["catalog_from_snapshot"]
    # no pydantic plugin scan over every installed distribution (fleetspec/spec/model.py, _Model)
    assert not report["plugins_scanned"]
    # Each dataclass costs a start ~4-6 M instructions on Python 3.11 (six generated methods
    # compiled): validate makes the IR's and two that need a dataclass (Release keeps facts
    # out of comparisons, SourceMap is filled in place); value records elsewhere on its path
    # (findings, rules, results, catalog facts) are NamedTuples.
    ir = {n for n in report["dataclasses"] if n.startswith("fleetspec.compile.ir.")}
    assert len(ir) == 20  # one per IR type (CpuNode: #29, SlurmTenant: #25 item 7, SlurmConverge: #30 item 2,
    # Adoption: #39 item 3)
    assert sorted(set(report["dataclasses"]) - ir) == ["fleetspec.catalog.Release", "fleetspec.spec.loader.SourceMap"]


def test_help_and_version_load_no_compiler():
    assert unwanted(loaded("--help")["modules"], COMPILER) == []
    assert unwanted(loaded("version")["modules"], COMPILER + NOT_FOR_VALIDATE + ("fleetspec.compile", "fleetspec.pipeline")) == []


def test_a_command_from_a_feature_package_still_runs_and_lists_its_help():
    report = loaded("state", "--help")
    assert "fleetspec.state.cli" in report["modules"]
    assert unwanted(report["modules"], ("fleetspec.plan", "fleetspec.apply", "fleetspec.lab")) == []



def test_help_lists_every_command_once_in_order():
    from typer.testing import CliRunner

    from fleetspec.cli import COMMANDS, app

    result = CliRunner().invoke(app, ["--help"])
    section = result.output.split("Commands:\n", 1)[1]
    assert [line.split()[0] for line in section.splitlines() if line.strip()] == list(COMMANDS)
