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

MAX_HOSTS = 1_000_000  # one expression may not expand beyond this: a typo, not a fleet

_HOSTNAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")
_TRAILING_NUMBER = re.compile(r"^(.*?)(\d+)([^\d]*)$")


class HostlistError(ValueError):
    """A hostlist expression that cannot be expanded; the message says how to fix it."""


def is_valid_hostname(name: str) -> bool:
    """A DNS-1123 label: what Slurm, Ansible, Kubernetes and a shell all accept as is."""
    return bool(_HOSTNAME.match(name))


def expand(expression: str) -> list[str]:
    """Expand a hostlist expression into hostnames, in order.

    Raises `HostlistError` for unbalanced brackets, empty or reversed ranges, letters in
    ranges, hostnames that are not DNS labels, and expansions larger than `MAX_HOSTS`.
    """
    if not isinstance(expression, str) or not expression.strip():
        raise HostlistError("empty hostlist. Write hostnames or a range like 'gpu-[001-016]'")
    hosts: list[str] = []
    for part in _split_top_level(expression.strip()):
        for host in _expand_one(part):
            hosts.append(host)
            if len(hosts) > MAX_HOSTS:
                raise HostlistError(
                    f"hostlist '{_clip(expression)}' expands to more than {MAX_HOSTS:,} hosts. "
                    "Check the range bounds"
                )
    return hosts


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


def _expand_one(part: str) -> Iterable[str]:
    """Expand one comma-free item, e.g. ``r[1-2]-n[01-04]``."""
    pieces = re.split(r"(\[[^\]]*\])", part)
    choices: list[list[str]] = []
    total = 1
    for piece in pieces:
        if piece.startswith("["):
            values = _expand_brackets(piece[1:-1], part)
            total *= len(values)
            if total > MAX_HOSTS:
                raise HostlistError(
                    f"hostlist '{_clip(part)}' expands to more than {MAX_HOSTS:,} hosts. Check the range bounds"
                )
            choices.append(values)
        elif piece:
            choices.append([piece])
    results = [""]
    for options in choices:
        results = [prefix + option for prefix in results for option in options]
    for host in results:
        if not is_valid_hostname(host):
            raise HostlistError(
                f"'{_clip(host)}' is not a valid hostname. Use lower-case letters, digits and '-' "
                "(at most 63 characters, not starting or ending with '-')"
            )
    return results


def _expand_brackets(body: str, part: str) -> list[str]:
    if not body:
        raise HostlistError(f"empty range '[]' in hostlist '{_clip(part)}'. Write a range like '[01-16]'")
    values: list[str] = []
    for item in body.split(","):
        m = _RANGE.match(item.strip())
        if m is None:
            raise HostlistError(
                f"'{_clip(item)}' in hostlist '{_clip(part)}' is not a number or range. "
                "Use numeric ranges like '[001-016]' or '[1-3,7]'"
            )
        lo_text, hi_text = m.group(1), m.group(2) or m.group(1)
        lo, hi = int(lo_text), int(hi_text)
        if hi < lo:
            raise HostlistError(f"range '{item}' in hostlist '{_clip(part)}' is reversed. Write '{hi_text}-{lo_text}'")
        if hi - lo + 1 > MAX_HOSTS:
            raise HostlistError(
                f"range '{item}' in hostlist '{_clip(part)}' covers more than {MAX_HOSTS:,} hosts. Check its bounds"
            )
        width = len(lo_text) if lo_text.startswith("0") or len(lo_text) == len(hi_text) else 0
        values.extend(str(n).zfill(width) for n in range(lo, hi + 1))
    return values


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
        return (prefix, suffix, len(digits)), int(digits)
    return None, (prefix, digits, suffix)


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
