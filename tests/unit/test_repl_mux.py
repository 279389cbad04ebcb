"""The framing of batched replication messages (``wire/repl_mux``): round trips, splitting under
the payload limit, and telling a batch from a plain replication message."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jetlog.wire import repl as R
from jetlog.wire import repl_mux as M

items_st = st.lists(
    st.tuples(st.integers(min_value=0, max_value=2**64 - 1), st.binary(max_size=300)), max_size=40
)


@settings(max_examples=200, deadline=None)
@given(items=items_st, limit=st.integers(min_value=16, max_value=4000))
def test_requests_round_trip_in_order_and_under_the_limit(items: list[M.Item], limit: int) -> None:
    msgs = M.encode_requests("$JETLOG.c.R.n2.MUX.r", items, limit)
    got: list[M.Item] = []
    for msg, ids in msgs:
        ret, frames = M.decode_request(msg)
        assert ret == "$JETLOG.c.R.n2.MUX.r"
        assert [rid for rid, _ in frames] == ids
        # Only a message holding a single item may exceed the limit (that item is too big).
        assert len(msg) <= limit or len(frames) == 1
        got.extend(frames)
    assert got == items
    assert bool(msgs) == bool(items)


@settings(max_examples=200, deadline=None)
@given(items=items_st, limit=st.integers(min_value=16, max_value=4000))
def test_replies_round_trip_in_order_and_under_the_limit(items: list[M.Item], limit: int) -> None:
    msgs = M.encode_replies(items, limit)
    got: list[M.Item] = []
    for msg in msgs:
        frames = M.decode_replies(msg)
        assert len(msg) <= limit or len(frames) == 1
        got.extend(frames)
    assert got == items


def test_items_fill_messages_up_to_the_limit() -> None:
    items = [(i, b"x" * 100) for i in range(10)]
    head = len(M.MAGIC_REP)
    per = M.FRAME_OVERHEAD + 100
    msgs = M.encode_replies(items, head + 3 * per)
    assert [len(M.decode_replies(m)) for m in msgs] == [3, 3, 3, 1]
    assert all(len(m) == head + 3 * per for m in msgs[:3])


def test_a_plain_replication_message_is_never_taken_for_a_batch() -> None:
    plain = [
        R.encode(R.FetchRequest(stream="S", replica="n2", epoch=3, pos=(10, 0))),
        R.encode(R.FetchReply(code=R.OK, epoch=3, hw=9), b"batches"),
        R.encode(R.EpochEndRequest(stream="S", replica="n2", epoch=1, leader_epoch=3)),
        R.encode(R.FetchReply(code=R.ERROR, error="x" * 5000)),
    ]
    for msg in plain:
        assert not M.is_request(msg) and not M.is_reply(msg)
    ((batch, _),) = M.encode_requests("in.r", [(1, plain[0])], 1 << 20)
    assert M.is_request(batch) and not M.is_reply(batch)
    # The plain decoder refuses a batch (its magic reads as a head of over 1 GiB).
    with pytest.raises(R.ReplError):
        R.decode_request(batch)


def test_damaged_messages_raise_mux_error() -> None:
    ((msg, _),) = M.encode_requests("in.r", [(7, b"abc"), (8, b"defg")], 1 << 20)
    head = len(M.MAGIC_REQ) + 2 + len("in.r")
    between = len(msg) - (M.FRAME_OVERHEAD + 4)
    for cut in range(len(msg)):
        try:
            _ret, frames = M.decode_request(msg[:cut])
        except M.MuxError:
            continue
        # Only a cut between whole frames is a (shorter) valid batch.
        assert (cut, frames) in ((head, []), (between, [(7, b"abc")]))
    with pytest.raises(M.MuxError):
        M.decode_replies(msg)
    with pytest.raises(M.MuxError):
        M.decode_request(M.MAGIC_REQ + b"\x02\x00\xff\xfe")  # not UTF-8
    with pytest.raises(M.MuxError):
        M.decode_request(M.MAGIC_REQ + b"\x03\x00a b")  # not a subject
    with pytest.raises(M.MuxError):
        M.encode_requests("x" * (M.MAX_RET + 1), [(1, b"")], 1 << 20)
