"""Regressions for what ``jetlog fuzz`` found (see docs/fuzz.md). Each request is sent byte for
byte (:class:`jetlog.chaos.fuzzrun.RawClient`) to jetlog and to nats-server -js (``target``),
and must get the same answer from both, so every expected value is nats-server's own."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from jetlog.chaos.fuzzrun import RawClient
from jetlog.spark.natsproto import Msg
from tests.integration.conftest import Target


@pytest.fixture
async def c(target: Target) -> AsyncIterator[RawClient]:
    cl = RawClient()
    await cl.connect(target.url)
    try:
        yield cl
    finally:
        await cl.close()


def _hdr(**pairs: str) -> bytes:
    return (
        "NATS/1.0\r\n" + "".join(f"{k.replace('_', '-')}: {v}\r\n" for k, v in pairs.items()) + "\r\n"
    ).encode()


LEVEL = "Nats_Required_Api_Level"


async def req(
    c: RawClient, subject: str, body: Any = b"", hdr: bytes = b"", timeout: float = 3.0
) -> Msg | None:
    payload = body if isinstance(body, bytes) else json.dumps(body).encode()
    return await c.request(subject, payload, timeout, hdr)


async def ok(c: RawClient, subject: str, body: Any = b"", hdr: bytes = b"") -> dict[str, Any]:
    m = await req(c, subject, body, hdr)
    assert m is not None, subject
    out = json.loads(m.data)
    assert "error" not in out, out
    return out


async def err(c: RawClient, subject: str, body: Any = b"", hdr: bytes = b"") -> tuple[int, str]:
    m = await req(c, subject, body, hdr)
    assert m is not None, subject
    e = json.loads(m.data)["error"]
    return e["err_code"], e["description"]


def status(m: Msg | None) -> str:
    assert m is not None
    return m.hdr.split(b"\r\n", 1)[0].decode()


async def stream(c: RawClient, name: str, **cfg: Any) -> None:
    await ok(c, f"$JS.API.STREAM.CREATE.{name}", {"name": name, **cfg})


async def consumer(c: RawClient, s: str, name: str, **cfg: Any) -> None:
    await ok(
        c, f"$JS.API.CONSUMER.CREATE.{s}.{name}", {"stream_name": s, "config": {"durable_name": name, **cfg}}
    )


# ---- request decoding -----------------------------------------------------------------------


async def test_invalid_utf8_in_a_member_name_is_invalid_json(c: RawClient) -> None:
    # jetlog raised UnicodeDecodeError in its fast decoders: no reply at all.
    await stream(c, "U", subjects=["u.>"])
    assert await err(c, "$JS.API.STREAM.MSG.DELETE.U", b'{"\xc0eq":1}') == (
        10025,
        'invalid JSON: json: unknown field "\ufffdeq"',
    )
    assert await err(c, "$JS.API.STREAM.MSG.DELETE.U", b'{"\xc0eq":1\xff}') == (
        10025,
        "invalid JSON: invalid character '\\xff' after object key:value pair at offset 9",
    )
    await consumer(c, "U", "p", ack_policy="explicit")
    m = await req(c, "$JS.API.CONSUMER.MSG.NEXT.U.p", b'{"\xc0":1,"no_wait":true}')
    assert status(m) == "NATS/1.0 404 No Messages"  # unknown member ignored by json.Unmarshal


@pytest.mark.parametrize("level", ["\u00b2", "garbage", "6 ", "5.0", "1e1", "6"])
async def test_required_api_level_that_is_not_an_integer_is_refused(c: RawClient, level: str) -> None:
    # "²" made jetlog's int() raise (no reply); other garbage was accepted as level 0.
    await stream(c, "L", subjects=["l.>"], allow_direct=True)
    hdr = _hdr(**{LEVEL: level})
    for subject in ("$JS.API.INFO", "$JS.API.STREAM.INFO.L", "$JS.API.STREAM.NAMES"):
        code, _ = await err(c, subject, b"", hdr)
        assert code == 10185, subject
    assert status(await req(c, "$JS.API.DIRECT.GET.L", {"seq": 1}, hdr)) == "NATS/1.0 412 Required Api Level"


@pytest.mark.parametrize("level", ["5", "+5", "0", "-3"])
async def test_required_api_level_integers_up_to_5_pass(c: RawClient, level: str) -> None:
    info = await ok(c, "$JS.API.INFO", b"", _hdr(**{LEVEL: level}))
    assert info["api"]["level"] == 5


async def test_consumer_info_checks_the_empty_body_before_the_api_level(c: RawClient) -> None:
    assert (await err(c, "$JS.API.CONSUMER.INFO.X.y", b"hello", _hdr(**{LEVEL: "1e1"})))[0] == 10038


async def test_purge_checks_seq_and_keep_before_the_stream(c: RawClient) -> None:
    assert await err(c, "$JS.API.STREAM.PURGE.NOPE", {"seq": 5, "keep": 1}) == (10003, "bad request")


# ---- who answers which subject ----------------------------------------------------------------


async def test_no_responders_for_odd_direct_get_and_next_subjects(c: RawClient) -> None:
    await stream(c, "D", subjects=["d.>"], allow_direct=True)
    await consumer(c, "D", "n", ack_policy="explicit")
    for subject in (
        "$JS.API.DIRECT.GET",
        "$JS.API.DIRECT.GETX.D",
        "$JS.API.CONSUMER.MSG.NEXT.D",
        "$JS.API.CONSUMER.MSG.NEXT.D.n.x",
    ):
        m = await req(c, subject, {"seq": 1})
        assert status(m) == "NATS/1.0 503", subject
        assert m is not None and m.header("Nats-Subject") == subject
    assert await req(c, "$JS.API.DIRECT", {"seq": 1}, timeout=0.5) is None
    assert await req(c, "$JS.API.CONSUMER.MSG.NEXT", b"", timeout=0.5) is None


async def test_snapshot_restore_and_cancel_move_are_answered(c: RawClient, target: Target) -> None:
    await stream(c, "S", subjects=["s.>"])
    assert await err(c, "$JS.API.STREAM.SNAPSHOT.S", b"") == (10003, "bad request")
    assert await err(c, "$JS.API.STREAM.SNAPSHOT.S", b"{}") == (10003, "bad request")
    assert (await err(c, "$JS.API.STREAM.SNAPSHOT.NOPE", {"deliver_subject": "x"}))[0] == 10059
    assert (await err(c, "$JS.API.STREAM.SNAPSHOT.S", {"seq": 1}))[0] == 10025
    assert await err(c, "$JS.API.STREAM.SNAPSHOT.S", {"deliver_subject": "a.*"}) == (
        10015,
        "deliver subject not valid",
    )
    assert await err(c, "$JS.API.STREAM.RESTORE.R", b"") == (10003, "bad request")
    assert (await err(c, "$JS.API.STREAM.RESTORE.R", {"seq": 1}))[0] == 10025
    assert (await err(c, "$JS.API.STREAM.RESTORE.R", {"config": {"name": "Q"}}))[0] == 10056
    assert (await err(c, "$JS.API.STREAM.CANCEL_MOVE.S", b""))[0] == 10010
    if target.is_jetlog:  # nats-server serves these; jetlog refuses them plainly
        assert await err(c, "$JS.API.STREAM.SNAPSHOT.S", {"deliver_subject": "snap.x"}) == (
            10064,
            "snapshot failed: stream snapshots are not supported by jetlog",
        )
        assert await err(c, "$JS.API.STREAM.RESTORE.R", {"config": {"name": "R"}}) == (
            10062,
            "restore failed: stream restores are not supported by jetlog",
        )


async def test_consumer_reset(c: RawClient, target: Target) -> None:
    await stream(c, "RS", subjects=["rs.>"])
    await consumer(c, "RS", "r", ack_policy="explicit")
    # An unknown consumer: only nats-server's per-consumer subscription would answer.
    assert await req(c, "$JS.API.CONSUMER.RESET.RS.nope", b"", timeout=0.5) is None
    m = await req(c, "$JS.API.CONSUMER.RESET.RS.r", b"{bad")
    assert m is not None and json.loads(m.data)["error"]["err_code"] == 10025
    m = await req(c, "$JS.API.CONSUMER.RESET.RS.r", b"")
    assert m is not None
    body = json.loads(m.data)
    if target.is_jetlog:
        assert body["error"] == {
            "code": 400,
            "err_code": 10204,
            "description": "invalid reset: consumer reset is not supported by jetlog",
        }
    else:
        assert body["reset_seq"] == 1


async def test_unpin_checks_its_body_first(c: RawClient) -> None:
    await stream(c, "P", subjects=["p.>"])
    await consumer(c, "P", "c", ack_policy="explicit")
    assert await err(c, "$JS.API.CONSUMER.UNPIN.P.c", b"") == (
        10025,
        "invalid JSON: unexpected end of JSON input",
    )
    assert await err(c, "$JS.API.CONSUMER.UNPIN.P.c", {}) == (
        10025,
        "invalid JSON: consumer group not specified",
    )
    assert (await err(c, "$JS.API.CONSUMER.UNPIN.P.c", {"group": "a b"}))[0] == 10162
    assert (await err(c, "$JS.API.CONSUMER.UNPIN.P.nope", {"group": "g"}))[0] == 10014
    assert (await err(c, "$JS.API.CONSUMER.UNPIN.P.c", {"group": "g"}))[0] == 10160


# ---- publishing -------------------------------------------------------------------------------


async def test_subject_that_is_not_utf8_is_stored_and_read_back(c: RawClient) -> None:
    # jetlog's subject index raised on it, and every later publish to the stream failed.
    await stream(c, "B", subjects=["b.>"], allow_direct=True)
    assert await ok(c, "b.\udcff", b"x") == {"stream": "B", "seq": 1}
    assert await ok(c, "b.ok", b"y") == {"stream": "B", "seq": 2}
    got = await ok(c, "$JS.API.STREAM.MSG.GET.B", {"seq": 1})
    assert got["message"]["subject"] == "b.\ufffd"
    m = await req(c, "$JS.API.DIRECT.GET.B", {"seq": 1})
    assert m is not None and b"\r\nNats-Subject: b.\xff\r\n" in m.hdr and m.data == b"x"
    info = await ok(c, "$JS.API.STREAM.INFO.B", {"subjects_filter": ">"})
    assert info["state"]["subjects"] == {"b.ok": 1, "b.\ufffd": 1}


@pytest.mark.parametrize(
    ("header", "value", "code"),
    [
        ("Nats-Expected-Last-Sequence", "\u00b2", 10071),  # jetlog: int('²') raised, no PubAck
        ("Nats-Expected-Last-Sequence", "abc", 10071),
        ("Nats-Expected-Last-Sequence", "1 ", 10071),
        ("Nats-Expected-Last-Sequence", "", 0),  # empty = not set
        ("Nats-Expected-Last-Sequence", "1", 0),
        ("Nats-Expected-Last-Subject-Sequence", "x", 10071),
        ("Nats-Expected-Last-Subject-Sequence", "", 0),
        ("Nats-Batch-Id", "b1", 10174),  # jetlog stored it
        ("Nats-Batch-Id", "", 0),
        ("Nats-Incr", "x", 10171),  # jetlog answered 10168
        ("Nats-Incr", "+1", 10168),
        ("Nats-Incr", "", 0),
    ],
)
async def test_publish_headers_read_like_nats_server(
    c: RawClient, header: str, value: str, code: int
) -> None:
    await stream(c, "H", subjects=["h.>"])
    await ok(c, "h.a", b"first")
    m = await req(c, "h.a", b"", f"NATS/1.0\r\n{header}: {value}\r\n\r\n".encode())
    assert m is not None
    body = json.loads(m.data)
    assert body.get("error", {}).get("err_code", 0) == code, body


# ---- stream and consumer state ----------------------------------------------------------------


@pytest.mark.parametrize("storage", ["file", "memory"])
async def test_msg_delete_outside_the_stored_range(c: RawClient, storage: str) -> None:
    await stream(c, "MD", subjects=["md.>"], storage=storage)
    for i in range(4):
        await ok(c, "md.a", str(i).encode())
    await ok(c, "$JS.API.STREAM.MSG.DELETE.MD", {"seq": 2})  # a gap inside the range
    assert await err(c, "$JS.API.STREAM.MSG.DELETE.MD", {"seq": 2}) == (10043, "sequence 2 not found")
    await ok(c, "$JS.API.STREAM.MSG.DELETE.MD", {"seq": 1})  # the first sequence is 3 now
    cases = []
    if storage == "file":  # nats-server's file store: outside the range is a store error
        cases += [(9, (10057, "stream store EOF")), (1, (10057, "no message found"))]
    else:
        cases += [(9, (10043, "sequence 9 not found")), (1, (10043, "sequence 1 not found"))]
    for seq, want in cases:
        assert await err(c, "$JS.API.STREAM.MSG.DELETE.MD", {"seq": seq}) == want, seq


@pytest.mark.parametrize("storage", ["file", "memory"])
async def test_multi_last_with_a_ceiling_beyond_the_stream(c: RawClient, storage: str) -> None:
    await stream(c, "ML", subjects=["ml.>"], allow_direct=True, storage=storage)
    for s in ("ml.a", "ml.b", "ml.a"):
        await ok(c, s, b"v")
    m = await req(c, "$JS.API.DIRECT.GET.ML", {"multi_last": ["ml.>"], "up_to_seq": 2})
    assert m is not None and m.header("Nats-Sequence") == "1"
    m = await req(c, "$JS.API.DIRECT.GET.ML", {"multi_last": ["ml.>"], "up_to_seq": 9})
    if storage == "file":
        assert status(m) == "NATS/1.0 404 No Results"
    else:
        assert m is not None and m.header("Nats-Sequence") == "2"


async def test_no_wait_pull_on_a_paused_consumer_ends_at_once(c: RawClient) -> None:
    await stream(c, "PZ", subjects=["pz.>"])
    await ok(c, "pz.a", b"1")
    await consumer(c, "PZ", "p", ack_policy="explicit")
    await ok(c, "$JS.API.CONSUMER.PAUSE.PZ.p", {"pause_until": "2099-01-01T00:00:00Z"})
    m = await req(c, "$JS.API.CONSUMER.MSG.NEXT.PZ.p", {"batch": 5, "no_wait": True})
    assert status(m) == "NATS/1.0 404 No Messages"


async def test_no_wait_pull_with_nothing_left_while_ack_pending_is_full(c: RawClient) -> None:
    await stream(c, "AP", subjects=["ap.>"])
    await ok(c, "ap.a", b"1")
    await consumer(c, "AP", "p", ack_policy="explicit", max_ack_pending=1, ack_wait=3_600_000_000_000)
    m = await req(c, "$JS.API.CONSUMER.MSG.NEXT.AP.p", {"batch": 1, "no_wait": True})
    assert m is not None and m.data == b"1"
    m = await req(c, "$JS.API.CONSUMER.MSG.NEXT.AP.p", {"batch": 1, "no_wait": True})
    assert status(m) == "NATS/1.0 404 No Messages"


async def test_pause_keeps_the_deadline_in_the_config(c: RawClient) -> None:
    await stream(c, "PC", subjects=["pc.>"])
    await consumer(c, "PC", "p", ack_policy="explicit")
    # Decoded before the API level is checked; a body that is not JSON means "resume".
    assert (await err(c, "$JS.API.CONSUMER.PAUSE.PC.p", {"pause_until": -1}, _hdr(**{LEVEL: "6"})))[
        0
    ] == 10025
    r = await ok(c, "$JS.API.CONSUMER.PAUSE.PC.p", b"\xff\xfe")
    assert r["paused"] is False
    r = await ok(c, "$JS.API.CONSUMER.PAUSE.PC.p", {"pause_until": "2099-01-01T05:30:00+05:30"})
    assert r["pause_until"] == "2099-01-01T00:00:00Z"
    info = await ok(c, "$JS.API.CONSUMER.INFO.PC.p")
    assert info["config"]["pause_until"] == "2099-01-01T00:00:00Z"
    assert info["config"]["metadata"]["_nats.req.level"] == "1"
    r = await ok(c, "$JS.API.CONSUMER.PAUSE.PC.p", {"pause_until": "2001-01-01T00:00:00Z"})
    assert (r["paused"], r["pause_until"]) == (False, "2001-01-01T00:00:00Z")
    r = await ok(c, "$JS.API.CONSUMER.PAUSE.PC.p", {})
    assert r == {
        "type": "io.nats.jetstream.api.v1.consumer_pause_response",
        "paused": False,
        "pause_until": "0001-01-01T00:00:00Z",
    }
    info = await ok(c, "$JS.API.CONSUMER.INFO.PC.p")
    assert "pause_until" not in info["config"]
    assert info["config"]["metadata"]["_nats.req.level"] == "0"


async def test_a_pull_request_waits_for_its_inbox_interest(nats_server: Any, jetlog_node: Any) -> None:
    """A request can reach jetlog before the hub tells it (LS+) that its inbox has interest;
    an interest change in between dropped it. Like nats-server with leafnodes, a request is kept
    for 2 s before missing interest counts (jetlog only: the reference server of ``target``
    has no leafnodes, so it drops such a request at once)."""
    c = RawClient()
    await c.connect(nats_server.url)
    try:
        await _young_request(c)
    finally:
        await c.close()


async def _young_request(c: RawClient) -> None:
    await stream(c, "YR", subjects=["yr.>"])
    await consumer(c, "YR", "p", ack_policy="explicit")
    got: asyncio.Queue[Msg] = asyncio.Queue()
    inbox = "_INBOX.young.1"
    c.publish("$JS.API.CONSUMER.MSG.NEXT.YR.p", b'{"batch":1,"expires":10000000000}', inbox)
    await c.flush()
    other = c.subscribe("some.other.subject", lambda m: None)  # an LS+ for something else
    await c.flush()
    c.unsubscribe(other)  # and an LS-
    await c.flush()
    c.subscribe(inbox, got.put_nowait)
    await c.flush()
    await ok(c, "yr.a", b"hello")
    m = await asyncio.wait_for(got.get(), 5)
    assert m.data == b"hello"


async def test_a_filter_with_gt_before_its_last_token_is_literal(c: RawClient) -> None:
    """jetlog treated ">" anywhere in a filter as the full wildcard: a purge with the filter
    ">.a" emptied the stream (nats-server purges nothing), reads found messages."""
    await stream(c, "G", subjects=["g.>"], allow_direct=True)
    for s in ("g.a", "g.b.c", "g.a"):
        await ok(c, s, b"v")
    for bad in (">.a", "g.>.a"):
        assert (await ok(c, "$JS.API.STREAM.PURGE.G", {"filter": bad}))["purged"] == 0
        info = await ok(c, "$JS.API.STREAM.INFO.G", {"subjects_filter": bad})
        assert "subjects" not in info["state"] and info["state"]["messages"] == 3
        assert (await err(c, "$JS.API.STREAM.MSG.GET.G", {"last_by_subj": bad}))[0] == 10037
        assert (await err(c, "$JS.API.STREAM.MSG.GET.G", {"next_by_subj": bad, "seq": 1}))[0] == 10037
        for body in ({"last_by_subj": bad}, {"next_by_subj": bad, "seq": 1}):
            assert status(await req(c, "$JS.API.DIRECT.GET.G", body)) == "NATS/1.0 404 Message Not Found"
    assert (await ok(c, "$JS.API.STREAM.PURGE.G", {"filter": "g.>"}))["purged"] == 3


async def test_max_msg_size_is_checked_before_any_header(c: RawClient) -> None:
    # nats-server 2.15.1 answers 10054 for an oversize message whatever its headers say.
    await stream(c, "MS", subjects=["ms.>"], max_msg_size=1024)
    await ok(c, "ms.a", b"x", _hdr(Nats_Msg_Id="d1"))
    for h in (
        b"",
        _hdr(Nats_Incr="1"),
        _hdr(Nats_Msg_Id="d1"),
        _hdr(Nats_Rollup="all"),
        _hdr(Nats_Expected_Last_Sequence="9"),
        _hdr(Nats_Batch_Id="b"),
    ):
        m = await req(c, "ms.a", b"x" * 1025, h)
        assert m is not None and json.loads(m.data)["error"]["err_code"] == 10054, h


@pytest.mark.parametrize("storage", ["file", "memory"])
async def test_purge_past_the_end_moves_the_sequence_on(c: RawClient, storage: str) -> None:
    # jetlog kept last_seq: the next message got last+1 where nats-server gives it `seq`.
    await stream(c, "PE", subjects=["pe.>"], storage=storage)
    for _ in range(3):
        await ok(c, "pe.a", b"x")
    assert (await ok(c, "$JS.API.STREAM.PURGE.PE", {"seq": 100}))["purged"] == 3
    assert (await ok(c, "$JS.API.STREAM.PURGE.PE", {"seq": 200, "filter": "pe.a"}))["purged"] == 0
    state = (await ok(c, "$JS.API.STREAM.INFO.PE"))["state"]
    assert (state["messages"], state["first_seq"], state["last_seq"]) == (0, 100, 99)
    assert await ok(c, "pe.a", b"y") == {"stream": "PE", "seq": 100}
    assert (await ok(c, "$JS.API.STREAM.PURGE.PE", {"seq": 18446744073709551615}))["purged"] == 1
    assert await ok(c, "pe.a", b"z") == {"stream": "PE", "seq": 18446744073709551615}


async def test_purge_past_the_end_survives_a_restart(nats_server: Any, tmp_path: Any) -> None:
    from tests.integration.conftest import start_node

    node = await start_node(nats_server, str(tmp_path / "d"))
    c = RawClient()
    await c.connect(nats_server.url)
    try:
        await stream(c, "PR", subjects=["pr.>"])
        await ok(c, "pr.a", b"x")
        await ok(c, "$JS.API.STREAM.PURGE.PR", {"seq": 50})
        await node.stop()
        node = await start_node(nats_server, str(tmp_path / "d"))
        state = (await ok(c, "$JS.API.STREAM.INFO.PR"))["state"]
        assert (state["first_seq"], state["last_seq"]) == (50, 49)
        assert await ok(c, "pr.a", b"y") == {"stream": "PR", "seq": 50}
    finally:
        await c.close()
        await node.stop()


async def test_the_last_sequence_refuses_more_instead_of_breaking(c: RawClient, target: Target) -> None:
    # After a purge to 2**64-1 the next append overflowed the u64 sequence: struct.error on
    # every later publish, the stream broken. nats-server wraps around to 0.
    await stream(c, "SX", subjects=["sx.>"])
    await ok(c, "$JS.API.STREAM.PURGE.SX", {"seq": 18446744073709551615})
    assert await ok(c, "sx.a", b"x") == {"stream": "SX", "seq": 18446744073709551615}
    m = await req(c, "sx.a", b"y")
    assert m is not None
    body = json.loads(m.data)
    if target.is_jetlog:
        assert body["error"] == {
            "code": 503,
            "err_code": 10077,
            "description": "stream sequence space exhausted",
        }
        assert (await ok(c, "$JS.API.STREAM.MSG.GET.SX", {"seq": 18446744073709551615}))["message"][
            "data"
        ] == "eA=="
    else:
        assert body == {"stream": "SX", "seq": 0}


async def test_a_negative_max_bytes_pull_is_unlimited(c: RawClient) -> None:
    # jetlog ended it with "409 Message Size Exceeds MaxBytes"; nats-server delivers.
    await stream(c, "NB", subjects=["nb.>"])
    await ok(c, "nb.a", b"hello")
    await consumer(c, "NB", "p", ack_policy="explicit")
    m = await req(
        c, "$JS.API.CONSUMER.MSG.NEXT.NB.p", {"batch": 2, "max_bytes": -9223372036854775808, "no_wait": True}
    )
    assert m is not None and m.data == b"hello"
