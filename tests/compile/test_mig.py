"""gpu.mig (#46): geometries the catalog's MIG tables allow compile to per-GPU instances;
the ones a GPU cannot hold are located errors."""

from __future__ import annotations

import pytest

from fleetspec.catalog import mig as catalog_mig
from fleetspec.pipeline import compile_text

SPEC = """\
apiVersion: fleetspec.io/v1alpha1
kind: Fleet
metadata: {{name: migs}}
spec:
  os: ubuntu-24.04
  stacks:
    hopper-cu13: {{driver: "580.95.05", cuda: "13.0.2", nccl: "2.28.3"}}
  racks:
    - name: r01
      nodes:
        - hosts: n-[01-02]
          gpu: {{model: {model}, count: 8, mig: {mig}}}
          stack: hopper-cu13
          scheduler: {scheduler}
  slurm: {{version: "25.11.8", controllers: ctl-01}}
"""


def _compile(model: str, mig: str, scheduler: str = "slurm"):
    return compile_text(SPEC.format(model=model, mig=mig, scheduler=scheduler), "migs.yaml")


@pytest.mark.parametrize(("model", "mig", "geometry", "config"), [
    ("h100-sxm", "all-1g.10gb", (("1g.10gb", 7),), "all-1g.10gb"),
    ("h200", "all-balanced", (("1g.18gb", 2), ("2g.35gb", 1), ("3g.71gb", 1)), "all-balanced"),
    ("b200", "{4g.90gb: 1, 3g.90gb: 1}", (("3g.90gb", 1), ("4g.90gb", 1)), "fleetspec-1x3g.90gb-1x4g.90gb"),
    ("gb200", "all-7g.189gb", (("7g.189gb", 1),), "all-7g.189gb"),
])
def test_a_geometry_the_gpu_holds_compiles_to_its_instances(model, mig, geometry, config):
    result = _compile(model, mig)
    assert result.valid, [f.message for f in result.findings]
    node = result.fleet.nodes[0]
    assert (node.mig, node.mig_config) == (geometry, config)


@pytest.mark.parametrize(("model", "mig", "scheduler", "says"), [
    ("h100-sxm", "{1g.20gb: 5}", "slurm", "holds at most 4"),
    ("h100-sxm", "{4g.40gb: 1, 3g.40gb: 1, 1g.10gb: 1}", "slurm", "9 of 8 memory slices"),
    ("h100-sxm", "all-1g.10gb.me", "slurm", "GRES type cannot hold '+'"),
    ("h100-sxm", "{1g.10gb+me: 1, 1g.20gb+me: 1}", "kubernetes", "no MIG profile 1g.20gb+me"),
    ("a100-40gb", "all-1g.10gb", "slurm", "no MIG profiles for a100-40gb"),
    ("l40s", "all-balanced", "slurm", "no MIG profiles for l40s"),
    ("h200", "all-1g.10gb", "slurm", "not a MIG geometry of h200"),
])
def test_a_geometry_the_gpu_cannot_hold_is_a_located_error(model, mig, scheduler, says):
    result = _compile(model, mig, scheduler)
    found = [f for f in result.findings if f.rule == "mig-geometry"]
    assert len(found) == 1 and says in found[0].message, [f.message for f in result.findings]
    assert found[0].path[-2:] == ("gpu", "mig")
    assert not result.valid


def test_every_catalogued_model_offers_its_balanced_geometry_and_each_profile_alone():
    for model_id in catalog_mig.mig_models():
        model = catalog_mig.model_mig(model_id)
        assert catalog_mig.check(model, model.balanced) is None, model_id
        for profile in model.profiles.values():
            assert catalog_mig.check(model, ((profile.name, profile.max),)) is None, (model_id, profile)


def test_mig_under_slinky_is_a_located_error():
    text = SPEC.format(model="h200", mig="all-balanced", scheduler="slurm").replace(
        'slurm: {version: "25.11.8", controllers: ctl-01}', 'slurm: {version: "25.11.8", mode: slinky, controllers: ctl-01}\n'
        '  kubernetes: {version: "1.34"}')
    result = compile_text(text, "migs.yaml")
    found = [f for f in result.findings if f.rule == "mig-geometry"]
    assert found and "under Slinky" in found[0].message, [f.message for f in result.findings]
    # The reason, not a "not yet": the only detection Slinky's images have cannot see instances.
    assert "AutoDetect=nvidia" in found[0].message and "mode: native" in found[0].message
    assert found[0].path[-2:] == ("gpu", "mig")
