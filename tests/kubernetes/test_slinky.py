"""Slinky mode: the ``slurm`` chart release carries the Slurm layer's Slinky values, comes
after the operator and the node labels, and every NodeSet selects exactly its nodes."""

from __future__ import annotations

import dataclasses

import yaml

from fleetspec.render.kubernetes import kubernetes_resources, render_kubernetes
from fleetspec.render.slurm import render_slinky_values

from . import fleets


def _fleet():
    return fleets.slinky(fleets.museum())


def test_slurm_chart_release_with_the_slinky_values() -> None:
    fleet = _fleet()
    layer = kubernetes_resources(fleet)
    releases = {r.name: r for r in layer.releases}
    slurm = releases["slurm"]
    assert slurm.chart == "oci://ghcr.io/slinkyproject/charts/slurm" and slurm.repo is None
    assert slurm.version == fleet.slurm.slinky_version == releases["slurm-operator"].version
    assert slurm.namespace == "slurm"
    assert slurm.values == yaml.safe_load(render_slinky_values(fleet))
    assert "release/slurm-operator" in slurm.depends_on
    assert "Namespace/slurm" in slurm.depends_on
    names = [r.name for r in layer.releases]
    assert names.index("slurm-operator-crds") < names.index("slurm-operator") \
        < names.index("slurm")
    files = render_kubernetes(fleet)
    install = next(v for k, v in files.items() if str(k) == "kubernetes/helm/install.sh")
    assert "upgrade --install slurm oci://ghcr.io/slinkyproject/charts/slurm --version 1.2.1 " \
           "--namespace slurm --values slurm.values.yaml" in install
    values_file = next(v for k, v in files.items()
                       if str(k) == "kubernetes/helm/slurm.values.yaml")
    assert yaml.safe_load(values_file) == slurm.values


def test_every_nodeset_selects_exactly_its_nodes() -> None:
    """The labels node-labels.sh sets on Slinky hosts match each NodeSet's nodeSelector on
    exactly ``replicas`` nodes (DaemonSet scaling: one slurmd pod per matching node)."""
    fleet = _fleet()
    layer = kubernetes_resources(fleet)
    labels = {n.hostname: n.labels for n in layer.node_labels}
    nodesets = yaml.safe_load(render_slinky_values(fleet))["nodesets"]
    assert nodesets
    covered: set[str] = set()
    for name, nodeset in nodesets.items():
        selector = nodeset["podSpec"]["nodeSelector"]
        hosts = {h for h, lab in labels.items() if selector.items() <= lab.items()}
        assert len(hosts) == nodeset["replicas"], name
        assert not hosts & covered, name  # no node hosts two NodeSets
        covered |= hosts
    slurm_hosts = {n.hostname for n in fleet.nodes if n.scheduler == "slurm"}
    assert covered == slurm_hosts
    slurm = next(r for r in layer.releases if r.name == "slurm")
    assert {f"node/{h}" for h in slurm_hosts} <= set(slurm.depends_on)


def test_slinky_hosts_get_only_the_nodeset_labels() -> None:
    """The NodeSet labels and the stack (its NVIDIADriver or DeviceConfig selects it); no
    Volcano nodegroup and no Kueue flavor: Slurm allocates their GPUs."""
    fleet = _fleet()
    for variant in (fleet, fleets.volcano(fleet)):
        layer = kubernetes_resources(variant)
        slurm_hosts = {n.hostname for n in variant.nodes if n.scheduler == "slurm"}
        labelled = [node for node in layer.node_labels if node.hostname in slurm_hosts]
        assert slurm_hosts and {node.hostname for node in labelled} == slurm_hosts
        for node in labelled:
            assert set(node.labels) == {"fleetspec.io/partition", "fleetspec.io/gpu-model",
                                        "fleetspec.io/stack", "fleetspec.io/vendor"}
        slurm_parts = {p.name for p in variant.partitions if p.scheduler == "slurm"}
        flavors = {m.name for m in layer.manifests if m.kind == "ResourceFlavor"}
        assert not flavors & slurm_parts


def test_label_script_covers_slinky_hosts() -> None:
    fleet = _fleet()
    files = render_kubernetes(fleet)
    script = next(v for k, v in files.items() if str(k) == "kubernetes/node-labels.sh")
    for node in (n for n in fleet.nodes if n.scheduler == "slurm"):
        assert f"label node --overwrite {node.hostname} " in script
    readme = next(v for k, v in files.items() if str(k) == "kubernetes/README.md")
    assert "Slinky-hosted" in readme


def test_native_mode_has_no_slurm_release_and_no_slurm_labels() -> None:
    layer = kubernetes_resources(fleets.museum())
    assert not any(r.name.startswith("slurm") for r in layer.releases)
    assert not any(n.hostname.startswith(("a100", "h100", "h200")) for n in layer.node_labels)


def test_slinky_without_kubernetes_nodes_still_renders_the_cluster() -> None:
    fleet = _fleet()
    slurm_only = dataclasses.replace(fleet, nodes=tuple(
        n for n in fleet.nodes if n.scheduler == "slurm"), partitions=tuple(
        p for p in fleet.partitions if p.scheduler == "slurm"))
    names = [r.name for r in kubernetes_resources(slurm_only).releases]
    assert names[-4:] == ["slurm-operator-crds", "slurm-operator", "slurm", "network-operator"]
    # slurmd pods ask for nvidia.com/gpu: the operator's device plugin and driver serve them.
    assert "gpu-operator" in names and "amd-gpu-operator" not in names


def test_museum_slinky_golden(golden) -> None:
    """The layer's own files; ``helm/slurm.values.yaml`` is the Slurm layer's output,
    checked above to equal ``render_slinky_values`` (its goldens are the Slurm tests')."""
    files = {p: t for p, t in render_kubernetes(_fleet()).items()
             if str(p) != "kubernetes/helm/slurm.values.yaml"}
    golden.check_tree("kubernetes/museum-slinky", files)


def test_the_chart_and_its_controller_carry_the_specs_cluster_name(crd_index) -> None:
    """The slurm chart's clusterName is the spec's cluster name: metadata.name, or
    slurm.cluster_name where the site keeps one (HAL9000_v2, no DNS label). The chart hands it
    to the Controller's spec.clusterName, which the real Controller CRD takes as is."""
    from fleetspec.pipeline import compile_text
    from tests.k8s_schema import validate_object

    fleet = _fleet()
    assert yaml.safe_load(render_slinky_values(fleet))["clusterName"] == fleet.name
    text = (fleets.EXAMPLES / "museum.yaml").read_text()
    text = text.replace("    mode: native\n", "    mode: slinky\n    slinky: {version: \"1.2.1\"}\n"
                        "    cluster_name: HAL9000_v2\n")
    text = text.replace('      debug: {nodes: "h100-[001-002]", max_time: "00:30:00"}\n', "")
    compiled = compile_text(text, "museum-slinky.yaml")
    assert not [f for f in compiled.located() if "cluster_name" in str(f.path) or "cluster_name" in f.message]
    assert compiled.fleet is not None and compiled.fleet.slurm.cluster_name == "HAL9000_v2"
    values = yaml.safe_load(render_slinky_values(compiled.fleet))
    assert values["clusterName"] == "HAL9000_v2"
    controller = {"apiVersion": "slinky.slurm.net/v1beta1", "kind": "Controller",
                  "metadata": {"name": "slurm", "namespace": "slurm"},
                  "spec": {"clusterName": values["clusterName"]}}  # what the chart sets from its value
    assert validate_object(controller, crd_index, compiled.fleet.kubernetes.version) == []
    assert validate_object({**controller, "spec": {**controller["spec"], "clusterName": 7}}, crd_index,
                           compiled.fleet.kubernetes.version) != []  # the check can fail
