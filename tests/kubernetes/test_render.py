"""The rendered kubernetes/ tree: goldens, determinism, and what must never appear."""

from __future__ import annotations

import dataclasses

import pytest
import yaml

from fleetspec.render.kubernetes import kubernetes_resources, render_kubernetes

from . import fleets


def test_museum_golden(golden) -> None:
    golden.check_tree("kubernetes/museum", render_kubernetes(fleets.museum()))


def test_museum_volcano_golden(golden) -> None:
    golden.check_tree("kubernetes/museum-volcano",
                      render_kubernetes(fleets.volcano(fleets.museum())))


def test_quickstart_renders_nothing() -> None:
    quick = fleets.compiled("quickstart")
    if quick is None:
        pytest.skip("the compiler is not importable yet")
    assert render_kubernetes(quick) == {}


def test_no_kubernetes_section_renders_nothing() -> None:
    assert render_kubernetes(dataclasses.replace(fleets.museum(), kubernetes=None)) == {}


def test_deterministic_and_sorted() -> None:
    first = render_kubernetes(fleets.museum())
    assert first == render_kubernetes(fleets.museum())
    assert list(first) == sorted(first)
    assert all(str(p).startswith("kubernetes/") for p in first)


def test_slurm_nodes_never_appear() -> None:
    fleet = fleets.museum()
    slurm_hosts = {n.hostname for n in fleet.nodes if n.scheduler == "slurm"}
    slurm_parts = {p.name for p in fleet.partitions if p.scheduler == "slurm"}
    for variant in (fleet, fleets.volcano(fleet), fleets.no_tenants(fleet)):
        text = "\n".join(render_kubernetes(variant).values())
        assert not any(h in text for h in slurm_hosts)
        assert not any(f"name: {p}\n" in text or f"partition={p}\n" in text
                       for p in slurm_parts)


def test_without_tenants_each_partition_gets_a_queue() -> None:
    layer = kubernetes_resources(fleets.no_tenants(fleets.museum()))
    cqs = {m.name: m.body["spec"]["resourceGroups"] for m in layer.manifests
           if m.kind == "ClusterQueue"}
    assert {n: g[0]["flavors"][0]["resources"][0]["nominalQuota"] for n, g in cqs.items()} \
        == {"amd-cdna4": 16, "nvidia-blackwell": 104}


def test_unassigned_gpus_stay_in_the_cohort() -> None:
    fleet = fleets.museum()
    one = dataclasses.replace(fleet, kubernetes=dataclasses.replace(
        fleet.kubernetes, tenants=fleet.kubernetes.tenants[:1]))  # research: 64 of 104
    cohort = next(m for m in kubernetes_resources(one).manifests if m.kind == "Cohort")
    quotas = {f["name"]: f["resources"][0]["nominalQuota"]
              for g in cohort.body["spec"]["resourceGroups"] for f in g["flavors"]}
    assert quotas == {"amd-cdna4": 16, "nvidia-blackwell": 40}


def test_workload_api_is_a_prerequisite() -> None:
    layer = kubernetes_resources(fleets.workload_api(fleets.museum()))
    (pre,) = layer.prerequisites
    assert pre.feature_gates == ("GenericWorkload=true",)
    assert pre.components == ("kube-apiserver", "kube-controller-manager", "kube-scheduler")
    readme = render_kubernetes(fleets.workload_api(fleets.museum()))
    assert "GenericWorkload" in next(v for k, v in readme.items() if k.name == "README.md")
    assert kubernetes_resources(fleets.museum()).prerequisites == ()


def test_amd_driver_follows_the_tuple_and_host_mode() -> None:
    fleet = fleets.museum()
    stacks = tuple(dataclasses.replace(s, amdgpu="30.10.1") if s.name == "cdna4-rocm7" else s
                   for s in fleet.stacks)
    pinned = dataclasses.replace(fleet, stacks=stacks)

    def device_config(f):
        return next(m for m in kubernetes_resources(f).manifests if m.kind == "DeviceConfig")

    assert device_config(pinned).body["spec"]["driver"] == {"enable": True,
                                                            "version": "30.10.1"}
    assert device_config(fleets.host_driver(pinned)).body["spec"]["driver"] == {"enable": False}


def test_node_label_values_are_valid_label_values() -> None:
    fleet = fleets.museum()
    stacks = tuple(dataclasses.replace(s, nccl="2.28.3-1+cuda13.0") if s.name ==
                   "blackwell-cu13" else s for s in fleet.stacks)
    layer = kubernetes_resources(dataclasses.replace(fleet, stacks=stacks))
    labels = next(n for n in layer.node_labels if n.hostname == "b200-01").labels
    assert labels["fleetspec.io/nccl"] == "2.28.3-1_cuda13.0"


def test_manifests_parse_back_to_the_layer() -> None:
    fleet = fleets.museum()
    layer = kubernetes_resources(fleet)
    parsed = [d for p, t in render_kubernetes(fleet).items() if p.parts[1] == "manifests"
              for d in yaml.safe_load_all(t) if d]
    assert sorted(map(repr, parsed)) == sorted(repr(dict(m.body)) for m in layer.manifests)
