"""Hostile or careless spec input (issue 13): non-ASCII digits, paths and namespaces with
meaning elsewhere, unbounded hostlists and inputs, echoed lines. Each test fails on the
code before the fix."""

from __future__ import annotations

import os
import time

import pytest
import yaml

from fleetspec.findings import Severity
from fleetspec.node_side.hostlist import MAX_HOSTS, HostlistError, count, expand
from fleetspec.pipeline import compile_file, compile_text
from fleetspec.render.kubernetes.common import NAMESPACES
from fleetspec.slurm_syntax import slurm_time_minutes
from fleetspec.spec.loader import EXCERPT_CHARS
from fleetspec.spec.model import RESERVED_NAMESPACES
from fleetspec.versions import parse_version
from tests.conftest import EXAMPLES

QUICKSTART = yaml.safe_load((EXAMPLES / "quickstart.yaml").read_text())
MUSEUM = yaml.safe_load((EXAMPLES / "museum.yaml").read_text())


def _compile(doc):
    return compile_text(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True), "fleet.yaml")


def _errors(result):
    return [f for f in result.located() if f.severity >= Severity.ERROR]


# -- 5. ASCII digits only ---------------------------------------------------------------

ARABIC_INDIC_5 = "\u0665"  # '٥': str.isdigit() and regex \d say yes
FULLWIDTH_1 = "\uff11"


@pytest.mark.parametrize(("path", "value"), [
    (("spec", "stacks", "hopper-cu13", "nccl"), f"2.28.{ARABIC_INDIC_5}"),
    (("spec", "stacks", "hopper-cu13", "driver"), f"58{FULLWIDTH_1}.95.05"),
    (("spec", "slurm", "version"), f"25.11.{ARABIC_INDIC_5}"),
    (("spec", "racks", 0, "nodes", 0, "hosts"), f"h100-[00{FULLWIDTH_1}-004]"),
    (("spec", "slurm", "partitions", "debug", "max_time"), f"00:3{ARABIC_INDIC_5}:00"),
])
def test_non_ascii_digits_are_refused_where_numbers_are_parsed(path, value):
    doc = yaml.safe_load(yaml.safe_dump(QUICKSTART))
    parent = doc
    for part in path[:-1]:
        parent = parent[part]
    parent[path[-1]] = value
    errors = _errors(_compile(doc))
    assert errors, f"{value!r} at {path} was accepted"
    assert any(e.path.replace("[", ".").replace("]", "") .endswith(str(path[-1])) for e in errors)


def test_gang_timeout_and_parsers_are_ascii_only():
    assert parse_version(f"1{ARABIC_INDIC_5}.0") is None
    assert slurm_time_minutes(f"{ARABIC_INDIC_5}0") is None
    with pytest.raises(HostlistError):
        expand(f"n[1-{ARABIC_INDIC_5}]")
    doc = yaml.safe_load(yaml.safe_dump(MUSEUM))
    doc["spec"]["kubernetes"]["gang_policy"] = {"timeout": f"1{ARABIC_INDIC_5}m"}
    errors = _errors(_compile(doc))
    assert [e.path for e in errors] == ["spec.kubernetes.gang_policy.timeout"]


# -- 6. paths and namespaces with meaning elsewhere ---------------------------------------

@pytest.mark.parametrize("path", ["/etc", "/etc/slurm", "/var/spool/../../etc", "/var/spool/./x/..", "/",
                                  "/var", "/usr/lib/slurm", "/home", "/proc/1", "/root/state"])
def test_state_save_location_must_be_a_directory_of_its_own(path):
    doc = yaml.safe_load(yaml.safe_dump(QUICKSTART))
    doc["spec"]["slurm"]["state_save_location"] = path
    errors = _errors(_compile(doc))
    assert [e.path for e in errors] == ["spec.slurm.state_save_location"]
    assert any(why in errors[0].message for why in ("slurm user", "'..'", "absolute path of letters"))
    assert errors[0].line > 1  # located


@pytest.mark.parametrize("path", ["/var/spool/slurmctld", "/shared/slurm/state", "/srv/slurmctld/"])
def test_state_save_location_accepts_own_directories(path):
    doc = yaml.safe_load(yaml.safe_dump(QUICKSTART))
    doc["spec"]["slurm"]["state_save_location"] = path
    assert not _errors(_compile(doc))


def _with_tenants(*tenants):
    doc = yaml.safe_load(yaml.safe_dump(MUSEUM))
    doc["spec"]["kubernetes"]["tenants"] = list(tenants)
    return doc


@pytest.mark.parametrize("namespace", ["kube-system", "default", "kube-public", "kueue-system", "gpu-operator",
                                       "kube-amd-gpu", "volcano-system", "kube-anything"])
def test_tenant_namespaces_that_belong_to_the_system_are_refused(namespace):
    doc = _with_tenants({"name": "research", "namespaces": ["research", namespace]})
    errors = _errors(_compile(doc))
    assert [e.path for e in errors] == ["spec.kubernetes.tenants[0].namespaces[1]"]
    assert "belongs to Kubernetes or to an operator" in errors[0].message


def test_a_namespace_twice_is_refused_where_it_repeats():
    errors = _errors(_compile(_with_tenants({"name": "a", "namespaces": ["team-a"]},
                                            {"name": "b", "namespaces": ["team-b", "team-a"]})))
    assert [e.path for e in errors] == ["spec.kubernetes.tenants[1].namespaces[1]"]
    assert "tenant 'a'" in errors[0].message
    errors = _errors(_compile(_with_tenants({"name": "a", "namespaces": ["team-a", "team-a"]})))
    assert [e.path for e in errors] == ["spec.kubernetes.tenants[0].namespaces[1]"]
    errors = _errors(_compile(_with_tenants({"name": "a", "namespaces": ["x1"]}, {"name": "a", "namespaces": ["x2"]})))
    assert [e.path for e in errors] == ["spec.kubernetes.tenants[1].name"]


def test_every_namespace_fleetspec_installs_into_is_reserved():
    assert set(NAMESPACES.values()) <= RESERVED_NAMESPACES


# -- 4. unbounded input -------------------------------------------------------------------

def test_a_hostlist_is_counted_before_it_is_expanded():
    started = time.perf_counter()
    with pytest.raises(HostlistError, match="at most"):
        expand("n[0-999999999999]")
    assert count("n[0-999999999999]x[1-10]") == 10**13
    assert time.perf_counter() - started < 0.5


def test_the_bound_holds_for_the_whole_fleet_not_per_hostlist():
    """A kilobyte of hostlists, each under the bound, must not add up to gigabytes."""
    doc = yaml.safe_load(yaml.safe_dump(QUICKSTART))
    group = doc["spec"]["racks"][0]["nodes"][0]
    per_group = MAX_HOSTS // 2 + 1
    doc["spec"]["racks"][0]["nodes"] = [dict(group, hosts=f"g{i}-[1-{per_group}]") for i in range(40)]
    started = time.perf_counter()
    errors = _errors(_compile(doc))
    assert time.perf_counter() - started < 60  # expanding all 4,000,040 names took minutes and gigabytes
    bad = [e for e in errors if e.rule == "bad-hostlist"]
    assert bad and all("at most" in e.message for e in bad)
    assert bad[0].path == "spec.racks[0].nodes[1].hosts"  # the first group fits, the second crosses the bound


def test_an_extra_partition_cannot_name_more_hosts_than_the_fleet_has():
    doc = yaml.safe_load(yaml.safe_dump(QUICKSTART))
    doc["spec"]["slurm"]["partitions"]["debug"]["nodes"] = "h100-[1-99999999]"
    errors = _errors(_compile(doc))
    assert [e.path for e in errors] == ["spec.slurm.partitions.debug.nodes"]


def test_validate_dev_zero_stops_at_the_bound():
    started = time.perf_counter()
    result = compile_file("/dev/zero")
    assert time.perf_counter() - started < 10
    assert [f.message for f in result.located()][0].startswith("input is larger than 16 MB")


def test_a_fifo_without_a_writer_does_not_hang(tmp_path):
    fifo = tmp_path / "spec.yaml"
    os.mkfifo(fifo)
    result = compile_file(fifo)
    assert "empty" in result.located()[0].message


def test_a_10_mb_line_is_not_echoed_whole(tmp_path):
    text = (EXAMPLES / "quickstart.yaml").read_text().replace(
        'max_time: "00:30:00"', 'max_time: "' + "9" * 10_000_000 + 'x"')
    spec = tmp_path / "fleet.yaml"
    spec.write_text(text)
    result = compile_file(spec)
    [error] = _errors(result)
    assert len(error.source_line) <= EXCERPT_CHARS + 6
    assert len(error.message) < 500
    assert error.source_line[error.caret:].startswith('"999')  # the caret still points at the value


# -- 3. no literal secret echoed ----------------------------------------------------------

def test_a_literal_secret_in_a_wrong_place_is_not_echoed(tmp_path):
    from typer.testing import CliRunner

    from fleetspec.cli import app

    secret = "hunter2-correct-horse-battery"
    text = (EXAMPLES / "quickstart.yaml").read_text()
    cases = [
        text + f"  secrets:\n    slurmdbd_password: {secret}\n",  # a value where a reference belongs
        text + f"  secrets:\n    munge_keyy: {secret}\n",  # a typo in the key
        text.replace("    mode: native\n", f"    mode: native\n    db_password: {secret}\n"),  # elsewhere
    ]
    for i, case in enumerate(cases):
        spec = tmp_path / f"fleet{i}.yaml"
        spec.write_text(case)
        for fmt in ("text", "json", "github"):
            result = CliRunner().invoke(app, ["validate", str(spec), "--format", fmt])
            assert result.exit_code == 1, result.output
            assert secret not in result.output, (i, fmt, result.output)


def test_a_password_under_a_slurm_pass_key_is_not_echoed(tmp_path):
    """StoragePass/AccountingStoragePass are refused (the password is a secret reference),
    and the line that holds the literal is not echoed in any format, SARIF snippets too;
    a Slurm ...Pass value that could not be written on a line is not quoted either."""
    from typer.testing import CliRunner

    from fleetspec.cli import app

    secret = "hunter2-correct-horse-battery"
    text = (EXAMPLES / "quickstart.yaml").read_text()
    add = "    accounting: {host: db-01}\n"
    cases = [
        text.replace(add, add + f"    slurmdbd_settings: {{StoragePass: {secret}}}\n"),
        text.replace(add, add + f"    settings:\n      AccountingStoragePass: {secret}\n"),
        text.replace(add, add + f"    settings: {{JobCompPass: \"{secret} x\"}}\n"),
    ]
    for i, case in enumerate(cases):
        assert case != text
        spec = tmp_path / f"fleet{i}.yaml"
        spec.write_text(case)
        for fmt in ("text", "json", "github", "sarif"):
            result = CliRunner().invoke(app, ["validate", str(spec), "--format", fmt])
            assert result.exit_code == 1, result.output
            assert "site-settings" in result.output, (i, fmt, result.output)
            assert secret not in result.output, (i, fmt, result.output)


def test_an_integer_over_4300_digits_is_a_located_error(tmp_path):
    """PyYAML's int() raised Python's digit-limit ValueError as a traceback."""
    from typer.testing import CliRunner

    from fleetspec.cli import app

    text = (EXAMPLES / "quickstart.yaml").read_text()
    for number in ("9" * 5000, "0x" + "f" * 5000):
        spec = tmp_path / "fleet.yaml"
        spec.write_text(text.replace("cpus: ", f"cpus: {number} #", 1))
        line = next(i for i, x in enumerate(spec.read_text().splitlines(), 1) if number in x)
        result = CliRunner().invoke(app, ["validate", str(spec)])
        assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.exception
        assert f"fleet.yaml:{line}:" in result.output and "characters long" in result.output, result.output
