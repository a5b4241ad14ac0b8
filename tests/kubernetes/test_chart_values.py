"""The Helm values fleetspec renders name keys the real charts have (their values.yaml at the
pinned tags in tests/data/crds), and NFD runs once on a mixed-vendor cluster."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import pytest
import yaml

from fleetspec.render.kubernetes import HelmRelease, kubernetes_resources
from tests.conftest import require_shared

from . import fleets

CHART_VALUES = {
    "gpu-operator": "crds/nvidia-gpu-operator/values.yaml",
    "amd-gpu-operator": "crds/amd-gpu-operator/values.yaml",
    "kueue": "crds/kueue/kueue-chart-values.yaml",
    "volcano": "crds/volcano/volcano-chart-values.yaml",
    "slurm": "crds/slurm-operator/slurm-chart-values.yaml",
    "kai-scheduler": "crds/kai-scheduler/values.yaml",
    "dra-driver-nvidia-gpu": "crds/nvidia-dra-driver-gpu/values.yaml",
    "network-operator": "crds/nvidia-network-operator/values.yaml",
}
# Maps whose keys are the user's (labels, config lines, resource names), not chart keys.
FREE_FORM = frozenset({"nodeSelector", "configFiles", "extraConfMap", "configMap", "limits",
                       "requests"})
# Maps of named objects, each checked against the chart's defaults for one entry.
ENTRY_DEFAULTS = {"nodesets": "nodesetDefaults", "partitions": ("partitions", "all")}


def _chart_defaults(name: str) -> dict[str, Any]:
    return yaml.safe_load(require_shared(CHART_VALUES[name]).read_text())


def unknown_paths(values: Mapping[str, Any], defaults: Mapping[str, Any],
                  root: Mapping[str, Any], path: str = "") -> list[str]:
    """Dotted paths in ``values`` that the chart's ``defaults`` do not have."""
    unknown = []
    for key, value in values.items():
        here = f"{path}.{key}" if path else key
        if not path and key in ENTRY_DEFAULTS:
            where = ENTRY_DEFAULTS[key]
            entry = root[where] if isinstance(where, str) else root[where[0]][where[1]]
            for name, item in value.items():
                unknown += unknown_paths(item, entry, root, f"{here}.{name}")
            continue
        if key not in defaults:
            unknown.append(here)
        elif isinstance(value, Mapping) and isinstance(defaults[key], Mapping) \
                and defaults[key] and key not in FREE_FORM:
            unknown += unknown_paths(value, defaults[key], root, here)
    return unknown


def _releases(fleet) -> dict[str, HelmRelease]:
    return {r.name: r for r in kubernetes_resources(fleet).releases}


@pytest.mark.parametrize("make", [
    fleets.museum,
    lambda: fleets.volcano(fleets.museum()),
    lambda: fleets.two_nvidia_stacks(fleets.museum()),
    lambda: fleets.slinky(fleets.museum()),
    lambda: fleets.kai(fleets.museum()),
    lambda: fleets.dra_gpus(fleets.museum()),
], ids=["museum", "volcano", "two-nvidia-stacks", "slinky", "kai", "dra-gpus"])
def test_rendered_values_use_real_chart_keys(make) -> None:
    checked = 0
    for name, release in _releases(make()).items():
        if name not in CHART_VALUES:
            continue  # slurm-operator(-crds): chart values not in tests/data/crds
        defaults = _chart_defaults(name)
        assert unknown_paths(release.values, defaults, defaults) == [], name
        checked += 1
    assert checked >= 3


def test_the_key_check_can_fail() -> None:
    defaults = _chart_defaults("amd-gpu-operator")
    assert unknown_paths({"nfd": {"enabled": False}}, defaults, defaults) == ["nfd"]
    nvidia = _chart_defaults("gpu-operator")
    assert unknown_paths({"driver": {"versoin": "1"}}, nvidia, nvidia) == ["driver.versoin"]


def test_mixed_vendors_run_one_nfd() -> None:
    """Both charts default to installing NFD: NVIDIA ``nfd.enabled`` and AMD
    ``node-feature-discovery.enabled``. fleetspec keeps NVIDIA's and turns AMD's off."""
    nvidia_defaults = _chart_defaults("gpu-operator")
    amd_defaults = _chart_defaults("amd-gpu-operator")
    assert nvidia_defaults["nfd"]["enabled"] is True
    assert amd_defaults["node-feature-discovery"]["enabled"] is True

    releases = _releases(fleets.museum())
    gpu, amd = releases["gpu-operator"], releases["amd-gpu-operator"]
    assert gpu.values["nfd"] == {"enabled": True}
    assert amd.values["node-feature-discovery"] == {"enabled": False}
    # The AMD chart's default NodeFeatureRule needs the NFD CRDs of NVIDIA's NFD: after it.
    assert gpu.key in amd.depends_on
    # The one NFD worker must also run on AMD nodes: the tolerations of both charts' workers.
    tolerations = gpu.values["node-feature-discovery"]["worker"]["tolerations"]
    for default in (nvidia_defaults["node-feature-discovery"]["worker"]["tolerations"]
                    + amd_defaults["node-feature-discovery"]["worker"]["tolerations"]):
        assert default in tolerations
    # Nothing sets an amd.com/gpu taint, so nothing tolerates one.
    assert not any(t.get("key") in ("amd.com/gpu", "nvidia.com/gpu") and t not in
                   nvidia_defaults["node-feature-discovery"]["worker"]["tolerations"]
                   for t in tolerations)


def test_amd_only_keeps_its_own_nfd() -> None:
    fleet = fleets.museum()
    no_nvidia_operator = dataclasses.replace(fleet, kubernetes=dataclasses.replace(
        fleet.kubernetes, gpu_operator=None))
    releases = _releases(no_nvidia_operator)
    assert "gpu-operator" not in releases
    assert "node-feature-discovery" not in releases["amd-gpu-operator"].values
    assert [p.id for p in kubernetes_resources(no_nvidia_operator).prerequisites] == \
        ["cert-manager"]
