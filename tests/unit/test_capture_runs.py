"""The capture fast path (``MsgStore.append_run``, ``Stream.process_run``) stores exactly what
one call per message stores: the same segment bytes, index, reads after a reopen, sequences,
PubAcks and limit removals, with headers, oversize messages and failures interleaved."""

from __future__ import annotations

import asyncio
import math
import os
import tempfile
from pathlib import Path
from typing import Any
from unittest import mock

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jetlog.api.models import StreamConfigRequest
from jetlog.errors import ApiError, E
from jetlog.log import FileStore, MemStore, fileappend
from jetlog.log.fileappend import SPLIT_AT
from jetlog.stream.config import normalize_stream_config, validate_stream_config
from jetlog.stream.stream import FOLLOWER, LEADER, Stream
from jetlog.wire import leaf as wire
from tests.unit.test_stream_demote import Out

SUBJECTS = ["s.a", "s.b", "s.c.d"]
HDR = b"NATS/1.0\r\nX: y\r\n\r\n"

# A run: (subject index, payload size) per message; a run of one header message between runs
# goes through ``append`` on both sides.
runs_st = st.lists(
    st.tuples(
        st.lists(
            st.tuples(
                st.integers(0, len(SUBJECTS) - 1),
                # mostly small; some at the size from which a payload is not copied into its record
                st.one_of(st.integers(0, 700), st.integers(SPLIT_AT - 2, SPLIT_AT + 300)),
            ),
            min_size=1,
            max_size=40,
        ),
        st.booleans(),
    ),
    min_size=1,
    max_size=8,
)


def _files(path: str) -> dict[str, bytes]:
    out = {}
    for name in sorted(os.listdir(path)):
        if name.endswith(".log"):
            with open(os.path.join(path, name), "rb") as f:
                out[name] = f.read()
    return out


def _segs(store: FileStore) -> list[tuple[int, ...]]:
    return [(s.base, s.min_seq, s.max_seq, s.nrecords, s.nlive) for s in store.segments]


def _payload(i: int, size: int) -> bytes:
    return (b"%d:" % i + bytes(range(256)) * (size // 256 + 1))[:size]


async def _both(runs: list[Any], compression: bool, batch: int, segment_bytes: int = 4096) -> None:
    with tempfile.TemporaryDirectory() as a_dir, tempfile.TemporaryDirectory() as b_dir:
        opts: dict[str, Any] = {
            "compression": compression,
            "segment_bytes": segment_bytes,
            "syncer": "thread",
            "auto_compact": False,
        }
        a = await FileStore.open(a_dir, **opts)
        b = await FileStore.open(b_dir, **opts)
        for s in (a, b):
            s.max_batch_bytes = batch
        mem_a, mem_b = MemStore(), MemStore()
        ts = 1_000
        i = 0
        try:
            for run, with_hdr in runs:
                ts += 7
                subjects = [SUBJECTS[k] for k, _ in run]
                datas = [_payload(i + n, size) for n, (_, size) in enumerate(run)]
                i += len(run)
                for subj, data in zip(subjects, datas, strict=True):
                    a.append(subj, b"", data, ts)
                    mem_a.append(subj, b"", data, ts)
                assert b.append_run(subjects, datas, ts) == a.last_seq
                assert mem_b.append_run(subjects, datas, ts) == mem_a.last_seq
                if with_hdr:
                    for s in (a, b, mem_a, mem_b):
                        s.append("s.h", HDR, b"h", ts)
                assert b.state() == a.state()
                assert mem_b.state() == mem_a.state()
            for seq in range(1, a.last_seq + 1):
                assert b.load(seq) == a.load(seq)
                assert mem_b.load(seq) == mem_a.load(seq)
            assert b.subjects_state() == a.subjects_state()
            assert _segs(b) == _segs(a)
            await a.flush()
            await b.flush()
            assert _files(b_dir) == _files(a_dir)
            # Small segments roll within runs, once more than a segment's worth is stored (each
            # record takes at least its accounted size on disk; 20 empty messages fit in one).
            # One record larger than a segment has it to itself.
            assert len(_files(a_dir)) > 1 or a.state().bytes < segment_bytes or a.state().messages == 1
        finally:
            await a.close()
            await b.close()
        b = await FileStore.open(b_dir, **opts)
        a = await FileStore.open(a_dir, **opts)
        try:
            assert b.state() == a.state()
            assert [b.load(s) for s in range(1, b.last_seq + 1)] == [
                a.load(s) for s in range(1, a.last_seq + 1)
            ]
        finally:
            await a.close()
            await b.close()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(runs=runs_st, compression=st.booleans(), batch=st.sampled_from([1024, 2048, 1 << 20]))
def test_append_run_stores_what_append_stores(runs: list[Any], compression: bool, batch: int) -> None:
    asyncio.run(_both(runs, compression, batch))


# Runs of one subject with small payloads: the ones ``_append_uniform`` lays down a list at a
# time when they fit the open batch and the segment (and the loop takes when they do not).
uniform_runs_st = st.lists(
    st.tuples(
        st.integers(0, len(SUBJECTS) - 1).flatmap(
            lambda k: st.lists(st.tuples(st.just(k), st.integers(0, 400)), min_size=1, max_size=60)
        ),
        st.booleans(),
    ),
    min_size=1,
    max_size=8,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    runs=uniform_runs_st,
    compression=st.booleans(),
    batch=st.sampled_from([1024, 4096, 1 << 20]),
    segment_bytes=st.sampled_from([4096, 16384, 1 << 20]),
)
def test_uniform_runs_store_what_append_stores(
    runs: list[Any], compression: bool, batch: int, segment_bytes: int
) -> None:
    asyncio.run(_both(runs, compression, batch, segment_bytes))


def test_uniform_runs_take_the_list_path_when_they_fit() -> None:
    taken: list[int] = []
    real = fileappend._append_uniform

    def spy(*args: Any) -> int:
        last = real(*args)
        taken.append(last)
        return last

    # One subject, a run that fits, one that crosses a 16 KiB segment, one of mixed subjects.
    runs = [([(0, 100)] * 30, False), ([(1, 300)] * 60, True), ([(0, 50), (1, 50)] * 5, False)]
    with mock.patch.object(fileappend, "_append_uniform", spy):
        asyncio.run(_both(runs, False, 1 << 20, 16384))
    assert len(taken) == 3 and taken[0] == 30 and taken[1] == 0 and taken[2] == 0


# ---- the stream ---------------------------------------------------------------------------


class Repl:
    def __init__(self, fenced: bool = False, error: ApiError | None = None) -> None:
        self._fenced = fenced
        self._error = error

    def on_durable(self, seq: int) -> None:
        return None

    def publish_error(self) -> ApiError | None:
        return self._error

    async def sync(self) -> None:
        return None

    def unanswered_error(self) -> ApiError | None:
        return None

    def fenced(self) -> bool:
        return self._fenced

    def lease_until(self) -> float | None:
        return math.inf

    def committed_wanted(self) -> None:
        return None


def _config(**kw: Any) -> Any:
    return validate_stream_config(
        normalize_stream_config(StreamConfigRequest(name="S", subjects=["s.>"], **kw))
    )


def _ev(subject: str, data: bytes, reply: str | None = None, hdr: bytes = b"") -> Any:
    return (wire.MSG, subject, reply, hdr, data, ())


async def _stream(path: Path, **kw: Any) -> tuple[Stream, Out]:
    store = await FileStore.open(str(path), syncer="thread", auto_compact=False)
    out = Out()
    stream = Stream(_config(**kw), store, 0, out, clock=lambda: 5_000)
    await stream.start()
    return stream, out


def _events() -> list[Any]:
    evs = []
    for i in range(40):
        subj = SUBJECTS[i % 2] if i % 7 else "s.c.d"
        if i % 11 == 5:  # a header message (an id, sent twice: the second is a duplicate)
            evs.append(_ev(subj, b"id", f"_INBOX.{i}", b"NATS/1.0\r\nNats-Msg-Id: m%d\r\n\r\n" % (i // 22)))
        elif i % 13 == 6:  # above max_msg_size: an error PubAck, in order
            evs.append(_ev(subj, b"x" * 300, f"_INBOX.{i}"))
        else:
            evs.append(_ev(subj, b"m%d" % i, f"_INBOX.{i}" if i % 3 else None))
    return evs


async def _compare(tmp_path: Path, **kw: Any) -> tuple[Stream, Stream]:
    a, out_a = await _stream(tmp_path / "a", **kw)
    b, out_b = await _stream(tmp_path / "b", **kw)
    events = _events()
    for ev in events:
        a.process(ev[1], ev[2], ev[3], ev[4])
    b.process_run(events)
    await a.store.flush()
    await b.store.flush()
    for _ in range(100):
        if len(out_b.sent) >= len(out_a.sent) and a._pending == b._pending:
            break
        await asyncio.sleep(0.01)
    assert out_b.sent == out_a.sent
    assert len(out_a.sent) > 20
    assert b.store.state() == a.store.state()
    assert [b.store.load(s) for s in range(1, b.store.last_seq + 1)] == [
        a.store.load(s) for s in range(1, a.store.last_seq + 1)
    ]
    for f in ("received", "stored", "duplicates", "rejected", "pubacks"):
        assert getattr(b.stats, f) == getattr(a.stats, f), f
    return a, b


async def test_process_run_matches_process(tmp_path: Path) -> None:
    a, b = await _compare(tmp_path, max_msg_size=200)
    assert a.stats.duplicates == 2 and a.stats.rejected == 3
    for s in (a, b):
        await s.close()


async def test_process_run_matches_process_under_limits(tmp_path: Path) -> None:
    a, b = await _compare(tmp_path, max_msg_size=200, max_msgs_per_subject=2, max_msgs=5)
    assert a.store.msgs == 5
    for s in (a, b):
        await s.close()


async def test_process_run_matches_process_on_a_sealed_stream(tmp_path: Path) -> None:
    # ``max_bytes`` with discard new takes the one-by-one path: same result by construction,
    # checked anyway.
    a, b = await _compare(tmp_path, max_msg_size=200, max_bytes=400, discard="new")
    assert 0 < a.store.msgs < 40
    for s in (a, b):
        await s.close()


async def test_follower_fenced_and_refusing_leaders(tmp_path: Path) -> None:
    events = [_ev("s.a", b"m%d" % i, f"_INBOX.{i}") for i in range(5)]
    follower, out_f = await _stream(tmp_path / "f")
    follower.role = FOLLOWER
    follower.process_run(events)
    assert follower.store.last_seq == 0 and out_f.sent == []

    fenced, out_x = await _stream(tmp_path / "x")
    fenced.role, fenced.repl = LEADER, Repl(fenced=True)
    fenced.process_run(events)
    # Held, unanswered, until the fence lifts (tests/unit/test_fence_hold.py).
    assert fenced.store.last_seq == 0 and out_x.sent == [] and fenced.stats.received == 0
    assert len(fenced.held) == 5

    refusing, out_r = await _stream(tmp_path / "r")
    refusing.role, refusing.repl = LEADER, Repl(error=E.CLUSTER_NOT_AVAIL())
    refusing.process_run(events)
    assert refusing.store.last_seq == 0
    assert [s for s, _ in out_r.sent] == [f"_INBOX.{i}" for i in range(5)]
    assert all(b'"err_code":10008' in body for _, body in out_r.sent)
    for s in (follower, fenced, refusing):
        s.repl = None
        await s.close()


async def test_a_failed_store_answers_every_message_of_the_run(tmp_path: Path) -> None:
    stream, out = await _stream(tmp_path)
    await stream.store.close()  # appends now raise StreamUnavailableError
    stream.process_run([_ev("s.a", b"m%d" % i, f"_INBOX.{i}") for i in range(4)])
    assert [s for s, _ in out.sent] == [f"_INBOX.{i}" for i in range(4)]
    assert all(b'"error"' in body for _, body in out.sent)
    assert stream.stats.rejected == 4 and stream.stats.stored == 0
    await stream.close()
