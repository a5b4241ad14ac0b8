"""Slurm's ``key=value`` configuration files, read the way slurmctld reads them.

slurm.conf(5), gres.conf(5) and topology.conf(5) share one syntax: ``#`` starts a
comment, a line ending in ``\\`` continues on the next, pairs are separated by
whitespace, keys ignore case, a value may be double-quoted (and then hold blanks), and
blanks may stand on either side of ``=`` (``SlurmctldHost            = master1``, as
Puppet-managed files write it). That is Slurm's own key/value pattern (SLURM_KEYVALUE
below), so a file slurmctld reads is a file the importer reads. slurm.conf adds
``Include FILE``. Every record keeps where it came from (file, line, column), so
each problem an importer finds is reported at its place in the site's own file.

Includes are a trust boundary: an included file must lie inside the directory of
the file that names it (after resolving links), may not include itself round a
ring, and the whole set is bounded in files, bytes and lines.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from fleetspec.safe_io import UnsafePathError, read_bounded

MAX_FILE_BYTES = 16 * 1024 * 1024  # the largest public slurm.conf seen is ~200 KB
MAX_FILES = 64
MAX_LINE_CHARS = 64 * 1024
# src/common/parse_config.c (SchedMD/slurm), the pattern every Slurm daemon matches a
# configuration pair with: blanks around '=', a quoted value may hold blanks, an unquoted
# one ends at the next blank:
#   "^[[:space:]]*([[:alnum:]_.]+)[[:space:]]*([-*+/]?)=[[:space:]]*"
#   "((\"([^\"]*)\")|([^[:space:]]+))([[:space:]]|$)"
# Checked against Debian 12's slurm 22.05.8 (tests/importer/test_import_parse.py).


@dataclass(frozen=True)
class Where:
    """A place in a site's file: ``file:line:column`` (1-based)."""

    file: str
    line: int
    column: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}"


@dataclass(frozen=True)
class Problem:
    """Something the importer cannot take, at its place, with what to do."""

    where: Where | None
    message: str
    severity: str = "error"

    def __str__(self) -> str:
        return f"{self.where or 'import'}: {self.severity}: {self.message}"


class ImportRefused(Exception):
    """The files cannot become a spec as they are; ``problems`` says where and why."""

    def __init__(self, problems: list[Problem]) -> None:
        super().__init__("\n".join(str(p) for p in problems))
        self.problems = problems


@dataclass(frozen=True)
class Pair:
    key: str  # as written
    value: str
    key_at: Where
    value_at: Where


@dataclass
class Line:
    """One logical line (continuations joined): its pairs in order."""

    at: Where
    pairs: list[Pair] = field(default_factory=list)

    def first(self) -> Pair:
        return self.pairs[0]

    def get(self, key: str) -> Pair | None:
        low = key.lower()
        return next((p for p in self.pairs if p.key.lower() == low), None)


def read_lines(path: Path, problems: list[Problem], *, includes: bool = False, display: str | None = None,
               _stack: tuple[Path, ...] = (), _count: list[int] | None = None, _at: Where | None = None) -> list[Line]:
    """The logical lines of ``path`` (and, with ``includes``, of the files it includes,
    in place). Problems are appended; lines with a problem are left out."""
    count = _count if _count is not None else [0]
    count[0] += 1
    name = display or str(path)
    if count[0] > MAX_FILES:
        problems.append(Problem(Where(name, 1, 1), f"more than {MAX_FILES} files through Include; "
                                "fleetspec reads at most that many. Merge some of them"))
        return []
    try:
        raw = read_bounded(path, MAX_FILE_BYTES)
    except (OSError, UnsafePathError, ValueError) as exc:
        problems.append(Problem(_at, f"cannot read {name}: {exc}"))
        return []
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        problems.append(Problem(Where(name, line, 1), "not UTF-8 text; a Slurm configuration file is plain text"))
        return []
    out: list[Line] = []
    for line in _logical_lines(text, name, problems):
        first = line.pairs[0] if line.pairs else None
        if includes and first is not None and first.key.lower() == "include" and first.value == "":
            out += _include(path, line, problems, _stack + (path.resolve(),), count, name)
            continue
        out.append(line)
    return out


def text_lines(text: str, name: str, problems: list[Problem]) -> list[Line]:
    """The logical lines of ``text`` (no Includes): a rendered file, read back."""
    return _logical_lines(text, name, problems)


def _include(path: Path, line: Line, problems: list[Problem], stack: tuple[Path, ...], count: list[int],
             name: str) -> list[Line]:
    if len(line.pairs) != 2:
        problems.append(Problem(line.at, "Include takes one file name: 'Include other.conf'"))
        return []
    target_text = line.pairs[1].key if not line.pairs[1].value else f"{line.pairs[1].key}={line.pairs[1].value}"
    at = line.pairs[1].key_at
    if any(c in target_text for c in "*?[$%"):
        problems.append(Problem(at, f"Include '{target_text}' has a wildcard or variable; fleetspec reads only "
                                "plain file names. Name each file in its own Include line"))
        return []
    base = path.resolve().parent
    target = (base / target_text).resolve()
    if target != base and base not in target.parents:
        problems.append(Problem(at, f"Include '{target_text}' is outside {base}: fleetspec reads only files in "
                                "the directory of the file that includes them. Copy it there"))
        return []
    if target in stack:
        ring = " -> ".join(p.name for p in (*stack[stack.index(target):], target))
        problems.append(Problem(at, f"Include loop: {ring}. Remove the Include that closes the ring"))
        return []
    shown = str(Path(name).parent / target_text)
    return read_lines(target, problems, includes=True, display=shown, _stack=stack, _count=count, _at=at)


def _logical_lines(text: str, name: str, problems: list[Problem]) -> list[Line]:
    physical = text.split("\n")
    out: list[Line] = []
    i = 0
    while i < len(physical):
        start = i
        pieces: list[tuple[int, str]] = []  # (line number, text without comment)
        while True:
            body = _strip_comment(physical[i])
            if len(body) > MAX_LINE_CHARS:
                problems.append(Problem(Where(name, i + 1, 1), f"line longer than {MAX_LINE_CHARS} characters"))
                body = ""
            if body.rstrip().endswith("\\"):
                pieces.append((i, body.rstrip()[:-1]))
                i += 1
                if i >= len(physical) or (i == len(physical) - 1 and physical[i] == ""):
                    problems.append(Problem(Where(name, start + 1, 1), "the last line ends in '\\' (a continuation) "
                                            "but nothing follows: finish the line or remove the '\\'"))
                    return out
                continue
            pieces.append((i, body))
            i += 1
            break
        line = _pairs(pieces, name, problems)
        if line is not None and line.pairs:
            out.append(line)
    return out


def _strip_comment(text: str) -> str:
    """Text before an unescaped ``#`` (slurm.conf(5): "\\#" is a literal '#')."""
    i = 0
    while True:
        i = text.find("#", i)
        if i < 0:
            return text
        if i > 0 and text[i - 1] == "\\":
            i += 1
            continue
        return text[:i]


def _pairs(pieces: list[tuple[int, str]], name: str, problems: list[Problem]) -> Line | None:
    """Split a logical line into pairs; positions are those of the physical lines."""
    chars: list[tuple[str, int, int]] = []  # (character, line, column)
    for number, body in pieces:
        chars += [(c, number + 1, col + 1) for col, c in enumerate(body)]
        chars.append((" ", number + 1, len(body) + 1))
    line = Line(Where(name, pieces[0][0] + 1, 1))
    i, n = 0, len(chars)
    while i < n:
        if chars[i][0] in " \t\r":
            i += 1
            continue
        k0 = i
        key = ""
        while i < n and chars[i][0] not in " \t\r=":
            key += chars[i][0]
            i += 1
        key_at = Where(name, chars[k0][1], chars[k0][2])
        value, value_at = "", key_at
        j = i
        while key and j < n and chars[j][0] in " \t\r":  # blanks before '=' (SLURM_KEYVALUE)
            j += 1
        if key and j < n and chars[j][0] == "=":
            i = j + 1
            while i < n and chars[i][0] in " \t\r":  # and after it
                i += 1
            value_at = Where(name, chars[i][1], chars[i][2]) if i < n else key_at
            if i < n and chars[i][0] == '"':
                i += 1
                while i < n and chars[i][0] != '"':
                    value += chars[i][0]
                    i += 1
                if i >= n:
                    problems.append(Problem(value_at, f"unclosed '\"' in the value of {key}"))
                    return None
                i += 1
            else:
                while i < n and chars[i][0] not in " \t\r":
                    value += chars[i][0]
                    i += 1
        if not key:
            problems.append(Problem(key_at, "'=' without a key before it"))
            return None
        line.pairs.append(Pair(key, value.replace("\\#", "#"), key_at, value_at))
    if line.pairs:
        line.at = line.pairs[0].key_at
    return line
