"""The pure Kubernetes checks the rules build on: each fails on bad input, passes museum."""

from __future__ import annotations

import dataclasses

from fleetspec.compile.ir import Tenant
from fleetspec.kubernetes_checks import (
    GpuOperatorRelease,
    gang_findings,
    gpu_operator_findings,
    quota_owner_findings,
    tenant_quota_findings,
)

from . import fleets

# compat-facts.yaml gpu_operator.releases v26.7.0 / v25.3.0, as the catalog would pass them.
RELEASES = {
    "v26.7.0": GpuOperatorRelease("v26.7.0", "1.32", "1.36",
                                  ("610.57.04", "595.91.07", "580.173.02", "535.309.01"),
                                  "595.91.07"),
    "v25.3.0": GpuOperatorRelease("v25.3.0", "1.29", "1.32", (), "570.124.06"),
}


def _tenants(*tenants: Tenant):
    fleet = fleets.museum()
    return dataclasses.replace(fleet, kubernetes=dataclasses.replace(
        fleet.kubernetes, tenants=tenants))


def test_museum_is_clean() -> None:
    fleet = fleets.museum()
    assert tenant_quota_findings(fleet) == []
    assert gpu_operator_findings(fleet, RELEASES) == []
    assert gang_findings(fleet) == [] and quota_owner_findings(fleet) == []


def test_unknown_partition_and_slurm_partition() -> None:
    fleet = _tenants(Tenant("a", ("a",), (("nvidia-rubin", 8),), path=("spec", "t", 0)),
                     Tenant("b", ("b",), (("nvidia-hopper", 8),)))
    found = tenant_quota_findings(fleet)
    assert len(found) == 2
    assert "'nvidia-rubin', which does not exist" in found[0][0]
    assert found[0][1] == ("spec", "t", 0, "quota", "nvidia-rubin")
    assert "Slurm allocates" in found[1][0]


def test_quota_larger_than_partition_or_oversubscribed() -> None:
    big = tenant_quota_findings(_tenants(Tenant("a", ("a",), (("amd-cdna4", 17),))))
    assert len(big) == 1 and "asks for 17 GPUs" in big[0][0] and "has 16" in big[0][0]
    size = next(p.gpus for p in fleets.museum().partitions if p.name == "nvidia-blackwell")
    over = tenant_quota_findings(_tenants(Tenant("a", ("a",), (("nvidia-blackwell", size),)),
                                          Tenant("b", ("b",), (("nvidia-blackwell", 8),))))
    assert len(over) == 1 and f"promised {size + 8} GPUs" in over[0][0]


def test_gpu_operator_kubernetes_range_and_drivers() -> None:
    fleet = fleets.museum()
    old = dataclasses.replace(fleet, kubernetes=dataclasses.replace(
        fleet.kubernetes, gpu_operator=dataclasses.replace(fleet.kubernetes.gpu_operator,
                                                           version="v25.3.0")))
    found = gpu_operator_findings(old, RELEASES)
    assert len(found) == 1 and "supports Kubernetes 1.29-1.32, not 1.36" in found[0][0]
    two = fleets.two_nvidia_stacks(fleet)  # ampere-cu12 pins 580.95.05: no container for it
    found = gpu_operator_findings(two, RELEASES)
    assert len(found) == 1 and "'ampere-cu12' pins driver 580.95.05" in found[0][0]
    assert gpu_operator_findings(fleets.host_driver(two), RELEASES) == []  # host installs it
    assert gpu_operator_findings(fleet, {}) == []  # unknown release: another rule's job


def test_workload_api_needs_137_and_one_quota_owner() -> None:
    fleet = fleets.museum()
    api_136 = dataclasses.replace(fleet, kubernetes=dataclasses.replace(
        fleet.kubernetes, gang="workload-api"))
    assert "1.37 or newer" in gang_findings(api_136)[0][0]
    assert gang_findings(fleets.workload_api(fleet)) == []
    both = dataclasses.replace(fleet, kubernetes=dataclasses.replace(
        fleet.kubernetes, quota_owners=("kueue", "volcano")))
    assert "kueue and volcano would both hold GPU quota" in quota_owner_findings(both)[0][0]
