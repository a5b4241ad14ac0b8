"""Bounds on a node's facts document: the node's word, checked before anything reads it.

The collector (``fleetspec.io/facts/v1``, docs/facts.md) prints a few kilobytes: the real
H200 node's document (``shared/fixtures/h200-node``) is 3.9 KB, 5 levels deep, its longest
string 77 characters, its longest list 9 items. A node that is broken or hostile can print
anything, and whatever reads the document afterwards (version comparison turns each part
of ``580.95.05`` into an int; Python refuses a string of over 4,300 digits, CVE-2020-10735)
must not be the first to find out. So every document is walked once where it enters
(a facts directory, an Ansible run, ``fleetspec facts collect``) and refused, as that
node's problem with the JSON path of the first bad value, when it exceeds these bounds.
Pure: no I/O.
"""

from __future__ import annotations

import re
from typing import Any

MAX_DEPTH = 32  # the collector nests 5 levels
MAX_STRING = 4096  # characters; the collector clips command output to 200 (collector.py)
MAX_KEY = 256
MAX_ITEMS = 65_536  # per list or object: a node with many Python environments lists many libraries
MAX_VALUES = 1_000_000  # in the whole document
# A version part: the longest real one seen is 8 digits (amdgpu 6.16.13.30300300, ROCm's
# packaging; verify/versions.py). 18 digits still fits a 64-bit integer.
MAX_VERSION_DIGITS = 18
_LONG_DIGITS = re.compile(rf"[0-9]{{{MAX_VERSION_DIGITS + 1},}}")


def facts_problem(document: Any) -> str | None:
    """The first value of ``document`` outside the bounds, as ``path: what is wrong``
    (None: within them). A field whose key names a version (``driver_version``,
    ``rccl_versions``, ``version``) holds no number part over MAX_VERSION_DIGITS digits."""
    if isinstance(document, dict) and _within(document):
        return None
    return _first_problem(document)


def _within(document: dict[str, Any]) -> bool:
    """The same bounds as ``_first_problem``, checked without building a path for every
    value, and scalars checked where their container is read instead of stacked: a
    document within them (nearly every one) costs half the walk; one outside them is
    walked again for its message. Importing 20,000 nodes' facts spent most of its time
    naming paths no problem needed (#45 item 3)."""
    versioned_key: dict[str, bool] = {}
    count = 1
    stack: list[tuple[Any, int, bool]] = [(document, 0, False)]
    pop, push = stack.pop, stack.append
    while stack:
        container, depth, versioned = pop()
        below = depth + 1
        if len(container) > MAX_ITEMS or (below > MAX_DEPTH and container):  # its items are one level down
            return False
        count += len(container)
        if count > MAX_VALUES:
            return False
        if isinstance(container, dict):
            for key, item in container.items():
                if len(key) > MAX_KEY:
                    return False
                named = versioned_key.get(key)
                if named is None:
                    named = versioned_key[key] = "version" in key.lower()
                if isinstance(item, str):
                    if len(item) > MAX_STRING or ((versioned or named) and _LONG_DIGITS.search(item)):
                        return False
                elif isinstance(item, (dict, list)):
                    push((item, below, versioned or named))
        else:
            for item in container:
                if isinstance(item, str):
                    if len(item) > MAX_STRING or (versioned and _LONG_DIGITS.search(item)):
                        return False
                elif isinstance(item, (dict, list)):
                    push((item, below, versioned))
    return True


def _first_problem(document: Any) -> str | None:
    if not isinstance(document, dict):
        return "not a JSON object"
    count = 0
    stack: list[tuple[str, Any, int, bool]] = [("", document, 0, False)]
    while stack:
        path, value, depth, versioned = stack.pop()
        count += 1
        if count > MAX_VALUES:
            return f"more than {MAX_VALUES:,} values in one document"
        where = path or "(top level)"
        if depth > MAX_DEPTH:
            return f"{where}: nested deeper than {MAX_DEPTH} levels"
        if isinstance(value, str):
            if versioned and _LONG_DIGITS.search(value):
                longest = max(len(run) for run in re.findall(r"[0-9]+", value))
                return (f"{where}: a version with a number part of {longest:,} digits "
                        f"(at most {MAX_VERSION_DIGITS}): {_clip(value)}")
            if len(value) > MAX_STRING:
                return f"{where}: a string of {len(value):,} characters (at most {MAX_STRING:,})"
        elif isinstance(value, dict):
            if len(value) > MAX_ITEMS:
                return f"{where}: an object of {len(value):,} keys (at most {MAX_ITEMS:,})"
            for key, item in value.items():
                if len(key) > MAX_KEY:
                    return f"{where}: a key of {len(key):,} characters (at most {MAX_KEY})"
                child = f"{path}.{key}" if path else key
                stack.append((child, item, depth + 1, versioned or "version" in key.lower()))
        elif isinstance(value, list):
            if len(value) > MAX_ITEMS:
                return f"{where}: a list of {len(value):,} items (at most {MAX_ITEMS:,})"
            stack.extend((f"{path}[{i}]", item, depth + 1, versioned) for i, item in enumerate(value))
    return None


def _clip(text: str, limit: int = 40) -> str:
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")
