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
    hopper-cu13: {{driver: "{driver}", cuda: "{cuda}", nccl: "2.28.3"}}
  racks:
    - name: r01
      nodes:
        - hosts: n-[01-02]
          gpu: {{model: {model}, count: 8, mig: {mig}}}
          stack: hopper-cu13
          scheduler: {scheduler}
  slurm: {{version: "25.11.8", controllers: ctl-01}}
"""


def _compile(model: str, mig: str, scheduler: str = "slurm", driver: str = "580.95.05", cuda: str = "13.0.2"):
    return compile_text(SPEC.format(model=model, mig=mig, scheduler=scheduler, driver=driver, cuda=cuda),
                        "migs.yaml")


@pytest.mark.parametrize(("model", "mig", "geometry", "config"), [
    ("h100-sxm", "all-1g.10gb", (("1g.10gb", 7),), "all-1g.10gb"),
    ("h200", "all-balanced", (("1g.18gb", 2), ("2g.35gb", 1), ("3g.71gb", 1)), "all-balanced"),
    ("b200", "{4g.90gb: 1, 3g.90gb: 1}", (("3g.90gb", 1), ("4g.90gb", 1)), "fleetspec-1x3g.90gb-1x4g.90gb"),
    ("gb200", "all-7g.189gb", (("7g.189gb", 1),), "all-7g.189gb"),
    # the A100 40GB boards (NVIDIA's MIG guide: 1g.5gb .. 7g.40gb; mig-parted's all-balanced for them)
    ("a100-40gb", "all-balanced", (("1g.5gb", 2), ("2g.10gb", 1), ("3g.20gb", 1)), "all-balanced"),
    ("a100-pcie-40gb", "{4g.20gb: 1, 3g.20gb: 1}", (("3g.20gb", 1), ("4g.20gb", 1)),
     "fleetspec-1x3g.20gb-1x4g.20gb"),
])
def test_a_geometry_the_gpu_holds_compiles_to_its_instances(model, mig, geometry, config):
    result = _compile(model, mig)
    assert result.valid, [f.message for f in result.findings]
    node = result.fleet.nodes[0]
    assert (node.mig, node.mig_config) == (geometry, config)


@pytest.mark.parametrize(("model", "mig", "scheduler", "says"), [
    ("h100-sxm", "{1g.20gb: 5}", "slurm", "holds at most 4"),
    ("h100-sxm", "{4g.40gb: 1, 3g.40gb: 1, 1g.10gb: 1}", "slurm", "9 of 8 memory slices"),
    ("a100-40gb", "{1g.10gb: 5}", "slurm", "holds at most 4"),
    ("h100-sxm", "all-1g.10gb.me", "slurm", "GRES type cannot hold '+'"),
    ("h100-sxm", "{1g.10gb+me: 1, 1g.20gb+me: 1}", "kubernetes", "no MIG profile 1g.20gb+me"),
    ("a30", "all-balanced", "slurm", "no MIG profiles for a30"),
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
    text = SPEC.format(model="h200", mig="all-balanced", scheduler="slurm", driver="580.95.05", cuda="13.0.2").replace(
        'slurm: {version: "25.11.8", controllers: ctl-01}', 'slurm: {version: "25.11.8", mode: slinky, controllers: ctl-01}\n'
        '  kubernetes: {version: "1.34"}')
    result = compile_text(text, "migs.yaml")
    found = [f for f in result.findings if f.rule == "mig-geometry"]
    assert found and "under Slinky" in found[0].message, [f.message for f in result.findings]
    # The reason, not a "not yet": the only detection Slinky's images have cannot see instances.
    assert "AutoDetect=nvidia" in found[0].message and "mode: native" in found[0].message
    assert found[0].path[-2:] == ("gpu", "mig")


# --- placement (NVIDIA's MIG user guide, Getting Started: `nvidia-smi mig -lgipp`) ---

def _layout_is_valid(model, layout) -> bool:
    used: set[int] = set()
    for name, start in layout:
        profile = model.profiles[name]
        slices = set(range(start, start + profile.memory))
        if start not in profile.at or used & slices or max(slices) >= catalog_mig.MEMORY_SLICES:
            return False
        used |= slices
    return True


def test_the_guides_3_2_1_1_geometry_places_with_the_3g_instance_at_slice_4():
    """The guide's Example 2 (A100-SXM4-40GB): `-cgi 19,19,14,9` fails with "Insufficient
    Resources" because the 1g and 2g instances took the slices the 3g.20gb needs; `-cgi
    9,19,14,19` works and `-lgi` shows the 3g.20gb at 4:4. The search finds such a layout (the
    3g.20gb has two starts, and only 4 leaves room for the 2g.10gb, which cannot start at 6)."""
    model = catalog_mig.model_mig("a100-40gb")
    geometry = (("1g.5gb", 2), ("2g.10gb", 1), ("3g.20gb", 1))
    layout = catalog_mig.placement(model, geometry)
    assert layout is not None and _layout_is_valid(model, layout)
    assert dict(layout)["3g.20gb"] == 4
    assert sorted(n for n, _ in layout) == ["1g.5gb", "1g.5gb", "2g.10gb", "3g.20gb"]


def test_a_layout_that_overlaps_or_starts_off_the_table_is_not_one():
    model = catalog_mig.model_mig("h100-sxm")
    assert _layout_is_valid(model, (("3g.40gb", 4), ("4g.40gb", 0)))
    assert not _layout_is_valid(model, (("3g.40gb", 0), ("4g.40gb", 0)))   # overlap
    assert not _layout_is_valid(model, (("2g.20gb", 6),))                  # 2g starts at 0, 2 or 4 only
    # 2 x 3g.40gb takes both 3g starts: nothing of 4 memory slices is left for a 4g
    assert catalog_mig.placement(model, (("3g.40gb", 2), ("4g.40gb", 1))) is None


@pytest.mark.parametrize("model_id", catalog_mig.mig_models())
def test_every_geometry_that_places_fits_the_slice_counts(model_id):
    """The search is the check; the slice counts are what it implies. Over every geometry a
    model's profiles allow (at most max of each), a layout exists only where the instances
    fit 7 compute and 8 memory slices, and each layout the search returns is valid."""
    import itertools

    model = catalog_mig.model_mig(model_id)
    names = list(model.profiles)
    for counts in itertools.product(*(range(model.profiles[n].max + 1) for n in names)):
        geometry = tuple(sorted((n, c) for n, c in zip(names, counts) if c))
        layout = catalog_mig.placement(model, geometry) if geometry else None
        if layout is not None:
            assert _layout_is_valid(model, layout), (model_id, geometry, layout)
            assert sum(model.profiles[n].compute * c for n, c in geometry) <= catalog_mig.COMPUTE_SLICES
            assert sum(model.profiles[n].memory * c for n, c in geometry) <= catalog_mig.MEMORY_SLICES


@pytest.mark.parametrize(("model", "mig"), [("a100-40gb", "{4g.20gb: 1, 3g.20gb: 1}"),
                                            ("a100", "{4g.40gb: 1, 3g.40gb: 1}")])
def test_4g_with_3g_is_refused_on_drivers_before_r510_as_the_guide_warns(model, mig):
    """MIG user guide, Concepts: "prior to NVIDIA driver release R510, the combination of a (4
    memory, 4 compute) and a (4 memory, 3 compute) profile was not supported". It fits the
    slice counts and places (4g at 0, 3g at 4), so only the node's driver decides."""
    old = _compile(model, mig, driver="470.256.02", cuda="11.4.4")
    found = [f for f in old.findings if f.rule == "mig-geometry"]
    assert len(found) == 1 and "before R510" in found[0].message and "470.256.02" in found[0].message, \
        [f.message for f in old.findings]
    assert found[0].path[-2:] == ("gpu", "mig")
    new = _compile(model, mig)
    assert not [f for f in new.findings if f.rule == "mig-geometry"], [f.message for f in new.findings]
