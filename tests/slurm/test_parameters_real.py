"""The catalog's per-release slurm.conf key tables (catalog/data/slurm_parameters.yaml), held
against real slurmctld of each release here: Debian's 22.05.8, 24.11.5 and 26.05.5 (#47).

slurmctld reads the whole of slurm.conf before it stops on the keys it does not know
("_parse_next_key: Parsing error at unrecognized key: K", one line per key, then "fatal:
Unable to process configuration file"), so one start with every key of the tables (each
set to 1: only the key's name matters to that parser) tells which keys a release knows.
"""

from __future__ import annotations

import re

import pytest

from fleetspec.lab.slurm import Cluster
from fleetspec.lab.slurm_releases import RELEASES, command_prefix, ensure_release_root
from fleetspec.render.slurm import render_slurm
from fleetspec.site.slurm import UNCONFIRMED, parameters
from fleetspec.versions import at_least

from . import fleets

pytestmark = [pytest.mark.slurm]

UNRECOGNIZED = re.compile(r"unrecognized key: (\w+)")


def expected(release: str) -> tuple[set[str], set[str]]:
    """(keys the catalog lets through for ``release``, keys it refuses as not yet parsed);
    keys it calls defunct there are in neither (a release may parse or drop them)."""
    table = parameters().files["slurm.conf"]
    parsed = {k for k in table.known.values() if k not in table.defunct}
    refused: set[str] = set()
    for key, since in table.added.values():
        if since == UNCONFIRMED:
            no = release == parameters().verified or key.lower() in table.refused_by.get(release, ())
        else:
            no = not at_least(release, since)
        (refused if no else parsed).add(key)
    parsed |= {k for k, gone in table.defunct.items() if gone != UNCONFIRMED and not at_least(release, gone)}
    return parsed, refused


@pytest.mark.parametrize("release", list(RELEASES))
def test_slurmctld_knows_exactly_the_keys_the_catalog_gives_its_release(release, tmp_path, slurm_release):
    slurm_release(release)
    cluster = Cluster(tmp_path, render_slurm(fleets.single_h100()),
                      prefix=command_prefix(ensure_release_root(RELEASES[release])))
    text = cluster.conf.read_text()
    written = {line.split("=", 1)[0].strip().lower() for line in text.splitlines() if "=" in line}
    table = parameters().files["slurm.conf"]
    every = [*table.known.values(), *(k for k, _ in table.added.values()), *table.defunct]
    cluster.conf.write_text(text + "".join(f"{k}=1\n" for k in dict.fromkeys(every) if k.lower() not in written))
    done = cluster.run("timeout", "30", "slurmctld", "-D", check=False, timeout=60)
    output = done.stdout + done.stderr
    assert done.returncode not in (0, 124), output  # it stopped on the file, as it must
    unknown = set(UNRECOGNIZED.findall(output))
    parsed, refused = expected(release)
    assert unknown & parsed == set(), f"Slurm {release} refuses keys the catalog lets through"
    assert refused - unknown == set(), f"Slurm {release} parses keys the catalog refuses"
    assert unknown <= refused | set(table.defunct), unknown - refused
    # A key every release here stops on after parsing it (catalog `defunct` since 22.05).
    cluster.conf.write_text(text + "AccountingStoreJobComment=YES\n")
    done = cluster.run("timeout", "30", "slurmctld", "-D", check=False, timeout=60)
    assert "AccountingStoreJobComment option has been removed" in done.stdout + done.stderr
    assert table.defunct["AccountingStoreJobComment"] == "22.05"
