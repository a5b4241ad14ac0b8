"""verify attests MIG geometry (#46) from a real-shaped MIG fact: the H200 node's own
``nvidia-smi -q -x`` with MIG on and its ``nvidia-smi mig -lgi`` (tests/data/fixtures/h200-mig,
modelled on the real capture and NVIDIA's documented output; its README says how)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fleetspec.node_side import collector as parsers
from fleetspec.pipeline import compile_text
from fleetspec.verify.compare import Status, compare
from tests.conftest import require_shared
from tests.verify.h200_facts import h200_facts, variant
from tests.verify.test_collector import run_collector

SPEC = (Path(__file__).parent / "specs" / "h200.yaml").read_text()
MIG = "fixtures/h200-mig"


def _fleet(mig: str | None):
    text = SPEC if mig is None else SPEC.replace("gpu: {model: h200, count: 1}",
                                                 f"gpu: {{model: h200, count: 1, mig: {mig}}}")
    result = compile_text(text, "h200.yaml")
    assert result.valid, result.located()
    return result.fleet


def _mig_facts() -> dict:
    """The H200 facts with the MIG fixture's GPU, as the collector merges it."""
    xml = parsers.parse_nvidia_smi_xml((require_shared(MIG) / "nvidia-smi-q.xml").read_text())
    instances = parsers.parse_mig_lgi((require_shared(MIG) / "nvidia-smi-mig-lgi.txt").read_text())
    facts = h200_facts()
    gpu = dict(facts["nvidia"]["gpus"][0], mig_mode=xml["gpus"][0]["mig_mode"], mig_instances=instances[0])
    return variant(facts, **{"nvidia.gpus": [gpu]})


def _mig_check(fleet, facts):
    report = compare(fleet, {"h200-001": facts, "h200-002": variant(facts, hostname="h200-002")})
    node = next(n for n in report.nodes if n.hostname == "h200-001")
    return next((c for c in node.checks if c.component == "mig"), None), report


def test_the_declared_geometry_is_attested():
    check, report = _mig_check(_fleet("all-balanced"), _mig_facts())
    assert check.status is Status.OK and check.found == "2x1g.18gb,1x2g.35gb,1x3g.71gb"
    assert all(c.status is not Status.DRIFT for n in report.nodes for c in n.checks if c.component == "mig")


def test_another_geometry_is_drift_repaired_by_a_drain():
    check, report = _mig_check(_fleet("all-1g.18gb"), _mig_facts())
    assert check.status is Status.DRIFT and not report.conforms
    assert check.expected == "7x1g.18gb" and check.found == "GPU 0: 2x1g.18gb,1x2g.35gb,1x3g.71gb"
    assert check.disruption == "drain"


def test_mig_off_where_the_spec_declares_it_is_drift_needing_a_reset():
    check, _ = _mig_check(_fleet("all-balanced"), h200_facts())  # the real capture: MIG disabled
    assert check.status is Status.DRIFT and check.found == "GPU 0: MIG disabled"
    assert check.disruption == "drain-reboot"


def test_mig_on_where_the_spec_has_whole_gpus_is_drift():
    check, _ = _mig_check(_fleet(None), _mig_facts())
    assert check.status is Status.DRIFT and check.expected == "MIG off" and check.found == "MIG on GPU 0"


def test_a_node_without_mig_anywhere_gets_no_mig_check():
    check, _ = _mig_check(_fleet(None), h200_facts())
    assert check is None


def test_the_collector_asks_mig_lgi_only_where_mig_is_on(tmp_path: Path):
    """nvidia-smi replaying the fixture's answers: the instances land on the GPU's facts."""
    shared = require_shared(MIG)
    csv_lines = (require_shared("fixtures/h200-node") / "query-gpu.csv").read_text().splitlines()[1:]
    noheader = "\n".join(line.replace(" MiB", "") for line in csv_lines)
    tool = tmp_path / "nvidia-smi"
    tool.write_text(
        "#!/bin/sh\n"
        f"case \"$*\" in *--query-gpu*) printf '%s\\n' '{noheader}';; "
        f"'-q -x') cat '{shared / 'nvidia-smi-q.xml'}';; "
        f"'mig -lgi') cat '{shared / 'nvidia-smi-mig-lgi.txt'}';; *) exit 9;; esac\n")
    tool.chmod(0o755)
    env = dict(os.environ, PATH=f"{tmp_path}:{os.environ.get('PATH', '')}")
    nvidia = run_collector(env=env)["nvidia"]
    assert nvidia["errors"] == []
    assert nvidia["gpus"][0]["mig_instances"] == ["1g.18gb", "1g.18gb", "2g.35gb", "3g.71gb"]


@pytest.mark.parametrize("text", ["", "No MIG-enabled devices found.", "|   x  MIG 1g.18gb  19  13  6:1 |"])
def test_mig_lgi_without_rows_is_no_instances(text):
    assert parsers.parse_mig_lgi(text) == {}
