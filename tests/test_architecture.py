"""The house as docs/architecture.md draws it, checked against the code's own imports.

- No import cycle between fleetspec modules (every import statement counts, at module
  level or inside a function; only ``if TYPE_CHECKING:`` blocks, which never run, do not).
- Each module imports only from its own layer and the layers below it (TYPE_CHECKING
  imports count here too: a type named from above is still a dependency on above).
- Every module in ``fleetspec/node_side`` imports, in a bare interpreter with nothing but
  that folder (and the package's ``__init__``) on the path, and parses as Python 3.8.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "fleetspec"

# Bottom first: a module may import its own layer and the layers below it. A module is in
# the layer of the longest prefix listed; ``<package>.cli`` modules are the interface's.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("node_side", ("fleetspec.node_side",)),
    ("base", ("fleetspec", "fleetspec.exit_codes", "fleetspec.config", "fleetspec.markdown", "fleetspec.slurm_syntax",
              "fleetspec.ssh_keys", "fleetspec.versions", "fleetspec.safe_io", "fleetspec.console", "fleetspec.text")),
    ("model", ("fleetspec.findings", "fleetspec.spec", "fleetspec.catalog")),
    ("compile", ("fleetspec.compile",)),
    ("facts", ("fleetspec.packages", "fleetspec.layout", "fleetspec.secrets")),
    ("checks", ("fleetspec.rules", "fleetspec.site")),
    ("render", ("fleetspec.render",)),
    ("after render", ("fleetspec.charts", "fleetspec.pipeline", "fleetspec.state")),
    ("operations", ("fleetspec.plan", "fleetspec.apply", "fleetspec.verify", "fleetspec.health", "fleetspec.importer",
                    "fleetspec.lab", "fleetspec.ansible_adhoc", "fleetspec.baremetal", "fleetspec.facts")),
    ("interface", ("fleetspec.cli", "fleetspec.cli_lazy", "fleetspec.cli_reference", "fleetspec.cli_usage", "fleetspec.tasks",
                   "fleetspec.sarif", "fleetspec.precommit", "fleetspec.verify.pytest_plugin",
                   "fleetspec.verify.test_fleet_node", "fleetspec.verify.testinfra_checks")),
)
RANK = {prefix: i for i, (_, prefixes) in enumerate(LAYERS) for prefix in prefixes}
INTERFACE = len(LAYERS) - 1


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def layer_of(module: str) -> int:
    if module.endswith(".cli"):
        return INTERFACE
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        rank = RANK.get(".".join(parts[:n]))
        if rank is not None:
            return rank
    raise AssertionError(f"{module} is in no layer: add it to LAYERS and docs/architecture.md")


def _type_checking_lines(tree: ast.Module) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                lines.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
    return lines


def imports(module: str) -> list[tuple[str, int, bool]]:
    """(imported fleetspec module, line, only for type checking) for each import in ``module``."""
    path = MODULES[module]
    tree = ast.parse(path.read_text(), filename=str(path))
    typing_only = _type_checking_lines(tree)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            # ``from pkg import sub`` imports the module pkg.sub; ``from mod import name`` imports mod
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
        else:
            continue
        for target in targets:
            if target == "fleetspec" or target.startswith("fleetspec."):
                while target not in MODULES:  # ``import fleetspec.x.y`` of a name, not a module
                    target = target.rpartition(".")[0]
                found.append((target, node.lineno, node.lineno in typing_only))
    return found


def _graph() -> dict[str, set[str]]:
    return {m: {t for t, _, typing in imports(m) if not typing and t != m} for m in MODULES}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def test_no_import_cycle_between_fleetspec_modules() -> None:
    assert _cycles(_graph()) == []


def test_the_cycle_check_finds_a_cycle() -> None:
    """The check itself can fail: two modules that import each other, and a ring of three."""
    assert _cycles({"a": {"b"}, "b": {"a"}, "c": set()}) == [["a", "b"]]
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_every_module_imports_only_its_layer_and_the_layers_below() -> None:
    upward = []
    for module in MODULES:
        mine = layer_of(module)
        for target, line, _ in imports(module):
            theirs = layer_of(target)
            if theirs > mine:
                upward.append(f"{MODULES[module].relative_to(ROOT)}:{line}: {module} ({LAYERS[mine][0]}) "
                              f"imports {target} ({LAYERS[theirs][0]})")
    assert upward == []


@pytest.mark.parametrize("lower", ["compile", "rules", "site", "catalog", "spec", "layout"])
def test_no_lower_layer_imports_render(lower: str) -> None:
    reaching = [f"{m} -> {t}" for m in MODULES if m == f"fleetspec.{lower}" or m.startswith(f"fleetspec.{lower}.")
                for t, _, _ in imports(m) if t.startswith("fleetspec.render")]
    assert reaching == []


def test_every_module_has_a_layer_and_the_layer_check_can_fail() -> None:
    for module in MODULES:
        layer_of(module)
    assert layer_of("fleetspec.render.slurm") > layer_of("fleetspec.rules.scheduling")
    assert layer_of("fleetspec.plan.cli") == INTERFACE
    assert layer_of("fleetspec.node_side.hostlist") == 0


# --- code that ships to nodes ---------------------------------------------------------

NODE_SIDE = sorted(m for m in MODULES if m.startswith("fleetspec.node_side"))


def test_node_side_modules_import_only_the_node_side_folder() -> None:
    leaving = [f"{m} -> {t}" for m in NODE_SIDE for t, _, _ in imports(m)
               if t != "fleetspec" and not t.startswith("fleetspec.node_side")]
    assert leaving == []


@pytest.fixture(scope="module")
def shipped_tree(tmp_path_factory) -> Path:
    """What a node receives: ``fleetspec/__init__.py`` and ``fleetspec/node_side/``, nothing else."""
    root = tmp_path_factory.mktemp("node")
    (root / "fleetspec").mkdir()
    shutil.copy(PACKAGE / "__init__.py", root / "fleetspec" / "__init__.py")
    shutil.copytree(PACKAGE / "node_side", root / "fleetspec" / "node_side",
                    ignore=shutil.ignore_patterns("__pycache__"))
    return root


BARE_IMPORT = """
import sys
sys.path.insert(0, sys.argv[1])
before = set(sys.modules)
import importlib
importlib.import_module(sys.argv[2])
stdlib = set(sys.stdlib_module_names)
foreign = sorted(m for m in set(sys.modules) - before
                 if m.split(".")[0] not in stdlib and m.split(".")[0] != "fleetspec")
outside = sorted(m for m in sys.modules if m.startswith("fleetspec.") and not m.startswith("fleetspec.node_side"))
print(foreign, outside)
sys.exit(1 if foreign or outside else 0)
"""


@pytest.mark.parametrize("module", NODE_SIDE)
def test_node_side_module_imports_in_a_bare_interpreter(module: str, shipped_tree: Path) -> None:
    """``-I -S``: no site packages, no user site, no PYTHONPATH; only the shipped tree."""
    proc = subprocess.run([sys.executable, "-I", "-S", "-c", BARE_IMPORT, str(shipped_tree), module],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_a_bare_interpreter_refuses_what_is_not_shipped(shipped_tree: Path) -> None:
    """The bare import fails for a module that leaves the folder (the check can fail)."""
    proc = subprocess.run([sys.executable, "-I", "-S", "-c", BARE_IMPORT, str(shipped_tree), "fleetspec.spec.model"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "ModuleNotFoundError" in proc.stderr


@pytest.mark.parametrize("module", NODE_SIDE)
def test_node_side_module_parses_as_python_3_8(module: str) -> None:
    path = MODULES[module]
    ast.parse(path.read_text(), filename=str(path), feature_version=(3, 8))


def _closure(entry: str) -> set[str]:
    seen, work = set(), [entry]
    while work:
        module = work.pop()
        if module in seen:
            continue
        seen.add(module)
        work.extend(t for t, _, typing in imports(module) if not typing)
    for module in list(seen):  # importing a.b.c runs a/__init__.py and a/b/__init__.py first
        parts = module.split(".")
        seen.update(".".join(parts[:n]) for n in range(1, len(parts)))
    return seen


def _files(modules: set[str]) -> list[str]:
    return sorted(str(MODULES[m].relative_to(ROOT)) for m in modules)


@pytest.mark.parametrize(("entry", "shipped"), [
    ("fleetspec.node_side.node_check fleetspec.node_side.prolog", "fleetspec.render.health:NODE_MODULES"),
    ("fleetspec.node_side.k8s_remediator", "fleetspec.render.kubernetes.health:REMEDIATOR_MODULES"),
    ("fleetspec.node_side.converge fleetspec.node_side.converge_request", "fleetspec.render.bundle:CONVERGE_MODULES"),
])
def test_each_shipped_program_carries_exactly_the_modules_it_imports(entry: str, shipped: str) -> None:
    """A module the node check or the remediator imports but its list leaves out would fail on
    every node (ModuleNotFoundError); one listed but never imported is dead weight."""
    import importlib

    module, name = shipped.split(":")
    closure = set().union(*(_closure(e) for e in entry.split()))
    assert sorted(getattr(importlib.import_module(module), name)) == _files(closure)
