"""The sans-I/O leafnode codec: grammar, chunking, malformed input, limits, round trips."""

from __future__ import annotations

import json
import tracemalloc
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jetlog.errors import ProtocolError
from jetlog.wire import leaf
from jetlog.wire.leaf import (
    CONNECT,
    ERR,
    INFO,
    LS_ADD,
    LS_DEL,
    MSG,
    OK,
    PING,
    PONG,
    LeafFrameError,
    LeafParser,
    PayloadTooLargeError,
)


def parse_all(data: bytes, chunk: int | None = None) -> list[Any]:
    p = LeafParser()
    if chunk is None:
        out = p.feed(data)
    else:
        out = []
        for i in range(0, len(data), chunk):
            out.extend(p.feed(data[i : i + chunk]))
    assert p.buffered == 0
    return out


# ------------------------------------------------------------------------------ grammar


def test_control_frames() -> None:
    data = (
        b'INFO {"server_id":"X","max_payload":1048576,"nonce":"abc"} \r\n'
        b"PING\r\nPONG\r\n+OK\r\n-ERR 'Authorization Violation'\r\n"
        b"LS+ foo.*\r\nLS+ jobs w 3\r\nLS- foo.*\r\nLS- jobs w\r\n"
        b'CONNECT {"name":"x"}\r\n'
    )
    assert parse_all(data) == [
        (INFO, {"server_id": "X", "max_payload": 1048576, "nonce": "abc"}),
        (PING,),
        (PONG,),
        (OK,),
        (ERR, "Authorization Violation"),
        (LS_ADD, "foo.*", None, 1),
        (LS_ADD, "jobs", "w", 3),
        (LS_DEL, "foo.*", None),
        (LS_DEL, "jobs", "w"),
        (CONNECT, {"name": "x"}),
    ]


def test_ops_are_case_insensitive_and_tabs_separate() -> None:
    assert parse_all(b"ping\r\npong\r\nls+\tfoo\tq\t2\r\n") == [(PING,), (PONG,), (LS_ADD, "foo", "q", 2)]


def test_lmsg_forms() -> None:
    data = (
        b"LMSG a 3\r\nabc\r\n"
        b"LMSG a r 0\r\n\r\n"
        b"LMSG a + r q1 q2 2\r\nxy\r\n"
        b"LMSG a | q1 1\r\nz\r\n"
        b"LMSG a + r 1\r\nz\r\n"  # "+ reply" with an empty queue list, as the hub accepts it
    )
    assert parse_all(data) == [
        (MSG, "a", None, b"", b"abc", ()),
        (MSG, "a", "r", b"", b"", ()),
        (MSG, "a", "r", b"", b"xy", ("q1", "q2")),
        (MSG, "a", None, b"", b"z", ("q1",)),
        (MSG, "a", "r", b"", b"z", ()),
    ]


def test_hmsg_forms() -> None:
    h = b"NATS/1.0\r\nA: b\r\n\r\n"
    hl = len(h)
    data = (
        b"HMSG a %d %d\r\n%bpay\r\n" % (hl, hl + 3, h)
        + b"HMSG a r %d %d\r\n%b\r\n" % (hl, hl, h)
        + b"HMSG a + r g %d %d\r\n%bp\r\n" % (hl, hl + 1, h)
        + b"HMSG a | g h %d %d\r\n%b\r\n" % (hl, hl, h)
    )
    assert parse_all(data) == [
        (MSG, "a", None, h, b"pay", ()),
        (MSG, "a", "r", h, b"", ()),
        (MSG, "a", "r", h, b"p", ("g",)),
        (MSG, "a", None, h, b"", ("g", "h")),
    ]


def test_payload_with_crlf_and_protocol_lookalikes() -> None:
    payload = b"\r\nPING\r\nLMSG x 1\r\n\r\n"
    frame = leaf.encode_msg("s", payload)
    assert parse_all(frame * 3, chunk=5) == [(MSG, "s", None, b"", payload, ())] * 3


def test_vertical_tab_is_part_of_a_subject() -> None:
    # The hub splits arguments on space/tab only; \v and \f are legal subject bytes.
    frame = leaf.encode_msg("a\x0bb", b"x", reply="r\x0cs")
    assert parse_all(frame) == [(MSG, "a\x0bb", "r\x0cs", b"", b"x", ())]


def test_invalid_utf8_subject_round_trips() -> None:
    frame = b"LMSG a\xffb 1\r\nx\r\n"
    ((_, subject, *_),) = parse_all(frame)
    assert leaf.encode_msg(subject, b"x") == frame


def test_repeated_spaces_tolerated() -> None:
    assert parse_all(b"LMSG  a   r  1\r\nx\r\n") == [(MSG, "a", "r", b"", b"x", ())]


def test_byte_at_a_time_and_big_payload_chunks() -> None:
    frames = [
        leaf.encode_msg("a.b", b"x" * 10, reply="r"),
        b"PING\r\n",
        leaf.encode_msg("c", b"", hdr=b"NATS/1.0 404 No Messages\r\n\r\n"),
        b"LS+ q g 2\r\n",
    ]
    data = b"".join(frames)
    assert parse_all(data, chunk=1) == parse_all(data)
    big = b"y" * (1 << 20)
    p = LeafParser()
    data = leaf.encode_msg("big", big)
    out: list[Any] = []
    for i in range(0, len(data), 997):
        out.extend(p.feed(data[i : i + 997]))
    assert out == [(MSG, "big", None, b"", big, ())]


def test_incomplete_frames_are_held() -> None:
    p = LeafParser()
    assert p.feed(b"LMSG a 5\r\nab") == []
    assert p.buffered == len(b"LMSG a 5\r\nab")
    assert p.feed(b"cde\r") == []
    assert p.feed(b"\nPI") == [(MSG, "a", None, b"", b"abcde", ())]
    assert p.feed(b"NG\r\n") == [(PING,)]
    p.feed(b"PO")
    p.reset()
    assert p.buffered == 0 and p.feed(b"PONG\r\n") == [(PONG,)]


# ------------------------------------------------------------------------ malformed input


@pytest.mark.parametrize(
    "data",
    [
        b"LMSG a x\r\n",  # size not a number
        b"LMSG a -1\r\n",
        b"LMSG a\r\n",
        b"LMSG\r\n",
        b"LMSG \r\n",
        b"LMSG a 1\r\nxy\r\n",  # payload longer than declared
        b"LMSG a r s 1\r\nx\r\n",  # 3+ args without + or |
        b"HMSG a 5 3\r\nabc\r\n",  # header larger than total
        b"HMSG a 3\r\nabc\r\n",
        b"HMSG a x 3\r\nabc\r\n",
        b"LS+ a b\r\n",  # queue without weight
        b"LS+ a b c\r\n",  # weight not a number
        b"LS+\r\n",
        b"LS- a b c d\r\n",
        b"INFO {bad json\r\n",
        b"INFO [1]\r\n",
        b"BOGUS\r\n",
        b"\r\n",
    ],
)
def test_malformed_raise_protocol_error(data: bytes) -> None:
    with pytest.raises(ProtocolError):
        parse_all(data)


def test_control_line_limit() -> None:
    p = LeafParser(max_control_line=100)
    with pytest.raises(ProtocolError):
        p.feed(b"LMSG " + b"a" * 200 + b" 1\r\nx\r\n")
    p = LeafParser(max_control_line=100)
    p.feed(b"LS+ " + b"a" * 50)
    with pytest.raises(ProtocolError):  # no CRLF yet, but already too long
        p.feed(b"a" * 100)
    # The default is 16 x 4096, as the hub allows on leaf connections.
    ok = b"LS+ " + b"a" * 60000 + b"\r\n"
    assert parse_all(ok) == [(LS_ADD, "a" * 60000, None, 1)]


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=200), st.integers(min_value=1, max_value=50))
def test_garbage_only_raises_protocol_error(data: bytes, chunk: int) -> None:
    p = LeafParser()
    try:
        for i in range(0, len(data), chunk):
            p.feed(data[i : i + chunk])
    except ProtocolError:
        pass


@settings(max_examples=300)
@given(
    st.lists(
        st.sampled_from(
            [
                b"LMSG ",
                b"HMSG ",
                b"LS+ ",
                b"LS- ",
                b"a",
                b"+",
                b"|",
                b" ",
                b"1",
                b"12",
                b"\r\n",
                b"\t",
                b"-ERR ",
            ]
        ),
        max_size=30,
    )
)
def test_near_miss_frames_only_raise_protocol_error(parts: list[bytes]) -> None:
    p = LeafParser()
    try:
        p.feed(b"".join(parts))
    except ProtocolError:
        pass


# -------------------------------------------------------------------------------- encoders


def test_encoders_exact_bytes() -> None:
    assert leaf.encode_msg("a", b"xy") == b"LMSG a 2\r\nxy\r\n"
    assert leaf.encode_msg("a", b"", reply="r") == b"LMSG a r 0\r\n\r\n"
    assert leaf.encode_msg("a", b"x", reply="r", queues=("g",)) == b"LMSG a + r g 1\r\nx\r\n"
    assert leaf.encode_msg("a", b"x", queues=("g", "h")) == b"LMSG a | g h 1\r\nx\r\n"
    h = b"NATS/1.0\r\n\r\n"
    assert leaf.encode_msg("a", b"x", hdr=h) == b"HMSG a 12 13\r\n" + h + b"x\r\n"
    assert leaf.encode_msg("a", b"x", "r", h) == b"HMSG a r 12 13\r\n" + h + b"x\r\n"
    assert leaf.encode_msg("a", b"x", "r", h, ["g"]) == b"HMSG a + r g 12 13\r\n" + h + b"x\r\n"
    assert leaf.encode_sub("a.>") == b"LS+ a.>\r\n"
    assert leaf.encode_sub("a", "q", 3) == b"LS+ a q 3\r\n"
    assert leaf.encode_unsub("a") == b"LS- a\r\n"
    assert leaf.encode_unsub("a", "q") == b"LS- a q\r\n"
    c = leaf.encode_connect({"name": "n", "headers": True})
    assert c.startswith(b"CONNECT ") and c.endswith(b"\r\n")
    assert json.loads(c[8:]) == {"name": "n", "headers": True}
    assert parse_all(leaf.encode_info({"a": 1}) + leaf.encode_err("x y") + leaf.OK_FRAME) == [
        (INFO, {"a": 1}),
        (ERR, "x y"),
        (OK,),
    ]


@pytest.mark.parametrize("bad", ["", "a b", "a\tb", "a\r\nb", "a\nb"])
def test_encoder_rejects_whitespace_tokens(bad: str) -> None:
    with pytest.raises(LeafFrameError):
        leaf.encode_msg(bad, b"x")
    if bad:
        with pytest.raises(LeafFrameError):
            leaf.encode_msg("ok", b"x", reply=bad)
        with pytest.raises(LeafFrameError):
            leaf.encode_msg("ok", b"x", queues=(bad,))
        with pytest.raises(LeafFrameError):
            leaf.encode_sub(bad)


def test_encoder_limits() -> None:
    leaf.encode_msg("a", b"x" * 100, max_payload=100)
    with pytest.raises(PayloadTooLargeError) as ei:
        leaf.encode_msg("a", b"x" * 101, max_payload=100)
    assert ei.value.size == 101 and ei.value.max_payload == 100
    assert ei.value.to_api().err_code == 10054
    h = b"NATS/1.0\r\nA: b\r\n\r\n"
    with pytest.raises(PayloadTooLargeError):  # header + payload is what the hub checks
        leaf.encode_msg("a", b"x" * (101 - len(h)), hdr=h, max_payload=100)
    with pytest.raises(PayloadTooLargeError):
        leaf.encode_msg("a", b"x" * 101, queues=("g",), max_payload=100)
    with pytest.raises(LeafFrameError):
        leaf.encode_msg("a" * 70000, b"")
    with pytest.raises(LeafFrameError):
        leaf.encode_connect({"lang": "python"})
    with pytest.raises(LeafFrameError):
        leaf.encode_sub("a", "q", 0)


# ------------------------------------------------------------------------- round trips

_token_chars = st.characters(blacklist_categories=("Cs",), blacklist_characters=" \t\r\n")
token = st.text(alphabet=_token_chars, min_size=1, max_size=24)
subject = st.lists(token.filter(lambda t: "." not in t), min_size=1, max_size=5).map(".".join)
header_block = st.one_of(
    st.just(b""),
    st.lists(
        st.tuples(st.from_regex(r"\A[A-Za-z][A-Za-z0-9-]{0,10}\Z"), st.from_regex(r"\A[ -~]{0,20}\Z")),
        max_size=4,
    ).map(lambda pairs: ("NATS/1.0\r\n" + "".join(f"{k}: {v}\r\n" for k, v in pairs) + "\r\n").encode()),
    st.sampled_from([b"NATS/1.0 404 No Messages\r\n\r\n", b"NATS/1.0 100 Idle Heartbeat\r\n\r\n"]),
)
payload = st.one_of(st.binary(max_size=300), st.sampled_from([b"", b"\r\n", b"\r\n\r\n", b"PING\r\n"]))

msg_frame = st.tuples(
    st.just("msg"),
    subject,
    st.one_of(st.none(), token),
    header_block,
    payload,
    st.lists(token, max_size=3).map(tuple),
)
sub_frame = st.tuples(st.just("sub"), subject, st.one_of(st.none(), token), st.integers(1, 10_000))
unsub_frame = st.tuples(st.just("unsub"), subject, st.one_of(st.none(), token))
ping_frame = st.sampled_from([("ping",), ("pong",)])
frame = st.one_of(msg_frame, sub_frame, unsub_frame, ping_frame)


def encode(f: tuple[Any, ...]) -> tuple[bytes, tuple[Any, ...]]:
    kind = f[0]
    if kind == "msg":
        _, s, r, h, p, q = f
        return leaf.encode_msg(s, p, r, h, q), (MSG, s, r, h, p, q)
    if kind == "sub":
        _, s, q, w = f
        return leaf.encode_sub(s, q, w), (LS_ADD, s, q, w if q else 1)
    if kind == "unsub":
        _, s, q = f
        return leaf.encode_unsub(s, q), (LS_DEL, s, q)
    if kind == "ping":
        return leaf.PING_FRAME, (PING,)
    return leaf.PONG_FRAME, (PONG,)


def _round_trip_in_pieces(frames: list[tuple[Any, ...]], cuts: list[int]) -> None:
    """Encode ``frames``, feed the bytes cut at ``cuts`` (modulo their length): the parser
    gives back exactly the frames' events and holds nothing."""
    encoded = [encode(f) for f in frames]
    data = b"".join(e for e, _ in encoded)
    points = sorted({c % (len(data) + 1) for c in cuts})
    p = LeafParser()
    out: list[Any] = []
    prev = 0
    for c in [*points, len(data)]:
        out.extend(p.feed(data[prev:c]))
        prev = c
    assert out == [ev for _, ev in encoded]
    assert p.buffered == 0


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(frame, min_size=1, max_size=12), st.lists(st.integers(0, 400), max_size=12))
def test_round_trip_arbitrary_chunking(frames: list[tuple[Any, ...]], cuts: list[int]) -> None:
    _round_trip_in_pieces(frames, cuts)


@settings(max_examples=50, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(msg_frame, min_size=1, max_size=4))
def test_round_trip_one_byte_at_a_time(frames: list[tuple[Any, ...]]) -> None:
    encoded = [encode(f) for f in frames]
    data = b"".join(e for e, _ in encoded)
    assert parse_all(data, chunk=1) == [ev for _, ev in encoded]


@given(
    st.sampled_from(["s", "a.b.c", "$JS.ACK.S.C.1.2.3.4.0"]),
    st.sampled_from([None, "_INBOX.x", "$JS.ACK.S.C.1.2.3.4.0"]),
    st.sampled_from([b"", b"NATS/1.0\r\nA: b\r\n\r\n"]),
    st.sampled_from([(), ("q1",), ("q1", "q2")]),
    st.binary(max_size=20),
)
def test_frame_reply_reads_back_the_reply_of_an_encoded_frame(
    subject: str, reply: str | None, hdr: bytes, queues: tuple[str, ...], payload: bytes
) -> None:
    frame = leaf.encode_msg(subject, payload, reply, hdr, queues)
    assert leaf.frame_reply(frame) == (reply.encode() if reply else None)
    assert leaf.frame_reply(leaf.encode_sub("a.b")) is None


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(subject, subject, token, header_block, payload)
def test_delivery_frames_are_encode_msg_frames(
    target: str, subj: str, ack: str, hdr: bytes, data: bytes
) -> None:
    """The consumer's unchecked encoder writes exactly what the checked one writes, and the
    parser reads back the ``ack@subject`` reply."""
    frame = leaf.encode_delivery(target, ack.encode("utf-8", "surrogateescape"), subj, hdr, data)
    reply = ack + "@" + subj
    assert frame == leaf.encode_msg(target, data, reply, hdr)
    assert parse_all(frame) == [(MSG, target, reply, hdr, data, ())]


def test_delivery_frame_too_long_for_a_control_line() -> None:
    ack = b"$JS.ACK.S.C.1.1.1.1.0"
    assert leaf.encode_delivery("t", ack, "s." + "x" * 5000, b"", b"p", max_control_line=4096) is None
    assert leaf.encode_delivery("t", ack, "s." + "x" * 70_000, b"", b"p") is None
    frame = leaf.encode_delivery("t", ack, "s." + "x" * 4000, b"", b"p", max_control_line=4096)
    assert frame is not None and len(frame.split(b"\r\n")[0]) <= 4096


def test_a_read_completing_a_held_back_frame_is_parsed_in_place() -> None:
    """A read that starts inside a held-back frame is not joined whole to it: only the frame's
    own bytes are, and the rest of the read is parsed where it is (with large messages nearly
    every read starts inside one; joining copied everything received once more)."""
    n, size = 64, 16384
    data = b"".join(leaf.encode_msg("s", bytes([i]) * size) for i in range(n))
    p = LeafParser()
    assert p.feed(data[:100]) == []  # inside the first frame's payload
    read = data[100:]
    tracemalloc.start()
    try:
        events = p.feed(read)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [e[4] for e in events] == [bytes([i]) * size for i in range(n)]
    assert p.buffered == 0
    # The payloads themselves (n * size) plus about one frame; a whole-read join is n * size more.
    assert peak < n * size * 1.25, peak
    # And a read ending inside a control line that the next read completes.
    cut = len(leaf.encode_msg("s", b"\x00" * size)) + 3
    p = LeafParser()
    first = p.feed(data[:cut])
    rest = p.feed(data[cut:])
    assert [e[4] for e in first + rest] == [bytes([i]) * size for i in range(n)]


# Frames drawn from a few subjects and sizes, most without a reply: runs of byte-equal control
# lines (the parser's shortcut for them), and lines that extend one another ("a 1" / "a 12",
# "a" / "a.b"), with a reply or headers now and then breaking the run.
repeat_frame = st.tuples(
    st.just("msg"),
    st.sampled_from(["a", "a.b", "ab", "LMSG"]),
    st.one_of(st.none(), st.none(), st.none(), st.sampled_from(["r", "_INBOX.x"])),
    st.sampled_from([b"", b"", b"", b"NATS/1.0\r\n\r\n"]),
    st.sampled_from([b"", b"x", b"1\r\n", b"LMSG a 1\r\n", b"y" * 12, b"z" * 128]),
    st.just(()),
)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(repeat_frame, min_size=1, max_size=40), st.lists(st.integers(0, 2000), max_size=6))
def test_repeated_control_lines_parse_like_any_other(frames: list[tuple[Any, ...]], cuts: list[int]) -> None:
    _round_trip_in_pieces(frames, cuts)


def test_a_repeated_line_whose_payload_is_not_terminated_is_refused() -> None:
    good = leaf.encode_msg("s.a", b"12345")
    p = LeafParser()
    assert len(p.feed(good + good)) == 2
    with pytest.raises(ProtocolError):
        p.feed(good + good[:-2] + b"XX")
