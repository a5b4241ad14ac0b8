"""docs/packaging.md's evidence table is the data the lab's evidence repositories are built
from (fleetspec/lab/vendor_packages.yaml): one row per group, in order, cell for cell."""

from __future__ import annotations

from fleetspec.lab.repo import evidence_groups, evidence_standins
from tests.conftest import ROOT


def table_rows() -> list[list[str]]:
    text = (ROOT / "docs/packaging.md").read_text()
    section = text.split("## Evidence: ", 1)[1].split("\n## ", 1)[0]
    lines = [ln for ln in section.splitlines() if ln.startswith("| ")]
    assert lines[0] == "| shape | example file name | source | date seen |"
    return [[c.strip() for c in ln.strip("|").split(" | ")] for ln in lines[1:]]


def test_the_docs_table_is_the_evidence_data():
    assert table_rows() == [[g.shape, g.example, g.source, g.seen] for g in evidence_groups()]


def test_every_group_cites_a_source_and_marks_what_no_artefact_shows():
    for g in evidence_groups():
        assert g.source and g.seen and g.example and g.packages
        for spec in g.unconfirmed:
            assert "unconfirmed" in g.source or "unconfirmed" in g.shape, (g.shape, spec)


def test_the_awkward_parts_are_served():
    repos = evidence_standins()
    cuda = {(p.name, p.version) for p in repos["https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/x86_64/"]}
    ubuntu = {p.name for p in repos["http://archive.ubuntu.com/ubuntu/"]}
    assert ("nvidia-fabricmanager", "580.95.05-1") in cuda and "nvidia-fabricmanager-580" in ubuntu
    assert ("libnvidia-compute-580", "580.159.03-1ubuntu1") in cuda  # newer than any pin
    assert {p.name for p in repos["https://repo.radeon.com/graphics/7.0.2/ubuntu"]} == {"mesa-amdgpu-va-drivers"}
