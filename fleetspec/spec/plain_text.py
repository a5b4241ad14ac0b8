"""Characters no spec field needs, refused in every string of the spec, keys included.

Spec values travel into Ansible variables, Slurm and Kubernetes files and command
lines. Template delimiters (``{{``, ``{%``, ``{#``) would be evaluated by Ansible on
the control machine (a ``lookup('pipe', ...)`` runs a command there), and control
characters (a newline, NUL, an escape sequence) split or hide lines in rendered
files and in the terminal. No field of the v1alpha1 spec has a use for either, so
they are refused at the boundary, for every field present and future, with the
location of the string; the Ansible renderer marks any such string ``!unsafe`` as
well (`fleetspec.render.ansible`), for fleets that did not come through this check
(a saved plan, a state file).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from typing import Any

from fleetspec.findings import Finding, Severity, SpecPath

TEMPLATE_DELIMITERS = ("{{", "{%", "{#")
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f\x85\u2028\u2029]")


@functools.lru_cache(maxsize=65536)  # a spec repeats its keys and values on every node group
def text_problem(text: str) -> str | None:
    """Why ``text`` may not appear in a spec, or None."""
    found = next((d for d in TEMPLATE_DELIMITERS if d in text), None)
    if found is not None:
        return (f"'{found}' starts a template: Ansible would evaluate it on the control machine. "
                "No spec value needs one: remove it")
    control = _CONTROL.search(text)
    if control is not None:
        return (f"control character U+{ord(control.group()):04X} (at offset {control.start()}): it would split or "
                "hide a line in the rendered files. Remove it")
    return None


def text_findings(data: Any) -> list[Finding]:
    """A `schema` error for each key or string value of ``data`` that `text_problem` refuses."""
    findings = []
    for path, text, anchor in _strings(data, ()):
        problem = text_problem(text)
        if problem is not None:
            findings.append(Finding("schema", Severity.ERROR, problem, path, anchor))
    return findings


def _strings(node: Any, path: SpecPath) -> Iterator[tuple[SpecPath, str, str]]:
    if isinstance(node, str):
        yield path, node, "value"
    elif isinstance(node, dict):
        for key, value in node.items():
            if isinstance(key, str):
                yield path + (key,), key, "key"
            yield from _strings(value, path + (key,))
    elif isinstance(node, list):
        for i, item in enumerate(node):
            yield from _strings(item, path + (i,))
