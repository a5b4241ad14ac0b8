"""slurm.conf keys Slurm removed or renamed: one table, each row with its evidence.

Old hand-kept files carry keys later releases refuse. The importer reads them as the
site's own release does: a key that release still takes is kept as written; from the
release that refuses it on, the key is translated to what replaced it (where Slurm says
what did) or dropped, each with a warning at its line naming that release. A key of this
table is never refused as a typo, and never passed on to a release that stops on it.

``refused_from`` is the first release *verified* to refuse (or ignore) the key: the
evidence says how. Where the removal itself is older but no artefact read here dates it,
the row says so ("removed before ..."), never a guess from a version pattern.
"""

from __future__ import annotations

from dataclasses import dataclass

from fleetspec.importer.conf import Pair, Problem
from fleetspec.versions import parse_version

# Debian 12's slurmctld 22.05.8 (tests/importer/test_import_parse.py runs its parser on
# each key below): what it says is quoted in each row.
_REAL_2205 = "Debian 12's slurm 22.05.8"


@dataclass(frozen=True)
class Removed:
    key: str  # Slurm's spelling
    refused_from: str  # first release verified to refuse or ignore it
    removed: str  # when Slurm removed it, as far as the evidence dates it
    evidence: str  # where that is written
    becomes: str  # "drop", or the key it is read as (see `read_removed`)


REMOVED: tuple[Removed, ...] = (
    Removed("FastSchedule", "20.02", "Slurm 20.02",
            "read_config.c from slurm-20.02 on: \"The FastSchedule option has been removed. The FastSchedule=2 "
            "functionality is available through the SlurmdParameters=config_overrides option\"; =1 is logged "
            f"\"Ignoring obsolete FastSchedule=1 option\" ({_REAL_2205} says both)",
            "SlurmdParameters"),
    Removed("AccountingStoreJobComment", "22.05", "before Slurm 22.05",
            f"{_REAL_2205} stops on it: \"fatal: The AccountingStoreJobComment option has been removed, please "
            "use AccountingStoreFlags=job_comment option instead.\" (read_config.c)",
            "AccountingStoreFlags"),
    Removed("JobCheckpointDir", "22.05", "with the checkpoint plugins, after Slurm 19.05",
            "slurm_checkpoint(3) still ships in libslurm-dev 19.05.5 "
            "(https://manpages.ubuntu.com/manpages/focal/man3/slurm_checkpoint.3.html); "
            f"{_REAL_2205} stops on it: \"Parsing error at unrecognized key: JobCheckpointDir\"",
            "drop"),
    Removed("CheckpointType", "22.05", "with the checkpoint plugins, after Slurm 19.05",
            "as JobCheckpointDir: slurm_checkpoint(3) in libslurm-dev 19.05.5; no checkpoint plugin in "
            f"{_REAL_2205}, whose parser stops on the key (\"Parsing error at unrecognized key\")",
            "drop"),
    Removed("SchedulerPort", "22.05", "before Slurm 22.05 (the port of the sched/wiki plugins)",
            f"{_REAL_2205} stops on it: \"Parsing error at unrecognized key\"", "drop"),
    Removed("CacheGroups", "22.05", "before Slurm 22.05 (slurmctld resolves groups itself: GroupUpdateTime)",
            f"{_REAL_2205} stops on it: \"Parsing error at unrecognized key\"", "drop"),
) + tuple(
    Removed(f"DefaultStorage{what}", "22.05", "before Slurm 22.05",
            "slurm.conf(5) of 17.11 documents DefaultStorage<X> as the default of AccountingStorage<X> "
            "(https://manpages.ubuntu.com/manpages/bionic/man5/slurm.conf.5.html); "
            f"{_REAL_2205} stops on it: \"Parsing error at unrecognized key\"",
            f"AccountingStorage{what}")
    for what in ("Type", "Host", "Port", "User", "Pass", "Loc")
)

_BY_KEY = {r.key.lower(): r for r in REMOVED}


@dataclass(frozen=True)
class Implied:
    """What a removed key stands for: ``pair`` set where the file does not set that key,
    or (``flag``) added to the comma list the file gives it."""

    pair: Pair
    flag: bool = False


def removed(key: str) -> Removed | None:
    return _BY_KEY.get(key.lower())


def _series(version: str | None) -> tuple[int, ...]:
    return (parse_version(version or "") or (0,))[:2]


def read_removed(pair: Pair, release: str | None, warnings: list[Problem]) -> list[Implied] | None:
    """A removed key at ``pair``: what it is read as (possibly nothing), a warning at it.
    None: not a removed key, or the site's ``release`` still takes it (then it is kept as
    written)."""
    row = removed(pair.key)
    if row is None:
        return None
    if release and _series(release) < _series(row.refused_from):
        return None
    value = pair.value.strip()
    out: list[Implied] = []
    if row.key == "FastSchedule" and value == "2":
        out.append(Implied(Pair("SlurmdParameters", "config_overrides", pair.key_at, pair.value_at), flag=True))
        what = "becomes SlurmdParameters=config_overrides"
    elif row.key == "AccountingStoreJobComment" and value.lower() in ("yes", "y", "true", "1"):
        out.append(Implied(Pair("AccountingStoreFlags", "job_comment", pair.key_at, pair.value_at), flag=True))
        what = "becomes AccountingStoreFlags=job_comment"
    elif row.becomes != "drop" and row.key.startswith("DefaultStorage"):
        target = value if row.becomes != "AccountingStorageType" or "/" in value else f"accounting_storage/{value}"
        out.append(Implied(Pair(row.becomes, target, pair.key_at, pair.value_at)))
        what = f"is read as {row.becomes}={_clip(target)} where the file does not set {row.becomes}"
    else:
        what = "is dropped"
    on = f"Slurm {release}" if release else "current Slurm"
    warnings.append(Problem(pair.key_at, f"{pair.key}={_clip(pair.value)} {what}: Slurm removed it "
                            f"({row.removed}), and {on} would not take it ({row.evidence})", "warning"))
    return out


def _clip(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
