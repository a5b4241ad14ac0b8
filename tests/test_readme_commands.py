"""README.md's lab loop is the one tests/test_readme_loop.py runs (that test is a lab
test; this one is fast): every fleetspec command of the README's loop, in order, with
the same arguments, apart from the ``--format json`` / ``--detailed-exitcode`` the test
adds to read the results (the test may run more: a last plan that shows what is left)."""

from __future__ import annotations

import ast
import shlex

from tests.conftest import ROOT

LAB = ".fleetspec/lab"


def readme_loop() -> list[list[str]]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## The whole loop", 1)[1]
    block = section.split("```sh\n", 1)[1].split("```", 1)[0]
    return [shlex.split(line.split("#", 1)[0])[1:] for line in block.splitlines() if line.startswith("fleetspec ")]


def _word(node: ast.expr) -> str:
    if isinstance(node, ast.Constant):
        return str(node.value)
    if isinstance(node, ast.Name) and node.id == "lab":
        return LAB
    assert isinstance(node, ast.JoinedStr), ast.dump(node)
    return "".join(LAB if isinstance(v, ast.FormattedValue) else str(v.value) for v in node.values)  # {lab}


def loop_calls() -> list[list[str]]:
    tree = ast.parse((ROOT / "tests" / "test_readme_loop.py").read_text())
    test = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "test_the_readme_loop")
    calls = []
    for node in ast.walk(test):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "fleetspec":
            words = [_word(a) for a in node.args[1:]]  # args[0] is the working directory
            calls.append((node.lineno, node.col_offset, words))
    out = []
    for _, _, words in sorted(calls):
        kept, skip = [], False
        for word in words:
            if skip:
                skip = False
            elif word == "--format":
                skip = True
            elif word != "--detailed-exitcode":
                kept.append(word)
        out.append(kept)
    return out


def test_readme_loop_is_the_tested_loop() -> None:
    readme, tested = readme_loop(), iter(loop_calls())
    assert len(readme) >= 10
    for command in readme:
        assert command in tested, f"README runs 'fleetspec {shlex.join(command)}': tests/test_readme_loop.py does not"
