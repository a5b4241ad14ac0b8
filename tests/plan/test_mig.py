"""A MIG geometry change is a disruption (#46): the GPU must be idle to remake its instances
(drain), and turning MIG mode on or off resets the GPU (drain and reboot); waved like a
driver change, never more than max_unavailable of a partition at once."""

from __future__ import annotations

from fleetspec.compile.ir import Fleet
from fleetspec.plan import make_plan
from fleetspec.plan.model import Disruption
from tests.plan.conftest import QUICKSTART, compiled_text

D = Disruption


def _with_mig(mig: str) -> Fleet:
    text = QUICKSTART.read_text()
    return compiled_text(text.replace("gpu: {model: h100-sxm, count: 8}", f"gpu: {{model: h100-sxm, count: 8, mig: {mig}}}"))


def _nodes(plan) -> dict:
    return {c.host: c for c in plan.changes if c.host is not None}


def test_turning_mig_on_drains_and_reboots_every_node_in_waves(quickstart: Fleet) -> None:
    new = _with_mig("all-1g.10gb")
    plan = make_plan(new, quickstart, max_unavailable="25%")
    nodes = _nodes(plan)
    assert sorted(nodes) == sorted(n.hostname for n in quickstart.nodes)
    change = nodes["h100-001"]
    assert change.disruption is D.DRAIN_REBOOT
    assert change.before == {"mig": "MIG off"} and change.after == {"mig": "7x1g.10gb"}
    assert "MIG mode changes" in change.reason and "slurmd restarts" in change.reason
    assert len(plan.waves) > 1 and len(plan.waves[0].hosts) == 1  # a canary first
    assert all(len(w.hosts) <= 2 for w in plan.waves)  # 25% of the partition's 8
    assert plan.summary()["nodes"] == {"drain-reboot": 8}


def test_a_new_geometry_on_mig_nodes_drains_without_reboot() -> None:
    old = _with_mig("all-1g.10gb")
    new = _with_mig("{1g.10gb: 2, 2g.20gb: 1, 3g.40gb: 1}")
    change = _nodes(make_plan(new, old))["h100-005"]
    assert change.disruption is D.DRAIN
    assert change.before == {"mig": "7x1g.10gb"} and change.after == {"mig": "2x1g.10gb,1x2g.20gb,1x3g.40gb"}


def test_the_same_geometry_is_no_change() -> None:
    fleet = _with_mig("all-balanced")
    assert make_plan(_with_mig("all-balanced"), fleet).empty


def test_a_time_slicing_change_is_planned_without_disruption() -> None:
    from tests.kubernetes.test_mig import SHARED, SPEC

    old, new = compiled_text(SPEC), compiled_text(SHARED)
    change = _nodes(make_plan(new, old))["a100-train-01"]
    assert change.disruption is D.NONE
    assert change.before == {"sharing": "not shared"} and change.after == {"sharing": "4 replicas"}
