"""Crash-safe file replacement: a reader sees the old bytes or the new, never a mix.

Write a temporary file in the same directory, fsync it, rename it over the target,
fsync the directory so the rename itself survives a power cut. With ``backup`` the
previous file is first hard-linked to ``backup`` (also by rename), so there is no
moment at which the target is missing. A target (or backup) that exists and is not a
regular file (a device, FIFO, socket, directory, symbolic link) is refused before
anything is written: the rename would replace it (`fleetspec.safe_io`).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from fleetspec.safe_io import check_output_file

TEMP_SUFFIX = ".tmp"


def atomic_write(path: Path, data: bytes, backup: Path | None = None) -> None:
    """Raises `fleetspec.safe_io.UnsafePathError` when ``path`` or ``backup`` is not a plain file."""
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
