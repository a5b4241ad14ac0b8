"""What Slurm accepts in the names and values fleetspec writes into its configuration.

Pure validators for the rules layer: each ``*_problem`` function returns None when
Slurm reads the value as meant, else a message that says what is wrong and how to fix
it. The rules turn a message into a finding, so a bad spec stops at ``validate``
instead of becoming a slurm.conf that slurmctld refuses (or, worse, misreads).
"""

from __future__ import annotations

import re

# slurm.conf keywords that are not names: "PartitionName=DEFAULT" / "NodeName=DEFAULT"
# set defaults for the lines after them, "ALL" means every node in partition lists.
RESERVED_NAMES = frozenset({"default", "all"})

# Slurm keeps node, switch and block names in fixed buffers of 64 bytes (HOST_NAME_MAX).
MAX_NAME_LENGTH = 64

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_FEATURE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
_INFINITE = frozenset({"infinite", "unlimited"})
# Slurm time formats (sbatch --time, MaxTime): minutes, minutes:seconds,
# hours:minutes:seconds, days-hours, days-hours:minutes, days-hours:minutes:seconds.
_TIME_FORMS = (
    re.compile(r"^(?P<m>\d+)$"),
    re.compile(r"^(?P<m>\d+):(?P<s>\d+)$"),
    re.compile(r"^(?P<h>\d+):(?P<m>\d+):(?P<s>\d+)$"),
    re.compile(r"^(?P<d>\d+)-(?P<h>\d+)$"),
    re.compile(r"^(?P<d>\d+)-(?P<h>\d+):(?P<m>\d+)$"),
    re.compile(r"^(?P<d>\d+)-(?P<h>\d+):(?P<m>\d+):(?P<s>\d+)$"),
)
TIME_FORMS_TEXT = (
    '"minutes", "minutes:seconds", "hours:minutes:seconds", "days-hours", '
    '"days-hours:minutes", "days-hours:minutes:seconds" or "INFINITE"'
)


def slurm_time_minutes(text: str) -> int | None:
    """Minutes in a Slurm time value (seconds round up, as Slurm does); None when
    ``text`` is not Slurm time syntax. ``INFINITE``/``UNLIMITED`` give -1."""
    value = text.strip()
    if value.lower() in _INFINITE:
        return -1
    for form in _TIME_FORMS:
        m = form.match(value)
        if m is None:
            continue
        parts = {k: int(v) for k, v in m.groupdict().items() if v is not None}
        # A field that is not the leading one must stay inside its unit.
        limits = {"s": 60, "m": 60, "h": 24}
        leading = next(iter(m.groupdict()))
        if any(parts[k] >= limit for k, limit in limits.items() if k in parts and k != leading):
            return None
        seconds = parts.get("s", 0)
        minutes = parts.get("d", 0) * 1440 + parts.get("h", 0) * 60 + parts.get("m", 0)
        return minutes + (1 if seconds else 0)
    return None


def slurm_time_problem(text: str) -> str | None:
    """None when ``text`` is a Slurm time (``MaxTime``), else why not."""
    if slurm_time_minutes(text) is not None:
        return None
    return f"{text!r} is not a Slurm time; write {TIME_FORMS_TEXT} (e.g. \"2-00:00:00\" for two days)"


def _name_problem(kind: str, name: str) -> str | None:
    if not name:
        return f"an empty {kind} name"
    if len(name) > MAX_NAME_LENGTH:
        return f"{kind} name {name!r} is {len(name)} characters; Slurm keeps at most {MAX_NAME_LENGTH}"
    if name.lower() in RESERVED_NAMES:
        return f"{kind} name {name!r} is a slurm.conf keyword (DEFAULT, ALL); pick another name"
    if not _NAME.match(name):
        return (
            f"{kind} name {name!r} cannot be written in Slurm's configuration: use letters, digits, "
            "'-', '_' and '.', starting with a letter or digit (no spaces, ',', '=', '#', brackets)"
        )
    return None


def hostname_problem(name: str) -> str | None:
    """None when Slurm can name a node ``name`` in NodeName lines and hostlists.

    Brackets and commas are hostlist syntax, '=' and whitespace end a slurm.conf
    value, '#' starts a comment: any of them would turn one host into something else.
    """
    return _name_problem("host", name)


def switch_name_problem(name: str) -> str | None:
    """None when ``name`` works as a topology SwitchName/BlockName (leaf, spine, rack)."""
    return _name_problem("switch", name)


def partition_name_problem(name: str) -> str | None:
    """None when ``name`` works as a Slurm PartitionName."""
    return _name_problem("partition", name)


def feature_problem(feature: str) -> str | None:
    """None when ``feature`` can be asked for in ``--constraint`` as is.

    Constraint expressions use ``& | , * [ ] ( ) ! :`` as operators, so a feature
    holding one of them could be declared but never requested.
    """
    if feature and len(feature) <= MAX_NAME_LENGTH and _FEATURE.match(feature):
        return None
    return (
        f"node feature {feature!r} cannot be used in --constraint: use letters, digits, "
        f"'-', '_' and '.' (at most {MAX_NAME_LENGTH} characters)"
    )
