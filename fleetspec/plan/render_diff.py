"""``plan --diff``: the before and after each change carries (the same values as the JSON
plan), shown as a reviewer reads them: lists of lines (slurm.conf settings) as a unified
diff, mappings (a node's tuple, a release's values) as ``key: old -> new``, anything else
as ``old -> new``. Nodes whose diff reads the same share one block with a hostlist.

Bounded: ``MAX_LINES_PER_CHANGE`` per block and ``MAX_LINES`` in all, each with a line
saying what was cut (``plan --format json`` has everything). Values come from the spec,
the state and rendered files: control characters are shown escaped (fleetspec/text.py).
"""

from __future__ import annotations

import difflib
import json
from typing import Any

from fleetspec.node_side.hostlist import compress
from fleetspec.plan.model import Change
from fleetspec.text import printable

MAX_LINES_PER_CHANGE = 40
MAX_LINES = 400
MAX_VALUE_CHARS = 200


def diff_lines(changes: tuple[Change, ...]) -> list[str]:
    """The ``--diff`` section, line by line (not yet escaped for Rich markup)."""
    blocks: dict[tuple[str, str, tuple[str, ...]], list[Change]] = {}
    for c in changes:
        body = tuple(_body(c.before, c.after))
        kind = "node" if c.host is not None else c.target
        blocks.setdefault((kind, c.action.value, body), []).append(c)
    out: list[str] = []
    items = list(blocks.items())
    for index, ((kind, action, body), members) in enumerate(items):
        if len(out) >= MAX_LINES:
            left = sum(len(m) for _, m in items[index:])
            out.append(f"... diff cut at {MAX_LINES} lines ({left} change(s) not shown): "
                       "'plan --format json' has every before and after")
            break
        target = f"node:{compress(c.host or '' for c in members)}" if kind == "node" else kind
        count = f", {len(members)} nodes" if len(members) > 1 else ""
        out.append(printable(f"--- {target} ({action}{count})"))
        out.extend(printable(line) for line in body[:MAX_LINES_PER_CHANGE])
        if len(body) > MAX_LINES_PER_CHANGE:
            out.append(f"  ... {len(body) - MAX_LINES_PER_CHANGE} more line(s)")
    return out


def _body(before: Any, after: Any) -> list[str]:
    if _lines(before) and _lines(after):
        return _unified(before or [], after or [])
    if isinstance(before, dict) or isinstance(after, dict):
        b, a = before or {}, after or {}
        rows = []
        for key in [*b, *(k for k in a if k not in b)]:
            old, new = b.get(key), a.get(key)
            if old == new:
                continue
            if isinstance(old, str) and isinstance(new, str) and ("\n" in old or "\n" in new):
                rows.append(f"  {key}:")
                rows.extend("    " + line for line in _unified(old.splitlines(), new.splitlines()))
            else:
                rows.append(f"  {key}: {_show(old, key in b)} -> {_show(new, key in a)}")
        return rows
    return [f"  {_show(before, before is not None)} -> {_show(after, after is not None)}"]


def _lines(value: Any) -> bool:
    return value is None or (isinstance(value, list) and all(isinstance(x, str) for x in value))


def _unified(before: list[str], after: list[str]) -> list[str]:
    found = list(difflib.unified_diff(before, after, "before", "after", n=1, lineterm=""))
    return ["  " + line for line in found]


def _show(value: Any, present: bool) -> str:
    if not present:
        return "(absent)"
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return text if len(text) <= MAX_VALUE_CHARS else text[:MAX_VALUE_CHARS] + f"... ({len(text)} chars)"
