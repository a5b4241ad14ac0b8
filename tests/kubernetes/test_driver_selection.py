"""Every GPU node the cluster holds gets its driver from exactly one object, at its stack's
version: an NVIDIADriver per NVIDIA stack, a DeviceConfig per AMD stack.

The check works from what a cluster would see: the labels fleetspec puts on each node, and
every driver object the layer deploys, including the ones the charts would create on their
own (the ClusterPolicy's driver, the NVIDIADriver and DeviceConfig default CRs) unless the
values turn them off. Node-to-object matching is Kubernetes' map selector semantics.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from fleetspec.compile.ir import Fleet, Node
from fleetspec.pipeline import compile_file
from fleetspec.render.kubernetes import KubernetesLayer, kubernetes_resources

from . import fleets
from .conftest import VARIANTS

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*.yaml"))


@dataclasses.dataclass(frozen=True)
class DriverObject:
    what: str
    vendor: str
    selector: Mapping[str, str]  # {} selects every node of the vendor
    version: str | None  # None: the chart's default, or the node's inbox module
    installs: bool


def _owned_gpu_nodes(fleet: Fleet) -> list[Node]:
    """Nodes the cluster holds, decided here from the spec's words, not by the renderer."""
    slinky = fleet.slurm is not None and fleet.slurm.mode == "slinky"
    return [n for n in fleet.nodes if n.scheduler == "kubernetes" or slinky]


def _driver_objects(layer: KubernetesLayer) -> list[DriverObject]:
    releases = {r.name: r.values for r in layer.releases}
    objs: list[DriverObject] = []
    if "gpu-operator" in releases:
        driver: dict[str, Any] = releases["gpu-operator"].get("driver", {})
        crd = driver.get("nvidiaDriverCRD", {})
        enabled = driver.get("enabled", True)  # chart default: true
        if enabled and not crd.get("enabled", False):
            objs.append(DriverObject("ClusterPolicy driver", "nvidia", {},
                                     driver.get("version"), True))
        if enabled and crd.get("enabled", False) and crd.get("deployDefaultCR", True):
            objs.append(DriverObject("default NVIDIADriver", "nvidia",
                                     crd.get("nodeSelector", {}), driver.get("version"), True))
    if "amd-gpu-operator" in releases:
        default_cr = releases["amd-gpu-operator"].get("crds", {}).get("defaultCR", {})
        if default_cr.get("install", True):
            objs.append(DriverObject("default DeviceConfig", "amd", {}, None, False))
    for m in layer.manifests:
        if m.kind == "NVIDIADriver":
            spec = m.body["spec"]
            objs.append(DriverObject(f"NVIDIADriver/{m.name}", "nvidia",
                                     spec.get("nodeSelector", {}), spec.get("version"), True))
        elif m.kind == "DeviceConfig":
            spec = m.body["spec"]
            drv = spec.get("driver", {})
            installs = drv.get("enable", True)
            objs.append(DriverObject(f"DeviceConfig/{m.name}", "amd", spec.get("selector", {}),
                                     drv.get("version") if installs else None, installs))
    return objs


def _selects(obj: DriverObject, labels: Mapping[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in obj.selector.items())


def driver_problems(fleet: Fleet, layer: KubernetesLayer | None = None) -> list[str]:
    k8s = fleet.kubernetes
    assert k8s is not None
    layer = layer or kubernetes_resources(fleet)
    labels = {n.hostname: n.labels for n in layer.node_labels}
    objs = _driver_objects(layer)
    problems = []
    for node in _owned_gpu_nodes(fleet):
        vendor = node.gpu.vendor
        if vendor == "nvidia" and k8s.gpu_operator is None:
            continue  # no operator: nothing deploys drivers (or device plugins)
        if vendor == "amd" and k8s.amd_gpu_operator_version is None and not any(
                o.vendor == "amd" for o in objs):
            continue
        stack = fleet.stack(node.stack)
        assert stack is not None
        mine = [o for o in objs if o.vendor == vendor and _selects(o, labels.get(node.hostname, {}))]
        host_managed = (vendor == "nvidia" and k8s.gpu_operator.driver == "host") or (  # type: ignore[union-attr]
            vendor == "amd" and k8s.amd_driver == "host")
        if host_managed:
            installing = [o.what for o in mine if o.installs]
            if installing:
                problems.append(f"{node.hostname}: host-installed driver, yet {installing} install one")
            if vendor == "amd" and len(mine) != 1:
                problems.append(f"{node.hostname}: {len(mine)} DeviceConfigs select it: "
                                f"{[o.what for o in mine]}")
            continue
        if len(mine) != 1:
            problems.append(f"{node.hostname} ({node.stack}): selected by {len(mine)} driver "
                            f"objects {[o.what for o in mine]}, expected exactly one")
            continue
        want = stack.driver if vendor == "nvidia" else stack.amdgpu
        if mine[0].version != want:
            problems.append(f"{node.hostname} ({node.stack}): {mine[0].what} installs "
                            f"{mine[0].version}, its stack pins {want}")
    return problems


def _fleets() -> dict[str, Fleet]:
    out = {f"example:{p.stem}": compile_file(p).fleet for p in EXAMPLES}
    out.update({f"variant:{name}": make() for name, make in VARIANTS.items()})
    out["variant:slinky-two-nvidia-stacks"] = fleets.slinky(fleets.two_nvidia_stacks(fleets.museum()))
    out["variant:slinky-host-driver"] = fleets.slinky(fleets.host_driver(fleets.museum()))
    return {k: v for k, v in out.items() if v is not None and v.kubernetes is not None}


FLEETS = _fleets()


@pytest.mark.parametrize("name", sorted(FLEETS))
def test_every_cluster_gpu_node_gets_exactly_its_stacks_driver(name: str) -> None:
    assert driver_problems(FLEETS[name]) == []


def test_the_check_fails_on_a_cluster_policy_driver_for_two_stacks() -> None:
    """What the renderer did before: one ClusterPolicy driver for every NVIDIA node of a
    Slinky cluster whose Slurm hosts run other stacks."""
    fleet = fleets.slinky(fleets.museum())
    real = kubernetes_resources(fleet)
    policy_release = next(r for r in real.releases if r.name == "gpu-operator")
    broken_values = {**policy_release.values, "driver": {"enabled": True, "version": "580.173.02"}}
    broken = dataclasses.replace(
        real,
        releases=tuple(dataclasses.replace(r, values=broken_values) if r is policy_release else r
                       for r in real.releases),
        manifests=tuple(m for m in real.manifests if m.kind != "NVIDIADriver"),
    )
    problems = driver_problems(fleet, broken)
    assert any("h100-001 (hopper-cu13): ClusterPolicy driver installs 580.173.02" in p
               for p in problems), problems


def test_slinky_hosts_carry_their_stack_and_are_in_the_cluster_inventory() -> None:
    fleet = fleets.slinky(fleets.museum())
    labels = {n.hostname: n.labels for n in kubernetes_resources(fleet).node_labels}
    assert labels["h100-001"]["fleetspec.io/stack"] == "hopper-cu13"
    assert labels["a100-01"]["fleetspec.io/stack"] == "ampere-cu12"
    # No Kueue flavor or Volcano node group may claim a Slinky host's GPUs.
    assert "volcano.sh/nodegroup-name" not in labels["h100-001"]
