"""The Spark connector's synchronous NATS client: protocol parsing, headers, auth material."""

from __future__ import annotations

import base64
import os

import nkeys
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jetlog.spark import natsio as N


def _all(p: N.Parser) -> list[object]:
    out = []
    while (op := p.next()) is not None:
        out.append(op)
    return out


def test_parse_msg_and_hmsg_with_and_without_reply() -> None:
    h2 = b"NATS/1.0\r\nK: v\r\nK: w\r\n\r\n"
    h3 = b"NATS/1.0 503 No Responders\r\n\r\n"
    p = N.Parser()
    p.feed(
        b"MSG a.b 1 5\r\nhello\r\n"
        b"MSG a.c 1 _INBOX.x.1 0\r\n\r\n"
        + b"HMSG _INBOX.x.2 1 %d %d\r\n" % (len(h2), len(h2) + 3)
        + h2
        + b"abc\r\n"
        + b"HMSG _INBOX.x.3 1 r.1 %d %d\r\n" % (len(h3), len(h3))
        + h3
        + b"\r\n"
    )
    ops = _all(p)
    assert len(ops) == 4
    m0, m1, m2, m3 = ops
    assert isinstance(m0, N.Msg) and (m0.subject, m0.reply, m0.hdr, m0.data) == ("a.b", None, b"", b"hello")
    assert isinstance(m1, N.Msg) and (m1.subject, m1.reply, m1.data) == ("a.c", "_INBOX.x.1", b"")
    assert isinstance(m2, N.Msg) and m2.data == b"abc" and m2.status == 0
    assert m2.headers() == [("K", "v"), ("K", "w")] and m2.header("K") == "v" and m2.header("k") is None
    assert isinstance(m3, N.Msg) and m3.reply == "r.1" and m3.status == 503
    assert m3.description == "No Responders" and m3.data == b""


def test_parse_byte_by_byte_and_control_ops() -> None:
    wire = (
        b'INFO {"server_id":"S","nonce":"abc","headers":true}\r\n'
        b"PING\r\nPONG\r\n+OK\r\n-ERR 'Permissions Violation for Subscription to \"x\"'\r\n"
        b"HMSG s 1 12 16\r\nNATS/1.0\r\n\r\n\r\n\r\n\r\n"
    )
    p = N.Parser()
    ops: list[object] = []
    for i in range(len(wire)):
        p.feed(wire[i : i + 1])
        ops.extend(_all(p))
    assert ops[0] == ("INFO", {"server_id": "S", "nonce": "abc", "headers": True})
    assert ops[1:4] == [N.OP_PING, N.OP_PONG, N.OP_OK]
    assert ops[4] == ("-ERR", 'Permissions Violation for Subscription to "x"')
    m = ops[5]
    assert isinstance(m, N.Msg) and m.data == b"\r\n\r\n" and m.hdr == b"NATS/1.0\r\n\r\n"
    assert p.buffered == 0


def test_parse_large_payload_in_chunks() -> None:
    payload = os.urandom(3 << 20)
    wire = b"MSG big 1 %d\r\n" % len(payload) + payload + b"\r\n"
    p = N.Parser()
    got = None
    for i in range(0, len(wire), 65536):
        p.feed(wire[i : i + 65536])
        op = p.next()
        if op is not None:
            got = op
    assert isinstance(got, N.Msg) and got.data == payload


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.binary(max_size=3000), min_size=1, max_size=8),
    st.lists(st.integers(1, 5000), min_size=1, max_size=50),
    st.integers(1, 4096),
)
def test_receiving_into_the_buffer_parses_like_feeding(
    payloads: list[bytes], pieces: list[int], size: int
) -> None:
    """``recv_into`` (the socket reads into the parser's own buffer, as much as the message
    being received needs) gives the same messages as ``feed``, whatever sizes the socket hands
    out and however parsing interleaves with receiving."""
    wire = b"".join(
        b"HMSG s.%d 1 r 12 %d\r\nNATS/1.0\r\n\r\n" % (i, 12 + len(d)) + d + b"\r\n"
        if i % 2
        else b"MSG s.%d 1 %d\r\n" % (i, len(d)) + d + b"\r\nPING\r\n"
        for i, d in enumerate(payloads)
    )
    fed = N.Parser()
    fed.feed(wire)
    want = _all(fed)
    p = N.Parser()
    sent = 0
    turn = 0
    asked: list[int] = []

    def recv(into: memoryview) -> int:
        nonlocal sent, turn
        asked.append(len(into))
        n = min(len(into), pieces[turn % len(pieces)], len(wire) - sent)
        turn += 1
        into[:n] = wire[sent : sent + n]
        sent += n
        return n

    got: list[object] = []
    while sent < len(wire):
        assert p.recv_into(recv, size) > 0
        got.extend(_all(p))

    def view(ops: list[object]) -> list[object]:
        return [(o.subject, o.reply, o.hdr, o.data) if isinstance(o, N.Msg) else o for o in ops]

    assert view(got) == view(want) and len(want) == 2 * len(payloads) - len(payloads) // 2
    assert p.buffered == 0 and p.recv_into(recv, size) == 0
    assert min(asked) >= size  # never less room than asked for


@pytest.mark.parametrize(
    "wire",
    [b"MSG a 1 3\r\nabcX\r\n", b"BOGUS\r\n", b"MSG a\r\n", b"HMSG a 1 9 3\r\nabc\r\n"],
)
def test_parse_rejects_malformed(wire: bytes) -> None:
    p = N.Parser()
    p.feed(wire)
    with pytest.raises(N.ProtocolError):
        _all(p)


def test_control_line_limit() -> None:
    p = N.Parser()
    p.feed(b"MSG " + b"x" * (70 * 1024))
    with pytest.raises(N.ProtocolError):
        p.next()


def test_headers_encode_round_trip_and_validation() -> None:
    block = N.encode_headers([("Nats-Msg-Id", "q-b1-p0-r3"), ("k", "v w"), ("k", "")])
    assert block == b"NATS/1.0\r\nNats-Msg-Id: q-b1-p0-r3\r\nk: v w\r\nk: \r\n\r\n"
    assert N.parse_headers(block) == [("Nats-Msg-Id", "q-b1-p0-r3"), ("k", "v w"), ("k", "")]
    for bad in [("a b", "x"), ("a:b", "x"), ("", "x"), ("k", "line\r\nbreak")]:
        with pytest.raises(ValueError):
            N.encode_headers([bad])


_KEY = st.sampled_from(["Jl-Count", "Jl-Next-Seq", "jl-count", "K", "Nats-Sequence"])
_VAL = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), max_size=6)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(_KEY, _VAL), max_size=8))
def test_a_header_lookup_is_the_first_value_asked_any_number_of_times(pairs: list[tuple[str, str]]) -> None:
    """``Msg.header`` parses the block once and answers every lookup from it: the first
    value of a key (case-sensitive, repeats kept in ``headers()``), None when absent."""
    m = N.Msg("s", None, N.encode_headers(pairs) if pairs else b"", b"")
    for _ in range(2):
        for key in ["Jl-Count", "Jl-Next-Seq", "jl-count", "K", "Nats-Sequence", "Absent"]:
            assert m.header(key) == next((v for k, v in pairs if k == key), None)
    assert m.headers() == pairs


def test_pub_encoding() -> None:
    assert N.Connection.encode_pub("a.b", b"xy") == b"PUB a.b 2\r\nxy\r\n"
    assert N.Connection.encode_pub("a.b", b"xy", "r.1") == b"PUB a.b r.1 2\r\nxy\r\n"
    hdr = b"NATS/1.0\r\nA: b\r\n\r\n"
    assert N.Connection.encode_pub("a", b"xy", "r", hdr) == b"HPUB a r 18 20\r\n" + hdr + b"xy\r\n"


def test_inboxes_are_unique_and_random() -> None:
    seen = {N.new_inbox() for _ in range(2000)}
    assert len(seen) == 2000
    assert all(s.startswith("_INBOX.") and "." not in s[7:] for s in seen)


def test_split_url() -> None:
    assert N._split_url("nats://127.0.0.1:4333") == ("127.0.0.1", 4333, False, None, None)
    assert N._split_url("tls://h") == ("h", 4222, True, None, None)
    assert N._split_url("u%40x:p%3Aw@h:1") == ("h", 1, False, "u@x", "p:w")
    with pytest.raises(ValueError):
        N._split_url("http://h:1")


def _user_seed() -> str:
    return nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER).decode()


def test_nkey_signature_verifies() -> None:
    seed = _user_seed()
    public, sig = N._sign(seed, "nonce-123")
    kp = nkeys.from_seed(bytearray(seed.encode()))
    assert public == kp.public_key.decode()
    raw = base64.urlsafe_b64decode(sig + "=" * (-len(sig) % 4))
    assert kp.verify(b"nonce-123", raw)


def test_creds_file_parsing(tmp_path) -> None:  # type: ignore[no-untyped-def]
    seed = _user_seed()
    creds = tmp_path / "u.creds"
    creds.write_text(
        "-----BEGIN NATS USER JWT-----\neyJhbGciOiJFZDI1NTE5In0.e30.sig\n------END NATS USER JWT------\n\n"
        "************************* IMPORTANT *************************\nNKEY Seed printed below\n\n"
        f"-----BEGIN USER NKEY SEED-----\n{seed}\n------END USER NKEY SEED------\n"
    )
    jwt, got = N._read_creds(str(creds))
    assert jwt == "eyJhbGciOiJFZDI1NTE5In0.e30.sig" and got == seed
    bad = tmp_path / "bad.creds"
    bad.write_text("nothing here\n")
    with pytest.raises(N.NatsAuthError):
        N._read_creds(str(bad))
    with pytest.raises(N.NatsAuthError):
        N._read_creds(str(tmp_path / "missing.creds"))


def test_seed_from_file_or_value(tmp_path) -> None:  # type: ignore[no-untyped-def]
    seed = _user_seed()
    f = tmp_path / "seed.nk"
    f.write_text(seed + "\n")
    assert N._load_seed(seed) == seed
    assert N._load_seed(str(f)) == seed


def test_connection_is_not_picklable() -> None:
    import pickle

    with pytest.raises(TypeError):
        pickle.dumps(N.Connection(N.ConnectOptions()))
