"""Slurm time syntax (``MaxTime``, ``DefaultTime``), read the way slurmctld reads it.

The spec model checks ``max_time`` with `slurm_time_problem`, so a bad value stops at
``validate`` instead of becoming a slurm.conf that slurmctld refuses; the renderer uses
`slurm_time_minutes` to derive ``DefaultTime``. Names need no Slurm-specific check:
the spec accepts only DNS labels, which every Slurm name field reads as written.
"""

from __future__ import annotations

import re

_INFINITE = frozenset({"infinite", "unlimited"})
# Slurm time formats (sbatch --time, MaxTime): minutes, minutes:seconds,
# hours:minutes:seconds, days-hours, days-hours:minutes, days-hours:minutes:seconds.
_TIME_FORMS = (
    re.compile(r"^(?P<m>[0-9]+)$"),
    re.compile(r"^(?P<m>[0-9]+):(?P<s>[0-9]+)$"),
    re.compile(r"^(?P<h>[0-9]+):(?P<m>[0-9]+):(?P<s>[0-9]+)$"),
    re.compile(r"^(?P<d>[0-9]+)-(?P<h>[0-9]+)$"),
    re.compile(r"^(?P<d>[0-9]+)-(?P<h>[0-9]+):(?P<m>[0-9]+)$"),
    re.compile(r"^(?P<d>[0-9]+)-(?P<h>[0-9]+):(?P<m>[0-9]+):(?P<s>[0-9]+)$"),
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
        # No field is bounded by its unit: Slurm carries over (parse_time.c's time_str2secs sums
        # the fields), and rounds the seconds up to whole minutes. Debian 12's 22.05.8 shows
        # MaxTime=7-0:00:99 as 7-00:02:00, 1-25:00:00 as 2-01:00:00, 59:99 as 01:01:00
        # (tests/slurm/test_slurm_syntax.py starts it on these).
        seconds = ((parts.get("d", 0) * 24 + parts.get("h", 0)) * 60 + parts.get("m", 0)) * 60 + parts.get("s", 0)
        return -(-seconds // 60)
    return None


def slurm_time_problem(text: str) -> str | None:
    """None when ``text`` is a Slurm time (``MaxTime``), else why not."""
    if slurm_time_minutes(text) is not None and text == text.strip():
        return None
    shown = repr(text) if len(text) <= 40 else repr(text[:36]) + "..."
    return f"{shown} is not a Slurm time; write {TIME_FORMS_TEXT} (e.g. \"2-00:00:00\" for two days)"
