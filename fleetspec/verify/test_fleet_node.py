"""Does each host run its partition's stack tuple? A pytest-testinfra module.

    pytest --pyargs fleetspec.verify.test_fleet_node --fleet-spec fleet.yaml --hosts ssh://node1,ssh://node2
    pytest --pyargs fleetspec.verify.test_fleet_node --fleet-spec fleet.yaml \
        --hosts 'ansible://all' --ansible-inventory build/ansible/inventory.yml

One test per component and host: drift fails, a warning (a shadow NCCL, an unheld
package) passes with a pytest warning, a component the node does not carry (CUDA on a
Kubernetes node, ROCm on an NVIDIA node) is skipped with the reason. The comparison is
``fleetspec.verify.compare``, the same code as ``fleetspec verify``.
"""

from __future__ import annotations

import warnings

import pytest

from fleetspec.compile.ir import Fleet
from fleetspec.verify.compare import NodeReport, Status
from fleetspec.verify.testinfra_checks import COMPONENTS, node_report


class FleetDriftWarning(UserWarning):
    """A check that does not fail the node but needs a look (shadow libraries, holds)."""


@pytest.fixture(scope="module")
def fleet_node(host, fleet: Fleet, fleet_node_override: str | None) -> NodeReport:
    return node_report(fleet, host, fleet_node_override)


@pytest.mark.parametrize("component", COMPONENTS)
def test_component(fleet_node: NodeReport, component: str) -> None:
    checks = [c for c in fleet_node.checks
              if c.component in (component, f"{component}-shadow") or c.component.startswith(f"{component}:")]
    if not checks:
        pytest.skip(f"{fleet_node.hostname}: {component} is not checked on this node "
                    f"(stack {fleet_node.stack}, {fleet_node.scheduler})")
    drift = [c for c in checks if c.status is Status.DRIFT]
    assert not drift, "\n".join(
        f"{fleet_node.hostname}: {c.component}: expected {c.expected}, found {c.found}: {c.message}" for c in drift)
    for check in checks:
        if check.status is Status.WARNING:
            warnings.warn(FleetDriftWarning(f"{fleet_node.hostname}: {check.component}: {check.message}"), stacklevel=1)
    if all(c.status is Status.NOT_APPLICABLE for c in checks):
        pytest.skip("; ".join(f"{fleet_node.hostname}: {c.message}" for c in checks))
