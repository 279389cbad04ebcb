"""Test-only sync ledger: what each completed sync made durable, so a chaos run can simulate a
power loss (``jetlog.chaos.powerloss`` truncates files back to it before restarting a killed
node). Off unless ``$JETLOG_SYNC_LEDGER`` names a directory; then ``Syncer`` calls :func:`note`
(with ``LEDGER`` not None) when a regular file is registered and when a sync of one succeeded,
and each process appends lines ``<ns> R|S <size> <path>`` to ``<dir>/<pid>.ledger``:

* ``R`` — registered with this size (the writer of a store that was just opened or created:
  its content is taken as on disk; after a simulated power loss it is exactly what survived).
* ``S`` — a sync requested when the file had this size succeeded: every byte below it is durable.
  A segment's size is the end of the data its writer wrote (``wrote``), not the file's size,
  which preallocation puts past it.

The line is written (``O_APPEND``, one ``write``) before the sync's future completes, so
before anything it covers is acknowledged. A ``kill -9`` keeps it (page cache), and a line lost
with a kill between the sync and the write only under-states durability — the simulation then
drops bytes nothing was acknowledged for. Production never sets the variable.
"""

from __future__ import annotations

import os
import stat
import time

ENV = "JETLOG_SYNC_LEDGER"


class Ledger:
    """The open ledger file of this process."""

    def __init__(self, directory: str) -> None:
        os.makedirs(directory, exist_ok=True)
        path = os.path.join(directory, f"{os.getpid()}.ledger")
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
        self._written: dict[str, int] = {}

    def wrote(self, path: str, end: int) -> None:
        """A segment writer wrote data up to ``end`` (positional writes set, never raise it)."""
        self._written[path] = end

    def size_of(self, path: str, fd: int) -> int:
        """What a sync of ``fd`` (at ``path``) requested now makes durable."""
        end = self._written.get(path)
        return end if end is not None else os.fstat(fd).st_size

    @staticmethod
    def path_of(fd: int) -> str | None:
        """The path of a regular file's fd (None for directories and anything else)."""
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return None
            return os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            return None

    def note(self, kind: str, size: int, path: str) -> None:
        """Append one line (see the module docstring)."""
        if kind == "R":
            self._written.pop(path, None)  # a (re)opened writer starts from the file as it is
        os.write(self._fd, f"{time.time_ns()} {kind} {size} {path}\n".encode())


def _open() -> Ledger | None:
    d = os.environ.get(ENV)
    return Ledger(d) if d else None


LEDGER: Ledger | None = _open()
