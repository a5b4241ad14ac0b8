"""Version strings as the GPU stack writes them, compared numerically.

``580.95.05`` > ``580.9``; ``v26.7.0`` == ``26.7.0``; ``2.28.3-1+cuda13.0`` compares on
its upstream part. Anything that is not dotted numbers is not a version here.
"""

from __future__ import annotations

import re

# Bounded: a part of 5,000 digits is not a version, and int() would refuse it (Python's
# 4,300-digit limit) with a ValueError far from here.
_VERSION = re.compile(r"^v?([0-9]{1,18}(?:\.[0-9]{1,18}){0,15})$")


def parse_version(text: str) -> tuple[int, ...] | None:
    """``"580.95.05"`` -> ``(580, 95, 5)``; ``None`` when ``text`` is not a version."""
    m = _VERSION.match(text.strip()) if isinstance(text, str) else None
    if m is None:
        return None
    return tuple(int(part) for part in m.group(1).split("."))


def version_key(text: str) -> tuple[int, ...]:
    """Like :func:`parse_version` but raises ``ValueError`` on a non-version."""
    parsed = parse_version(text)
    if parsed is None:
        raise ValueError(f"not a version: {text!r}")
    return parsed


def at_least(version: str, minimum: str) -> bool:
    """``version >= minimum``, comparing only as many parts as ``minimum`` names
    beyond zero-padding (``25.11`` >= ``25.11.0``)."""
    return _padded(version_key(version), version_key(minimum)) >= _padded(
        version_key(minimum), version_key(version)
    )


def _padded(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    return a + (0,) * max(0, len(b) - len(a))


def major_minor(version: str) -> str:
    """``"13.0.2"`` -> ``"13.0"``."""
    parts = version_key(version)
    return f"{parts[0]}.{parts[1] if len(parts) > 1 else 0}"


def series_matches(version: str, series: str) -> bool:
    """Whether ``version`` belongs to ``series``: ``"6.3.1"`` in ``"6.3"``."""
    v, s = version_key(version), version_key(series)
    return v[: len(s)] == s
