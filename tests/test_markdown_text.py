"""fleetspec.markdown and fleetspec.text on their own: the pieces every report uses."""

from __future__ import annotations

import html as html_lib
import re

import pytest
from markdown_it import MarkdownIt

from fleetspec.markdown import cell, code
from fleetspec.text import printable, xml_text

HOSTILE = ["``x``<b>y</b>", "`", "a ``` b", "<a href=javascript:x>l</a>", "![i](https://t.example/a.png)",
           "[l](https://e.example)", "@org/team", "**bold** _it_ ~~s~~", "back\\|slash\\", "&lt;b&gt;",
           "a\x1b[31mb\x1b]52;c;aGk=\x07", "\u202eevil"]


def _render(row: str) -> str:
    return MarkdownIt("commonmark").enable(["table", "strikethrough"]).render(f"| a | b |\n|---|---|\n{row}\n")


@pytest.mark.parametrize("value", HOSTILE)
def test_a_value_in_a_cell_or_a_code_span_renders_as_its_text(value: str) -> None:
    html = _render(f"| {cell(value)} | {code(value)} |")
    assert html.count("<td>") == 2, html
    assert not re.search(r"<(?!/?(?:table|thead|tbody|tr|th|td|code)>)", html), html  # no tag of the value's
    td_cell, td_code = re.findall(r"<td>(.*?)</td>", html, re.S)
    shown = printable(value)
    assert html_lib.unescape(td_cell).replace("\u2060", "") == shown
    assert html_lib.unescape(td_code.removeprefix("<code>").removesuffix("</code>")).replace("\u200b", "") == shown


def test_printable_and_xml_text() -> None:
    assert printable("a\x1b[2Jb\tc\nd\r\x7f\x85\u202e") == "a\\x1b[2Jb\tc\nd\\x0d\\x7f\\x85\\u202e"
    assert xml_text("a\x00b\ufffe") == "a\\x00b\\ufffe"
