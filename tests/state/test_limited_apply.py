"""A limited apply (``--lab``, ``--limit``) that finished reads as finished (issue #28
item 3): the state records the nodes it applied and the control-plane parts it converged,
names the nodes it left without calling the apply interrupted, and the next plan shows
neither slurm.conf, gres.conf, the group_vars nor the partitions again while they render
the same. Against both backends (a directory and PostgreSQL)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fleetspec.compile.ir import Fleet
from fleetspec.plan import converged_parts, plan_against_state
from fleetspec.render import render_all
from fleetspec.state import LimitedApply, StateBackend, StateError
from tests.state.conftest import tamper

LAB = ["h100-001", "h100-002"]


def _limited(store: StateBackend, fleet: Fleet, hosts: set[str]) -> None:
    """What apply --lab writes: the nodes' records, then the finished limited apply."""
    with store.lock("apply"):
        store.record_wave(fleet, LAB, "converged h100-[001-002] (the lab's hosts)")
        left = tuple(n.hostname for n in fleet.nodes if n.hostname not in LAB)
        store.record_limited(LimitedApply("the lab's hosts", left, converged_parts(fleet, render_all(fleet), hosts)),
                             "limited apply finished")


def test_a_finished_limited_apply_is_not_in_progress(store: StateBackend, fleet: Fleet) -> None:
    _limited(store, fleet, {"ctl-01", *LAB})
    state = store.read()
    assert not state.in_progress and sorted(state.nodes) == LAB
    assert state.limited is not None and state.limited.unapplied == tuple(f"h100-00{i}" for i in range(3, 9))
    with store.lock("apply"):  # a later apply moving nodes is unfinished until it says so
        store.record_wave(fleet, ["h100-003"], "wave 1")
    assert store.read().in_progress and store.read().limited is None
    with store.lock("apply"):
        store.record_applied(fleet, "all")
    assert store.read().limited is None and not store.read().in_progress


def test_the_next_plan_lists_only_the_nodes_left(store: StateBackend, fleet: Fleet) -> None:
    _limited(store, fleet, {"ctl-01", *LAB})
    plan = plan_against_state(fleet, store.read())
    targets = sorted(c.target for c in plan.changes)
    # slurmdbd.conf lives on the accounting host (db-01), which the lab does not have
    assert targets == [f"node:h100-00{i}" for i in range(3, 9)] + ["slurm:slurmdbd.conf"], targets


def test_without_the_controller_the_slurm_files_stay_pending(store: StateBackend, fleet: Fleet) -> None:
    _limited(store, fleet, set(LAB))  # --limit h100-00[1-2]: the controller got nothing
    targets = {c.target for c in plan_against_state(fleet, store.read()).changes}
    assert {"slurm:slurm.conf", "slurm:gres.conf"} <= targets and any(t.startswith("partition:") for t in targets)
    assert not any(t.startswith("ansible:") for t in targets)  # the playbooks ran with these inputs


def test_a_file_that_renders_differently_since_is_planned_again(store: StateBackend, fleet: Fleet) -> None:
    _limited(store, fleet, {"ctl-01", *LAB})
    tamper(store, lambda d: d["limited"]["converged"].update({"slurm/slurm.conf": "0" * 64}))
    targets = {c.target for c in plan_against_state(fleet, store.read()).changes}
    assert "slurm:slurm.conf" in targets


def test_a_malformed_record_is_refused(store: StateBackend, fleet: Fleet) -> None:
    _limited(store, fleet, {"ctl-01", *LAB})
    tamper(store, lambda d: d["limited"].update(unapplied="h100-003"))
    with pytest.raises(StateError, match="'limited' is malformed"):
        store.read()


def test_state_show_says_finished_and_what_is_left(file_store: StateBackend, fleet: Fleet, tmp_path: Path) -> None:
    _limited(file_store, fleet, {"ctl-01", *LAB})
    show = [sys.executable, "-m", "fleetspec.cli", "state", "show", fleet.name, "--state", str(file_store.location)]
    text = " ".join(subprocess.run(show, capture_output=True, text=True, env={**os.environ, "COLUMNS": "200"},
                                   check=True).stdout.split())
    assert "did not finish" not in text and "2 node(s) applied" in text
    assert "the last apply finished, limited to the lab's hosts: 6 node(s) with changes not applied yet: " \
           "h100-[003-008]" in text
    data = json.loads(subprocess.run([*show, "--format", "json"], capture_output=True, text=True, check=True).stdout)
    assert data["in_progress_nodes"] == [] and data["limited"]["unapplied"][0] == "h100-003"
    listed = subprocess.run([sys.executable, "-m", "fleetspec.cli", "state", "list", "--state",
                             str(file_store.location), "--format", "json"], capture_output=True, text=True, check=True)
    assert json.loads(listed.stdout)["fleets"][0]["in_progress"] is False
