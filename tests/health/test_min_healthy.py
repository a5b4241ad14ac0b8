"""The blast-radius limit's arithmetic: medik8s NHC's minHealthy (a count, or a percentage of
the selected nodes rounded up: intstr.GetScaledValueFromIntOrPercent(..., roundUp=true))."""

from __future__ import annotations

import pytest

from fleetspec.node_side.min_healthy import DEFAULT, HELD, hold, needed


@pytest.mark.parametrize(("limit", "selected", "want"), [
    ("51%", 4, 3), ("51%", 100, 51), ("51%", 1, 1), ("51%", 0, 0), ("51%", 15000, 7650), ("50%", 3, 2),
    ("0%", 5, 0), ("100%", 5, 5), ("0", 9, 0), ("3", 10, 3), ("12", 4, 12)])
def test_needed(limit: str, selected: int, want: int) -> None:
    assert needed(limit, selected) == want


@pytest.mark.parametrize("bad", ["101%", "-1", "1.5", "", "%", "51 %", "x"])
def test_a_bad_limit_is_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="give a count of nodes"):
        needed(bad, 4)


def test_hold() -> None:
    assert DEFAULT == "51%"
    assert hold("51%", 4, healthy=3, sick=1) is None  # at the limit: remediation goes on
    assert hold("51%", 4, healthy=0, sick=0) is None  # nothing sick: nothing to hold back
    line = hold("51%", 4, healthy=2, sick=2)
    assert line is not None and line.startswith(HELD + "2 of 4 GPU nodes look sick, 2 healthy, below min_healthy "
                                                "51% (3 healthy needed)")
    assert "\n" not in line and "a human must look" in line
    assert "(1 more gave no verdict)" in str(hold("51%", 4, healthy=1, sick=2))
    assert hold("0", 4, healthy=0, sick=4) is None  # 0: no limit
    assert hold("100%", 4, healthy=3, sick=1) is not None  # 100%: no remediation at all
