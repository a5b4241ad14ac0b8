"""A node's ``State`` and ``Reason`` on its NodeName line, as the spec's ``slurm_state``.

slurm.conf(5) of 22.05.8 (Debian's slurm-client 22.05.8-4+deb12u3,
/usr/share/man/man5/slurm.conf.5.gz), NodeName ``State``: "Acceptable values are CLOUD, DOWN,
DRAIN, FAIL, FAILING, FUTURE and UNKNOWN"; ``Reason``: "Identifies the reason for a node being
in state DOWN, DRAINED, DRAINING, FAIL or FAILING. Use quotes to enclose a reason having more
than one word." UNKNOWN (the default) is a node in service: fleetspec writes it itself.
FAILING is FAIL with jobs still running: the spec keeps FAIL (no job survives a restart from
the files anyway). IDLE is not in the man page's list, but 22.05.8's parser takes it (it reads
any node state name) and real sites write it (TuragaLab/slurm_cluster's slurm.conf, shared
brownfield janelia-turaga-2017): kept as written, so the render is the site's line.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from fleetspec.importer.conf import Pair, Problem

STATES = ("CLOUD", "DOWN", "DRAIN", "FAIL", "FUTURE", "IDLE")
_SPELLED = {**{s: s for s in STATES}, "FAILING": "FAIL"}
# The spec's pattern (fleetspec.spec.model.SLURM_NODE_REASON): one quoted string on a line.
_REASON = re.compile(r'[^"#\\\x00-\x1f\x7f]{1,256}')
_BAD_REASON = re.compile(r'["#\\\x00-\x1f\x7f]')


def clean_reason(text: str) -> tuple[str, bool]:
    """``text`` as a spec reason (at most 256 characters, none that a slurm.conf line cannot
    quote), and whether anything had to be taken out."""
    cleaned = re.sub(r"\s+", " ", _BAD_REASON.sub(" ", text)).strip()[:256]
    return cleaned, cleaned != text


def node_state(attrs: Mapping[str, Pair], problems: list[Problem], warnings: list[Problem]) -> dict[str, Any] | None:
    """``{"state": ..., "reason": ...}`` from a node's ``State``/``Reason`` pairs (None: in
    service, ``UNKNOWN`` or no State). A State slurm.conf(5) does not list is a problem at
    its value; a Reason the spec cannot quote is cleaned, with a warning."""
    state = attrs.get("State")
    reason = attrs.get("Reason")
    value = state.value.strip().upper() if state is not None else "UNKNOWN"
    if value == "UNKNOWN":
        if reason is not None:
            warnings.append(Problem(reason.key_at, f"Reason={reason.value[:60]!r} on a node in service (no State "
                                    "that takes a reason): Slurm shows it nowhere; not kept", "warning"))
        return None
    if value not in _SPELLED:
        where = state.value_at if state is not None else None
        problems.append(Problem(where, f"State={value[:40]}: not a node state of slurm.conf(5) (CLOUD, DOWN, "
                                "DRAIN, FAIL, FAILING, FUTURE, IDLE, UNKNOWN). Fix the line"))
        return None
    out: dict[str, Any] = {"state": _SPELLED[value]}
    if reason is not None and reason.value.strip():
        text, changed = clean_reason(reason.value)
        if changed:
            warnings.append(Problem(reason.value_at, "the node's Reason holds characters a slurm.conf line cannot "
                                    f"quote, or more than 256: kept as {text[:80]!r}", "warning"))
        if text:
            out["reason"] = text
    return out
