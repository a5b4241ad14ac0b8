"""Slurm time syntax, as the spec model and the renderer read it."""

from __future__ import annotations

import pytest

from fleetspec.pipeline import compile_text
from fleetspec.slurm_syntax import slurm_time_minutes, slurm_time_problem
from tests.conftest import EXAMPLES


@pytest.mark.parametrize(
    ("text", "minutes"),
    [("30", 30), ("00:30:00", 30), ("90:30", 91), ("2-00:00:00", 2880), ("1-12", 2160),
     ("1-12:30", 2190), ("INFINITE", -1), ("unlimited", -1), ("0", 0),
     # a field past its unit carries over, as slurmctld reads it (test below)
     ("7-0:00:99", 10082), ("1-25:00:00", 2940), ("00:61:00", 61), ("59:99", 61), ("1-2:99", 1659)],
)
def test_slurm_times(text, minutes):
    assert slurm_time_minutes(text) == minutes
    assert slurm_time_problem(text) is None


@pytest.mark.parametrize("text", ["2d", "48h", "1:2:3:4", "1-2:3:4:5", "", "forever", "-1", "1.5"])
def test_not_slurm_times(text):
    assert slurm_time_minutes(text) is None
    problem = slurm_time_problem(text)
    assert problem is not None and "days-hours:minutes:seconds" in problem


def test_the_spec_refuses_a_max_time_slurm_would_not_read():
    text = (EXAMPLES / "quickstart.yaml").read_text().replace('max_time: "00:30:00"', 'max_time: "1:2:3:4"')
    [finding] = compile_text(text, "f.yaml").located()
    assert finding.rule == "schema" and "not a Slurm time" in finding.message


@pytest.mark.slurm
@pytest.mark.usefixtures("slurm_installed")
def test_slurmctld_reads_a_field_past_its_unit_as_the_minutes_counted_here(tmp_path):
    """ocotillo's MaxTime=7-0:00:99 (brownfield/ocotillo-2020): Debian 12's slurmctld carries
    the 99 seconds over and rounds up to the minute; so does slurm_time_minutes."""
    from pathlib import PurePosixPath

    from tests.slurm.cluster import Cluster

    times = ["7-0:00:99", "1-25:00:00", "00:61:00", "59:99", "1-2:99", "90:30"]
    conf = "ClusterName=t\nSlurmctldHost=localhost\nNodeName=n1 CPUs=1 RealMemory=100 State=UNKNOWN\n" + "".join(
        f"PartitionName=p{i} Nodes=n1 MaxTime={t} State=UP\n" for i, t in enumerate(times))
    cluster = Cluster(tmp_path, {PurePosixPath("slurm/slurm.conf"): conf})
    try:
        cluster.start(wait_idle=False, nodes=())
        shown = cluster.run("scontrol", "-o", "show", "partition").stdout
    finally:
        cluster.stop()
    for i, t in enumerate(times):
        [line] = [line for line in shown.splitlines() if line.startswith(f"PartitionName=p{i} ")]
        value = line.split("MaxTime=", 1)[1].split()[0]
        days, _, hms = value.rpartition("-")
        h, m, s = (int(x) for x in hms.split(":"))
        assert (int(days or 0) * 24 + h) * 60 + m + (1 if s else 0) == slurm_time_minutes(t), (t, value)
