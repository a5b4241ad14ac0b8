"""The plan's old side reuses a renderer's files where the old fleet equals the new one in
every field that renderer read (fleetspec/render/traced.py): it must be render_all, file for
file, whatever changed between the two fleets."""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from fleetspec.compile.ir import Fleet
from fleetspec.pipeline import compile_file, compile_text
from fleetspec.render import render_all
from fleetspec.render.slurm import render_slurm
from fleetspec.render.traced import files_of, render_beside, render_traced
from tests.conftest import EXAMPLES

NAMES = ("quickstart", "museum", "inference", "rocky9")


def _fleet(name: str) -> Fleet:
    fleet = compile_file(EXAMPLES / f"{name}.yaml").fleet
    assert fleet is not None
    return fleet


@pytest.fixture(scope="module")
def fleets() -> dict[str, Fleet]:
    return {name: _fleet(name) for name in NAMES}


def _bumped(name: str, old: str, new: str) -> Fleet:
    text = (EXAMPLES / f"{name}.yaml").read_text()
    assert old in text, f"{name}.yaml no longer pins {old}: pick another value"
    fleet = compile_text(text.replace(old, new), f"{name}.yaml").fleet
    assert fleet is not None
    return fleet


def test_traced_render_is_render_all(fleets: dict[str, Fleet]) -> None:
    for fleet in fleets.values():
        assert files_of(render_traced(fleet)) == render_all(fleet)
        assert files_of(render_traced(fleet, fleet_json=False)) == render_all(fleet, fleet_json=False)


@pytest.mark.parametrize(("new", "old"), list(itertools.permutations(NAMES, 2)))
def test_the_old_side_is_render_all_between_different_fleets(fleets: dict[str, Fleet], new: str, old: str) -> None:
    traced = render_traced(fleets[new], fleet_json=False)
    assert render_beside(fleets[old], fleets[new], traced) == render_all(fleets[old], fleet_json=False)


def test_a_driver_bump_reuses_the_slurm_files_and_renders_the_rest(fleets: dict[str, Fleet]) -> None:
    old = fleets["quickstart"]
    new = _bumped("quickstart", 'driver: "580.95.05"', 'driver: "580.126.09"')
    assert [f.name for f in dataclasses.fields(Fleet) if getattr(old, f.name) != getattr(new, f.name)] == ["stacks"]
    traced = render_traced(new, fleet_json=False)
    reads = {t.renderer: t.reads for t in traced}
    assert "stacks" not in reads[render_slurm] and {"nodes", "partitions", "slurm"} <= reads[render_slurm]
    before = render_beside(old, new, traced)
    assert before == render_all(old, fleet_json=False)
    assert before != files_of(traced)  # the tuple's own files moved


def test_a_read_through_a_method_is_recorded(fleets: dict[str, Fleet]) -> None:
    fleet = fleets["quickstart"]
    host = fleet.nodes[0].hostname
    seen = []

    def renderer(f: Fleet) -> dict:
        seen.append(f.node(host))  # Fleet.node reads nodes through its cached index
        return {}

    (traced,) = [t for t in _traced_with(fleet, renderer)]
    assert seen == [fleet.nodes[0]] and traced.reads == frozenset({"nodes"})


def _traced_with(fleet: Fleet, renderer):  # type: ignore[no-untyped-def]
    import fleetspec.render.traced as traced_module

    original = traced_module.renderers
    traced_module.renderers = lambda fleet_json=True: (renderer,)
    try:
        return render_traced(fleet)
    finally:
        traced_module.renderers = original
