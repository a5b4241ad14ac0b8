"""Text from nodes, the state and the spec, made safe for the places it is shown.

A node's facts or verdict, a state row and a spec value can hold any character. Printed
raw, an ESC sequence recolours or rewrites the terminal and an OSC 52 sequence
(``ESC ] 52 ; c ; <base64> BEL``) writes the reader's clipboard; a carriage return or a
bidirectional override hides what a line says (CVE-2021-42574, "Trojan Source"); and a
control character makes an XML report unreadable (XML 1.0 allows only tab, line feed and
carriage return below U+0020, https://www.w3.org/TR/xml/#charsets). These functions
show such characters as visible escapes (``\\x1b``) instead.
"""

from __future__ import annotations

import re

# C0 controls but tab and line feed, DEL, C1 controls, and the bidirectional embeddings,
# overrides and isolates (Unicode TR9).
_UNPRINTABLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
# What XML 1.0 cannot hold at all, plus what printable() escapes.
_NOT_XML = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff\ufffe\uffff]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str) -> str:
    """``text`` with every control character but tab and line feed shown as ``\\xNN``
    (``\\uNNNN`` for a bidirectional control): safe to print to a terminal."""
    return _UNPRINTABLE.sub(_escape, text)


def xml_text(text: str) -> str:
    """``text`` with what XML 1.0 cannot hold (and what a terminal would act on) escaped."""
    return _NOT_XML.sub(_escape, text)


def xml_safe_tree(root: object) -> None:
    """Every text, tail and attribute of an ElementTree element tree through ``xml_text``."""
    for element in root.iter():  # type: ignore[attr-defined]
        if element.text:
            element.text = xml_text(element.text)
        if element.tail:
            element.tail = xml_text(element.tail)
        for key, value in element.attrib.items():
            element.attrib[key] = xml_text(value)
