"""The one place rendered files touch the disk, and only inside DIR.

The whole tree is written to a staging sibling directory, then swapped in: on Linux
with one ``renameat2(RENAME_EXCHANGE)``, so a reader sees the old tree or the new,
never neither (atomically); elsewhere with two renames, between which DIR is briefly
absent. A failed render leaves DIR exactly as it was. DIR is fleetspec's: it carries a
marker file, and a non-empty directory without that marker is refused rather than
replaced (it might be someone's work); so is a DIR that is a symbolic link or not a
directory. Staging and ``.old`` directories that a killed render left beside DIR
(recognised by the marker fleetspec writes into them first) are removed on the next
render.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import fcntl
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path, PurePosixPath

from fleetspec.safe_io import kind_of

MARKER = ".fleetspec-render"
MARKER_TEXT = "This directory is written by 'fleetspec render'; it is replaced as a whole.\n"
_RENAME_EXCHANGE = 2  # linux/fs.h
_AT_FDCWD = -100


class RenderWriteError(Exception):
    pass


_CHUNK = 1 << 20  # characters written at a time


def safe_relative(path: PurePosixPath | str) -> PurePosixPath:
    """Refuse absolute paths and '..' segments: a rendered name may not leave DIR."""
    p = PurePosixPath(path)
    if p.is_absolute() or not p.parts or any(part in ("..", "") for part in p.parts) or "\0" in str(p):
        raise RenderWriteError(f"refusing to write '{path}': rendered paths must stay inside the output directory")
    return p


def write_tree(files: dict[PurePosixPath, str], out_dir: Path, marker_text: str = MARKER_TEXT) -> None:
    """Write ``files`` as the whole of ``out_dir`` (the module's docstring says how);
    ``marker_text``: what the marker says wrote the directory."""
    checked = {safe_relative(rel): text for rel, text in files.items()}
    write_parts([checked], out_dir, marker_text)


def write_parts(parts: Iterable[Mapping[PurePosixPath, str]], out_dir: Path,
                marker_text: str = MARKER_TEXT) -> list[PurePosixPath]:
    """``write_tree`` of the union of ``parts`` (each renderer's files, made as they are
    asked for), holding one part at a time: at 100,000 nodes fleet.json's 45 MB is gone
    before the inventory is made. A bad path or two parts naming one file leaves ``out_dir``
    as it was. Returns the paths written, sorted."""
    out_dir = Path(out_dir)
    check_target(out_dir)
    parent = out_dir.absolute().parent
    parent.mkdir(parents=True, exist_ok=True)
    written: set[PurePosixPath] = set()
    with _renders_in(parent):
        check_target(out_dir)  # again, now that no other render can change it
        remove_leftovers(out_dir)
        staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=parent))
        try:
            (staging / MARKER).write_text(marker_text)  # first: a killed render's staging is recognisable
            for part in parts:
                checked = {safe_relative(rel): rel for rel in part}
                for rel in checked:
                    if rel in written:
                        raise ValueError(f"two renderers produce {rel}")
                    written.add(rel)
                for rel, name in checked.items():
                    _write(staging.joinpath(*rel.parts), part[name])
                del part  # before the next part is made
            _swap(staging, out_dir)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
    return sorted(written)


def _write(target: Path, text: str) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target, "w", encoding="utf-8") as fh:
        # A slice at a time: writing a str encodes it whole, a second copy of
        # fleet.json's 45 MB at 100,000 nodes beside the first.
        for start in range(0, len(text), _CHUNK):
            fh.write(text[start:start + _CHUNK])


@contextmanager
def _renders_in(parent: Path) -> Iterator[None]:
    """One render at a time beside DIR (an advisory lock on the parent directory), so the
    staging directories found there belong to renders that were killed, not running."""
    fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def check_target(out_dir: Path) -> None:
    try:
        st = os.lstat(out_dir)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode):
        raise RenderWriteError(f"{out_dir} is a symbolic link; render replaces its directory as a whole and would "
                               "replace the link. Pass the directory it points to as --out")
    if not stat.S_ISDIR(st.st_mode):
        raise RenderWriteError(f"{out_dir} exists and is {kind_of(st.st_mode)}, not a directory. Choose another --out")
    if any(out_dir.iterdir()) and not (out_dir / MARKER).is_file():
        raise RenderWriteError(
            f"{out_dir} is not empty and was not written by fleetspec. Choose an empty or new --out directory"
        )


def remove_leftovers(out_dir: Path) -> list[Path]:
    """Staging and ``.old`` directories of an earlier render into ``out_dir`` that was killed."""
    parent = Path(out_dir).absolute().parent
    pattern = re.compile(re.escape(f".{Path(out_dir).name}.") + r"[A-Za-z0-9_]{8}(\.old)?")
    removed = []
    try:
        entries = list(parent.iterdir())
    except OSError:
        return removed
    for entry in entries:
        if not pattern.fullmatch(entry.name) or entry.is_symlink() or not entry.is_dir():
            continue
        if (entry / MARKER).is_file() or not any(entry.iterdir()):
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry)
    return removed


def _swap(staging: Path, out_dir: Path) -> None:
    if not out_dir.exists():
        os.rename(staging, out_dir)
        return
    if _exchange(staging, out_dir):
        shutil.rmtree(staging, ignore_errors=True)  # now the previous tree
        return
    backup = staging.with_name(staging.name + ".old")
    os.rename(out_dir, backup)
    try:
        os.rename(staging, out_dir)
    except BaseException:
        os.rename(backup, out_dir)
        raise
    shutil.rmtree(backup, ignore_errors=True)


def _exchange(a: Path, b: Path) -> bool:
    """Swap two directory entries in one step (Linux renameat2); False where unsupported."""
    renameat2 = getattr(_libc(), "renameat2", None)
    if renameat2 is None:
        return False
    # Non-zero: EINVAL/ENOSYS, a file system or kernel without RENAME_EXCHANGE; fall back.
    return renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0


_LIBC: ctypes.CDLL | None = None


def _libc() -> ctypes.CDLL | None:
    global _LIBC
    if _LIBC is None:
        name = ctypes.util.find_library("c")
        try:
            _LIBC = ctypes.CDLL(name, use_errno=True) if name else None
        except OSError:
            _LIBC = None
    return _LIBC
