"""Markdown for pull-request comments and job summaries (``plan --format markdown``,
``verify --format markdown``): values from the spec and from nodes' facts go into table
cells and code spans, and must not end the cell, the span or the table."""

from __future__ import annotations

from typing import Any


def cell(value: Any) -> str:
    """Text safe inside a Markdown table cell."""
    return str(value).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ").replace("<", "&lt;")


def code(value: Any) -> str:
    """A code span inside a table cell: shown as written (a backtick in it widens the fence)."""
    text = str(value).replace("|", "\\|").replace("\n", " ")
    return f"``{text}``" if "`" in text else f"`{text}`"
