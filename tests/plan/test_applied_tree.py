"""A plan reads the old side of the rendered files from the tree the last complete apply
rendered (no second render of the applied fleet), and only when that tree is exactly
the applied fleet's."""

from __future__ import annotations

from pathlib import Path

from fleetspec.plan import plan_against_state
from fleetspec.render import render_all
from fleetspec.render.writer import write_tree
from fleetspec.state import StateStore
from fleetspec.state.build import APPLIED_MARK, applied_tree, build_dir, mark_applied
from tests.plan.conftest import MUSEUM, QUICKSTART, SPECS, compiled


def _applied(tmp_path: Path, fleet) -> StateStore:
    store = StateStore(tmp_path / "state", fleet.name)
    with store.lock("test apply"):
        write_tree(render_all(fleet), build_dir(store))  # as apply renders before its playbooks
        mark_applied(store, store.record_applied(fleet, "applied").serial)
    return store


def test_the_plan_from_the_applied_tree_is_the_plan_from_a_second_render(tmp_path: Path) -> None:
    old = compiled(QUICKSTART)
    store = _applied(tmp_path, old)
    state = store.read()
    tree = applied_tree(store, state)
    assert tree == render_all(old)
    for variant in ("driver-bump.yaml", "nccl-bump.yaml", "maxtime.yaml", "nodes-added.yaml", "gpu-swap.yaml"):
        new = compiled(SPECS / variant)
        planned = plan_against_state(new, state, old_files=tree)
        assert not planned.empty
        assert planned.to_dict() == plan_against_state(new, state).to_dict()
    museum = _applied(tmp_path / "museum", compiled(MUSEUM))
    assert applied_tree(museum, museum.read()) == render_all(compiled(MUSEUM))


def test_a_tree_that_is_not_the_applied_fleets_is_not_used(tmp_path: Path) -> None:
    old = compiled(MUSEUM)
    store = _applied(tmp_path, old)
    with store.lock("a later apply"):
        store.record_wave(old, [old.nodes[0].hostname], "wave 1")  # serial moves on, records appear
    assert applied_tree(store, store.read()) is None
    store = _applied(tmp_path / "again", old)
    (build_dir(store) / APPLIED_MARK).write_text("999\n")
    assert applied_tree(store, store.read()) is None
    write_tree(render_all(compiled(SPECS / "driver-bump.yaml")), build_dir(store))  # the next apply's tree
    assert applied_tree(store, store.read()) is None  # replaced as a whole: no mark
