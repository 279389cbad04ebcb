"""ClientSplitter: our MSG/HMSG frames parsed, everything else passed on byte for byte."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from jetlog.wire.clientframes import MAX_LINE, ClientSplitter

OURS = {7, 12}


def msg(subject: bytes, sid: int, reply: bytes, payload: bytes) -> bytes:
    r = reply + b" " if reply else b""
    return b"MSG %s %d %s%d\r\n%s\r\n" % (subject, sid, r, len(payload), payload)


def hmsg(subject: bytes, sid: int, reply: bytes, hdr: bytes, payload: bytes) -> bytes:
    r = reply + b" " if reply else b""
    return b"HMSG %s %d %s%d %d\r\n%s%s\r\n" % (
        subject,
        sid,
        r,
        len(hdr),
        len(hdr) + len(payload),
        hdr,
        payload,
    )


def split_all(chunks: list[bytes], ours: set[int] = OURS) -> tuple[list[object], ClientSplitter]:
    sp = ClientSplitter(ours)
    out: list[object] = []
    for c in chunks:
        out.extend(sp.feed(c))
    return out, sp


def test_ours_are_parsed_and_the_rest_passes_whole_and_in_order() -> None:
    hdr = b"NATS/1.0\r\nA: b\r\n\r\n"
    wire = [
        b'INFO {"server_id":"x"}\r\n',
        msg(b"a.b", 7, b"", b"one"),
        b"PING\r\n",
        msg(b"other", 3, b"_INBOX.1", b"theirs"),
        hmsg(b"c.d", 12, b"_INBOX.2", hdr, b"two\r\nwith crlf"),
        hmsg(b"e", 4, b"", hdr, b""),
        b"+OK\r\n",
        b"-ERR 'Permissions Violation'\r\n",
        msg(b"f", 7, b"r", b""),
    ]
    out, sp = split_all([b"".join(wire)])
    assert out == [
        wire[0],
        (7, b"a.b", b"", b"", b"one"),
        wire[2] + wire[3],
        (12, b"c.d", b"_INBOX.2", hdr, b"two\r\nwith crlf"),
        wire[5] + wire[6] + wire[7],
        (7, b"f", b"r", b"", b""),
    ]
    assert sp.buffered == 0 and not sp.gave_up


frames = st.one_of(
    st.builds(
        lambda s, sid, r, p: msg(s, sid, r, p),
        st.sampled_from([b"a", b"a.b.c", b"$JS.API.INFO", b"_INBOX.x.1"]),
        st.sampled_from([3, 7, 12, 99]),
        st.sampled_from([b"", b"_INBOX.r"]),
        st.binary(max_size=300),
    ),
    st.builds(
        lambda s, sid, r, h, p: hmsg(s, sid, r, h, p),
        st.sampled_from([b"k", b"$KV.b.k"]),
        st.sampled_from([3, 7, 12]),
        st.sampled_from([b"", b"_INBOX.r"]),
        st.sampled_from([b"NATS/1.0\r\n\r\n", b"NATS/1.0 503\r\n\r\n", b"NATS/1.0\r\nX: y\r\n\r\n"]),
        st.binary(max_size=300),
    ),
    st.sampled_from([b"PING\r\n", b"PONG\r\n", b"+OK\r\n", b'INFO {"a":1}\r\n', b"-ERR 'x'\r\n"]),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(frames, max_size=12), st.data())
def test_any_chunking_gives_the_same_items(wire: list[bytes], data: st.DataObject) -> None:
    stream = b"".join(wire)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=8)))
    chunks = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
    out, sp = split_all(chunks)
    whole, _ = split_all([stream])

    # Ours come out identical; the rest, concatenated between two of ours, is identical too.
    def norm(items: list[object]) -> list[object]:
        res: list[object] = []
        for it in items:
            if isinstance(it, bytes) and res and isinstance(res[-1], bytes):
                res[-1] += it
            elif isinstance(it, bytes):
                res.append(bytes(it))
            else:
                res.append(it)
        return res

    assert norm(out) == norm(whole)
    assert sp.buffered == 0
    # Reassembling our frames gives back the original stream.
    rebuilt = b""
    for it in out:
        if isinstance(it, bytes):
            rebuilt += it
        else:
            assert isinstance(it, tuple)
            sid, subject, reply, hdr, payload = it
            assert sid in OURS
            rebuilt += hmsg(subject, sid, reply, hdr, payload) if hdr else msg(subject, sid, reply, payload)
    assert rebuilt == stream


def test_a_payload_arriving_in_pieces_is_held_then_parsed() -> None:
    frame = msg(b"big", 7, b"_INBOX.z", bytes(range(256)) * 100)
    sp = ClientSplitter(OURS)
    got: list[object] = []
    for i in range(0, len(frame), 1000):
        got.extend(sp.feed(frame[i : i + 1000]))
        if i + 1000 < len(frame):
            assert got == [] and sp.buffered == i + 1000
    assert got == [(7, b"big", b"_INBOX.z", b"", bytes(range(256)) * 100)]


def test_what_it_cannot_read_goes_to_nats_py_unparsed_for_good() -> None:
    sp = ClientSplitter(OURS)
    # A tab between arguments is legal for the server but not a shape the splitter reads.
    odd = b"MSG a\t7 3\r\nabc\r\n"
    assert sp.feed(b"PONG\r\n" + odd) == [b"PONG\r\n" + odd]
    assert sp.gave_up
    later = msg(b"a", 7, b"", b"x")
    assert sp.feed(later) == [later]
    # Payload not followed by CRLF: handed over from that frame on.
    sp = ClientSplitter(OURS)
    bad = b"MSG a 7 3\r\nabcXY"
    assert sp.feed(msg(b"a", 7, b"", b"ok") + bad) == [(7, b"a", b"", b"", b"ok"), bad]
    assert sp.gave_up


def test_a_line_that_never_ends_is_handed_over() -> None:
    sp = ClientSplitter(OURS)
    assert sp.feed(b"INFO {") == []
    junk = b"x" * (MAX_LINE + 10)
    out = sp.feed(junk)
    assert out == [b"INFO {" + junk] and sp.gave_up


def test_subscriptions_are_looked_up_live() -> None:
    ours: set[int] = set()
    sp = ClientSplitter(ours)
    f = msg(b"a", 5, b"", b"1")
    assert sp.feed(f) == [f]
    ours.add(5)
    assert sp.feed(f) == [(5, b"a", b"", b"", b"1")]
