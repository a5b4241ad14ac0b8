"""Each kind of change gets the disruption class an SRE expects, on exactly the nodes it touches."""

from __future__ import annotations

import dataclasses

from fleetspec.compile.ir import Fleet
from fleetspec.plan import make_plan
from fleetspec.plan.model import Action, Disruption
from tests.plan.conftest import MUSEUM, compiled_text, variant

D = Disruption


def node_changes(plan):
    return {c.host: c for c in plan.changes if c.host is not None}


def by_target(plan):
    return {c.target: c for c in plan.changes}


def test_no_changes_is_an_empty_plan(quickstart: Fleet) -> None:
    plan = make_plan(quickstart, quickstart)
    assert plan.empty and plan.waves == ()
    assert plan.summary()["changes"] == 0 and plan.summary()["max_disruption"] == "none"


def test_driver_bump_drains_and_reboots_every_node_of_the_stack(quickstart: Fleet) -> None:
    plan = make_plan(variant("driver-bump"), quickstart)
    nodes = node_changes(plan)
    assert sorted(nodes) == [n.hostname for n in quickstart.nodes]
    for c in nodes.values():
        assert c.disruption is D.DRAIN_REBOOT and c.action is Action.UPDATE
        assert c.before == {"driver": "580.95.05"} and c.after == {"driver": "580.126.09"}
        assert c.reason == "driver 580.95.05 -> 580.126.09: kernel module change, node must drain and reboot"
    assert plan.summary()["nodes"] == {"drain-reboot": 8}
    assert plan.summary()["partitions"] == {"nvidia-hopper": {"drain-reboot": 8}}
    # Stack pins do not appear in slurm.conf: no daemon restart for a driver bump.
    assert "slurm:slurm.conf" not in by_target(plan)


def test_driver_bump_touches_exactly_the_nodes_of_that_stack(museum: Fleet) -> None:
    text = MUSEUM.read_text()
    hopper = text.index("hopper-cu13:")
    bumped = text[:hopper] + text[hopper:].replace('driver: "580.95.05"', 'driver: "580.126.09"', 1)
    plan = make_plan(compiled_text(bumped), museum)
    expected = sorted(n.hostname for n in museum.nodes if n.stack == "hopper-cu13")
    assert expected and sorted(node_changes(plan)) == expected
    assert {c.disruption for c in node_changes(plan).values()} == {D.DRAIN_REBOOT}
    waved = sorted(h for w in plan.waves for h in w.hosts)
    assert waved == expected


def test_nccl_bump_drains_without_reboot(quickstart: Fleet) -> None:
    plan = make_plan(variant("nccl-bump"), quickstart)
    nodes = node_changes(plan)
    assert len(nodes) == 8
    assert {c.disruption for c in nodes.values()} == {D.DRAIN}
    assert "NCCL 2.28.3 -> 2.28.9" in nodes["h100-001"].reason and "no reboot" in nodes["h100-001"].reason
    assert plan.summary()["max_disruption"] == "drain"


def test_max_time_change_is_a_reconfigure_and_moves_no_node(quickstart: Fleet) -> None:
    plan = make_plan(variant("maxtime"), quickstart)
    changes = by_target(plan)
    assert node_changes(plan) == {} and plan.waves == ()
    partition = changes["partition:nvidia-hopper"]
    assert partition.disruption is D.RECONFIGURE
    assert partition.before == {"max_time": "2-00:00:00"} and partition.after == {"max_time": "1-00:00:00"}
    assert "MaxTime 2-00:00:00 -> 1-00:00:00" in partition.reason
    assert changes["slurm:slurm.conf"].disruption is D.RECONFIGURE
    assert plan.summary()["max_disruption"] == "reconfigure"


def test_added_nodes_are_created_and_restart_the_daemons(quickstart: Fleet) -> None:
    plan = make_plan(variant("nodes-added"), quickstart)
    nodes = node_changes(plan)
    assert sorted(nodes) == ["h100-009", "h100-010"]
    for c in nodes.values():
        assert c.action is Action.CREATE and c.disruption is D.RESTART_DAEMON
        assert c.after["tuple"]["driver"] == "580.95.05" and c.after["rack"] == "r02"
    changes = by_target(plan)
    assert changes["slurm:slurm.conf"].disruption is D.RESTART_DAEMON
    assert "NodeName" in changes["slurm:slurm.conf"].reason
    assert "+2 (h100-[009-010])" in changes["partition:nvidia-hopper"].reason
    assert plan.waves == ()  # new nodes serve nothing yet: nobody has to leave service


def test_gpu_swap_is_a_replace(quickstart: Fleet) -> None:
    plan = make_plan(variant("gpu-swap"), quickstart)
    nodes = node_changes(plan)
    assert sorted(nodes) == [f"h100-00{i}" for i in range(5, 9)]
    assert {c.disruption for c in nodes.values()} == {D.REPLACE}
    assert nodes["h100-005"].before["gpu"] == "8x h100-sxm" and nodes["h100-005"].after["gpu"] == "8x h200"


def test_removed_node_is_drained_first(quickstart: Fleet) -> None:
    reverse = make_plan(quickstart, variant("nodes-added"))
    removed = node_changes(reverse)
    assert sorted(removed) == ["h100-009", "h100-010"]
    assert {(c.action, c.disruption) for c in removed.values()} == {(Action.DELETE, D.DRAIN)}
    assert sorted(h for w in reverse.waves for h in w.hosts) == ["h100-009", "h100-010"]


def test_scheduler_change_is_a_replace_of_the_allocation_owner(quickstart: Fleet) -> None:
    moved = dataclasses.replace(quickstart, nodes=tuple(
        dataclasses.replace(n, scheduler="kubernetes") if n.hostname == "h100-008" else n for n in quickstart.nodes))
    change = node_changes(make_plan(moved, quickstart))["h100-008"]
    assert change.disruption is D.REPLACE
    assert "allocation owner slurm -> kubernetes" in change.reason and "drained and removed from slurm" in change.reason


def test_cuda_on_kubernetes_nodes_lives_in_images(museum: Fleet) -> None:
    stacks = tuple(dataclasses.replace(s, cuda="13.0.3") if s.name == "blackwell-cu13" else s for s in museum.stacks)
    plan = make_plan(dataclasses.replace(museum, stacks=stacks), museum)
    nodes = node_changes(plan)
    assert nodes and all(museum.node(h).scheduler == "kubernetes" for h in nodes)
    assert {c.disruption for c in nodes.values()} == {D.NONE}
    assert "workload images" in next(iter(nodes.values())).reason
    assert plan.waves == ()


def test_host_shape_change_restarts_slurmd(quickstart: Fleet) -> None:
    bigger = dataclasses.replace(quickstart, nodes=tuple(
        dataclasses.replace(n, memory_gb=4096) if n.rack == "r01" else n for n in quickstart.nodes))
    plan = make_plan(bigger, quickstart)
    nodes = node_changes(plan)
    assert sorted(nodes) == [f"h100-00{i}" for i in range(1, 5)]
    assert {c.disruption for c in nodes.values()} == {D.RESTART_DAEMON}
    assert by_target(plan)["slurm:slurm.conf"].disruption is D.RESTART_DAEMON


def test_kubernetes_objects_and_helm_releases_are_diffed_per_object(museum: Fleet) -> None:
    k8s = museum.kubernetes
    tenants = tuple(dataclasses.replace(t, quota=tuple((p, g * 2) for p, g in t.quota)) if t.name == "research"
                    else t for t in k8s.tenants)
    operator = dataclasses.replace(k8s.gpu_operator, version="v26.8.0")
    changed = dataclasses.replace(museum, kubernetes=dataclasses.replace(k8s, tenants=tenants, gpu_operator=operator))
    changes = by_target(make_plan(changed, museum))
    queue = [t for t in changes if t.startswith("kubernetes:ClusterQueue/")]
    assert queue == ["kubernetes:ClusterQueue/research-nvidia-blackwell-arm64"]
    assert changes[queue[0]].disruption is D.NONE
    helm = changes["helm:gpu-operator"]
    assert helm.disruption is D.RECONFIGURE and "v26.7.0 -> v26.8.0" in helm.reason
    assert not [c for c in changes.values() if c.target.startswith("node:")]


def test_unknown_rendered_files_are_still_planned() -> None:
    from pathlib import PurePosixPath

    from fleetspec.plan.files import file_changes

    old = {PurePosixPath("future/thing.conf"): "a=1\n", PurePosixPath("fleet.json"): "{}"}
    new = {PurePosixPath("future/thing.conf"): "a=2\n", PurePosixPath("fleet.json"): "{ }"}
    (change,) = file_changes(new, old)
    assert change.target == "file:future/thing.conf" and change.action is Action.UPDATE
    assert change.before["sha256"] != change.after["sha256"]


def test_first_plan_creates_everything(quickstart: Fleet) -> None:
    plan = make_plan(quickstart, None)
    assert {c.action for c in plan.changes} == {Action.CREATE}
    assert len(node_changes(plan)) == 8 and "slurm:slurm.conf" in by_target(plan)


def test_json_form_is_stable_and_complete(quickstart: Fleet) -> None:
    import json

    plan = make_plan(variant("driver-bump"), quickstart)
    data = plan.to_dict()
    assert list(data) == ["format_version", "fleet", "state_serial", "lineage", "base", "spec_digest", "settings",
                          "changes", "summary", "waves", "schedule"]
    assert json.dumps(data) == json.dumps(make_plan(variant("driver-bump"), quickstart).to_dict())
    assert data["spec_digest"].startswith("sha256:") and len(data["spec_digest"]) == 71
    assert data["summary"]["by_disruption"] == {"drain-reboot": 8, "none": 3}  # group_vars, pins .pref, .list


def test_switch_type_change_needs_an_empty_queue_not_a_restart() -> None:
    """Slurm 24.05 brings switch/nvidia_imex to Slurm-owned NVL72 racks: SwitchType changes, and
    slurm.conf(5) warns that slurmctld restarted with a new SwitchType while jobs exist may lose
    the records of all jobs. The plan says drain everything and wait, not restart."""
    from tests.slurm import fleets

    old = fleets.with_version(fleets.nvl72(), "23.11.10")
    new = fleets.with_version(fleets.nvl72(), "24.11.6")
    conf = by_target(make_plan(new, old))["slurm:slurm.conf"]
    assert "SwitchType=switch/nvidia_imex" in conf.after
    assert conf.disruption is D.DRAIN
    assert "empty queue" in conf.reason and "squeue" in conf.reason and "SwitchType" in conf.reason
    # And back: removing it is the same change.
    assert by_target(make_plan(old, new))["slurm:slurm.conf"].disruption is D.DRAIN


def test_adding_dcgm_to_a_stack_is_a_planned_change_of_its_nodes(quickstart: Fleet) -> None:
    """#24 item 11: a stack's dcgm: is part of what the nodes carry, so adding it plans them."""
    from tests.plan.conftest import QUICKSTART

    text = QUICKSTART.read_text()
    assert 'nccl: "2.28.3"' in text
    plan = make_plan(compiled_text(text.replace('nccl: "2.28.3"', 'nccl: "2.28.3"\n      dcgm: "4.5.2"', 1)),
                     quickstart)
    nodes = node_changes(plan)
    assert len(nodes) == 8 and "DCGM (none) -> 4.5.2" in nodes["h100-001"].reason


def test_a_tenant_quota_change_is_planned_as_an_accounts_change_without_disruption() -> None:
    """slurm.tenants (#25 item 7): the accounts file shows in the plan with what sacctmgr
    will change, and moves no node; slurm.conf tracks every GPU type the limits name."""
    from tests.slurm import fleets

    tenants = "    tenants:\n      - name: research\n        users: [alice]\n        quota: {{h100: {n}}}\n"
    old, new = fleets.lab_with_tenants(tenants.format(n=8)), fleets.lab_with_tenants(tenants.format(n=16))
    plan = make_plan(new, old)
    accounts = by_target(plan)["slurm:accounts.json"]
    assert accounts.disruption is D.NONE and "sacctmgr" in accounts.reason
    assert accounts.after == {"research": {"grp_tres": "gres/gpu:h100=16,gres/gpu:h200=0,gres/gpu:mi300x=0",
                                           "users": ["alice"], "groups": [], "fairshare": 1}}
    assert accounts.before["research"]["grp_tres"].startswith("gres/gpu:h100=8,") and not node_changes(plan)
    first = by_target(make_plan(new, None))
    assert "slurm:accounts.json" in first
