"""The state lock: one writer per fleet, and everyone else is told who holds it.

The lock is a file created with O_CREAT|O_EXCL holding a JSON record of its holder
(host, pid, the pid's start time, user, command, time). Creation and take-over happen
under an ``fcntl.flock`` on a guard file, so two processes that both find a stale lock
cannot both take it. A lock is stale when its holder ran on this host and that process
is gone (or the pid now belongs to a later process); a lock held on another host is
never taken over automatically, because this host cannot see that process.
"""

from __future__ import annotations

import calendar
import fcntl
import getpass
import json
import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from fleetspec.safe_io import UnsafePathError, fsync_dir, loads_json, read_bounded

MAX_LOCK_BYTES = 64 * 1024  # a holder record is a few hundred bytes


@dataclass(frozen=True)
class LockInfo:
    host: str
    pid: int
    pid_started: str | None  # /proc/<pid>/stat start time: tells a reused pid apart
    user: str
    command: str
    started: str  # ISO 8601, UTC

    def describe(self, now: float | None = None) -> str:
        """Who holds it and for how long (``state show``, ``state list``, a refused plan or apply)."""
        return (f"{self.user}@{self.host} pid {self.pid} since {self.started}{self._age(now)} "
                f"running '{self.command}'")

    def _age(self, now: float | None) -> str:
        try:
            started = calendar.timegm(time.strptime(self.started, "%Y-%m-%dT%H:%M:%SZ"))
        except (TypeError, ValueError):
            return ""
        seconds = max(0, int((time.time() if now is None else now) - started))
        days, rest = divmod(seconds, 86400)
        hours, rest = divmod(rest, 3600)
        minutes, seconds = divmod(rest, 60)
        parts = [f"{days}d"] * bool(days) + [f"{hours}h"] * bool(hours) + [f"{minutes}m"] * bool(minutes)
        return f" ({' '.join(parts[:2]) or f'{seconds}s'} ago)"


class LockHeld(Exception):
    """Another live process holds the lock."""

    def __init__(self, path: Path, holder: LockInfo | None, detail: str = "") -> None:
        self.path = path
        self.holder = holder
        who = holder.describe() if holder else "an unknown holder (the lock file is unreadable)"
        super().__init__(f"state is locked by {who} ({path}). {detail}".rstrip())


def current_holder(command: str) -> LockInfo:
    return LockInfo(
        host=socket.gethostname(),
        pid=os.getpid(),
        pid_started=_process_start(os.getpid()),
        user=current_user(),
        command=command,
        started=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    )


def read_holder(path: Path) -> LockInfo | None:
    try:
        data = loads_json(read_bounded(path, MAX_LOCK_BYTES))
    except (OSError, ValueError, UnsafePathError):
        return None
    return _holder_from(data)


def _holder_from(data: object) -> LockInfo | None:
    """A `LockInfo` when ``data`` has exactly its fields with their types; else None (garbage)."""
    if not isinstance(data, dict) or set(data) != {f.name for f in fields(LockInfo)}:
        return None
    text = ("host", "user", "command", "started")
    if not all(isinstance(data[k], str) for k in text) or not isinstance(data["pid_started"], str | None):
        return None
    pid = data["pid"]
    if not isinstance(pid, int) or isinstance(pid, bool) or not 0 < pid < 2**22:  # Linux pid_max is 2^22
        return None
    return LockInfo(**data)


def is_stale(holder: LockInfo) -> bool:
    """True only when we can see that the holder is gone: same host, process ended."""
    if holder.host != socket.gethostname():
        return False
    try:
        os.kill(holder.pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return holder.pid_started is not None and _process_start(holder.pid) != holder.pid_started


class StateLock:
    """Hold with ``with StateLock(path, command) as lock:``; ``lock.took_over`` names a stale holder replaced."""

    def __init__(self, path: Path, command: str) -> None:
        self.path = Path(path)
        self.command = command
        self.holder: LockInfo | None = None
        self.took_over: LockInfo | None = None

    @property
    def held(self) -> bool:
        return self.holder is not None

    def acquire(self) -> StateLock:
        if self.held:
            raise RuntimeError(f"{self.path} is already held by this process")
        me = current_holder(self.command)
        with _guard(self.path):
            try:
                self._create(me)
            except FileExistsError:
                other = read_holder(self.path)
                if other is None:
                    raise LockHeld(self.path, None,
                                   f"If no fleetspec is running, remove {self.path} by hand.") from None
                if not is_stale(other):
                    hint = ("It is still running." if other.host == me.host else
                            f"It runs on another host; if that process is gone, remove {self.path} by hand.")
                    raise LockHeld(self.path, other, hint) from None
                self.path.unlink()
                self._create(me)
                self.took_over = other
        self.holder = me
        return self

    def release(self) -> None:
        if not self.held:
            return
        with _guard(self.path):
            if read_holder(self.path) == self.holder:
                self.path.unlink(missing_ok=True)
                fsync_dir(self.path.parent)
        self.holder = None

    def __enter__(self) -> StateLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()

    def _create(self, me: LockInfo) -> None:
        fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        with os.fdopen(fd, "w") as handle:
            handle.write(json.dumps(asdict(me)) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        fsync_dir(self.path.parent)


@contextmanager
def _guard(path: Path) -> Iterator[None]:
    """Serialise lock creation and take-over between processes (short critical section)."""
    guard = path.with_name(path.name + ".guard")
    try:
        fd = os.open(guard, os.O_CREAT | os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
    except OSError as exc:
        raise LockHeld(path, None, f"Its guard {guard} cannot be opened ({exc.strerror}): remove it by hand "
                                   "if it is not a plain file.") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _process_start(pid: int) -> str | None:
    """Field 22 of /proc/<pid>/stat (start time in clock ticks); None where /proc is absent."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def current_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return str(os.getuid())
