import pytest
from hypothesis import given
from hypothesis import strategies as st

from fleetspec.node_side.hostlist import MAX_HOSTS, HostlistError, compress, expand


@pytest.mark.parametrize(
    ("expression", "hosts"),
    [
        ("gpu-[001-003]", ["gpu-001", "gpu-002", "gpu-003"]),
        ("a[1-3,7]", ["a1", "a2", "a3", "a7"]),
        ("r[1-2]-n[01-02]", ["r1-n01", "r1-n02", "r2-n01", "r2-n02"]),
        ("ctl-01", ["ctl-01"]),
        ("x1,y[2-3]", ["x1", "y2", "y3"]),
        ("n[8-10]", ["n8", "n9", "n10"]),
        ("n[08-10]", ["n08", "n09", "n10"]),
    ],
)
def test_expand(expression, hosts):
    assert expand(expression) == hosts


@pytest.mark.parametrize(
    ("expression", "fragment"),
    [
        ("gpu-[3-1]", "reversed"),
        ("gpu-[a-c]", "not a number or range"),
        ("gpu-[1-2", "unclosed"),
        ("gpu-1-2]", "unmatched"),
        ("gpu-[[1-2]]", "nested"),
        ("gpu;rm -rf /", "not a valid hostname"),
        ("GPU_01", "not a valid hostname"),
        ("$(reboot)", "not a valid hostname"),
        ("", "empty hostlist"),
        ("a,,b", "empty item"),
        ("x[]", "empty range"),
        (f"x[1-{MAX_HOSTS + 1}]", "at most"),
        ("a[1-1000]b[1-1000000]", "at most"),
    ],
)
def test_expand_rejects_with_advice(expression, fragment):
    with pytest.raises(HostlistError, match=fragment):
        expand(expression)


def test_compress_examples():
    assert compress(expand("gpu-[001-016]")) == "gpu-[001-016]"
    assert compress(["a1", "a2", "a3", "a7"]) == "a[1-3,7]"
    assert compress(["n9", "n10", "n8"]) == "n[8-10]"
    assert compress(["ctl"]) == "ctl"
    assert compress(expand("r[1-2]-n[01-02]")) == "r1-n[01-02],r2-n[01-02]"


hostname_sets = st.sets(
    st.builds(
        lambda prefix, n, width: f"{prefix}{str(n).zfill(width)}",
        st.sampled_from(["gpu-", "h100-", "rack1-n", "x"]),
        st.integers(min_value=0, max_value=300),
        st.sampled_from([0, 2, 3]),
    ),
    min_size=1,
    max_size=60,
)


@given(hostname_sets)
def test_compress_round_trips(hosts):
    text = compress(hosts)
    assert sorted(expand(text)) == sorted(hosts)
    assert compress(expand(text)) == text  # stable
