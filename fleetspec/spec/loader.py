"""Read a fleet YAML file into plain data plus a side table of source positions.

PyYAML composes a node tree (libyaml's C loader when present: it keeps line and
column marks at no extra cost); we construct plain Python data from it ourselves so
that we can

- keep the position of every mapping key and every value (``SourceMap``),
- reject duplicate keys (PyYAML silently keeps the last one),
- refuse tags that construct objects, and aliases that expand beyond a sane size
  (the "billion laughs"),
- bound file size and nesting depth,
- remember the raw text of unquoted numbers, so ``cuda: 12.10`` can be refused with
  "quote this version" instead of silently becoming ``12.1``.

Pydantic never sees positions: errors carry a key path, and `SourceMap.locate` turns
that path into ``line:column``, falling back to the nearest ancestor it knows.
"""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import yaml

from fleetspec.safe_io import UnsafePathError, read_bounded
from fleetspec.spec.url_credentials import line_holds_credential

try:  # libyaml: ~10x faster composition, same marks
    from yaml import CSafeLoader as _BaseLoader
except ImportError:  # pragma: no cover - depends on how PyYAML was built
    from yaml import SafeLoader as _BaseLoader  # type: ignore[assignment]


class _Loader(_BaseLoader):  # type: ignore[misc,valid-type]
    """Resolves each distinct plain scalar once: a fleet repeats the same few values
    (models, counts, schedulers) on every node group, and resolving is regex work."""

    def resolve(self, kind: Any, value: Any, implicit: Any) -> Any:
        if kind is not yaml.ScalarNode:
            return super().resolve(kind, value, implicit)
        key = (value, implicit)
        tag = _RESOLVED.get(key)
        if tag is None:
            tag = super().resolve(kind, value, implicit)
            if len(_RESOLVED) < 65536:
                _RESOLVED[key] = tag
        return tag


_RESOLVED: dict[Any, str] = {}

MAX_FILE_BYTES = 16 * 1024 * 1024
MAX_DEPTH = 64
MAX_NODES = 2_000_000  # after alias expansion
MAX_INT_CHARS = 64  # an integer's text: a 64-bit number has at most 20 decimal digits
EXCERPT_CHARS = 160  # of a source line echoed under a finding
# Keys that name a secret wherever they appear (a literal pasted in the wrong place).
# "pass" alone only as a word or at the end of a key (Slurm's StoragePass and
# AccountingStoragePass, JobCompPass, db_pass), never inside one (PassThrough, bypass).
SECRET_NAME = re.compile(r"(?i:passw|passphrase|secret|token|credential|munge_key|private_key|signing_key|api_key)"
                         r"|(?:Pass|PASS)(?:$|[0-9_.-])|(?:^|[_.-])(?i:pass|pwd)(?:$|[0-9_.-])")



@functools.lru_cache(maxsize=65536)  # the same few key names, on every path of a large spec
def _secret_name(key: str) -> bool:
    return SECRET_NAME.search(key) is not None


def is_secret_name(key: str) -> bool:
    """Whether ``key`` names a secret (its value is never echoed)."""
    return _secret_name(key)


_STR = "tag:yaml.org,2002:str"
_INT = "tag:yaml.org,2002:int"
_FLOAT = "tag:yaml.org,2002:float"
_BOOL = "tag:yaml.org,2002:bool"
_NULL = "tag:yaml.org,2002:null"
_MAP = "tag:yaml.org,2002:map"
_SEQ = "tag:yaml.org,2002:seq"
_SCALAR_TAGS = {_STR, _INT, _FLOAT, _BOOL, _NULL}

Path_ = tuple[str | int, ...]


# A NamedTuple, immutable like a frozen dataclass but made at each start without compiling
# six generated methods (Python 3.11): tests/test_startup_imports.py counts what validate makes.
class Position(NamedTuple):
    """A place in the spec file (1-based line and column)."""

    line: int  # 1-based
    column: int  # 1-based


@dataclass
class SourceMap:
    """Positions of keys and values by key path, for one file."""

    file: str
    keys: dict[Path_, Position] = field(default_factory=dict)
    values: dict[Path_, Position] = field(default_factory=dict)
    numbers: dict[Path_, str] = field(default_factory=dict)  # raw text of unquoted numbers
    lines: list[str] = field(default_factory=list)
    _secret_lines: frozenset[int] | None = field(default=None, repr=False, compare=False)

    def locate(self, path: Path_, prefer: str = "value") -> Position:
        """The best position for ``path``: its value (or key), else the nearest ancestor."""
        path = tuple(path)
        while True:
            first, second = (self.values, self.keys) if prefer == "value" else (self.keys, self.values)
            for table in (first, second):
                if path in table:
                    return table[path]
            if not path:
                return Position(1, 1)
            path = path[:-1]

    def source_line(self, line: int) -> str:
        return self.lines[line - 1] if 0 < line <= len(self.lines) else ""

    def excerpt(self, line: int, column: int) -> tuple[str, int]:
        """The text of ``line`` around ``column``, at most `EXCERPT_CHARS` long, and the
        caret's 0-based offset in it. Lines that hold a secret come back empty."""
        text = self.source_line(line)
        if not text or line in self.secret_lines() or line_holds_credential(text, _secret_name):
            return "", 0
        caret = max(0, column - 1)
        if len(text) <= EXCERPT_CHARS:
            return text, min(caret, len(text))
        start = max(0, min(caret - EXCERPT_CHARS // 3, len(text) - EXCERPT_CHARS))
        body = text[start:start + EXCERPT_CHARS]
        prefix = "..." if start else ""
        suffix = "..." if start + EXCERPT_CHARS < len(text) else ""
        return prefix + body + suffix, len(prefix) + caret - start

    def secret_lines(self) -> frozenset[int]:
        """Lines with a key or value under ``spec.secrets``, or under a key named like a
        secret anywhere: never echoed, whatever the finding is about."""
        if self._secret_lines is None:
            lines: set[int] = set()
            secret: dict[Path_, bool] = {(): False}  # per path, from its parent's answer

            def is_secret(path: Path_) -> bool:
                known = secret.get(path)
                if known is None:
                    last = path[-1]
                    known = secret[path] = (path[:2] == ("spec", "secrets") or is_secret(path[:-1])
                                            or (isinstance(last, str) and _secret_name(last)))
                return known

            for table in (self.keys, self.values):
                for path, pos in table.items():
                    if is_secret(path):
                        lines.add(pos.line)
            self._secret_lines = frozenset(lines)
        return self._secret_lines


class SpecLoadError(Exception):
    """The file cannot be read as a fleet spec at all (before any schema check)."""

    def __init__(self, file: str, line: int, column: int, message: str) -> None:
        super().__init__(f"{file}:{line}:{column}: {message}")
        self.file, self.line, self.column, self.message = file, line, column, message


# A NamedTuple, like Position.
class LoadedSpec(NamedTuple):
    """The spec as plain data and the source map that locates every value in it."""

    data: Any
    source: SourceMap


def load_file(path: str | os.PathLike[str]) -> LoadedSpec:
    """Read and parse ``path``; raise `SpecLoadError` with a location on any problem."""
    name = str(path)
    p = Path(path)
    if p.is_dir():
        raise SpecLoadError(name, 1, 1, "is a directory, not a fleet file. Pass the path of a .yaml file")
    try:
        size = p.stat().st_size
    except FileNotFoundError:
        raise SpecLoadError(name, 1, 1, "no such file. Check the path") from None
    except OSError as exc:
        raise SpecLoadError(name, 1, 1, f"cannot read: {exc.strerror}. Check the path and permissions") from None
    too_big = (f"fleetspec reads fleet files up to {MAX_FILE_BYTES // (1024 * 1024)} MB. "
               "Write node groups with hostlist ranges instead of one entry per node")
    if size > MAX_FILE_BYTES:
        raise SpecLoadError(name, 1, 1, f"file is {size / 1e6:.1f} MB; {too_big}")
    try:
        # Bounded: a device (/dev/zero) or a pipe stops at the limit instead of filling memory.
        raw = read_bounded(p, MAX_FILE_BYTES, regular_only=False)
    except UnsafePathError:
        raise SpecLoadError(name, 1, 1, f"input is larger than {MAX_FILE_BYTES // (1024 * 1024)} MB; {too_big}") from None
    except OSError as exc:
        raise SpecLoadError(name, 1, 1, f"cannot read: {exc.strerror}. Check the path and permissions") from None
    return load_bytes(raw, name)


def load_bytes(raw: bytes, name: str = "<input>") -> LoadedSpec:
    if len(raw) > MAX_FILE_BYTES:
        raise SpecLoadError(name, 1, 1, f"input exceeds {MAX_FILE_BYTES // (1024 * 1024)} MB. Use hostlist ranges")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        raise SpecLoadError(
            name, line, column, f"byte 0x{raw[exc.start]:02x} is not UTF-8. Save the file as UTF-8"
        ) from None
    return load_text(text, name)


def load_text(text: str, name: str = "<input>") -> LoadedSpec:
    source = SourceMap(file=name, lines=text.splitlines())
    if text.startswith("\ufeff"):
        text = text[1:]
    try:
        loader = _Loader(text)
        try:
            root = loader.get_single_node()
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, column = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        problem = exc.problem or exc.context or "invalid YAML"
        raise SpecLoadError(name, line, column, f"invalid YAML: {problem}. Fix the syntax at this position") from None
    except yaml.YAMLError as exc:
        raise SpecLoadError(name, 1, 1, f"invalid YAML: {exc}") from None
    except RecursionError:
        raise SpecLoadError(name, 1, 1, f"YAML nested too deeply. Keep nesting under {MAX_DEPTH} levels") from None
    if root is None:
        raise SpecLoadError(name, 1, 1, "file is empty. Start from examples/quickstart.yaml")
    size = _expanded_size(root, {}, 0)
    if size > MAX_NODES:
        raise SpecLoadError(
            name, 1, 1,
            f"document expands to more than {MAX_NODES:,} nodes through aliases (an alias bomb?). "
            "Remove the aliases",
        )
    builder = _Builder(source)
    data = builder.build(root, (), 0)
    return LoadedSpec(data=data, source=source)


def _expanded_size(node: yaml.Node, memo: dict[int, int], depth: int) -> int:
    """Node count after alias expansion, computed over distinct nodes only (memoized)."""
    if depth > MAX_DEPTH:
        return 1  # the builder reports the depth with a position
    known = memo.get(id(node))
    if known is not None:
        return known
    if isinstance(node, yaml.SequenceNode):
        size = 1 + sum(_expanded_size(n, memo, depth + 1) for n in node.value)
    elif isinstance(node, yaml.MappingNode):
        size = 1 + sum(_expanded_size(v, memo, depth + 1) + 1 for _, v in node.value)
    else:
        size = 1
    memo[id(node)] = min(size, MAX_NODES + 1)
    return memo[id(node)]


class _Builder:
    def __init__(self, source: SourceMap) -> None:
        self.source = source

    def _fail(self, node: yaml.Node, message: str) -> SpecLoadError:
        return SpecLoadError(self.source.file, node.start_mark.line + 1, node.start_mark.column + 1, message)

    def build(self, node: yaml.Node, path: Path_, depth: int) -> Any:
        if depth > MAX_DEPTH:
            raise self._fail(node, f"nesting deeper than {MAX_DEPTH} levels. Flatten the document")
        self.source.values.setdefault(path, Position(node.start_mark.line + 1, node.start_mark.column + 1))
        if isinstance(node, yaml.ScalarNode):
            return self._scalar(node, path)
        if isinstance(node, yaml.SequenceNode):
            if node.tag != _SEQ:
                raise self._fail(node, f"tag {node.tag} is not allowed. Remove it: fleet files are plain data")
            return [self.build(item, path + (i,), depth + 1) for i, item in enumerate(node.value)]
        if isinstance(node, yaml.MappingNode):
            return self._mapping(node, path, depth)
        raise self._fail(node, "unsupported YAML node")  # pragma: no cover

    def _mapping(self, node: yaml.MappingNode, path: Path_, depth: int) -> dict[Any, Any]:
        if node.tag != _MAP:
            raise self._fail(node, f"tag {node.tag} is not allowed. Remove it: fleet files are plain data")
        result: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                raise self._fail(key_node, "merge keys ('<<') are not supported. Write the keys out")
            if not isinstance(key_node, yaml.ScalarNode):
                raise self._fail(key_node, "mapping keys must be plain strings")
            key = self._scalar(key_node, None)
            if not isinstance(key, str):
                key = key_node.value  # `1: x` or `true: x`: keep the text the user wrote
            if key in result:
                first = self.source.keys[path + (key,)]
                raise self._fail(
                    key_node,
                    f"duplicate key '{key}' (first defined at line {first.line}). Remove one of them",
                )
            child = path + (key,)
            self.source.keys[child] = Position(key_node.start_mark.line + 1, key_node.start_mark.column + 1)
            result[key] = self.build(value_node, child, depth + 1)
        return result

    def _scalar(self, node: yaml.ScalarNode, path: Path_ | None) -> Any:
        tag = node.tag
        if tag not in _SCALAR_TAGS:
            raise self._fail(node, f"tag {tag} is not allowed. Remove it: fleet files are plain data")
        text = node.value
        if tag == _STR:
            return text
        if tag == _NULL:
            return None
        if tag == _BOOL:
            return text.lower() in ("true", "yes", "on", "y")
        if path is not None:
            self.source.numbers[path] = text
        if tag == _INT:
            if len(text) > MAX_INT_CHARS:  # Python refuses to convert over 4,300 decimal digits
                raise self._fail(node, f"a number {len(text):,} characters long; no field of a fleet spec takes "
                                 f"more than {MAX_INT_CHARS}. Fix the number, or quote it if it is a name")
            try:
                return int(text.replace("_", ""), 0) if not text.startswith("0") or text == "0" else int(text, 10)
            except ValueError:
                return yaml.SafeLoader.construct_yaml_int(yaml.SafeLoader(""), node)  # 0o, 0x, sexagesimal
        try:
            return float(text.replace("_", ""))
        except ValueError:
            return yaml.SafeLoader.construct_yaml_float(yaml.SafeLoader(""), node)
