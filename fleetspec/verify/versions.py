"""Version agreement by meaning, for facts that state versions in different shapes.

Why not plain equality: the same CUDA shows up as ``13.0.2`` (version.json), ``13.0``
(nvcc, cudaRuntimeGetVersion) and ``13.0.2-1`` (a package); the same NCCL as ``2.28.3``
(ncclGetVersion) and ``2.28.3-1+cuda13.0`` (libnccl2). A spec may pin a series
(cuda ``13.0``) or a release (``13.0.2``). Pure functions, no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

# Leading upstream version of a package or tool string: drops a Debian epoch ("1:"),
# a leading "v", and everything from the first character that is not part of it
# ("-1+cuda13.0", "+cu130", " (Open Kernel Module)").
_UPSTREAM = re.compile(r"^\s*(?:[0-9]+:)?v?([0-9]+(?:\.[0-9]+)*)")

Agreement = Literal["exact", "series", "partial"]


@dataclass(frozen=True, slots=True)
class VersionMatch:
    """How ``found`` agrees with ``expected``.

    ``exact``: the same version (zero padding ignored: ``25.11`` == ``25.11.0``).
    ``series``: the spec pins a series and ``found`` is in it (``13.0`` pins, ``13.0.2`` found).
    ``partial``: the source shows fewer parts than the spec pins and those agree
    (nvcc ``13.0`` for a pinned ``13.0.2``): a match as far as the source can show.
    """

    agreement: Agreement
    shown: str  # the parsed upstream version of ``found``


def upstream(text: object) -> str | None:
    """``"2.28.3-1+cuda13.0"`` -> ``"2.28.3"``; ``"1:6.16.13.30300300-2327507"`` -> ``"6.16.13.30300300"``."""
    if not isinstance(text, str):
        return None
    m = _UPSTREAM.match(text)
    return m.group(1) if m else None


def _parts(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split("."))


def _strip_zeros(parts: tuple[int, ...]) -> tuple[int, ...]:
    while len(parts) > 1 and parts[-1] == 0:
        parts = parts[:-1]
    return parts


def match_version(expected: str, found: object) -> VersionMatch | None:
    """Whether ``found`` (any tool's or package's spelling) agrees with the pinned ``expected``.

    None when they disagree or ``found`` is not a version at all (``"absent"``).
    """
    shown = upstream(found)
    want = upstream(expected)
    if shown is None or want is None:
        return None
    f, e = _parts(shown), _parts(want)
    if _strip_zeros(f) == _strip_zeros(e):
        return VersionMatch("exact", shown)
    if len(f) > len(e) and f[: len(e)] == e:
        return VersionMatch("series", shown)
    if len(f) < len(e) and e[: len(f)] == f:
        return VersionMatch("partial", shown)
    return None


def at_precision(expected: str, found: str) -> str:
    """``found`` cut to as many parts as ``expected`` names: what the spec pins, nothing more.

    Partition fingerprints use it so that a node whose toolkit says ``13.0.2`` and one
    whose nvcc says ``13.0`` agree under a spec pinning ``13.0``.
    """
    shown = upstream(found)
    want = upstream(expected)
    if shown is None or want is None:
        return found
    return ".".join(shown.split(".")[: len(want.split("."))])
