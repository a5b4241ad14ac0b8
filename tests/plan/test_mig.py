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


def _model(model: str) -> Fleet:
    text = QUICKSTART.read_text().replace("gpu: {model: h100-sxm, count: 8}", f"gpu: {{model: {model}, count: 8}}")
    return compiled_text(text if model.startswith("h100") else text.replace("nvidia-hopper: {", "nvidia-ampere: {"))


def test_a_state_from_before_the_a100_40gb_was_its_own_model_plans_no_replacement() -> None:
    """Before #46 `model: a100-40gb` resolved to the catalog's a100, so a state applied then
    says a100 for those boards. The same spec now compiles to a100-40gb: the same boards, whose
    GRES type (a100) stays; the plan changes their labels and features and replaces nothing."""
    old, new = _model("a100"), _model("a100-40gb")
    plan = make_plan(new, old)
    change = _nodes(plan)["h100-001"]
    assert change.before == {"gpu": "a100"} and change.after == {"gpu": "a100-40gb"}
    assert change.disruption is D.RECONFIGURE and "the node stays" in change.reason
    assert "replace" not in plan.summary()["nodes"]
    # a different board is still new hardware
    assert _nodes(make_plan(_model("a100-40gb"), _model("h100-sxm")))["h100-001"].disruption is D.REPLACE
    assert _nodes(make_plan(_model("a100"), _model("a100-40gb")))["h100-001"].disruption is D.REPLACE
