"""Messages near the upstream's max_payload through every read path, against jetlog and against
``nats-server -js`` configured with the same max_payload (64 KiB, to keep the tests fast; the
user's 1 MiB case once).

nats-server sends its JetStream replies internally, with no size cap, so where a reply outgrows
max_payload it still sends it (each test records that as evidence). jetlog's replies travel on
ordinary connections, where the server would close the connection for such a frame: jetlog
answers with an error that says why instead (``jetlog.api.oversize``), and never sends a frame
the server rejects: every jetlog test ends by checking that neither link was dropped and that
the server never logged a payload violation.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgspec
import nats
import pytest
from nats.aio.msg import Msg
from nats.js.api import KeyValueConfig, ObjectMeta, ObjectMetaOptions
from nats.js.errors import APIError, BadRequestError

from jetlog.embedded import NatsServer
from jetlog.transport.barrier import flush_barrier

from .conftest import start_node
from .jsutil import api

if TYPE_CHECKING:
    from jetlog.node import Node

MP = 64 * 1024
TOO_LARGE_STATUS = "413"
TOO_LARGE_TEXT = "Message Size Exceeds Max Payload"


@dataclass
class Side:
    kind: str
    srv: NatsServer
    node: Node | None = None

    @property
    def is_jetlog(self) -> bool:
        return self.kind == "jetlog"


@contextlib.asynccontextmanager
async def _side(kind: str, tmp: Any, max_payload: int) -> AsyncIterator[Side]:
    conf = f"max_payload: {max_payload}"
    if kind == "nats":
        async with NatsServer(
            jetstream=True, leafnode=False, store_dir=str(tmp / "js"), extra_conf=conf
        ) as srv:
            yield Side("nats", srv)
        return
    async with NatsServer(leafnode=True, extra_conf=conf) as srv:
        node = await start_node(srv, str(tmp / "data"))
        try:
            yield Side("jetlog", srv, node)
        finally:
            await node.stop()


@pytest.fixture(params=["jetlog", "nats"])
async def side(request: pytest.FixtureRequest, tmp_path: Any) -> AsyncIterator[Side]:
    async with _side(request.param, tmp_path, MP) as s:
        yield s


@pytest.fixture
async def nc(side: Side) -> AsyncIterator[nats.NATS]:
    conn = await nats.connect(side.srv.url)
    assert conn.max_payload == MP
    try:
        yield conn
    finally:
        await conn.close()


def assert_links_intact(side: Side) -> None:
    """jetlog never sent a frame the server rejected: no link was dropped, no violation logged."""
    if not side.is_jetlog:
        return
    node = side.node
    assert node is not None
    assert node.ready() == (True, "ready")
    assert node.client.reconnects == 0 and node.leaf.stats.reconnects == 0
    server_log = b"".join(side.srv._log).lower()
    assert b"maximum payload" not in server_log, server_log[-2000:]


async def direct(nc: nats.NATS, subject: str, body: Any, stop_after_one: bool) -> list[Msg]:
    """Raw Direct Get: every reply message up to a status (or the first one for single gets)."""
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    payload = json.dumps(body).encode() if body is not None else b""
    await nc.publish(subject, payload, reply=inbox)
    out: list[Msg] = []
    while True:
        m = await sub.next_msg(timeout=3)
        out.append(m)
        if stop_after_one or (m.headers or {}).get("Status"):
            break
    await sub.unsubscribe()
    return out


def status_of(m: Msg) -> tuple[str | None, str | None]:
    h = m.headers or {}
    return h.get("Status"), h.get("Description")


async def fill(js: Any, **stream: Any) -> dict[int, tuple[bytes, dict[str, str] | None]]:
    """Messages near the limit, with and without headers: seq -> (data, headers)."""
    await js.add_stream(name="S", subjects=["s.>"], **stream)
    big_hdr = {"X-Big": "h" * 1000}  # "NATS/1.0\r\nX-Big: hhh...\r\n\r\n": 1021 bytes
    msgs: list[tuple[str, bytes, dict[str, str] | None]] = [
        ("s.a", b"a" * (MP - 200), None),  # near the limit, no headers
        ("s.b", b"b" * (MP - 50 - 1021), big_hdr),  # near the limit with a 1 KiB header block
        ("s.c", b"c" * MP, None),  # exactly max_payload
        ("s.d", b"d" * (MP - 1000), None),  # room for Direct Get's headers
        ("s.e", b"e" * 40_000, None),  # fits a MSG.GET reply even base64-encoded
        ("s.f", b"f" * 30_000, {"X-Small": "v"}),
    ]
    out = {}
    for subj, data, hdrs in msgs:
        ack = await js.publish(subj, data, headers=hdrs)
        out[ack.seq] = (data, hdrs)
    return out


# ---- STREAM.MSG.GET ------------------------------------------------------------------------


async def test_msg_get_near_limit(side: Side, nc: nats.NATS) -> None:
    js = nc.jetstream()
    stored = await fill(js)
    # Replies that fit: identical on both.
    for seq in (5, 6):
        m = await js.get_msg("S", seq)
        assert (m.seq, m.data) == (seq, stored[seq][0])
        if stored[seq][1]:
            assert m.headers is not None and m.headers["X-Small"] == "v"
    for seq in (1, 2, 3, 4):
        raw = await nc.request("$JS.API.STREAM.MSG.GET.S", json.dumps({"seq": seq}).encode(), timeout=3)
        body = json.loads(raw.data)
        assert body["type"] == "io.nats.jetstream.api.v1.stream_msg_get_response"
        if not side.is_jetlog:
            # Evidence: nats-server replies with more than max_payload (base64 of the message).
            assert len(raw.data) > MP
            msg = body["message"]
            assert base64.b64decode(msg["data"]) == stored[seq][0]
            continue
        assert len(raw.data) <= MP
        err = body["error"]
        assert (err["code"], err["err_code"]) == (400, 10054)
        assert err["description"].startswith("message size exceeds maximum allowed: the ")
        assert f"exceeds the upstream max_payload of {MP} bytes" in err["description"]
    with pytest.raises(BadRequestError if side.is_jetlog else AssertionError):
        m = await js.get_msg("S", 1)
        assert m.data != stored[1][0]  # nats-server: the message itself (no error)
    # The API keeps answering at once.
    assert (await js.stream_info("S")).state.messages == 6
    assert_links_intact(side)


# ---- Direct Get ------------------------------------------------------------------------------


async def test_direct_get_single_near_limit(side: Side, nc: nats.NATS) -> None:
    js = nc.jetstream()
    stored = await fill(js, allow_direct=True)
    # Fits with the ~115 header bytes Direct Get adds: same message, same headers on both.
    for body, seq in (({"seq": 1}, 1), ({"seq": 4}, 4), ({"seq": 6}, 6), ({"last_by_subj": "s.f"}, 6)):
        (m,) = await direct(nc, "$JS.API.DIRECT.GET.S", body, True)
        assert m.data == stored[seq][0]
        h = m.headers or {}
        subj = f"s.{'abcdef'[seq - 1]}"
        assert (h["Nats-Stream"], h["Nats-Sequence"], h["Nats-Subject"]) == ("S", str(seq), subj)
    (m,) = await direct(nc, "$JS.API.DIRECT.GET.S.s.a", None, True)
    assert m.data == stored[1][0]
    # Too large once Direct Get's headers are added: the header-heavy message 50 bytes under
    # the limit, and the message of exactly max_payload.
    for subject, body, seq in (
        ("$JS.API.DIRECT.GET.S", {"seq": 2}, 2),
        ("$JS.API.DIRECT.GET.S", {"next_by_subj": "s.c", "seq": 1}, 3),
        ("$JS.API.DIRECT.GET.S.s.c", None, 3),
    ):
        (m,) = await direct(nc, subject, body, True)
        if side.is_jetlog:
            assert status_of(m) == (TOO_LARGE_STATUS, TOO_LARGE_TEXT) and m.data == b""
        else:
            # Evidence: nats-server sends stored message + headers, above max_payload.
            assert m.data == stored[seq][0]
            hdr_bytes = sum(len(k) + len(v) + 4 for k, v in (m.headers or {}).items()) + 12
            assert len(m.data) + hdr_bytes > MP
    # nats-py's get_msg(direct=True): an APIError that says why (404 stays NotFoundError).
    if side.is_jetlog:
        with pytest.raises(APIError) as ei:
            await js.get_msg("S", 3, direct=True)
        assert ei.value.code == 413 and ei.value.description == TOO_LARGE_TEXT
    else:
        assert (await js.get_msg("S", 3, direct=True)).data == stored[3][0]
    assert_links_intact(side)


async def test_direct_get_batch_and_multi_last_near_limit(side: Side, nc: nats.NATS) -> None:
    js = nc.jetstream()
    stored = await fill(js, allow_direct=True)
    # A batch of messages that all fit: identical, ending in 204 EOB.
    got = await direct(nc, "$JS.API.DIRECT.GET.S", {"seq": 4, "batch": 3}, False)
    assert [m.data for m in got[:-1]] == [stored[s][0] for s in (4, 5, 6)]
    assert status_of(got[-1])[0] == "204"
    # The batch reaches a message that does not fit (seq 2).
    got = await direct(nc, "$JS.API.DIRECT.GET.S", {"seq": 1, "batch": 6}, False)
    if side.is_jetlog:
        # What fits is sent, then the 413 ends the reply (no 204 EOB).
        assert [m.data for m in got[:-1]] == [stored[1][0]]
        assert status_of(got[-1]) == (TOO_LARGE_STATUS, TOO_LARGE_TEXT)
    else:
        assert [m.data for m in got[:-1]] == [stored[s][0] for s in range(1, 7)]
        assert status_of(got[-1])[0] == "204"
    got = await direct(nc, "$JS.API.DIRECT.GET.S", {"multi_last": ["s.e", "s.b", "s.d"]}, False)
    if side.is_jetlog:
        # Sequence order: s.b (2) first, which does not fit.
        assert len(got) == 1 and status_of(got[0]) == (TOO_LARGE_STATUS, TOO_LARGE_TEXT)
    else:
        assert [m.data for m in got[:-1]] == [stored[s][0] for s in (2, 4, 5)]
        assert status_of(got[-1])[0] == "204"
    got = await direct(nc, "$JS.API.DIRECT.GET.S", {"multi_last": ["s.d", "s.a", "s.f"]}, False)
    assert [m.data for m in got[:-1]] == [stored[s][0] for s in (1, 4, 6)]
    assert status_of(got[-1])[0] == "204"
    await js.publish("s.g", b"g" * (MP - 150))  # seq 7: fits alone, not with batch headers
    got = await direct(nc, "$JS.API.DIRECT.GET.S", {"seq": 5, "batch": 5}, False)
    if side.is_jetlog:
        assert [m.data for m in got[:-1]] == [stored[5][0], stored[6][0]]
        assert status_of(got[-1]) == (TOO_LARGE_STATUS, TOO_LARGE_TEXT)
    else:
        assert len(got) == 4 and got[2].data == b"g" * (MP - 150)
    assert_links_intact(side)


# ---- consumers --------------------------------------------------------------------------------


async def test_pull_and_push_deliveries_near_limit(side: Side, nc: nats.NATS) -> None:
    js = nc.jetstream()
    stored = await fill(js)
    want = [stored[s][0] for s in sorted(stored)]
    # Pull: fetch and next (batch 1).
    await js.add_consumer("S", durable_name="P", ack_policy="explicit")
    psub = await js.pull_subscribe_bind("P", "S")
    got: list[Msg] = []
    while len(got) < len(want):
        got += await psub.fetch(len(want) - len(got), timeout=3)
    assert [m.data for m in got] == want
    assert got[1].headers is not None and got[1].headers["X-Big"] == "h" * 1000
    for m in got:
        await m.ack()
    await js.publish("s.h", b"h" * MP)
    (nxt,) = await psub.fetch(1, timeout=3)
    assert nxt.data == b"h" * MP
    await nxt.ack_sync()
    # Push (a plain subscriber on the deliver subject) and an ordered consumer.
    q: asyncio.Queue[Msg] = asyncio.Queue()

    async def cb(m: Msg) -> None:
        await q.put(m)

    await js.subscribe("s.>", durable="PUSH", cb=cb, manual_ack=False)
    pushed = [await asyncio.wait_for(q.get(), 5) for _ in range(len(want) + 1)]
    assert [m.data for m in pushed] == [*want, b"h" * MP]
    oq: asyncio.Queue[Msg] = asyncio.Queue()

    async def ocb(m: Msg) -> None:
        await oq.put(m)

    await js.subscribe("s.>", cb=ocb, ordered_consumer=True)
    ordered = [await asyncio.wait_for(oq.get(), 5) for _ in range(len(want) + 1)]
    assert [m.data for m in ordered] == [*want, b"h" * MP]
    assert_links_intact(side)


async def test_headers_only_delivery_pushed_over_the_limit(side: Side, nc: nats.NATS) -> None:
    js = nc.jetstream()
    await js.add_stream(name="H", subjects=["h"])
    # A header block close to max_payload: headers_only adds "Nats-Msg-Size: 10" and the
    # delivery no longer fits (nats-server still sends it).
    # "NATS/1.0\r\nX-Heavy: <v>\r\n\r\n" is len(v) + 23 bytes: with 10 data bytes, exactly MP.
    heavy = {"X-Heavy": "x" * (MP - 33)}
    await js.publish("h", b"0123456789", headers=heavy)
    await js.publish("h", b"small")
    await js.add_consumer("H", durable_name="HO", ack_policy="explicit", headers_only=True)
    psub = await js.pull_subscribe_bind("HO", "H")
    if side.is_jetlog:
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        await nc.publish("$JS.API.CONSUMER.MSG.NEXT.H.HO", b'{"batch": 2, "expires": 2000000000}', inbox)
        m = await sub.next_msg(timeout=3)
        assert status_of(m) == ("409", TOO_LARGE_TEXT)
        assert m.headers is not None and m.headers["Nats-Pending-Messages"] == "2"
        # The message stays: the next request gets the same answer, not the next message.
        await nc.publish("$JS.API.CONSUMER.MSG.NEXT.H.HO", b'{"batch": 1, "no_wait": true}', inbox)
        m = await sub.next_msg(timeout=3)
        assert status_of(m) == ("409", TOO_LARGE_TEXT)
        info = await js.consumer_info("H", "HO")
        assert info.num_pending == 2 and info.delivered.stream_seq == 0
    else:
        (m,) = await psub.fetch(1, timeout=3)
        assert m.data == b"" and m.headers is not None and m.headers["Nats-Msg-Size"] == "10"
        # Evidence: the delivery's header block alone exceeds max_payload.
        assert 12 + sum(len(k) + len(v) + 4 for k, v in m.headers.items()) > MP
    assert_links_intact(side)


# ---- KV, object store ------------------------------------------------------------------------


@pytest.mark.parametrize("direct_get", [False, True], ids=["msg-get", "direct-get"])
async def test_kv_get_near_limit(side: Side, nc: nats.NATS, direct_get: bool) -> None:
    js = nc.jetstream()
    # nats-py's buckets read with STREAM.MSG.GET (base64) unless created with direct=True.
    kv = await js.create_key_value(KeyValueConfig(bucket="KV", direct=direct_get))
    fits = b"v" * (MP - 400 if direct_get else 40_000)
    over = b"w" * (MP - 20)  # accepted by put; the get reply does not fit either way
    await kv.put("fits", fits)
    await kv.put("over", over)
    assert (await kv.get("fits")).value == fits
    if side.is_jetlog:
        with pytest.raises(APIError) as ei:
            await kv.get("over")
        if direct_get:
            assert ei.value.code == 413 and ei.value.description == TOO_LARGE_TEXT
        else:
            assert (ei.value.code, ei.value.err_code) == (400, 10054)
    else:
        assert (await kv.get("over")).value == over
    # Watchers read through an ordered consumer: both values arrive whole on both. (An ordered
    # consumer of our own: nats-py's watchall() races, see test_kv_obj_watch.py.)
    sub = await js.subscribe("$KV.KV.>", ordered_consumer=True)
    got = [await sub.next_msg(timeout=3) for _ in range(2)]
    assert {m.subject: m.data for m in got} == {"$KV.KV.fits": fits, "$KV.KV.over": over}
    await sub.unsubscribe()
    assert_links_intact(side)


async def test_object_store_large_object_near_limit_chunks(side: Side, nc: nats.NATS) -> None:
    js = nc.jetstream()
    obs = await js.create_object_store(bucket="OBJ")
    blob = bytes(range(256)) * 4096  # 1 MiB in 16 chunks of exactly max_payload
    meta = ObjectMeta(name="big", options=ObjectMetaOptions(max_chunk_size=MP))
    info = await obs.put("big", blob, meta=meta)
    assert info.chunks == len(blob) // MP
    res = await obs.get("big")
    assert res.data == blob
    assert_links_intact(side)


# ---- any JSON reply ---------------------------------------------------------------------------


async def test_json_reply_larger_than_max_payload(side: Side, nc: nats.NATS) -> None:
    js = nc.jetstream()
    for i in range(8):
        await js.add_stream(name=f"L{i}", subjects=[f"l{i}"], metadata={"blob": "m" * 10_000})
    raw = await nc.request("$JS.API.STREAM.LIST", b"", timeout=3)
    body = json.loads(raw.data)
    assert body["type"] == "io.nats.jetstream.api.v1.stream_list_response"
    if side.is_jetlog:
        assert len(raw.data) <= MP
        assert (body["error"]["code"], body["error"]["err_code"]) == (400, 10054)
    else:
        assert len(raw.data) > MP and len(body["streams"]) == 8
    # Small pages still work.
    names = await api(nc, "$JS.API.STREAM.NAMES", {})
    assert sorted(names["streams"]) == [f"L{i}" for i in range(8)]
    assert_links_intact(side)


# ---- republish -----------------------------------------------------------------------------


async def test_republish_near_limit(side: Side, nc: nats.NATS) -> None:
    js = nc.jetstream()
    await js.add_stream(name="R", subjects=["r.>"], republish={"src": "r.>", "dest": "rp.>"})
    sub = await nc.subscribe("rp.>")
    await flush_barrier(nc)
    await js.publish("r.big", b"x" * (MP - 50))  # republish adds ~130 header bytes
    await js.publish("r.small", b"y" * 1000)
    first = await sub.next_msg(timeout=3)
    if side.is_jetlog:
        # The oversize republish is dropped (logged); the next one goes through.
        assert first.subject == "rp.small" and first.headers is not None
        assert first.headers["Nats-Sequence"] == "2"
    else:
        assert first.subject == "rp.big" and len(first.data) == MP - 50
        assert (await sub.next_msg(timeout=3)).subject == "rp.small"
    assert_links_intact(side)


# ---- $JETLOG.API.FETCH (jetlog only) ------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["jlc1", "jlr1"])
async def test_fetch_near_limit(tmp_path: Any, fmt: str) -> None:
    async with _side("jetlog", tmp_path, MP) as side:
        nc = await nats.connect(side.srv.url)
        js = nc.jetstream()
        await js.add_stream(name="F", subjects=["f"])
        await js.publish("f", b"1" * (MP - 3000))
        await js.publish("f", b"2" * (MP - 3000), headers={"X-A": "b" * 500})
        await js.publish("f", b"3" * (MP - 200))  # alone above the reply budget
        await js.publish("f", b"4" * 10)
        seqs = []
        start = 1
        while start <= 4:
            req = msgspec.json.encode({"start": start, "format": fmt, "headers": True})
            r = await nc.request("$JETLOG.API.FETCH.F", req, timeout=3)
            assert len(r.data) + sum(len(k) + len(v) + 4 for k, v in (r.headers or {}).items()) <= MP
            h = r.headers or {}
            if h.get("Status") == "413":
                # One record alone does not fit: the reader is told which.
                assert h["Description"] == "Message Too Large" and h["Jl-Next-Seq"] == "3"
                start = 4
                continue
            n = int(h["Jl-Count"])
            assert n == 1 or start == 4  # each near-limit record needs a reply of its own
            seqs += list(range(start, start + n))
            start = int(h["Jl-Next-Seq"])
        assert seqs == [1, 2, 4]
        await nc.close()
        assert_links_intact(side)


# ---- the user's case, default 1 MiB max_payload ------------------------------------------------


@pytest.mark.parametrize("kind", ["jetlog", "nats"])
async def test_get_msg_of_1mib_message(tmp_path: Any, kind: str) -> None:
    mp = 1024 * 1024
    async with _side(kind, tmp_path, mp) as side:
        nc = await nats.connect(side.srv.url)
        js = nc.jetstream()
        await js.add_stream(name="U", subjects=["u"])
        data = b"u" * (mp - 200)
        ack = await js.publish("u", data)
        assert ack.seq == 1
        if side.is_jetlog:
            with pytest.raises(BadRequestError) as ei:
                await js.get_msg("U", 1)
            assert ei.value.err_code == 10054
            assert f"max_payload of {mp} bytes" in str(ei.value.description)
        else:
            assert (await js.get_msg("U", 1)).data == data  # a 1.4 MB reply
        # The API answers at once afterwards, and the message reads through a consumer.
        assert (await js.stream_info("U")).state.messages == 1
        psub = await js.pull_subscribe("u", durable="D")
        (m,) = await psub.fetch(1, timeout=3)
        assert m.data == data
        await nc.close()
        assert_links_intact(side)
