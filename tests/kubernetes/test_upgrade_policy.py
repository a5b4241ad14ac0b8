"""The GPU Operator rolls the driver on Kubernetes pools (#30 item 2): each NVIDIADriver's
``upgradePolicy`` comes from the wave policy and validates against the real CRD schema."""

from __future__ import annotations

import copy

import pytest

from fleetspec.plan.waves import budget
from fleetspec.render.kubernetes.layer import WAVE_DRAIN_TIMEOUT_S, WAVE_MAX_UNAVAILABLE, upgrade_policy
from tests.k8s_schema import CrdIndex, validate_object

from . import fleets
from .test_manifests_valid import _rendered_objects


def test_each_nvidiadriver_rolls_within_the_wave_policy(crd_index: CrdIndex) -> None:
    fleet = fleets.two_nvidia_stacks(fleets.museum())
    drivers = [o for o in _rendered_objects(fleet) if o["kind"] == "NVIDIADriver"]
    assert len(drivers) >= 2
    for obj in drivers:
        pool = [n for n in fleet.nodes if n.stack == obj["metadata"]["name"]
                and (n.scheduler == "kubernetes" or (fleet.slurm is not None and fleet.slurm.mode == "slinky"))]
        policy = obj["spec"]["upgradePolicy"]
        assert policy["autoUpgrade"] is True and policy["maxUnavailable"] == WAVE_MAX_UNAVAILABLE
        assert policy["maxParallelUpgrades"] == budget(WAVE_MAX_UNAVAILABLE, len(pool))  # one wave of the pool
        assert policy["drain"] == {"enable": True, "force": False, "deleteEmptyDir": True,
                                   "timeoutSeconds": WAVE_DRAIN_TIMEOUT_S}
        assert validate_object(obj, crd_index, fleet.kubernetes.version) == []
        broken = copy.deepcopy(obj)
        broken["spec"]["upgradePolicy"]["maxParallelUpgrades"] = -1  # the schema's minimum is 0
        assert any("maxParallelUpgrades" in e for e in validate_object(broken, crd_index, fleet.kubernetes.version))


@pytest.mark.parametrize(("max_unavailable", "pool", "parallel", "unavailable"),
                         [("25%", 16, 4, "25%"), ("25%", 3, 1, "25%"), ("10%", 1000, 100, "10%"), (2, 16, 2, 2)])
def test_upgrade_policy_follows_the_plan_budget(max_unavailable, pool, parallel, unavailable) -> None:
    policy = upgrade_policy(pool, max_unavailable)
    assert policy["maxParallelUpgrades"] == parallel == budget(max_unavailable, pool)
    assert policy["maxUnavailable"] == unavailable
