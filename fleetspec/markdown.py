"""Markdown for pull-request comments and job summaries (``plan --format markdown``,
``verify --format markdown``): values from the spec, the state and nodes' facts go into
table cells and code spans, and must not end the cell, the span or the table, nor render
as anything but their text: no HTML (``<img>``, ``<a>``), no image, link or emphasis, no
``@mention`` that notifies someone, no control character.

GitHub-flavoured Markdown (https://github.github.com/gfm/): a code span ends at a run of
backticks as long as the one that opened it, so its fence is one longer than the longest
run in the value, with a space inside when the value starts or ends with a backtick
(spec 6.1); a table row is split at every ``|`` not escaped by a backslash, code spans
included (spec 4.10), and a backslash escapes only the character right after it, so a
value's own backslash before a pipe gets a zero-width space between them.
"""

from __future__ import annotations

import re
from typing import Any

from fleetspec.text import printable

# Characters that start Markdown or HTML in running text (spec 2.4: any ASCII punctuation
# may be backslash-escaped). "(" and ")" need no escape once "[" and "]" have one; "#", "-",
# "+", ">" and "=" mean something only at the start of a line, and a cell is inside a row.
_MARKUP = re.compile(r"([\\`*_\[\]!~|])")
_MENTION = "@\u2060"  # a word joiner after @: GitHub links no user or team
_BACKTICKS = re.compile(r"`+")


def cell(value: Any) -> str:
    """Text safe inside a Markdown table cell, shown as written."""
    text = printable(str(value)).replace("\n", " ").replace("\r", " ")
    text = text.replace("&", "&amp;").replace("<", "&lt;")
    return _MARKUP.sub(r"\\\1", text).replace("@", _MENTION)


def code(value: Any) -> str:
    """A code span inside a table cell: shown as written, whatever backticks it holds."""
    text = printable(str(value)).replace("\n", " ").replace("\r", " ")
    text = text.replace("\\|", "\\\u200b|").replace("|", "\\|")
    longest = max((len(run) for run in _BACKTICKS.findall(text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"
