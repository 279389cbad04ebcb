"""``MemStore``: the memory-storage implementation of ``MsgStore``.

Same index and the same read/purge code as the file store (``base.IndexedStore``), so state,
reads and sequences behave identically; payloads live in the index blocks. Nothing is durable:
``committed_seq`` is always ``last_seq`` and commit listeners run on the next loop iteration
after a mutation (or synchronously when no loop is running), mimicking a group commit.
"""

from __future__ import annotations

import asyncio

from jetlog.errors import StreamUnavailableError
from jetlog.log.base import IndexedStore
from jetlog.log.index import Block, Index
from jetlog.log.store import StoredMsg

__all__ = ["MemStore"]


class MemStore(IndexedStore):
    """In-memory ``MsgStore``."""

    def __init__(self, first_seq: int = 1) -> None:
        super().__init__(Index(first_seq, payload=True))
        self._closed = False
        self._notify_scheduled = False
        self._notified = self._ix.last_seq

    @classmethod
    async def open(cls, path: str | None = None, *, first_seq: int = 1, **_options: object) -> MemStore:
        """Same shape as ``FileStore.open`` (``path`` and file options are ignored)."""
        return cls(first_seq)

    @property
    def committed_seq(self) -> int:
        return self._ix.last_seq

    def _check_writable(self) -> None:
        if self._closed:
            raise StreamUnavailableError("memory store is closed")

    def append(self, subject: str, hdr: bytes, data: bytes, ts: int, ttl: int = 0) -> int:
        if self._closed:
            self._check_writable()
        ix = self._ix
        subj = ix.subjects
        sid = subj.ids.get(subject)
        if sid is None:
            sid = subj.intern(subject)
        seq = ix.last_seq + 1
        ix.last_seq = seq
        ix.last_ts = ts
        blk = ix.add(seq, ts, sid, len(subj.raw[sid]) + len(hdr) + len(data) + 16, 0, 0)
        blk.payload.append((hdr, data))  # type: ignore[union-attr]
        if ttl:
            ix.ttl[seq] = ts + ttl
        if self._listeners:
            self._schedule_notify()
        return seq

    def _skipped(self) -> None:
        if self._listeners:
            self._schedule_notify()

    def _schedule_notify(self) -> None:
        if self._notify_scheduled:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._do_notify()
            return
        self._notify_scheduled = True
        loop.call_soon(self._do_notify)

    def _do_notify(self) -> None:
        self._notify_scheduled = False
        seq = self._ix.last_seq
        if seq > self._notified:
            self._notified = seq
            self._notify(seq)

    def _read(self, blk: Block, i: int) -> StoredMsg:
        hdr, data = blk.payload[i]  # type: ignore[index,misc]
        return StoredMsg(blk.seqs[i], self._ix.subjects.names[blk.sid[i]], hdr, data, blk.ts[i])

    async def flush(self) -> None:
        return None

    async def close(self) -> None:
        self._closed = True

    async def destroy(self) -> None:
        self._closed = True
        self._ix = Index(self._ix.last_seq + 1, payload=True)
