"""Property-based tests: whatever the input, compile returns an IR or findings; it never raises."""

import copy
import json
import signal
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleetspec.findings import Severity
from fleetspec.pipeline import compile_text
from tests.conftest import EXAMPLES

pytestmark = pytest.mark.fuzz

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
    from fleetspec.pipeline import compile_loaded
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
    from fleetspec.pipeline import compile_file

    result = compile_file(path)
    assert not result.valid
    _check(result)


# -- the same harness over the other decoders: state, saved plans, locks, facts ---------------
#
# Each decoder reads what a file (possibly edited, damaged or planted) says. Whatever it
# says, the decoder gives a result or its own error with a message: never another
# exception, never a hang. The budget is fixed (examples per test below) and every
# example runs under a deadline (`_no_hang`).

HANG_SECONDS = 20


@contextmanager
def _no_hang(what: str):
    """Fail (with the input hypothesis prints) when one example takes longer than HANG_SECONDS."""
    def alarm(signum, frame):
        raise AssertionError(f"{what} did not finish within {HANG_SECONDS} s: a hang")

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(HANG_SECONDS)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _mutated(base, changes):
    doc = copy.deepcopy(base)
    for path, kind, value in changes:
        if not path:
            continue
        try:
            _mutate(doc, path, kind, value)
        except (KeyError, IndexError, TypeError):
            continue
    return doc


def _decoder_mutations(base):
    paths = [p for p in _paths(base) if p]
    return st.lists(st.tuples(st.sampled_from(paths), st.sampled_from(["replace", "delete", "add", "duplicate"]),
                              values), min_size=1, max_size=4)


def _quickstart_fleet():
    from fleetspec.pipeline import compile_file

    return compile_file(EXAMPLES / "quickstart.yaml").fleet


QUICK = _quickstart_fleet()
STATE_BASE = {"format_version": 1, "fleet": QUICK.name, "lineage": "0b6f", "serial": 3,
              "applied": json.loads(QUICK.to_json()),
              "nodes": {"h100-001": {"node": json.loads(QUICK.to_json())["nodes"][0], "stack": None}},
              "journal": [{"serial": 3, "user": "u", "host": "h", "time": "t"}]}


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_decoder_mutations(STATE_BASE))
def test_mutated_state_documents_give_a_state_or_a_state_error(tmp_path_factory, changes):
    from fleetspec.state import StateError, StateStore

    directory = tmp_path_factory.mktemp("state")
    (directory / f"{QUICK.name}.state.json").write_text(json.dumps(_mutated(STATE_BASE, changes)))
    with _no_hang("StateStore.read"):
        try:
            state = StateStore(directory, QUICK.name).read()
        except StateError as exc:
            assert str(exc)
            return
    assert state.serial >= 0 and isinstance(state.journal, tuple)


def _plan_base():
    from fleetspec.plan import make_plan

    plan = make_plan(QUICK, None, canary=1, max_unavailable="25%", base="nothing")
    return {"kind": "fleetspec-plan", **plan.to_dict(include_fleet=True)}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_decoder_mutations(_plan_base()))
def test_mutated_saved_plans_give_a_plan_or_a_saved_plan_error(tmp_path_factory, changes):
    from fleetspec.plan.saved import SavedPlanError, load_saved_plan

    path = tmp_path_factory.mktemp("plan") / "plan.json"
    path.write_text(json.dumps(_mutated(_plan_base(), changes)))
    with _no_hang("load_saved_plan"):
        try:
            load_saved_plan(path)
        except SavedPlanError as exc:
            assert str(exc)


@settings(max_examples=200, deadline=None)
@given(st.one_of(values, st.dictionaries(st.sampled_from(["host", "pid", "pid_started", "user", "command",
                                                            "started"]), scalars, max_size=6)))
def test_any_lock_file_content_gives_a_holder_or_none(content):
    from fleetspec.state.lock import LockInfo, _holder_from, is_stale

    with _no_hang("lock holder"):
        holder = _holder_from(content)
        assert holder is None or isinstance(holder, LockInfo)
        if holder is not None:
            is_stale(holder)  # the holder's fields are used as they are: they must have their types


def _facts_base():
    from tests.verify.h200_facts import h200_facts

    return h200_facts("h100-001")


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_decoder_mutations(_facts_base()))
def test_mutated_facts_give_a_report_never_a_crash(changes):
    from fleetspec.verify.compare import compare

    facts = _mutated(_facts_base(), changes)
    with _no_hang("compare"):
        report = compare(QUICK, {"h100-001": facts}, hosts=["h100-001"])
    assert report.nodes


LIST_FACTS = [("nvidia", "gpus"), ("nvidia", "nvswitches"), ("nvidia", "nvlink5_bridges"), ("nvidia", "imex", "channels"),
              ("cuda", "toolkits"), ("cuda", "cudart")]


@pytest.mark.parametrize("path", LIST_FACTS, ids=".".join)
@pytest.mark.parametrize("value", [5, "text", {"a": 1}, [5, "text", None]], ids=repr)
def test_a_list_fact_of_another_shape_gives_a_report(path, value):
    """What the random mutations above found once (cuda.toolkits: 5 was a TypeError): every
    list the collector writes, as a number, a string, an object or a list of odd items."""
    from fleetspec.verify.compare import compare

    facts = _facts_base()
    parent = facts
    for key in path[:-1]:
        parent = parent.setdefault(key, {})
    parent[path[-1]] = value
    report = compare(QUICK, {"h100-001": facts}, hosts=["h100-001"])
    assert report.nodes


@settings(max_examples=100, deadline=None)
@given(st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                     st.dictionaries(st.text(max_size=8), inner, max_size=3)),
                    max_leaves=12))
def test_any_json_as_facts_gives_a_report(document):
    from fleetspec.verify.compare import compare

    with _no_hang("compare"):
        report = compare(QUICK, {"h100-001": document}, hosts=["h100-001"])
    assert report.nodes


# Issue 27: kernel logs, node verdicts and the text that reaches Markdown, terminals and XML.
KMSG_LINES = [line for name in ("kmsg-xids.txt", "kmsg-mig-xids.txt")  # MIG-attributed Xids too (#46)
              for line in (EXAMPLES.parent / "tests" / "data" / "fixtures" / "health" / name).read_text().splitlines()]
kmsg_line = st.one_of(
    st.sampled_from(KMSG_LINES),
    st.builds(lambda line, cut, junk: line[:cut] + junk + line[cut:], st.sampled_from(KMSG_LINES),
              st.integers(0, 200), st.text(max_size=12)),
    st.text(max_size=120),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(kmsg_line, max_size=12))
def test_any_kernel_log_gives_faults_of_the_catalog_never_a_crash(lines):
    from fleetspec.node_side.classify import kernel_log_faults, parse_kmsg
    from fleetspec.node_side.faults import FAULTS

    with _no_hang("kernel log"):
        records = parse_kmsg("\n".join(lines))
        faults = kernel_log_faults(msg for _, msg in records)
    for fault in faults:
        assert fault["class"] in FAULTS and all(isinstance(fault[k], str) for k in ("device", "detail"))


verdict_base = {"status": "sick", "action": "drain-reboot", "errors": [],
                "faults": [{"class": "gpu-lost", "action": "drain-reboot", "device": "0000:18:00",
                            "detail": "Xid 79", "scope": "node", "source": "kernel-log"}]}


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(_decoder_mutations(verdict_base), st.just([])), values)
def test_any_verdict_gives_a_row_or_an_unknown_node_never_a_crash(changes, document):
    import xml.etree.ElementTree as ET

    from fleetspec.health.fleet import FleetHealth, to_json, to_junit, to_text, verdict_problem

    for verdict in (_mutated(verdict_base, changes), document):
        problem = verdict_problem(verdict)
        health = FleetHealth("f", {"n1": verdict} if problem is None else {}, {} if problem is None else {"n1": problem})
        assert "\x1b" not in to_text(health)
        json.dumps(to_json(health))
        ET.fromstring(to_junit(health))


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=60))
def test_any_text_stays_text_in_markdown_terminals_and_xml(text):
    import re
    import xml.etree.ElementTree as ET

    from markdown_it import MarkdownIt

    from fleetspec.markdown import cell, code
    from fleetspec.text import printable, xml_text

    html = MarkdownIt("commonmark").enable(["table", "strikethrough"]).render(
        f"| a | b |\n|---|---|\n| {cell(text)} | {code(text)} |\n")
    assert html.count("<td>") == 2, html
    assert not re.search(r"<(?!/?(?:table|thead|tbody|tr|th|td|code)>)", html), html
    assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f]", printable(text))
    ET.fromstring(f"<a>{xml_text(text).replace('&', '&amp;').replace('<', '&lt;')}</a>")


SITE_BASE = yaml.safe_load((EXAMPLES / "quickstart.yaml").read_text())
SITE_BASE["spec"]["slurm"].update({
    "settings": {"SchedulerParameters": ["bf_continue", "bf_window=2880"], "PriorityWeightAge": 5000},
    "cgroup_settings": {"ConstrainSwapSpace": True}, "slurmdbd_settings": {"PurgeJobAfter": "12month"}})
SITE_BASE["spec"]["ansible"] = {
    "vars": {"site_nfs_server": "nfs-01.example.org", "site_mounts": ["/home", "/scratch"]},
    "hooks": {"before": [{"playbook": "hooks/mounts.yml", "disruption": "drain"}],
              "after": [{"playbook": "hooks/check.yml", "disruption": "none", "partitions": ["nvidia-hopper"]}]}}
SITE_PATHS = [p for p in _paths(SITE_BASE) if p and p[:2] in (("spec", "slurm"), ("spec", "ansible"))]
site_values = st.one_of(values, st.sampled_from([
    "ansible_host", "ansible_ssh_common_args", "hostvars", "fleetspec_os", "StoragePass", "AuthType",
    "30 SlurmUser=root", "{{ lookup('pipe', 'id') }}", "../../etc/shadow", "/etc/shadow", "x\x1b[2J", "9" * 5000]))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(SITE_PATHS), st.sampled_from(["replace", "delete", "add", "duplicate"]),
                          site_values), min_size=1, max_size=4))
def test_mutated_site_settings_give_findings_never_a_crash(changes):
    """Site settings (issue 27): hostile names and values in slurm settings, ansible.vars and hooks."""
    doc = _mutated(SITE_BASE, changes)
    with _no_hang("site settings"):
        _check(compile_text(yaml.safe_dump(doc, sort_keys=False), "fuzz.yaml"))
