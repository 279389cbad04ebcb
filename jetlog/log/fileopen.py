"""Recovering a ``FileStore``'s directory ahead of the store: ``recover_dir`` creates, locks and
recovers it (blocking) into a ``RecoveredDir``, which ``FileStore.open`` takes over.

Apart from ``filestore.py`` because it runs before there is a store, in a thread of the caller's
choosing (a node start recovers every stream in one thread: ``stream/preload.py``), and uses
nothing of the store object.
"""

from __future__ import annotations

import os

from jetlog.errors import StorageError
from jetlog.log import filereplica as fr
from jetlog.log.index import Index
from jetlog.log.recovery import Recovered, prepare_dir
from jetlog.log.segment import OsIO, SegmentIO
from jetlog.log.store import Pos

__all__ = ["RecoveredDir", "recover_dir"]


class RecoveredDir:
    """A store directory locked and recovered by ``recover_dir``, not yet taken over by a
    ``FileStore``. Whoever holds one either passes it to ``FileStore.open`` or calls
    ``discard`` (the directory stays locked until one of the two)."""

    __slots__ = ("_parts",)

    def __init__(
        self, io: SegmentIO, lock_fd: int, rec: Recovered, ix: Index, epochs: list[tuple[int, Pos]]
    ) -> None:
        self._parts: tuple[SegmentIO, int, Recovered, Index, list[tuple[int, Pos]]] | None = (
            io,
            lock_fd,
            rec,
            ix,
            epochs,
        )

    def take(self) -> tuple[SegmentIO, int, Recovered, Index, list[tuple[int, Pos]]]:
        """The parts, once: the caller owns the lock fd from here on."""
        parts, self._parts = self._parts, None
        if parts is None:
            raise StorageError("a recovered store directory was taken over twice")
        return parts

    def discard(self) -> None:
        """Unlock the directory without opening a store on it (recovery leaves no other fd
        open: segments are opened when a store takes them over)."""
        parts, self._parts = self._parts, None
        if parts is not None:
            os.close(parts[1])


def recover_dir(
    path: str,
    *,
    io: SegmentIO | None = None,
    verify: bool = True,
    first_seq: int = 1,
    lazy_verify: bool = False,
) -> RecoveredDir:
    """Create if needed, lock and recover the store directory ``path`` (blocking: a thread).
    See ``FileStore.open`` for the arguments. Raises ``StorageError``."""
    sio: SegmentIO = io if io is not None else OsIO()
    lock_fd = prepare_dir(path, sio)
    try:
        rec, ix, epochs = fr.recover_all(path, sio, verify, first_seq, lazy_verify)
    except BaseException as exc:
        os.close(lock_fd)
        if isinstance(exc, OSError):
            raise StorageError(f"cannot open store {path}: {exc}") from exc
        raise
    return RecoveredDir(sio, lock_fd, rec, ix, epochs)
