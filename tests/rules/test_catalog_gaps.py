"""Catalog gaps a newcomer hits (issue #28 item 7) that the fixtures cannot show: the
advice of an unknown ROCm build names no cuDNN version; the unknown point release names
the releases the catalog knows and where to check."""

from __future__ import annotations

from fleetspec.findings import Severity
from fleetspec.pipeline import compile_text
from tests.conftest import EXAMPLES


def test_an_unknown_rocm_build_is_not_told_to_pin_cudnn() -> None:
    text = (EXAMPLES / "museum.yaml").read_text().replace('rocm: "7.0.2"', 'rocm: "7.0.9"')
    result = compile_text(text, "museum.yaml")
    pins = [f for f in result.findings if f.rule == "package-pin" and "rocm" in str(f.message)]
    assert pins, [f.message for f in result.findings]
    assert not any("cudnn" in f.message.lower() for f in pins), [f.message for f in pins]


def test_an_unknown_point_release_names_what_the_catalog_knows() -> None:
    text = (EXAMPLES / "quickstart.yaml").read_text().replace('driver: "580.95.05"', 'driver: "580.95.99"')
    found = [f for f in compile_text(text, "q.yaml").findings if f.rule == "unknown-version"]
    assert len(found) == 1 and found[0].severity is Severity.WARNING
    assert "580.95.05" in found[0].message and "redistrib_580.95.99.json" in found[0].message
