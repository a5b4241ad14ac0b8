"""Every file fleetspec reads or writes by name goes through here: bounded, and never
through something that is not a plain file.

Reading: at most a stated number of bytes (``validate /dev/zero`` stops at the bound);
the file is opened without blocking, so a FIFO without a writer reads as empty instead
of hanging, and callers that want plain files only (secrets, state, saved plans, facts,
locks) get a clear refusal for a directory, FIFO, socket or device.

Writing (``plan --out``, state, JUnit, reports): the target must be absent or a plain
file. A character or block device, a FIFO, a socket, a directory or a symbolic link
(to anything) is refused and left exactly as it is: a file is written next to the
target and renamed over it, and rename(2) would replace such a node, not write into
it. ``-`` means standard output, on purpose. Every such write is atomic (``atomic_write``).
"""

from __future__ import annotations

import fcntl
import os
import stat
import sys
import tempfile
from pathlib import Path
from typing import Any

STDOUT = "-"
TEMP_SUFFIX = ".tmp"


class UnsafePathError(Exception):
    """A path fleetspec must not read or write as a file; the message says why."""


def kind_of(mode: int) -> str:
    """``st_mode`` in words: what a user would call the thing at a path."""
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symbolic link")):
        if test(mode):
            return name
    return "a regular file" if stat.S_ISREG(mode) else "not a regular file"


def read_bounded(path: str | os.PathLike[str], limit: int, *, regular_only: bool = True) -> bytes:
    """The bytes of ``path``, at most ``limit`` of them.

    Raises `UnsafePathError` for a directory, for anything but a regular file when
    ``regular_only``, and for content over ``limit`` bytes; `OSError` when it cannot be
    opened (missing, no permission).
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode) or (regular_only and not stat.S_ISREG(st.st_mode)):
            raise UnsafePathError(f"{path} is {kind_of(st.st_mode)}, not a regular file")
        if stat.S_ISREG(st.st_mode) and st.st_size > limit:
            raise UnsafePathError(f"{path} is {st.st_size:,} bytes; fleetspec reads at most {limit:,} here")
        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
        fcntl.fcntl(fd, fcntl.F_SETFL, flags & ~os.O_NONBLOCK)  # a pipe with a writer: wait for its data
        chunks, total = [], 0
        while total <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > limit:
            raise UnsafePathError(f"{path} holds more than {limit:,} bytes; fleetspec reads at most that here")
        return b"".join(chunks)
    finally:
        os.close(fd)


def loads_json(raw: bytes | str) -> Any:
    """``json.loads`` whose nesting-depth and number-length failures are ValueErrors with
    a message, like every other bad document."""
    import json  # here: reading a spec never needs it (startup time)

    try:
        return json.loads(raw)
    except RecursionError:
        raise ValueError("nested too deeply") from None
    except json.JSONDecodeError:
        raise
    except ValueError:  # int(): Python refuses over 4,300 decimal digits (CVE-2020-10735)
        raise ValueError("a number of more than 4,300 digits; no field holds one") from None


def check_output_file(path: str | os.PathLike[str]) -> None:
    """Refuse to replace anything at ``path`` that is not a plain file (or absent)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode):
        try:
            target = kind_of(os.stat(path).st_mode)
        except OSError:
            target = "nothing (a dangling link)"
        raise UnsafePathError(f"{path} is a symbolic link to {target}; fleetspec does not write through links. "
                              "Write to the target's own path, or remove the link")
    if not stat.S_ISREG(st.st_mode):
        raise UnsafePathError(f"{path} is {kind_of(st.st_mode)}; fleetspec writes only regular files and leaves "
                              "it as it is. Choose another path" + (" (or '-' for standard output)"
                                                                    if stat.S_ISCHR(st.st_mode) else ""))


def write_output(path: str | os.PathLike[str], data: bytes) -> None:
    """Write a report or plan the user named: ``-`` is standard output; any other path
    must be absent or a regular file, and is replaced atomically."""
    if str(path) == STDOUT:
        if hasattr(sys.stdout, "buffer"):
            sys.stdout.buffer.write(data)
        else:  # a text-only stream (a test runner's capture)
            sys.stdout.write(data.decode())
        sys.stdout.flush()
        return
    atomic_write(Path(path), data)

def atomic_write(path: Path, data: bytes, backup: Path | None = None) -> None:
    """Replace ``path`` with ``data`` crash-safely: a reader sees the old bytes or the new, never
    a mix. A temporary file in the same directory is fsynced and renamed over the target, then
    the directory is fsynced so the rename itself survives a power cut. With ``backup`` the
    previous file is first hard-linked to ``backup`` (also by rename), so there is no moment
    at which the target is missing. Raises `UnsafePathError` when ``path`` or ``backup`` is
    not a plain file (the rename would replace it)."""
    path = Path(path)
    check_output_file(path)
    if backup is not None:
        check_output_file(backup)
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=TEMP_SUFFIX)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        if backup is not None and path.exists():
            _link_over(path, backup)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def _link_over(source: Path, target: Path) -> None:
    """Make ``target`` another name of ``source``'s current inode, atomically."""
    if target.exists() and os.path.samefile(source, target):
        return  # already the same file (a writer was killed between the link and the write)
    staging = target.with_name(f".{target.name}.{os.getpid()}{TEMP_SUFFIX}")
    staging.unlink(missing_ok=True)
    os.link(source, staging)
    os.replace(staging, target)
    # rename(2) of two names of one inode does nothing and leaves the staging name.
    staging.unlink(missing_ok=True)


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def remove_leftovers(directory: Path, name: str) -> list[Path]:
    """Temporary files a killed writer of ``name`` left behind; call only under the lock."""
    removed = []
    for leftover in Path(directory).glob(f".{name}.*{TEMP_SUFFIX}"):
        leftover.unlink(missing_ok=True)
        removed.append(leftover)
    return removed
