"""Fixtures for the Kubernetes-layer tests: the fleets and the real upstream CRD index."""

from __future__ import annotations

import pytest

from tests.conftest import require_shared
from tests.k8s_schema import CrdIndex

from . import fleets


@pytest.fixture(scope="session")
def crd_index() -> CrdIndex:
    return CrdIndex.load(require_shared("crds"))


VARIANTS = {
    "museum": lambda: fleets.museum(),
    "volcano": lambda: fleets.volcano(fleets.museum()),
    "workload-api": lambda: fleets.workload_api(fleets.museum()),
    "host-driver": lambda: fleets.host_driver(fleets.museum()),
    "two-nvidia-stacks": lambda: fleets.two_nvidia_stacks(fleets.museum()),
    "no-tenants": lambda: fleets.no_tenants(fleets.museum()),
    "slinky": lambda: fleets.slinky(fleets.museum()),
    "kai": lambda: fleets.kai(fleets.museum()),
    "dra-gpus": lambda: fleets.dra_gpus(fleets.museum()),
    "rdma-sriov": lambda: fleets.rdma_sriov(fleets.museum()),
    "named-pool": lambda: fleets.named_pool(),
    "named-pool-volcano": lambda: fleets.volcano(fleets.named_pool()),
}


@pytest.fixture(params=sorted(VARIANTS))
def variant(request: pytest.FixtureRequest):
    return request.param, VARIANTS[request.param]()
