"""The Rich consoles every command prints through: plain (no highlighting, no emoji
codes: ``museum.yaml:100:18`` and a path with ``:fire:`` print as written), as wide as
``COLUMNS`` says, and wide in pipes and CI logs instead of Rich's 80-column default.
Every string they print (a message, a table cell) has its control characters shown as
escapes (``fleetspec.text.printable``): text from a node, the state or a spec can hold an
ESC or OSC 52 sequence, and Rich passes ESC through; Rich's own styling is not text and
is kept.
Also the one way a command writes a report file (``--junit``) and says why it could not."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

from fleetspec.exit_codes import ERROR

if TYPE_CHECKING:
    from pathlib import Path

    from rich.console import Console

PIPE_WIDTH = 200

# The root options -q/--quiet (-1: only errors and the result line) and -v/--verbose (1:
# more detail where a command has it); 0 by default. Set once by fleetspec/cli.py's root.
_VERBOSITY = [0]


def set_verbosity(level: int) -> None:
    _VERBOSITY[0] = level


def verbosity() -> int:
    return _VERBOSITY[0]


def _width(stream: Any) -> int | None:
    """None lets Rich use the terminal's size; a pipe without COLUMNS gets PIPE_WIDTH."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    return None if stream.isatty() else PIPE_WIDTH


_CLASS: list[type] = []


def _console_class() -> type:
    """Rich's Console whose ``render_str`` (every string printed, markup or not, and every
    string table cell) escapes control characters first."""
    if not _CLASS:
        from rich.console import Console

        from fleetspec.text import printable

        class SafeConsole(Console):
            def render_str(self, text: str, **kwargs: Any) -> Any:
                return super().render_str(printable(text), **kwargs)

        _CLASS.append(SafeConsole)
    return _CLASS[0]


def console(stderr: bool = False) -> Console:
    stream = sys.stderr if stderr else sys.stdout
    return _console_class()(stderr=stderr, highlight=False, emoji=False,  # type: ignore[no-any-return]
                            soft_wrap=True, width=_width(stream))


def consoles() -> tuple[Console, Console]:
    """(stdout, stderr) consoles for one command."""
    return console(), console(stderr=True)


class _LazyConsole:
    """A console made on first use, so importing a command module does not import Rich."""

    def __init__(self, stderr: bool) -> None:
        self._stderr = stderr
        self._console: Console | None = None

    def __getattr__(self, name: str) -> Any:
        if self._console is None:
            self._console = console(self._stderr)
        return getattr(self._console, name)

    def print(self, *objects: Any, **kwargs: Any) -> None:
        """A line Rich would print as it is, before any Rich output, is written without
        making the console (importing Rich costs a start ~8 ms: `validate` of a valid
        spec prints one such line). That line is one string holding no markup (no ``[``,
        or ``markup=False``) and no tab (Rich expands tabs by cell width): on these
        consoles (no highlighting, no emoji, soft wrap, so never wrapped) Rich writes its
        ``printable`` text and a newline to the stream it looks up at each print, and
        flushes it. tests/test_console.py holds the two to the same bytes."""
        if self._console is None and _plain_line(objects, kwargs):
            from fleetspec.text import printable

            stream = sys.stderr if self._stderr else sys.stdout
            try:
                stream.write(printable(objects[0]) + "\n")
                stream.flush()  # as Rich does: what a child process writes to the stream comes after
                return
            except BrokenPipeError:
                pass  # Rich's own handling below (it writes again: exit 1, no traceback)
        self.__getattr__("print")(*objects, **kwargs)

    # Special methods are looked up on the type, not through __getattr__: Rich's Live
    # redraws inside ``with console:``.
    def __enter__(self) -> Console:
        return self.__getattr__("__enter__")()  # type: ignore[no-any-return]

    def __exit__(self, *exc: object) -> None:
        self.__getattr__("__exit__")(*exc)


def _plain_line(objects: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    if len(objects) != 1 or type(objects[0]) is not str or "\t" in objects[0]:
        return False
    if kwargs.get("markup", True) is not False and "[" in objects[0]:
        return False
    return set(kwargs) <= {"markup"}


def lazy_consoles() -> tuple[Console, Console]:
    """(stdout, stderr) consoles for a module's commands, made when first printed to."""
    return _LazyConsole(False), _LazyConsole(True)  # type: ignore[return-value]


def command_class() -> type:
    """The click command class for fleetspec's commands: usage lines name arguments as
    their metavar (``SPEC``), not ``{SPEC}``. With ``rich_markup_mode=None`` on the apps,
    flags show no ``<bool>`` type either."""
    from typer.core import TyperCommand

    class Command(TyperCommand):
        def collect_usage_pieces(self, ctx: Any) -> list[str]:
            return [p[1:-1] if p.startswith("{") and p.endswith("}") else p
                    for p in super().collect_usage_pieces(ctx)]

    return Command


def write_report(path: Path, data: bytes, err: Console) -> None:
    """Write a report file through ``safe_io.write_output`` ('-' is standard output; links,
    devices and FIFOs refused); a refused or failed write prints one error line and exits 1."""
    import typer

    from fleetspec.safe_io import UnsafePathError, write_output

    try:
        write_output(path, data)
    except UnsafePathError as exc:
        err.print(f"error: {exc}", markup=False)
        raise typer.Exit(ERROR) from None
    except OSError as exc:
        err.print(f"error: cannot write {path}: {exc.strerror}", markup=False)
        raise typer.Exit(ERROR) from None
