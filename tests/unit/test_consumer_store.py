"""The consumer-state log: replay equals the live state, torn tails, corruption, compaction."""

from __future__ import annotations

import asyncio
import copy
import os

from jetlog.consumer.state import ACK_EXPLICIT, ConsumerState
from jetlog.consumer.store import LOG_NAME, ConsumerLog


def _drive(lg: ConsumerLog, cid: int, st: ConsumerState) -> None:
    for q in range(1, 11):
        st.deliver(q, q * 10)
        lg.deliver(cid, q, q * 10)
    for q in (1, 2, 5):
        d = st.pending[q].dseq
        st.ack(q, d, 0)
        lg.ack(cid, q, d)
    st.deliver(3, 200)
    lg.deliver(cid, 3, 200)
    st.drop_max_delivered(4)
    lg.drop(cid, 4)


def _same(a: ConsumerState, b: ConsumerState) -> None:
    assert (a.dseq, a.sseq, a.floor_dseq, a.floor_sseq) == (b.dseq, b.sseq, b.floor_dseq, b.floor_sseq)
    assert {k: (v.dseq, v.ts) for k, v in a.pending.items()} == {
        k: (v.dseq, v.ts) for k, v in b.pending.items()
    }
    assert a.redelivered == b.redelivered


async def test_replay_reproduces_state(tmp_path) -> None:  # type: ignore[no-untyped-def]
    lg = await ConsumerLog.open(str(tmp_path))
    cid = lg.create("dur", ACK_EXPLICIT, b'{"durable_name":"dur"}', 123)
    st = ConsumerState(ACK_EXPLICIT)
    lg.start(cid, 1)
    _drive(lg, cid, st)
    lg.pause(cid, 999)
    other = lg.create("gone", ACK_EXPLICIT, b"{}", 1)
    lg.delete(other)
    await lg.sync()
    await lg.close()
    lg2 = await ConsumerLog.open(str(tmp_path))
    try:
        assert set(lg2.recovered) == {"dur"}
        r = lg2.recovered["dur"]
        assert (r.config, r.created, r.pause_until) == (b'{"durable_name":"dur"}', 123, 999)
        _same(r.state, st)
        # A new consumer gets a fresh id.
        assert lg2.create("x", ACK_EXPLICIT, b"{}", 0) == 3
    finally:
        await lg2.close()


async def test_torn_tail_is_truncated(tmp_path) -> None:  # type: ignore[no-untyped-def]
    lg = await ConsumerLog.open(str(tmp_path))
    cid = lg.create("d", ACK_EXPLICIT, b"{}", 0)
    st = ConsumerState(ACK_EXPLICIT)
    _drive(lg, cid, st)
    await lg.close()
    with open(os.path.join(tmp_path, LOG_NAME), "ab") as f:
        f.write(b"\x01\x02\x03\x04\x20\x00")  # half a record header
    lg2 = await ConsumerLog.open(str(tmp_path))
    _same(lg2.recovered["d"].state, st)
    lg2.ack(cid, 6, lg2.recovered["d"].state.pending[6].dseq)
    await lg2.close()
    lg3 = await ConsumerLog.open(str(tmp_path))
    assert 6 not in lg3.recovered["d"].state.pending
    await lg3.close()


async def test_corruption_keeps_prefix_and_moves_file_aside(tmp_path) -> None:  # type: ignore[no-untyped-def]
    lg = await ConsumerLog.open(str(tmp_path))
    cid = lg.create("d", ACK_EXPLICIT, b"{}", 0)
    for q in range(1, 50):
        lg.deliver(cid, q, q)
    await lg.close()
    path = os.path.join(tmp_path, LOG_NAME)
    with open(path, "rb") as f:
        data = bytearray(f.read())
    data[len(data) // 2] ^= 0xFF
    with open(path, "wb") as f:
        f.write(bytes(data))
    lg2 = await ConsumerLog.open(str(tmp_path))
    try:
        st = lg2.recovered["d"].state
        assert 0 < st.sseq < 49  # the readable prefix
        assert all(q <= st.sseq for q in st.pending)
        assert os.path.exists(path + ".corrupt.0")
    finally:
        await lg2.close()


async def test_compaction_is_equivalent(tmp_path) -> None:  # type: ignore[no-untyped-def]
    lg = await ConsumerLog.open(str(tmp_path))
    cid = lg.create("d", ACK_EXPLICIT, b'{"a":1}', 7)
    st = ConsumerState(ACK_EXPLICIT)
    _drive(lg, cid, st)
    await lg.sync()
    before = lg.size
    await lg.compact(lambda: [(cid, "d", b'{"a":1}', 7, st, 55)])
    assert lg.size < before
    lg.ack(cid, 6, st.pending[6].dseq)
    st.ack(6, st.pending[6].dseq, 0)
    await lg.close()
    lg2 = await ConsumerLog.open(str(tmp_path))
    try:
        r = lg2.recovered["d"]
        _same(r.state, st)
        assert r.pause_until == 55 and r.config == b'{"a":1}'
    finally:
        await lg2.close()


async def test_large_log_asks_for_compaction(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import jetlog.consumer.store as S

    monkeypatch.setattr(S, "COMPACT_BYTES", 2000)
    lg = await ConsumerLog.open(str(tmp_path))
    asked: list[int] = []
    lg.on_large = lambda: asked.append(lg.size)
    cid = lg.create("d", ACK_EXPLICIT, b"{}", 0)
    st = ConsumerState(ACK_EXPLICIT)
    for q in range(1, 200):
        st.deliver(q, q)
        lg.deliver(cid, q, q)
        d = st.pending[q].dseq
        st.ack(q, d, q)
        lg.ack(cid, q, d)
    await lg.sync()
    assert asked and asked[0] > 2000
    await lg.compact(lambda: [(cid, "d", b"{}", 0, st, 0)])
    assert lg.size < 200
    await lg.close()
    lg2 = await ConsumerLog.open(str(tmp_path))
    _same(lg2.recovered["d"].state, st)
    await lg2.close()


async def test_records_written_during_compaction_survive(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """An ack recorded while the log is being rewritten (compaction runs in a thread) must land
    in the new file, and a sync() asked for then must cover it there: it used to be written
    to the old file, which the rename then discarded, after sync() had confirmed it."""
    lg = await ConsumerLog.open(str(tmp_path))
    cid = lg.create("d", ACK_EXPLICIT, b"{}", 0)
    st = ConsumerState(ACK_EXPLICIT)
    _drive(lg, cid, st)
    await lg.sync()
    image = [(cid, "d", b"{}", 0, copy.deepcopy(st), 0)]
    task = asyncio.create_task(lg.compact(lambda: image))
    await asyncio.sleep(0)  # the rewrite is now running in its thread
    for q in (6, 7):
        d = st.pending[q].dseq
        st.ack(q, d, 0)
        lg.ack(cid, q, d)
    await lg.sync()  # confirmed durable: must survive whatever the rename does
    await task
    # Simulate a crash right after the confirmed sync: reopen without close().
    lg2 = await ConsumerLog.open(str(tmp_path))
    try:
        _same(lg2.recovered["d"].state, st)
    finally:
        await lg2.close()
        await lg.close()


async def test_unchanged_tells_whether_anything_was_appended_since_the_last_image(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """What a stream's close asks before rewriting the log: nothing new since it was opened
    or rewritten as an image, also when records arrive while the rewrite runs."""
    lg = await ConsumerLog.open(str(tmp_path))
    assert lg.unchanged()
    cid = lg.create("d", ACK_EXPLICIT, b"{}", 0)
    st = ConsumerState(ACK_EXPLICIT)
    _drive(lg, cid, st)
    assert not lg.unchanged()
    await lg.compact(lambda: [(cid, "d", b"{}", 0, copy.deepcopy(st), 0)])
    assert lg.unchanged()
    image = [(cid, "d", b"{}", 0, copy.deepcopy(st), 0)]
    task = asyncio.create_task(lg.compact(lambda: image))
    await asyncio.sleep(0)  # the rewrite is running in its thread
    d = st.pending[6].dseq
    st.ack(6, d, 0)
    lg.ack(cid, 6, d)  # held, then written after the image
    await task
    assert not lg.unchanged()
    await lg.close()
    lg2 = await ConsumerLog.open(str(tmp_path))
    try:
        assert lg2.unchanged()
        _same(lg2.recovered["d"].state, st)
    finally:
        await lg2.close()


def test_hot_records_are_the_generic_encoding() -> None:
    """``deliver`` and ``ack`` pack their records in one call; the bytes are ``_record``'s
    (the layout recovery reads: crc, length, type, payload)."""
    import struct

    from crc32c import crc32c

    from jetlog.consumer import records
    from jetlog.consumer import store as cs

    out: list[bytes] = []
    lg = cs.ConsumerLog.__new__(cs.ConsumerLog)
    lg._append = out.append  # type: ignore[method-assign]
    for cid, a, b in [(1, 2, 3), (7, 1 << 60, -(1 << 62)), (2**32 - 1, 0, 0)]:
        lg.deliver(cid, a, b)
        assert out[-1] == records.record(records.DELIVER, struct.pack("<IQq", cid, a, b))
        lg.ack(cid, a, abs(b))
        assert out[-1] == records.record(records.ACK, struct.pack("<IQQ", cid, a, abs(b)))
    rec = out[0]
    assert struct.unpack_from("<I", rec)[0] == crc32c(rec[4:])
    assert struct.unpack_from("<I", rec, 4)[0] == len(rec) - 8 and rec[8] == cs.DELIVER


async def test_deliver_many_is_deliver_each(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A delivery pass's records (``deliver_many``) are byte for byte the DELIVER records of
    ``deliver`` one by one, count as that many records for the followers' feed, and replay to
    the live state."""
    a = await ConsumerLog.open(str(tmp_path / "a"))
    b = await ConsumerLog.open(str(tmp_path / "b"))
    try:
        for lg in (a, b):
            lg.enable_feed()
        ca = a.create("d", ACK_EXPLICIT, b"{}", 0)
        cb = b.create("d", ACK_EXPLICIT, b"{}", 0)
        st = ConsumerState(ACK_EXPLICIT)
        for seqs, ts in [([1, 2, 3, 4, 5], 100), ([6], 110), ([9, 10, 12], 120), ([], 125), ([3, 4], 130)]:
            for q in seqs:
                st.deliver(q, ts)
                a.deliver(ca, q, ts)
            b.deliver_many(cb, seqs, ts)
        d = st.pending[9].dseq
        st.ack(9, d, 0)
        a.ack(ca, 9, d)
        b.ack(cb, 9, d)
        assert b.appended == a.appended == 1 + 11 + 1
        assert b.records_after(0, 1 << 20) == a.records_after(0, 1 << 20)
        assert b.records_after(5, 1 << 20) == a.records_after(5, 1 << 20)
        await a.sync()
        await b.sync()
        with (
            open(os.path.join(str(tmp_path / "a"), LOG_NAME), "rb") as fa,
            open(os.path.join(str(tmp_path / "b"), LOG_NAME), "rb") as fb,
        ):
            assert fa.read() == fb.read()
    finally:
        await a.close()
        await b.close()
    lg2 = await ConsumerLog.open(str(tmp_path / "b"))
    try:
        r = lg2.recovered["d"]
        _same(r.state, st)
        assert r.state.dseq == 11 and r.state.delivery_count(3) == 2
    finally:
        await lg2.close()
