"""Slurm hostlist expressions: ``gpu-[001-016]``, ``a[1-3,7]``, ``r[1-2]-n[01-04]``.

`expand` turns an expression into hostnames (several bracket groups multiply out,
zero padding is kept); `compress` is its inverse, used when rendering. Only numeric
ranges are accepted: Slurm 22.05 rejects letter ranges, and a fleet file should not
depend on a newer parser for something this basic.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable

MAX_HOSTS = 200_000  # all hostlists of one fleet together: 10x the largest fleet fleetspec is measured on

# Letters of either case: Slurm node names are case-sensitive and sites keep upper-case
# ones (NodeName=AMD7763), while DNS resolves them case-insensitively (RFC 4343), so
# Slurm, Ansible and a shell take them as written. Kubernetes does not: its node names are
# lower-case DNS-1123 (`is_kubernetes_name`; the compiler refuses upper case there).
_HOSTNAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?")
_KUBERNETES_NAME = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")
_RANGE = re.compile(r"([0-9]+)(?:-([0-9]+))?")
_TRAILING_NUMBER = re.compile(r"^(.*?)([0-9]+)([^0-9]*)$")
_LITERAL = re.compile(r"[A-Za-z0-9-]*")

# One parsed item (no top-level commas): literal text and bracket groups, each group a
# list of (lo, hi, width) ranges. Counted before anything is expanded.
_Range = tuple[int, int, int]
_Item = list[str | list[_Range]]


class HostlistError(ValueError):
    """A hostlist expression that cannot be expanded; the message says how to fix it."""


class HostlistTooLarge(HostlistError):
    """An expression that names more hosts than its limit (counted, never expanded)."""


def is_valid_hostname(name: str) -> bool:
    """A DNS label (RFC 1123, letters of either case): what Slurm, Ansible and a shell accept as is."""
    return isinstance(name, str) and _HOSTNAME.fullmatch(name) is not None


def is_kubernetes_name(name: str) -> bool:
    """A lower-case DNS-1123 label: what Kubernetes takes as a node name."""
    return isinstance(name, str) and _KUBERNETES_NAME.fullmatch(name) is not None


def count(expression: str) -> int:
    """How many hostnames ``expression`` names, computed without expanding it."""
    return sum(_item_count(item) for item in _parse(expression))


def expand(expression: str, limit: int = MAX_HOSTS) -> list[str]:
    """Expand a hostlist expression into hostnames, in order.

    The hosts are counted first, from the ranges alone: an expression naming more than
    ``limit`` hosts is refused before one name is built. Raises `HostlistError` for
    unbalanced brackets, empty or reversed ranges, letters in ranges, hostnames that are
    not DNS labels, and expansions larger than ``limit``.
    """
    items = _parse(expression)
    total = sum(_item_count(item) for item in items)
    if total > limit:
        raise HostlistTooLarge(
            f"hostlist '{_clip(expression)}' names {_amount(total)} hosts; at most {limit:,} are allowed here "
            f"(a fleet has at most {MAX_HOSTS:,} hosts in all). Check the range bounds"
        )
    hosts: list[str] = []
    for item in items:
        hosts.extend(_expand_item(item))
    return hosts


def _amount(total: int) -> str:
    return f"{total:,}" if total < 10**15 else f"about 10^{len(str(total)) - 1}"


def _parse(expression: str) -> list[_Item]:
    if not isinstance(expression, str) or not expression.strip():
        raise HostlistError("empty hostlist. Write hostnames or a range like 'gpu-[001-016]'")
    return [_parse_item(part) for part in _split_top_level(expression.strip())]


def _split_top_level(expression: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(expression):
        if ch == "[":
            depth += 1
            if depth > 1:
                raise HostlistError(
                    f"nested '[' in hostlist '{_clip(expression)}'. Close each range before opening another"
                )
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise HostlistError(f"unmatched ']' in hostlist '{_clip(expression)}'. Remove it or add '['")
        elif ch == "," and depth == 0:
            parts.append(expression[start:i].strip())
            start = i + 1
    if depth != 0:
        raise HostlistError(f"unclosed '[' in hostlist '{_clip(expression)}'. Add the closing ']'")
    parts.append(expression[start:].strip())
    if any(not p for p in parts):
        raise HostlistError(f"empty item in hostlist '{_clip(expression)}'. Remove the stray ','")
    return parts


def _parse_item(part: str) -> _Item:
    """One comma-free item, e.g. ``r[1-2]-n[01-04]``, as literals and range groups."""
    item: _Item = []
    for piece in re.split(r"(\[[^\]]*\])", part):
        if piece.startswith("["):
            item.append(_parse_brackets(piece[1:-1], part))
        elif piece:
            if _LITERAL.fullmatch(piece) is None:
                raise HostlistError(f"'{_clip(part)}' is not a valid hostname. {_HOSTNAME_ADVICE}")
            item.append(piece)
    return item


_HOSTNAME_ADVICE = ("Use letters, digits and '-' (at most 63 characters, not starting or ending with '-')")


def _parse_brackets(body: str, part: str) -> list[_Range]:
    if not body:
        raise HostlistError(f"empty range '[]' in hostlist '{_clip(part)}'. Write a range like '[01-16]'")
    ranges: list[_Range] = []
    for item in body.split(","):
        m = _RANGE.fullmatch(item.strip())
        if m is None:
            raise HostlistError(
                f"'{_clip(item)}' in hostlist '{_clip(part)}' is not a number or range. "
                "Use numeric ranges like '[001-016]' or '[1-3,7]'"
            )
        lo_text, hi_text = m.group(1), m.group(2) or m.group(1)
        if len(lo_text) > 18 or len(hi_text) > 18:
            raise HostlistError(f"range '{_clip(item)}' in hostlist '{_clip(part)}' has numbers too long for a "
                                "hostname. Check its bounds")
        lo, hi = int(lo_text), int(hi_text)
        if hi < lo:
            raise HostlistError(
                f"range '{_clip(item)}' in hostlist '{_clip(part)}' is reversed. Write '{hi_text}-{lo_text}'")
        width = len(lo_text) if lo_text.startswith("0") or len(lo_text) == len(hi_text) else 0
        ranges.append((lo, hi, width))
    return ranges


def _item_count(item: _Item) -> int:
    total = 1
    for piece in item:
        if isinstance(piece, list):
            total *= sum(hi - lo + 1 for lo, hi, _ in piece)
    return total


def _expand_item(item: _Item) -> list[str]:
    results = [""]
    for piece in item:
        options = [piece] if isinstance(piece, str) else [
            str(n).zfill(width) for lo, hi, width in piece for n in range(lo, hi + 1)]
        results = [prefix + option for prefix in results for option in options]
    for host in results:
        if not is_valid_hostname(host):
            raise HostlistError(f"'{_clip(host)}' is not a valid hostname. {_HOSTNAME_ADVICE}")
    return results


def compress(hostnames: Iterable[str]) -> str:
    """The shortest-form hostlist for ``hostnames`` that Slurm 22.05+ reads back.

    Hosts are grouped by the text around their last number and by its zero-padded
    width; each group becomes ``prefix[lo-hi,...]suffix``. Output is sorted, so the
    same set always gives the same text.
    """
    groups: dict[tuple[str, str, int], set[int]] = {}
    plain: set[str] = set()
    unpadded: list[tuple[str, str, str]] = []
    for host in hostnames:
        parsed = _split(host)
        if parsed is None:
            plain.add(host)
        elif parsed[0] is not None:
            key, number = parsed
            if key in groups:
                groups[key].add(number)
            else:
                groups[key] = {number}
        else:
            unpadded.append(parsed[1])
    for prefix, digits, suffix in unpadded:
        # "10" belongs with "01"-"09" when that zero-padded group has its width.
        key = (prefix, suffix, len(digits))
        groups.setdefault(key if key in groups else (prefix, suffix, 0), set()).add(int(digits))
    items: list[tuple[str, str]] = [(h, h) for h in plain]
    for (prefix, suffix, width), numbers in groups.items():
        ordered = sorted(numbers)
        if len(ordered) == 1:
            text = f"{prefix}{str(ordered[0]).zfill(width)}{suffix}"
        else:
            text = f"{prefix}[{_ranges(ordered, width)}]{suffix}"
        items.append((f"{prefix}\0{suffix}\0{width:03d}", text))
    return ",".join(text for _, text in sorted(items))


@functools.lru_cache(maxsize=1 << 18)
def _split(host: str) -> tuple[tuple[str, str, int], int] | tuple[None, tuple[str, str, str]] | None:
    """A host's zero-padded group key and number, or (None, its parts) when unpadded, or
    None without a number. Cached: one fleet's hosts are compressed many times over."""
    m = _TRAILING_NUMBER.match(host)
    if m is None:
        return None
    prefix, digits, suffix = m.groups()
    if digits.startswith("0") and len(digits) > 1:
        key = (prefix, suffix, len(digits))
        return _KEYS.setdefault(key, key), int(digits)  # one key per rack, not per host (memory)
    return None, (prefix, digits, suffix)


_KEYS: dict[tuple[str, str, int], tuple[str, str, int]] = {}


def _ranges(numbers: list[int], width: int) -> str:
    spans: list[str] = []
    start = prev = numbers[0]
    for n in numbers[1:] + [None]:  # type: ignore[list-item]
        if n is not None and n == prev + 1:
            prev = n
            continue
        lo, hi = str(start).zfill(width), str(prev).zfill(width)
        spans.append(lo if start == prev else f"{lo}-{hi}")
        if n is not None:
            start = prev = n
    return ",".join(spans)


def _clip(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
