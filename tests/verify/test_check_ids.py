"""Every check id verify can emit is in compare.py's table (NODE_CHECK_IDS, PARTITION_CHECK_IDS),
so the testinfra module has a test for it and docs/verify.md names it (#42). The ids are derived
from the verify modules' own ``Check(...)`` calls, not from a hand list: a literal, an f-string,
a parameter (resolved through every call of its function), a loop over literals or a local
assigned from one of those."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from fleetspec.spec.model import Firmware
from fleetspec.verify import compare
from fleetspec.verify.testinfra_checks import COMPONENTS
from tests.conftest import ROOT

VERIFY = ROOT / "fleetspec/verify"


class _Ids:
    """The first arguments of ``Check(...)`` in ``paths``; ``*`` where a value comes from data
    (a firmware component of the spec, a module's name)."""

    def __init__(self, paths: list[Path]) -> None:
        self.functions = [n for p in paths for n in ast.walk(ast.parse(p.read_text())) if isinstance(n, ast.FunctionDef)]
        self.calls: dict[str, list[tuple[ast.Call, ast.FunctionDef]]] = {}
        for function in self.functions:
            for node in ast.walk(function):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                    self.calls.setdefault(node.func.id, []).append((node, function))

    def all(self) -> set[str]:
        return {v for call, function in self.calls["Check"] for v in self.values(call.args[0], function)}

    def values(self, expr: ast.expr, function: ast.FunctionDef) -> set[str]:
        if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
            return {expr.value}
        if isinstance(expr, ast.JoinedStr):
            out = {""}
            for part in expr.values:
                parts = ({part.value} if isinstance(part, ast.Constant)
                         else self.values(part.value, function))  # type: ignore[attr-defined]
                out = {a + b for a in out for b in parts}
            return out
        if isinstance(expr, ast.Attribute):
            return set()  # another Check's component, wrapped again (its id is counted where made)
        assert isinstance(expr, ast.Name), f"{function.name}: a check id from {ast.dump(expr)}"
        params = [a.arg for a in function.args.args]
        if expr.id in params:
            i = params.index(expr.id)
            out = set()
            for call, caller in self.calls.get(function.name, []):
                arg = call.args[i] if i < len(call.args) else next(k.value for k in call.keywords if k.arg == expr.id)
                out |= self.values(arg, caller)
            return out
        for node in ast.walk(function):
            if (isinstance(node, ast.For) and isinstance(node.target, ast.Name) and node.target.id == expr.id
                    and isinstance(node.iter, ast.Tuple)):
                return {e.value for e in node.iter.elts if isinstance(e, ast.Constant)}
            if (isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == [expr.id]):
                return self.values(node.value, function)
        return {"*"}  # a value from data: a loop over the spec's firmware pins, a module's name


def emitted() -> set[str]:
    return _Ids(sorted(VERIFY.glob("*.py"))).all()


def expand(ids: set[str]) -> set[str]:
    """``*-firmware``: one per firmware component the spec can pin; ``module-signer:*``: the table's
    ``module-signer``."""
    out = set()
    for i in ids:
        if i == "*-firmware":
            out |= {f"{c}-firmware" for c in Firmware.model_fields}
        elif i == "module-signer:*":
            out.add("module-signer")
        else:
            assert "*" not in i, f"a check id verify builds from data: {i}; teach this test its values"
            out.add(i)
    return out


def test_every_check_id_verify_emits_is_in_compares_table() -> None:
    ids = expand(emitted())
    table = set(compare.NODE_CHECK_IDS) | set(compare.PARTITION_CHECK_IDS)
    assert not ids - table, f"check ids missing from compare.NODE_CHECK_IDS: {sorted(ids - table)}"
    assert not table - ids, f"ids in the table that no Check(...) emits: {sorted(table - ids)}"
    assert {"gpus", "dcgm", "cuda-components", "rdma-userspace", "driver-stream"} <= ids  # the derivation finds them


def test_the_testinfra_module_has_a_test_for_every_node_check() -> None:
    assert set(COMPONENTS) == {c for c in compare.NODE_CHECK_IDS if not c.endswith("-shadow")}
    assert len(set(compare.NODE_CHECK_IDS)) == len(compare.NODE_CHECK_IDS)


def test_docs_verify_names_every_check_id() -> None:
    table = (ROOT / "docs/verify.md").read_text().split("\n## What is checked", 1)[1].split("\n## ", 1)[0]
    named = set(re.findall(r"`([a-z0-9-]+)(?::<module>)?`", "\n".join(ln.split(" | ")[0] for ln in
                                                                   table.splitlines() if ln.startswith("| `"))))
    named |= set(re.findall(r"`([a-z]+-firmware)`", table))  # the Redfish ids, in the firmware row's text
    missing = (set(compare.NODE_CHECK_IDS) | set(compare.PARTITION_CHECK_IDS)) - named
    assert not missing, f"docs/verify.md 'What is checked' lacks {sorted(missing)}"
