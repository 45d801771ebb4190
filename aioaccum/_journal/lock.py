"""The journal folder's one-writer lock: ``journal.lock``, holding the writer's pid.

``flock`` rather than the file's existence: the kernel drops the lock when its holder dies,
however it dies, so a crashed producer never leaves a folder locked for its successor. The pid
inside is only for the message a refused second producer gets.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from aioaccum.errors import JournalError, JournalLockedError

__all__ = ["FolderLock"]

LOCK_NAME = "journal.lock"


class FolderLock:
    """Held from :meth:`acquire` until :meth:`release` (or the process's end)."""

    __slots__ = ("_fd", "path")

    def __init__(self, folder: Path) -> None:
        self.path = folder / LOCK_NAME
        self._fd = -1

    def acquire(self) -> None:
        """Take the lock without waiting.

        Raises:
            JournalLockedError: Another producer holds it; the message names its pid.
            JournalError: The lock file cannot be created.
        """
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise JournalError(
                f"cannot create the journal lock {self.path}: {exc.strerror}; check that "
                f"journal_dir is a writable folder"
            ) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_pid(fd)
            os.close(fd)
            raise JournalLockedError(
                f"journal_dir {self.path.parent} is in use by another producer (pid {holder}); "
                f"give each producer a folder of its own, or stop that process first"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd >= 0:
            # Closing drops the flock; the file stays, harmlessly, for the next holder.
            os.close(self._fd)
            self._fd = -1


def _read_pid(fd: int) -> str:
    try:
        text = os.pread(fd, 32, 0).decode(errors="replace").strip()
    except OSError:
        return "unknown"
    return text or "unknown"
