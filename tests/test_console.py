"""The lazy consoles write a plain line themselves, before Rich is imported
(fleetspec/console.py, _LazyConsole.print): byte for byte what Rich writes for it."""

from __future__ import annotations

import io
import os
import subprocess
import sys

import pytest

from fleetspec import console as fleet_console
from tests.conftest import ROOT

PLAIN = [
    "examples/quickstart.yaml: valid (no findings)",
    "a path with spaces/and ünïcödé 漢字.yaml: valid (no findings)",
    "an ESC \x1b[31m, a BEL \x07, a CR \r, a bidi override \u202e and a NUL \x00 in a name",
    "two\nlines",
    "",
    "  leading and trailing blanks  ",
    "x" * 500,  # longer than any width: soft wrap, never folded
]
# Lines Rich would change (markup, tabs) or arguments beyond one string: Rich prints them.
NOT_PLAIN = [
    (("[red]error[/] x",), {}),
    (("a\tb",), {"markup": False}),
    (("a", "b"), {}),
    (("styled",), {"style": "bold"}),
    ((42,), {}),
]


def _through(stream: io.TextIOBase, monkeypatch: pytest.MonkeyPatch, rich: bool, *objects: object,
             **kwargs: object) -> None:
    monkeypatch.setattr(sys, "stderr", stream)
    lazy = fleet_console._LazyConsole(stderr=True)
    if rich:
        lazy.__getattr__("print")(*objects, **kwargs)  # the console made first: Rich prints it
    else:
        lazy.print(*objects, **kwargs)
    stream.flush()


# markup on (the default) with a '[' in the line: Rich prints it
@pytest.mark.parametrize(("line", "markup"), [(line, markup) for line in PLAIN for markup in (None, False)
                                              if markup is False or "[" not in line])
def test_a_plain_line_is_written_as_rich_writes_it_to_a_pipe(line, markup, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    kwargs = {} if markup is None else {"markup": markup}
    written = {}
    for rich in (True, False):
        stream = io.StringIO()
        _through(stream, monkeypatch, rich, line, **kwargs)
        written[rich] = stream.getvalue()
    assert written[False] == written[True]
    assert written[False].endswith("\n")


def test_a_plain_line_is_written_as_rich_writes_it_to_a_terminal(monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    line = "spec.yaml: valid (no findings) \x1b]52;c;aGk=\x07"
    written = {}
    for rich in (True, False):
        master, replica = os.openpty()
        with os.fdopen(replica, "w", encoding="utf-8") as stream:
            assert stream.isatty()
            _through(stream, monkeypatch, rich, line, markup=False)
        written[rich] = os.read(master, 65536)
        os.close(master)
    assert written[False] == written[True]
    assert b"\x1b" not in written[False]  # shown as \x1b, never passed to the terminal


@pytest.mark.parametrize(("objects", "kwargs"), NOT_PLAIN)
def test_anything_else_goes_through_rich(objects, kwargs, monkeypatch):
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    lazy = fleet_console._LazyConsole(stderr=True)
    lazy.print(*objects, **kwargs)
    assert lazy._console is not None


def test_once_rich_has_printed_every_line_goes_through_it(monkeypatch):
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    lazy = fleet_console._LazyConsole(stderr=True)
    lazy.print("[red]first[/]")
    assert sys.stderr.getvalue() == "first\n"
    printed = []
    monkeypatch.setattr(lazy._console, "print", lambda *objects, **kwargs: printed.append((objects, kwargs)))
    lazy.print("then a plain line", markup=False)
    assert printed == [(("then a plain line",), {"markup": False})]


class _Flushes(io.StringIO):
    """A stream that records what it held at each flush."""

    def __init__(self) -> None:
        super().__init__()
        self.flushed: list[str] = []

    def flush(self) -> None:
        self.flushed.append(self.getvalue())


def test_a_plain_line_is_flushed_as_rich_flushes_it(monkeypatch):
    # a child process writing to the same stream next (an Ansible run) comes after the line
    for rich in (True, False):
        stream = _Flushes()
        monkeypatch.setattr(sys, "stderr", stream)
        lazy = fleet_console._LazyConsole(stderr=True)
        (lazy.__getattr__("print") if rich else lazy.print)("wave 1: 4 nodes", markup=False)
        assert stream.flushed[:1] == ["wave 1: 4 nodes\n"]


BROKEN_PIPE = """
import sys
from fleetspec.console import _LazyConsole
out = _LazyConsole(stderr=False)
if sys.argv[1] == "rich":
    out.__getattr__("print")  # the console made first: Rich prints the line
for _ in range(100):  # past the pipe's buffer
    out.print("x" * 1000, markup=False)
"""


@pytest.mark.parametrize("path", ["rich", "plain"])
def test_a_closed_pipe_ends_the_command_as_rich_ends_it(path):
    read, write = os.pipe()
    os.close(read)
    with os.fdopen(write, "wb") as stdout:
        proc = subprocess.run([sys.executable, "-c", BROKEN_PIPE, path], stdout=stdout, capture_output=False,
                              stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert (proc.returncode, proc.stderr) == (1, "")  # exit 1, no traceback
