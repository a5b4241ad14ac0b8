"""Waves: canary first, never more than max_unavailable of any partition out at once."""

from __future__ import annotations

import dataclasses

import pytest

from fleetspec.compile.ir import Fleet
from fleetspec.plan import make_plan, plan_waves
from fleetspec.plan.waves import budget, parse_max_unavailable
from tests.plan.conftest import variant


def out_per_partition(fleet: Fleet, hosts: tuple[str, ...]) -> dict[str, int]:
    return {p.name: len(set(p.nodes) & set(hosts)) for p in fleet.partitions}


@pytest.mark.parametrize("max_unavailable", ["25%", "50%", 1, 3, "100%"])
def test_waves_respect_every_partitions_budget(quickstart: Fleet, max_unavailable) -> None:
    new = variant("driver-bump")
    plan = make_plan(new, quickstart, max_unavailable=max_unavailable)
    assert sorted(h for w in plan.waves for h in w.hosts) == sorted(n.hostname for n in new.nodes)
    for wave in plan.waves:
        for partition, out in out_per_partition(new, wave.hosts).items():
            assert out <= budget(max_unavailable, len(new.partition(partition).nodes)), (wave, partition)
    assert plan.waves[0].canary and len(plan.waves[0].hosts) == 1
    assert not any(w.canary for w in plan.waves[1:])


def test_debug_partition_is_never_emptied(quickstart: Fleet) -> None:
    plan = make_plan(variant("driver-bump"), quickstart, max_unavailable="50%", canary=0)
    for wave in plan.waves:
        assert not {"h100-001", "h100-002"} <= set(wave.hosts)


def test_racks_are_not_mixed_within_a_wave(quickstart: Fleet) -> None:
    plan = make_plan(variant("driver-bump"), quickstart, max_unavailable=3)
    assert all(len(w.racks) == 1 for w in plan.waves)
    whole = make_plan(variant("driver-bump"), quickstart, max_unavailable="100%", canary=0)
    assert whole.waves[0].racks == ("r01", "r02")  # both racks fit whole; debug's budget defers one node


def test_only_disruptive_nodes_are_in_waves(quickstart: Fleet) -> None:
    bigger = dataclasses.replace(quickstart, nodes=tuple(dataclasses.replace(n, memory_gb=4096)
                                                        for n in quickstart.nodes))
    plan = make_plan(bigger, quickstart)
    assert len(plan.changes) > 8 and plan.waves == ()
    assert plan_waves(plan, bigger) == ()


def test_canary_zero_and_canary_larger_than_budget(quickstart: Fleet) -> None:
    plan = make_plan(variant("nccl-bump"), quickstart)
    assert plan_waves(plan, variant("nccl-bump"), canary=0)[0].canary is False
    assert len(plan_waves(plan, variant("nccl-bump"), canary=5, max_unavailable=2)[0].hosts) == 2
    first = plan_waves(plan, variant("nccl-bump"), canary=5, max_unavailable="50%")[0]
    # nvidia-hopper may lose 4, but debug (h100-[001-002]) only 1, and rack r02 does not fit whole.
    assert first.canary and first.hosts == ("h100-001", "h100-003", "h100-004")


@pytest.mark.parametrize("bad", ["0", 0, "-1", "0%", "150%", "lots", "%"])
def test_bad_max_unavailable_is_refused(bad) -> None:
    with pytest.raises(ValueError, match="max_unavailable"):
        parse_max_unavailable(bad)


def test_budget_rounds_down_but_never_to_zero() -> None:
    assert budget("25%", 8) == 2 and budget("25%", 2) == 1 and budget(3, 2) == 3 and budget("10%", 1) == 1


def test_nodes_drained_by_someone_else_leave_the_waves_and_are_named(quickstart: Fleet) -> None:
    """hold_back: the canary node is under an operator's drain; the plan names it with the
    reason, plans the waves again over the others (a canary still goes first) and leaves
    its changes pending, as a restriction does."""
    from io import StringIO

    from rich.console import Console

    from fleetspec.plan import hold_back
    from fleetspec.plan.render_text import print_plan

    plan = make_plan(variant("driver-bump"), quickstart)
    canary = plan.waves[0].hosts[0]
    held = hold_back(plan, {canary: "RMA case 4711: do not resume", "not-in-any-wave": "x"})
    assert held.held == ((canary, "RMA case 4711: do not resume"),)
    assert canary not in {h for w in held.waves for h in w.hosts}
    assert held.waves[0].canary and len(held.waves[0].hosts) == 1
    assert sorted(h for w in held.waves for h in w.hosts) == sorted(
        h for w in plan.waves for h in w.hosts if h != canary)
    assert held.skipped == (canary,) and "drained by someone else" in (held.restriction or "")
    assert held.to_dict()["held"] == [{"node": canary, "reason": "RMA case 4711: do not resume"}]
    shown = StringIO()
    print_plan(held, Console(file=shown, width=300))
    assert f"{canary} (RMA case 4711: do not resume)" in shown.getvalue()
    assert hold_back(plan, {}) is plan
