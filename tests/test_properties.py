"""Property-based tests: whatever the input, compile returns an IR or findings; it never raises."""

import copy
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleetspec.compile import compile_text
from fleetspec.findings import Severity
from tests.conftest import EXAMPLES

BASE = yaml.safe_load((EXAMPLES / "museum.yaml").read_text())

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-10, 10**6), st.floats(allow_nan=True),
    st.text(max_size=20),
    st.sampled_from(["h100", "mi300x", "gpu-[1-3]", "x[3-1]", "580.95.05", "13.0", "../../etc", "a;b", "", "v1.36",
                     "slurm", "kubernetes", "rack", "nvidia-hopper", "UNLIMITED", "2-00:00:00", "ethernet"]),
)
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                       st.dictionaries(st.text(max_size=8), inner, max_size=3)),
                      max_leaves=6)


def _paths(node, prefix=()):
    yield prefix
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, prefix + (i,))


ALL_PATHS = [p for p in _paths(BASE) if p]


def _mutate(doc, path, kind, value):
    parent = doc
    for part in path[:-1]:
        parent = parent[part]
    key = path[-1]
    if kind == "replace":
        parent[key] = value
    elif kind == "delete":
        del parent[key]
    elif kind == "add" and isinstance(parent, dict):
        parent[f"x{len(parent)}"] = value
    elif kind == "duplicate" and isinstance(parent, list):
        parent.append(copy.deepcopy(parent[key]))


mutations = st.lists(
    st.tuples(st.sampled_from(ALL_PATHS), st.sampled_from(["replace", "delete", "add", "duplicate"]), values),
    min_size=1, max_size=4,
)


def _check(result):
    assert result.fleet is not None or result.findings
    if result.fleet is None:
        assert any(f.severity == Severity.ERROR for f in result.findings)
    for f in result.located():
        assert f.line >= 1 and f.column >= 1 and f.message


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutations)
def test_mutated_specs_never_crash(changes):
    doc = copy.deepcopy(BASE)
    for path, kind, value in changes:
        try:
            _mutate(doc, path, kind, value)
        except (KeyError, IndexError, TypeError):
            continue  # an earlier mutation removed this path
    _check(compile_text(yaml.safe_dump(doc, sort_keys=False), "fuzz.yaml"))


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=400))
def test_arbitrary_text_never_crashes(text):
    _check(compile_text(text, "fuzz.yaml"))


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=200))
def test_arbitrary_bytes_never_crash(raw):
    from fleetspec.compile import compile_loaded
    from fleetspec.spec.loader import SpecLoadError, load_bytes

    try:
        loaded = load_bytes(raw, "fuzz.yaml")
    except SpecLoadError:
        return
    _check(compile_loaded(loaded))


REGRESSIONS = sorted((Path(__file__).resolve().parent / "fuzz_regressions").glob("*"))


@pytest.mark.parametrize("path", REGRESSIONS, ids=lambda p: p.name)
def test_fuzz_regressions_give_findings_not_crashes(path):
    """Inputs that once crashed or were hostile: each must give located findings, fast."""
    from fleetspec.compile import compile_file

    result = compile_file(path)
    assert not result.valid
    _check(result)
