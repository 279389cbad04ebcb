"""A Direct Get reply's header block, built with one bytes format (``api.direct._headers``), is
byte for byte what the generic ``headers.append`` builds: after stored headers in any of the
shapes a block can have, for any subject, sequence and time, with a batch's lines or not."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from jetlog.api.direct import _BATCH_LINES, _headers
from jetlog.log.store import StoredMsg
from jetlog.wire import headers as H
from jetlog.wire.timefmt import format_time

_stored = st.sampled_from(
    [
        b"",
        b"NATS/1.0\r\n\r\n",
        b"NATS/1.0\r\nNats-Msg-Id: a1\r\n\r\n",
        b"NATS/1.0\r\nX: y\r\n",  # without the closing blank line (tolerated on input)
        b"NATS/1.0\r\nX: y",
    ]
)


@given(
    _stored,
    st.text(min_size=1, max_size=40),
    st.integers(1, 2**63 - 1),
    st.integers(-(10**18), 4 * 10**18),
    st.none() | st.tuples(st.integers(0, 2**63 - 1), st.integers(0, 2**63 - 1)),
)
def test_the_one_format_is_the_generic_block(
    hdr: bytes, subject: str, seq: int, ts: int, batch: tuple[int, int] | None
) -> None:
    m = StoredMsg(seq, subject, hdr, b"data", ts)
    pairs = [
        ("Nats-Stream", "ORDERS"),
        ("Nats-Subject", subject),
        ("Nats-Sequence", str(seq)),
        ("Nats-Time-Stamp", format_time(ts)),
    ]
    if batch is None:
        got = _headers("ORDERS", m)
    else:
        pending, last = batch
        got = _headers("ORDERS", m, _BATCH_LINES % (pending, last))
        pairs += [("Nats-Num-Pending", str(pending)), ("Nats-Last-Sequence", str(last))]
    assert got == H.append(hdr, pairs)
