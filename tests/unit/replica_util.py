"""Helpers of the replication-primitive tests: pulling a leader's batches into a follower the
way the replication layer will (chunks reassembled), observable state, batch lists."""

from __future__ import annotations

import random
from typing import Any

from jetlog.log import OutOfRangeError, Pos
from jetlog.wire import records as rc
from jetlog.wire import recordscan as rs

BIG = 1 << 40


def split(data: bytes) -> list[bytes]:
    """The batches of a buffer of whole batches."""
    res = rs.scan(data)
    assert res.status == rs.OK and res.end == len(data), res
    return [data[off : off + h.size] for off, h in res.batches]


def start_of(store: Any) -> Pos:
    """A store's start position (no epoch is <= -1, so ``epoch_end`` answers the start)."""
    e, pos = store.epoch_end(-1)
    assert e == -1
    return pos


def positions(batches: list[bytes]) -> list[Pos]:
    """Positions computed from the headers alone (the definition: k counts equal last_seqs)."""
    out: list[Pos] = []
    for b in batches:
        h = rc.decode_header(b)
        k = out[-1][1] + 1 if out and out[-1][0] == h.last_seq else 0
        out.append((h.last_seq, k))
    return out


def batch_list(store: Any) -> list[tuple[Pos, bytes]]:
    """Every batch of a store with its position, checking the store reports the same ones."""
    r = store.read_batches(start_of(store), BIG)
    assert not r.partial
    bs = split(r.data)
    assert len(bs) == r.nbatches
    pos = positions(bs)
    if bs:
        assert r.last == pos[-1] == store.log_end()
    return list(zip(pos, bs, strict=True))


def snapshot(store: Any) -> tuple[Any, ...]:
    """Everything a reader can observe."""
    st = store.state()
    return (
        tuple(st[:8]),
        [store.load(s) for s in range(1, st.last_seq + 1)],
        store.subjects_state(),
        store.deleted_seqs(),
        sorted(store.ttl_entries()),
    )


async def replicate(
    leader: Any,
    follower: Any,
    max_bytes: int = 1 << 20,
    rng: random.Random | None = None,
    fetches: int | None = None,
    record: list[bytes] | None = None,
    stats: dict[str, int] | None = None,
) -> int:
    """Fetch from ``leader`` into ``follower`` until caught up (or ``fetches`` replies), with a
    random ``max_bytes`` per fetch when ``rng`` is given (tiny ones force chunked batches).
    A follower below the leader's start resets (and ``record`` restarts). Every appended batch
    is added to ``record``; ``stats`` counts resets and chunks. Returns the number of replies."""
    stats = stats if stats is not None else {}
    buf = bytearray()
    off = 0
    n = 0
    while fetches is None or n < fetches:
        mb = rng.choice([1, 7, 64, 100, 500, 1500, 4000, 1 << 20]) if rng else max_bytes
        raw = rng.choice([0, 0, 3000]) if rng else 0
        try:
            r = leader.read_batches(follower.log_end(), mb, off, max_raw=raw)
        except OutOfRangeError as exc:
            assert not buf
            await follower.reset(exc.start[0] + 1)
            stats["resets"] = stats.get("resets", 0) + 1
            assert follower.log_end() == exc.start
            if record is not None:
                record.clear()
            continue
        n += 1
        if r.partial:
            stats["chunks"] = stats.get("chunks", 0) + 1
            assert r.offset == off and len(r.data) <= mb and r.nbatches == 0
            buf += r.data
            off += len(r.data)
            if r.complete:
                data = bytes(buf)
                buf.clear()
                off = 0
                assert follower.append_batches(data) == r.last
                if record is not None:
                    record.append(data)
            continue
        assert len(r.data) <= mb
        if not r.nbatches:
            assert r.last == follower.log_end()
            return n
        assert follower.append_batches(r.data) == r.last
        if record is not None:
            record.extend(split(r.data))
    return n
