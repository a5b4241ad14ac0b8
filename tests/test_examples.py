"""Every example validates and renders; fleet.json of each is a golden file."""

import pytest

from fleetspec.pipeline import compile_file
from fleetspec.render import render_all
from tests.conftest import EXAMPLES

EXAMPLE_FILES = sorted(EXAMPLES.glob("*.yaml"))


def test_the_examples_exist():
    names = {p.name for p in EXAMPLE_FILES}
    assert {"quickstart.yaml", "museum.yaml"} <= names


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=lambda p: p.stem)
def test_example_validates_without_errors(path):
    result = compile_file(path)
    assert result.valid, [(f.rule, f.line, f.message) for f in result.located()]


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=lambda p: p.stem)
def test_example_renders_every_layer(path):
    files = render_all(compile_file(path).fleet)
    tops = {p.parts[0] for p in files}
    assert "fleet.json" in tops
    assert "ansible" in tops
    if compile_file(path).fleet.slurm is not None:
        assert "slurm" in tops


@pytest.mark.parametrize("name", ["quickstart", "museum"])
def test_fleet_json_golden(name, golden):
    fleet = compile_file(EXAMPLES / f"{name}.yaml").fleet
    golden.check_text(f"fleet-json/{name}.json", fleet.to_json())
