"""EL fleets (#42): docs/packaging.md's EL table is the catalog's EL data, row for row."""

from __future__ import annotations

import pytest

from fleetspec.catalog.el import el_data, parse_nevra
from tests.conftest import ROOT


# docs/packaging.md's EL table is the data, row for row.
def table_rows() -> list[list[str]]:
    section = (ROOT / "docs/packaging.md").read_text().split("\n## EL nodes ", 1)[1].split("\n## ", 1)[0]
    lines = [ln for ln in section.splitlines() if ln.startswith("| ")]
    assert lines[0] == "| EL | component | release | packages | source | seen | unconfirmed |"
    return [[c.strip() for c in ln.strip("|").split(" | ")] for ln in lines[1:]]


def test_the_docs_el_table_is_the_catalog_data() -> None:
    rows = []
    for r in el_data()[0]:
        packages = ", ".join(f"{n.name}-{n.epoch}:{n.version}-{n.release}" + (f" ({n.condition})" if n.condition
                                                                                 else "") for n in r.packages)
        rows.append([str(r.el), r.component, r.release, packages, r.source, r.seen, r.unconfirmed or "-"])
    assert table_rows() == rows


def test_every_row_cites_a_source_and_parses() -> None:
    releases, repos = el_data()
    for r in releases:
        assert r.source and r.seen and r.packages and r.repo.startswith("https://"), r
        assert r.el in (9, 10)
    assert {(r.el, r.vendor) for r in repos} == {(9, "nvidia"), (10, "nvidia")}
    with pytest.raises(ValueError):
        parse_nevra("nvidia-driver-cuda")
    n = parse_nevra("amdgpu-dkms-1:6.1.5.50601-1649308.el9")
    assert (n.name, n.epoch, n.version, n.release) == ("amdgpu-dkms", 1, "6.1.5.50601", "1649308.el9")
