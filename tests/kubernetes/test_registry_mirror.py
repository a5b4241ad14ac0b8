"""Air-gapped sites: chart and image sources from the spec (#28 item 9).

``packages.registry_mirror`` (an OCI registry holding every image and OCI chart under its
upstream registry's name) and ``packages.chart_repository`` (an https Helm repository for
the charts otherwise taken from public https repositories), as ``packages.mirror`` is for
apt. Before, every rendered manifest, values file, example and the Pulumi program's
releases named nvcr.io, registry.k8s.io, docker.io, ghcr.io and the public chart
repositories whatever the spec said.
"""

from __future__ import annotations

import dataclasses
import re

import pytest

from fleetspec.layout.kubernetes import AMD_REPO, NVIDIA_REPO, PUBLIC_REGISTRIES, VOLCANO_REPO
from fleetspec.pipeline import compile_text
from fleetspec.render import render_all
from fleetspec.render.kubernetes import kubernetes_resources
from fleetspec.render.kubernetes.operators import KUBERAY_REPO

from . import fleets

MIRROR = "registry.museum.example:5000/mirror"
CHARTS = "https://charts.museum.example/stable"
# A public registry's name at the start of a reference (not after the mirror's path).
PUBLIC = re.compile(r"(?<![\w./-])(?:oci://)?(" + "|".join(re.escape(r) for r in sorted(PUBLIC_REGISTRIES)) + r")/")
PUBLIC_REPOS = (NVIDIA_REPO, AMD_REPO, VOLCANO_REPO, KUBERAY_REPO)


def _air_gapped(fleet):
    return dataclasses.replace(fleet, registry_mirror=MIRROR, chart_repository=CHARTS)


VARIANTS = {
    "museum": fleets.museum,
    "volcano": lambda: fleets.volcano(fleets.museum()),
    "kai": lambda: fleets.kai(fleets.museum()),
    "slinky": lambda: fleets.slinky(fleets.museum()),
    "dra-gpus": lambda: fleets.dra_gpus(fleets.museum()),
}


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_no_rendered_file_names_a_public_registry_when_a_mirror_is_set(name: str) -> None:
    plain = VARIANTS[name]()
    before = render_all(plain)
    assert any(PUBLIC.search(t) for t in before.values())  # the check can fail: it did before
    files = render_all(_air_gapped(plain))
    for path, text in files.items():
        if path.suffix == ".md":
            continue  # prose (links to upstream docs), never pulled from
        assert not PUBLIC.search(text), (path, PUBLIC.search(text).group(0))
        for repo in PUBLIC_REPOS:
            assert repo not in text, (path, repo)
    mirrored = [t for t in files.values() if f"{MIRROR}/" in t]
    assert mirrored, "the mirror appears in what was rendered"


def test_releases_the_stack_installs_take_the_sites_sources() -> None:
    layer = kubernetes_resources(_air_gapped(fleets.slinky(fleets.museum())))
    by_name = {r.name: r for r in layer.releases}
    assert by_name["kueue"].chart == f"oci://{MIRROR}/registry.k8s.io/kueue/charts/kueue"
    assert by_name["gpu-operator"].repo == CHARTS and by_name["gpu-operator"].chart == "gpu-operator"
    assert all(r.repo in (None, CHARTS) for r in layer.releases)
    assert all(not r.chart.startswith("oci://") or r.chart.startswith(f"oci://{MIRROR}/") for r in layer.releases)
    drivers = [m.body for m in layer.manifests if m.body["kind"] == "NVIDIADriver"]
    assert drivers and all(d["spec"]["repository"] == f"{MIRROR}/nvcr.io/nvidia" for d in drivers)
    # The site's own registry (the AMD operator's driver_image) is not a public one: kept.
    amd = next(m.body for m in layer.manifests if m.body["kind"] == "DeviceConfig")
    assert amd["spec"]["driver"]["image"] == "registry.museum.example/gpu/amdgpu-driver"
    assert amd["spec"]["devicePlugin"]["devicePluginImage"].startswith(f"{MIRROR}/docker.io/rocm/")


def test_without_sources_nothing_moves() -> None:
    layer = kubernetes_resources(fleets.museum())
    assert {r.name: r.chart for r in layer.releases}["kueue"] == "oci://registry.k8s.io/kueue/charts/kueue"
    assert {r.name: r.repo for r in layer.releases}["gpu-operator"] == NVIDIA_REPO


SPEC = """\
apiVersion: fleetspec.io/v1alpha1
kind: Fleet
metadata: {{name: gapped}}
spec:
  os: ubuntu-24.04
  stacks:
    blackwell-cu13: {{driver: "580.173.02", cuda: "13.0.2", nccl: "2.28.3"}}
  racks:
    - name: r01
      nodes:
        - hosts: b200-[01-02]
          gpu: {{model: b200, count: 8}}
          stack: blackwell-cu13
          scheduler: kubernetes
  kubernetes:
    version: "1.34"
    gpu_operator: {{version: v26.7.0, driver: operator}}
  packages:
    registry_mirror: {mirror}
    chart_repository: {charts}
"""


def test_the_sources_are_checked_where_they_are_written() -> None:
    good = compile_text(SPEC.format(mirror=MIRROR, charts=CHARTS), "gapped.yaml")
    assert good.valid, [f.message for f in good.findings]
    assert good.fleet is not None and good.fleet.registry_mirror == MIRROR
    for mirror, charts, line, words in [
        ("robot:s3cret@registry.example.com", CHARTS, 19, "pull secret"),
        ("https://registry.example.com", CHARTS, 19, "without a scheme"),
        ("Registry.Example.com", CHARTS, 19, "not a registry host"),
        (MIRROR, "https://robot:s3cret@charts.example.com/", 20, "without credentials"),
        (MIRROR, "http://charts.example.com", 20, "https chart repository"),
    ]:
        result = compile_text(SPEC.format(mirror=mirror, charts=charts), "gapped.yaml")
        assert not result.valid
        (finding,) = [f for f in result.located() if f.line == line]
        assert words in finding.message, finding.message
        assert "s3cret" not in finding.message  # a credential is never echoed
