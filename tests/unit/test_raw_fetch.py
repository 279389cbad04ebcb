"""JLR1 bulk reads (``"format": "jlr1"``): runs of stored records cut out of segment files.

Checked against per-message ``load`` over random ranges and byte budgets, for plain and
compressed file stores (compressed records take the re-encoding path), after deletes, purges
and reopen, with uncommitted records present, and for the memory store's generic path; the
reader-side checks catch a damaged record."""

from __future__ import annotations

import os
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import jetlog.log.index as index_mod
from jetlog.api import fetch as F
from jetlog.log.filestore import FileStore
from jetlog.log.memstore import MemStore
from jetlog.wire import headers as H
from jetlog.wire import rawframe as rf
from jetlog.wire import records as rc
from jetlog.wire.crc import crc32c
from tests.unit.test_store_iter_range import _fill

MAX_PAYLOAD = 1 << 20


def _read(
    store: Any, start: int, end: int, budget: int, max_msgs: int = 0
) -> tuple[list[rc.Record], int, int]:
    """Loop FETCH(jlr1) over ``[start, end)`` like a reader; returns (records, replies, hw)."""
    hw = store.committed_seq
    out: list[rc.Record] = []
    seq = start
    replies = 0
    while seq < end:
        req = F.FetchRequest(start=seq, end=end, max_bytes=budget, max_msgs=max_msgs, format="jlr1")
        hdr, payload = F.fetch("S", store, hw, req, MAX_PAYLOAD)
        _code, _desc, pairs = H.parse(hdr)
        meta = dict(pairs)
        assert meta.get("Jl-Format") == "jlr1" and int(meta["Jl-Hwm"]) == hw, (_code, meta)
        assert len(payload) <= budget
        recs = rf.decode(payload)
        assert len(recs) == int(meta["Jl-Count"])
        if max_msgs:
            assert len(recs) <= max_msgs
        out.extend(recs)
        nxt = int(meta["Jl-Next-Seq"])
        assert nxt > seq, "no progress"
        if recs:
            assert nxt > recs[-1].seq  # (may skip deleted sequences; completeness is checked below)
        seq = nxt
        replies += 1
        if seq > hw:
            break
    return out, replies, hw


def _expected(store: Any, start: int, end: int, hw: int) -> list[tuple[Any, ...]]:
    got = []
    for s in range(max(start, 1), min(end, hw + 1)):
        m = store.load(s)
        if m is not None:
            got.append((m.seq, m.ts, m.subject, m.hdr, m.data))
    return got


def _view(recs: list[rc.Record]) -> list[tuple[Any, ...]]:
    return [(r.seq, r.ts, r.subject, r.hdr, r.data) for r in recs]


async def _check(store: Any, rnd: random.Random) -> None:
    top = store.last_seq + 3
    for _ in range(25):
        a = rnd.randint(1, top)
        b = rnd.randint(a, top + 1)
        budget = rnd.choice([600, 1000, 4000, 70_000, MAX_PAYLOAD])
        recs, _n, hw = _read(store, a, b, budget)
        assert _view(recs) == _expected(store, a, b, hw)
    recs, _n, hw = _read(store, 1, top, MAX_PAYLOAD, max_msgs=7)
    assert _view(recs) == _expected(store, 1, top, hw)


@pytest.mark.parametrize("block_max", [0, 7])
@pytest.mark.parametrize("compression", [False, True])
async def test_file_store_raw_reads_match_load(
    tmp_path: Any, compression: bool, block_max: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    if block_max:  # index blocks of 7 entries: stored batches cross them all the time (JOIN)
        monkeypatch.setattr(index_mod, "BLOCK_MAX", block_max)
    rnd = random.Random(11)
    st_ = await FileStore.open(str(tmp_path), compression=compression, segment_bytes=16 * 1024)
    try:
        _fill(st_, rnd, 600)
        await st_.flush()
        _fill(st_, rnd, 5)  # not committed yet: never returned
        recs, _n, hw = _read(st_, 1, st_.last_seq + 1, MAX_PAYLOAD)
        assert hw == 600 and recs[-1].seq == 600 and len(recs) == 600
        await st_.flush()
        await _check(st_, rnd)
        for s in rnd.sample(range(1, 601), 80):
            st_.remove(s)
        st_.purge(seq=40)
        _fill(st_, rnd, 50)
        await st_.flush()
        await _check(st_, rnd)
    finally:
        await st_.close()
    st_ = await FileStore.open(str(tmp_path), compression=compression, segment_bytes=16 * 1024)
    try:
        await _check(st_, rnd)  # after recovery, cold caches
    finally:
        await st_.close()


async def test_memory_store_raw_reads_match_load() -> None:
    rnd = random.Random(5)
    st_ = await MemStore.open()
    _fill(st_, rnd, 300)
    for s in rnd.sample(range(1, 301), 40):
        st_.remove(s)
    await _check(st_, rnd)


async def test_record_larger_than_budget_is_413(tmp_path: Any) -> None:
    st_ = await FileStore.open(str(tmp_path))
    try:
        st_.append("a", b"", b"x" * 100, 1)
        st_.append("a", b"", b"y" * 5000, 2)
        await st_.flush()
        req = F.FetchRequest(start=2, max_bytes=1000, format="jlr1")
        hdr, payload = F.fetch("S", st_, 2, req, MAX_PAYLOAD)
        code, _desc, pairs = H.parse(hdr)
        assert (code, dict(pairs)["Jl-Next-Seq"], payload) == (413, "2", b"")
        # From 1: the first record fits, the reply stops before the big one.
        hdr, payload = F.fetch(
            "S", st_, 2, F.FetchRequest(start=1, max_bytes=1000, format="jlr1"), MAX_PAYLOAD
        )
        code, _desc, pairs = H.parse(hdr)
        assert code == 0 and dict(pairs)["Jl-Next-Seq"] == "2"
        assert [r.seq for r in rf.decode(payload)] == [1]
    finally:
        await st_.close()


def _overwrite(directory: str, find: bytes, put: bytes) -> None:
    """Damage the first segment file of a closed store in place: ``find`` → ``put``."""
    seg = sorted(f for f in os.listdir(directory) if f.endswith(".log"))[0]
    with open(os.path.join(directory, seg), "r+b") as f:
        f.seek(f.read().index(find))
        f.write(put)


async def test_damaged_record_is_caught_by_the_reader(tmp_path: Any) -> None:
    st_ = await FileStore.open(str(tmp_path))
    for i in range(20):
        st_.append("x", b"", b"payload-%d" % i, 1_000 + i)
    await st_.flush()
    await st_.close()
    _overwrite(str(tmp_path), b"payload-13", b"PAYLOAD")
    st_ = await FileStore.open(str(tmp_path), verify=False)
    try:
        _hdr, payload = F.fetch("S", st_, 20, F.FetchRequest(format="jlr1"), MAX_PAYLOAD)
        with pytest.raises(rf.RawFrameError, match="crc"):
            rf.decode(payload)
    finally:
        await st_.close()


def test_unknown_format_is_refused() -> None:
    assert F.decode_fetch(b'{"format":"arrow"}') == "format must be one of jlc1, jlr1"
    req = F.decode_fetch(b'{"format":"jlr1"}')
    assert isinstance(req, F.FetchRequest) and req.format == "jlr1"


_recs = st.lists(
    st.tuples(
        st.text(min_size=1, max_size=12), st.binary(max_size=40), st.binary(max_size=60), st.booleans()
    ),
    max_size=12,
)


@settings(max_examples=150, deadline=None)
@given(_recs, st.integers(min_value=1, max_value=4))
def test_frame_round_trip(rows: list[tuple[str, bytes, bytes, bool]], nruns: int) -> None:
    encoded = [
        rc.encode_record(i + 1, 10 * i, s.encode(), h, d, ttl=99 if t else 0)
        for i, (s, h, d, t) in enumerate(rows)
    ]
    # Spread the records over runs, each run with an arbitrary stored base position.
    runs = []
    per = max(1, -(-len(encoded) // nruns))
    for r0 in range(0, len(encoded), per):
        chunk = encoded[r0 : r0 + per]
        base = 1000 * (r0 + 1)
        pos, p = [], base
        for rec in chunk:
            pos.append(p)
            p += len(rec)
        from array import array

        runs.append(rf.Run(len(chunk), array("I", pos).tobytes(), base, b"".join(chunk)))
    frame = b"".join(rf.encode(runs))
    got = rf.decode(frame)
    assert [(r.seq, r.ts, r.subject, r.hdr, r.data) for r in got] == [
        (i + 1, 10 * i, s, h, d) for i, (s, h, d, _t) in enumerate(rows)
    ]


@pytest.mark.parametrize(
    "mutate",
    [
        lambda b: b[:10],  # truncated header
        lambda b: b"JLR2" + b[4:],  # bad magic
        lambda b: b[:-1],  # data shorter than the runs claim
        lambda b: b + b"\0",  # trailing bytes
    ],
)
def test_malformed_frames_are_refused(mutate: Any) -> None:
    rec = rc.encode_record(1, 2, b"a.b", b"", b"hello")
    frame = b"".join(rf.encode([rf.single(rec)]))
    assert [r.data for r in rf.decode(frame)] == [b"hello"]
    with pytest.raises(rf.RawFrameError):
        rf.decode(mutate(frame))


async def test_whole_batches_carry_their_stored_crc(tmp_path: Any) -> None:
    """A run that is one whole stored batch says so (and carries the batch's body CRC); a run
    cut by a deletion does not, and its records are checked one by one."""
    st_ = await FileStore.open(str(tmp_path))
    try:
        for batch in range(3):
            for i in range(10):
                st_.append("x", b"", b"b%d-%d" % (batch, i), 1_000 + i)
            await st_.flush()  # one stored batch of 10 records each time
        st_.remove(15)  # splits the second batch into two partial runs
        _hdr, payload = F.fetch("S", st_, 30, F.FetchRequest(format="jlr1"), MAX_PAYLOAD)
        lay = rf.layout(payload)
        assert [(r.nrec, bool(r.flags & rf.RUN_WHOLE_BATCH)) for r in lay.runs] == [
            (10, True),
            (4, False),
            (5, False),
            (10, True),
        ]
        assert all(r.crc for r in lay.runs if r.flags) and not any(r.crc for r in lay.runs if not r.flags)
        assert [r.seq for r in rf.decode(payload)] == [s for s in range(1, 31) if s != 15]
        # A stored-CRC mismatch on a whole run is caught.
        bad = bytearray(payload)
        bad[lay.data_start + 40] ^= 0x01
        with pytest.raises(rf.RawFrameError, match="crc"):
            rf.decode(bytes(bad))
    finally:
        await st_.close()


async def _twelve_batches(st_: FileStore) -> None:
    """12 stored batches of 40 records (~60 bytes each)."""
    for batch in range(12):
        for i in range(40):
            st_.append("x", b"", b"%03d-%03d" % (batch, i) + b"." * 40, 1_000 + i)
        await st_.flush()


async def test_frames_end_at_batch_boundaries(tmp_path: Any) -> None:
    """A budget that would cut a batch in two ends the frame before that batch once the frame
    is half full, so consecutive reads carry whole batches (one CRC call each in the reader);
    a batch larger than a whole frame is still cut (checked by the node, see below)."""
    st_ = await FileStore.open(str(tmp_path))
    try:
        await _twelve_batches(st_)
        frames = []
        seq = 1
        while seq <= 480:
            # ~3.5 batches per frame
            hdr, payload = F.fetch(
                "S", st_, 480, F.FetchRequest(start=seq, max_bytes=12_000, format="jlr1"), MAX_PAYLOAD
            )
            frames.append(rf.layout(payload))
            seq = int(dict(H.parse(hdr)[2])["Jl-Next-Seq"])
        assert all(r.nrec == 40 and r.flags & rf.RUN_WHOLE_BATCH for lay in frames for r in lay.runs)
        assert sum(lay.n for lay in frames) == 480 and len(frames) == 4
        # One batch bigger than the budget: cut; the node checked the batch it was cut from.
        _hdr, payload = F.fetch(
            "S", st_, 480, F.FetchRequest(start=1, max_bytes=2_000, format="jlr1"), MAX_PAYLOAD
        )
        lay = rf.layout(payload)
        assert len(lay.runs) == 1 and 0 < lay.n < 40 and lay.runs[0].flags == rf.RUN_CHECKED
    finally:
        await st_.close()


@pytest.mark.parametrize("reopen", [False, True])
async def test_a_batch_split_by_index_blocks_travels_as_one_whole_run(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, reopen: bool
) -> None:
    """Index blocks end every ``BLOCK_MAX`` entries, wherever that falls in a stored batch; the
    pieces of a batch are joined back into one run that carries the batch's CRC, and a frame
    that cannot take the rest of a batch begun in it leaves the whole batch to the next read
    (with blocks of 7 entries, each 40-record batch spans 6 or 7 blocks)."""
    monkeypatch.setattr(index_mod, "BLOCK_MAX", 7)
    st_ = await FileStore.open(str(tmp_path))
    try:
        await _twelve_batches(st_)
        if reopen:  # blocks rebuilt by recovery, not by the writer
            await st_.close()
            st_ = await FileStore.open(str(tmp_path))
        assert len(st_._ix.blocks) > 12
        frames = []
        seqs: list[int] = []
        seq = 1
        while seq <= 480:
            hdr, payload = F.fetch(
                "S", st_, 480, F.FetchRequest(start=seq, max_bytes=12_000, format="jlr1"), MAX_PAYLOAD
            )
            frames.append(rf.layout(payload))
            seqs += [r.seq for r in rf.decode(payload)]  # every CRC checked (batch or record)
            seq = int(dict(H.parse(hdr)[2])["Jl-Next-Seq"])
        assert [(r.nrec, bool(r.flags & rf.RUN_WHOLE_BATCH)) for lay in frames for r in lay.runs] == [
            (40, True)
        ] * 12
        assert seqs == list(range(1, 481)) and len(frames) == 4
        # A damaged byte in a joined run is caught by the batch CRC.
        _hdr, payload = F.fetch("S", st_, 480, F.FetchRequest(start=1, format="jlr1"), MAX_PAYLOAD)
        lay = rf.layout(payload)
        bad = bytearray(payload)
        bad[lay.data_start + lay.runs[0].data_len - 3] ^= 0x01
        with pytest.raises(rf.RawFrameError, match="crc"):
            rf.decode(bytes(bad))
    finally:
        await st_.close()


def _runs_of(payload: bytes) -> list[tuple[int, int]]:
    return [(r.nrec, r.flags) for r in rf.layout(payload).runs]


async def test_runs_a_range_cuts_are_checked_by_the_node(tmp_path: Any) -> None:
    """A reader's range ends cut stored batches (a Spark task pipelines fixed sub-ranges). The
    node checks the whole batch each cut run came from against the batch's stored CRC and
    sends the run with the CRC of its own bytes (RUN_CHECKED), so the reader checks it with
    one call instead of one per record; damage in the bytes sent is still caught, and damage
    in the part of a batch not sent leaves the run to the reader's per-record checks."""
    st_ = await FileStore.open(str(tmp_path))
    try:
        await _twelve_batches(st_)  # batch b holds 40 * b + 1 .. 40 * (b + 1)
        _hdr, payload = F.fetch("S", st_, 480, F.FetchRequest(start=15, end=95, format="jlr1"), MAX_PAYLOAD)
        assert _runs_of(payload) == [(26, rf.RUN_CHECKED), (40, rf.RUN_WHOLE_BATCH), (14, rf.RUN_CHECKED)]
        lay = rf.layout(payload)
        for r in lay.runs:
            a = lay.data_start + r.data_off
            assert r.crc == crc32c(payload[a : a + r.data_len])
        assert [r.seq for r in rf.decode(payload)] == list(range(15, 95))
        # Cut at both ends inside one batch: the run is checked with the batch's head and tail.
        _hdr, inner = F.fetch("S", st_, 480, F.FetchRequest(start=45, end=50, format="jlr1"), MAX_PAYLOAD)
        assert _runs_of(inner) == [(5, rf.RUN_CHECKED)]
        assert [r.seq for r in rf.decode(inner)] == [45, 46, 47, 48, 49]
        # A flipped bit in a checked run's bytes is caught by the reader.
        for at in (lay.data_start + 40, lay.size - 5):
            bad = bytearray(payload)
            bad[at] ^= 0x01
            with pytest.raises(rf.RawFrameError, match="crc"):
                rf.decode(bytes(bad))
    finally:
        await st_.close()
    _overwrite(str(tmp_path), b"000-003", b"XXX")  # in batch 0, before what a read from 15 carries
    st_ = await FileStore.open(str(tmp_path), verify=False)
    try:
        _hdr, payload = F.fetch("S", st_, 480, F.FetchRequest(start=15, end=95, format="jlr1"), MAX_PAYLOAD)
        assert _runs_of(payload) == [(26, 0), (40, rf.RUN_WHOLE_BATCH), (14, rf.RUN_CHECKED)]
        assert [r.seq for r in rf.decode(payload)] == list(range(15, 95))
    finally:
        await st_.close()


@pytest.mark.parametrize("reopen", [False, True])
async def test_cut_runs_are_checked_when_their_batch_spans_index_blocks(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, reopen: bool
) -> None:
    """A range that starts or ends inside a batch indexed across several blocks (blocks of 7
    entries here, so a 40-record batch spans 6 or 7): the node finds the batch's start in an
    earlier block, joins the cut first run's pieces, and every run still travels checked
    (RUN_CHECKED or whole), none left to the reader record by record."""
    monkeypatch.setattr(index_mod, "BLOCK_MAX", 7)
    st_ = await FileStore.open(str(tmp_path))
    try:
        await _twelve_batches(st_)
        if reopen:
            await st_.close()
            st_ = await FileStore.open(str(tmp_path))
        for start, end in ((15, 95), (8, 30), (41, 47), (120, 121), (7, 15), (299, 481), (1, 470)):
            _hdr, payload = F.fetch(
                "S", st_, 480, F.FetchRequest(start=start, end=end, format="jlr1"), MAX_PAYLOAD
            )
            runs = rf.layout(payload).runs
            assert all(r.flags for r in runs), (start, end, _runs_of(payload))
            assert [r.seq for r in rf.decode(payload)] == list(range(start, min(end, 481)))
        _hdr, payload = F.fetch("S", st_, 480, F.FetchRequest(start=15, end=95, format="jlr1"), MAX_PAYLOAD)
        assert _runs_of(payload) == [(26, rf.RUN_CHECKED), (40, rf.RUN_WHOLE_BATCH), (14, rf.RUN_CHECKED)]
    finally:
        await st_.close()


async def test_a_cut_run_is_checked_only_when_its_batch_is_small_next_to_it(tmp_path: Any) -> None:
    """The node reads the rest of a cut batch only up to twice the run plus a slack: a sliver
    of a large batch goes to the reader's per-record checks instead."""
    st_ = await FileStore.open(str(tmp_path))
    try:
        for i in range(4_000):  # one stored batch of ~200 KiB
            st_.append("x", b"", b"%04d" % i + b"." * 20, 1_000 + i)
        await st_.flush()
        _hdr, sliver = F.fetch("S", st_, 4_000, F.FetchRequest(start=10, end=20, format="jlr1"), MAX_PAYLOAD)
        assert _runs_of(sliver) == [(10, 0)]
        _hdr, half = F.fetch("S", st_, 4_000, F.FetchRequest(start=1, end=2_500, format="jlr1"), MAX_PAYLOAD)
        assert _runs_of(half) == [(2_499, rf.RUN_CHECKED)]
        assert [r.seq for r in rf.decode(half)] == list(range(1, 2_500))
    finally:
        await st_.close()
