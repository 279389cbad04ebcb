"""A stream leader that is demoted while its own group commit is still in flight: the queued
PubAcks are dropped, never released by that commit (chaos finding 8), and a replica between
roles never advances its committed mark on local durability."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

from jetlog.api.models import StreamConfigRequest
from jetlog.api.models_stream import StreamConfig
from jetlog.errors import ApiError
from jetlog.log import FileStore
from jetlog.stream.config import normalize_stream_config, validate_stream_config
from jetlog.stream.stream import FOLLOWER, LEADER, Stream
from tests.unit.test_store_pipeline import GatedSync


class Out:
    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes]] = []

    def send(self, subject: str, payload: bytes, hdr: bytes = b"") -> None:
        self.sent.append((subject, payload))


class NoQuorum:
    """A leader's replication side whose followers never confirm anything."""

    def __init__(self) -> None:
        self.durable: list[int] = []

    def on_durable(self, seq: int) -> None:
        self.durable.append(seq)

    def publish_error(self) -> ApiError | None:
        return None

    async def sync(self) -> None:
        return None

    def unanswered_error(self) -> ApiError | None:
        return None

    def fenced(self) -> bool:
        return False

    def lease_until(self) -> float | None:
        return math.inf

    def committed_wanted(self) -> None:
        return None


def _config() -> StreamConfig:
    return validate_stream_config(normalize_stream_config(StreamConfigRequest(name="S", subjects=["s.>"])))


async def _leader(tmp_path: Path) -> tuple[Stream, GatedSync, Out, NoQuorum]:
    gs = GatedSync()
    store = await FileStore.open(str(tmp_path), syncer=gs, auto_compact=False)
    out = Out()
    stream = Stream(_config(), store, 0, out)
    repl = NoQuorum()
    await stream.start(LEADER, repl)
    return stream, gs, out, repl


async def _held(gs: GatedSync, n: int = 1) -> None:
    for _ in range(200):
        if len(gs.held) >= n:
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"no fdatasync requested (held {len(gs.held)})")


async def test_demotion_drops_acks_a_commit_in_flight_would_release(tmp_path: Path) -> None:
    stream, gs, out, _ = await _leader(tmp_path)
    try:
        for i in range(3):
            stream.process("s.x", f"_INBOX.r{i}", b"", f"m{i}".encode())
        assert stream.store.last_seq == 3
        await _held(gs)
        # The demotion starts; while it is under way the local fsync of the unreplicated tail
        # completes (a resumed stale leader: its followers follow someone else by now).
        demotion = asyncio.ensure_future(stream.demote(None))
        await asyncio.sleep(0)
        while gs.held:
            gs.complete()
        await demotion
        await stream.store.flush()
        assert out.sent == []  # no PubAck for sequences the new leader will reuse
        assert stream.committed_seq == 0
        assert stream.role == FOLLOWER
    finally:
        gs.hold = False
        while gs.held:
            gs.complete()
        await stream.close()


async def test_replica_without_role_never_commits_on_its_own_durability(tmp_path: Path) -> None:
    stream, gs, out, repl = await _leader(tmp_path)
    try:
        stream.process("s.x", "_INBOX.a", b"", b"one")
        stream.process("s.x", "_INBOX.b", b"", b"two")
        await _held(gs)
        await stream.demote(None)
        # Leaderless now, and only then does the fsync land: the log holds entries nobody
        # committed (a new leader may truncate them), so durability alone commits none.
        while gs.held:
            gs.complete()
        await stream.store.flush()
        assert stream.store.committed_seq == 2  # durable on this replica ...
        assert stream.committed_seq == 0  # ... but not committed
        assert repl.durable == []  # the former replication side is no longer told
        await stream.close()
        assert out.sent == []
    finally:
        gs.hold = False
        while gs.held:
            gs.complete()
        if not stream.closed:
            await stream.close()


async def test_a_read_waits_for_a_stalled_disk_only_so_long(tmp_path: Path) -> None:
    """A standalone stream whose fsync never returns: ``wait_committed`` (what STREAM.INFO and
    Direct Get wait on) gives up after its bound and leaves the committed mark where it is;
    the commit lands once the disk answers."""
    gs = GatedSync()
    store = await FileStore.open(str(tmp_path), syncer=gs, auto_compact=False)
    out = Out()
    stream = Stream(_config(), store, 0, out)
    await stream.start()  # standalone (a single node)
    try:
        stream.process("s.x", "_INBOX.a", b"", b"one")
        await _held(gs)
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        await stream.wait_committed(timeout=0.2)
        waited = loop.time() - t0
        assert 0.15 <= waited < 2.0
        assert stream.committed_seq == 0 and out.sent == []
        gs.complete()
        await stream.store.flush()
        assert stream.committed_seq == 1
        assert [s for s, _ in out.sent] == ["_INBOX.a"]
    finally:
        gs.hold = False
        while gs.held:
            gs.complete()
        await stream.close()
