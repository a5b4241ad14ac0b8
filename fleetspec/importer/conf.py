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

import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from fleetspec.safe_io import UnsafePathError, read_bounded

MAX_FILE_BYTES = 16 * 1024 * 1024  # the largest public slurm.conf seen is ~200 KB
MAX_FILES = 64
MAX_LINE_CHARS = 64 * 1024
MAX_TOTAL_BYTES = 16 * 1024 * 1024  # all files of one slurm.conf, Includes together
MAX_PROBLEMS = 100  # problems kept and printed; the rest are counted ("N more")
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


class Problems(list[Problem]):
    """The problems of one import: the first `MAX_PROBLEMS` kept, the rest only counted
    (``more``), so a file of a million bad lines costs a counter, not a million messages
    (#41 item 9). ``full`` lets callers skip the costly part of a message (did-you-mean)."""

    def __init__(self) -> None:
        super().__init__()
        self.more = 0
        self.stopped = False  # a reader stopped at the cap: there may be more than ``more``

    @property
    def full(self) -> bool:
        return len(self) >= MAX_PROBLEMS

    def append(self, problem: Problem) -> None:
        if self.full:
            self.more += 1
        else:
            super().append(problem)

    def __iadd__(self, others):  # type: ignore[no-untyped-def,override]
        for problem in others:
            self.append(problem)
        return self


def is_full(problems: list[Problem]) -> bool:
    """True once ``problems`` holds all it keeps; the caller stops reading (and says so)."""
    if isinstance(problems, Problems) and problems.full:
        problems.stopped = True
        return True
    return False


class ImportRefused(Exception):
    """The files cannot become a spec as they are; ``problems`` says where and why
    (at most `MAX_PROBLEMS` of them, then how many more)."""

    def __init__(self, problems: list[Problem]) -> None:
        shown = list(problems)
        more = getattr(problems, "more", 0)
        if more or getattr(problems, "stopped", False):
            counted = f"{more:,} more problem(s) not shown" if more else "more problems may follow"
            shown.append(Problem(None, f"{counted}: fleetspec stops at the first {MAX_PROBLEMS} (and stops "
                                 "reading there). Fix these and import again"))
        super().__init__("\n".join(str(p) for p in shown))
        self.problems = shown


@dataclass(frozen=True)
class Pair:
    key: str  # as written
    value: str
    key_at: Where
    value_at: Where
    bare: bool = False  # a word without '=' (only "Include FILE" may have them)


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


def read_lines(path: Path, problems: list[Problem], *, includes: bool = False,
               display: str | None = None) -> list[Line]:
    """The logical lines of ``path`` (and, with ``includes``, of the files it includes,
    in place). Problems are appended; lines with a problem are left out."""
    return list(iter_lines(path, problems, includes=includes, display=display))


def iter_lines(path: Path, problems: list[Problem], *, includes: bool = False, display: str | None = None,
               _stack: tuple[Path, ...] = (), _count: list[int] | None = None,
               _at: Where | None = None) -> Iterator[Line]:
    """`read_lines`, one line at a time: a reader that stops (at the problem cap) stops
    the reading, so a file of a million bad lines is not read past the hundredth."""
    count = _count if _count is not None else [0, 0]  # files, bytes
    count[0] += 1
    name = display or str(path)
    if count[0] > MAX_FILES:
        problems.append(Problem(Where(name, 1, 1), f"more than {MAX_FILES} files through Include; "
                                "fleetspec reads at most that many. Merge some of them"))
        return
    refused = source_refused(path, top=not _stack)
    if refused:
        problems.append(Problem(_at, f"{name}: {refused}"))
        return
    try:
        raw = read_bounded(path, min(MAX_FILE_BYTES, MAX_TOTAL_BYTES - count[1]))
    except (OSError, UnsafePathError, ValueError) as exc:
        more = " (all files of one import together)" if count[1] else ""
        problems.append(Problem(_at, f"cannot read {name}: {exc}{more}"))
        return
    count[1] += len(raw)
    if _ARMOUR in raw:
        problems.append(Problem(_at, f"{name} holds PEM armour ('-----BEGIN ...': a key or certificate), not Slurm "
                                "configuration; nothing of it is shown. Give the configuration file"))
        return
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        problems.append(Problem(Where(name, line, 1), "not UTF-8 text; a Slurm configuration file is plain text"))
        return
    for line in _logical_lines(text, name, problems):
        if is_full(problems):
            return
        first = line.pairs[0] if line.pairs else None
        if includes and first is not None and first.key.lower() == "include" and first.value == "":
            yield from _include(path, line, problems, _stack + (path.resolve(),), count, name)
            continue
        bare = next((p for p in line.pairs if p.bare), None)
        if bare is not None:  # SLURM_KEYVALUE matches key=value only: 22.05.8 "Parse error in file"
            problems.append(Problem(bare.key_at, f"{shown_key(bare.key)} has no '=': slurmctld stops on that "
                                    "(\"Parse error in file\"); write Key=value, or remove it"))
            continue
        yield line


# Key material, by the name it is stored under (after links are resolved): never a Slurm
# file, so refused before a byte of it is read, let alone echoed in a message (#41 item 3).
_SECRET_NAME = re.compile(r"(^id_|^ssh_host_|\.(key|pem|crt|cert|der|p12|pfx|jwk|gpg|asc|kdbx)$|"
                          r"^(shadow|gshadow|passwd|master\.passwd|\.netrc|\.pgpass|credentials)$)", re.IGNORECASE)
_ARMOUR = b"-----BEGIN "
# The files an import is given (--conf, --gres, --topology) are Slurm's own, and every
# one of them is a NAME.conf (slurm.conf(5), gres.conf(5), topology.conf(5); Include files
# are named by the site and only read from the including file's own directory).
_TOP_SUFFIXES = (".conf",)


def source_refused(path: Path, *, top: bool, suffixes: tuple[str, ...] = _TOP_SUFFIXES) -> str | None:
    """Why ``path`` may not be read as a Slurm file, or None. Links are resolved first
    (Include's rule), so a link named slurm.conf to a private key is judged by the key's
    name; a given file (``top``) must be a regular ``*.conf`` file."""
    try:
        real = path.resolve(strict=True)
        mode = real.stat().st_mode
    except (OSError, RuntimeError):
        return None  # read_bounded says what is missing or unreadable
    shown = f" (a link to {real})" if real != path.absolute() else ""
    for candidate in (path.name, real.name):
        if _SECRET_NAME.search(candidate):
            return (f"'{candidate}' is the name of key material or passwords, not a Slurm configuration file{shown}; "
                    "fleetspec does not read it")
    if top and not stat.S_ISREG(mode):
        return None  # read_bounded refuses it by kind
    if top and not real.name.endswith(suffixes):
        return (f"fleetspec reads Slurm's configuration files, which are named *{'/*'.join(suffixes)}{shown}; "
                f"'{real.name}' is not. Give the file itself")
    return None


def shown_key(key: str) -> str:
    """A key as a message may echo it: Slurm's key characters ([[:alnum:]_.], parse_config.c),
    at most 40 of them; anything else is not echoed (a line of a key file or a password
    hash must not reach a terminal or a CI log)."""
    if re.fullmatch(r"[A-Za-z0-9_.]{1,40}", key):
        return f"'{key}'"
    return f"a {len(key)}-character token (not shown)"


def text_lines(text: str, name: str, problems: list[Problem]) -> list[Line]:
    """The logical lines of ``text`` (no Includes): a rendered file, read back."""
    return list(_logical_lines(text, name, problems))


def _include(path: Path, line: Line, problems: list[Problem], stack: tuple[Path, ...], count: list[int],
             name: str) -> Iterator[Line]:
    if len(line.pairs) != 2:
        problems.append(Problem(line.at, "Include takes one file name: 'Include other.conf'"))
        return
    target_text = line.pairs[1].key if not line.pairs[1].value else f"{line.pairs[1].key}={line.pairs[1].value}"
    at = line.pairs[1].key_at
    if any(c in target_text for c in "*?[$%"):
        problems.append(Problem(at, f"Include '{target_text}' has a wildcard or variable; fleetspec reads only "
                                "plain file names. Name each file in its own Include line"))
        return
    base = path.resolve().parent
    target = (base / target_text).resolve()
    if target != base and base not in target.parents:
        problems.append(Problem(at, f"Include '{target_text}' is outside {base}: fleetspec reads only files in "
                                "the directory of the file that includes them. Copy it there"))
        return
    if target in stack:
        ring = " -> ".join(p.name for p in (*stack[stack.index(target):], target))
        problems.append(Problem(at, f"Include loop: {ring}. Remove the Include that closes the ring"))
        return
    shown = str(Path(name).parent / target_text)
    yield from iter_lines(target, problems, includes=True, display=shown, _stack=stack, _count=count, _at=at)


def _logical_lines(text: str, name: str, problems: list[Problem]) -> Iterator[Line]:
    physical = text.split("\n")
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
                    return
                continue
            pieces.append((i, body))
            i += 1
            break
        line = _pairs(pieces, name, problems)
        if line is not None and line.pairs:
            yield line


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
            if i >= n:  # SLURM_KEYVALUE wants a value: 22.05.8 says "Parse error in file ... line N"
                problems.append(Problem(Where(name, chars[j][1], chars[j][2]), f"{shown_key(key)}= has no value, "
                                        "and slurmctld stops on that (\"Parse error in file\"); write the value, "
                                        "'\"\"' for an empty one, or remove the key"))
                return None
            if chars[i][0] == '"':
                i += 1
                while i < n and chars[i][0] != '"':
                    value += chars[i][0]
                    i += 1
                if i >= n:
                    problems.append(Problem(value_at, f"unclosed '\"' in the value of {shown_key(key)}"))
                    return None
                i += 1
            else:
                while i < n and chars[i][0] not in " \t\r":
                    value += chars[i][0]
                    i += 1
        if not key:
            problems.append(Problem(key_at, "'=' without a key before it"))
            return None
        line.pairs.append(Pair(key, value.replace("\\#", "#"), key_at, value_at, bare=value_at is key_at))
    if line.pairs:
        line.at = line.pairs[0].key_at
    return line
