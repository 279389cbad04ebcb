"""``$JETLOG.API.FETCH.<stream>`` and ``$JETLOG.API.OFFSETS``: bulk committed-range reads through
a real nats-server, checked against what Direct Get returns for the same messages."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import nats
import pytest
from nats.aio.msg import Msg

from jetlog.embedded import NatsServer
from jetlog.wire import columnar
from jetlog.wire.timefmt import parse_time


@pytest.fixture
async def conn(nats_server: NatsServer, jetlog_node: Any) -> AsyncIterator[nats.NATS]:
    c = await nats.connect(nats_server.url)
    try:
        yield c
    finally:
        await c.close()


async def _fetch(nc: nats.NATS, stream: str, **req: Any) -> tuple[dict[str, str], list[columnar.Row], Msg]:
    m = await nc.request(f"$JETLOG.API.FETCH.{stream}", json.dumps(req).encode(), timeout=5)
    hdrs = dict(m.headers or {})
    rows = columnar.decode(m.data) if not hdrs.get("Status") else []
    return hdrs, rows, m


async def _fill(nc: nats.NATS, n: int = 50) -> nats.js.JetStreamContext:
    js = nc.jetstream()
    await js.add_stream(name="F", subjects=["f.>"], allow_direct=True)
    for i in range(n):
        h = {"K": f"v{i}", "Two": "x"} if i % 3 == 0 else None
        await js.publish(f"f.{i % 4}", f"msg-{i}".encode() * (1 + i % 5), headers=h)
    return js


async def test_fetch_whole_stream_matches_direct_get(conn: nats.NATS) -> None:
    await _fill(conn)
    hdrs, rows, _ = await _fetch(conn, "F", start=1, headers=True)
    assert hdrs["Jl-Stream"] == "F"
    assert hdrs["Jl-Hwm"] == "50" and hdrs["Jl-First-Seq"] == "1"
    assert hdrs["Jl-Next-Seq"] == "51" and hdrs["Jl-Count"] == "50"
    assert [r.seq for r in rows] == list(range(1, 51))
    for r in rows[:12]:
        dg = await conn.request("$JS.API.DIRECT.GET.F", json.dumps({"seq": r.seq}).encode(), timeout=2)
        assert dg.headers is not None
        assert r.subject == dg.headers["Nats-Subject"]
        assert r.data == dg.data
        assert r.ts == parse_time(dg.headers["Nats-Time-Stamp"])
        user = [(k, v) for k, v in dg.headers.items() if not k.startswith("Nats-")]
        assert r.headers == user
    # Without headers the frame has no header columns.
    _, plain, _ = await _fetch(conn, "F", start=1)
    assert [r.headers for r in plain] == [None] * 50
    assert [(r.seq, r.data) for r in plain] == [(r.seq, r.data) for r in rows]


async def test_fetch_pages_within_max_bytes_and_bounds(conn: nats.NATS) -> None:
    await _fill(conn)
    seen: list[int] = []
    start = 1
    pages = 0
    while start <= 50:
        hdrs, rows, m = await _fetch(conn, "F", start=start, max_bytes=300)
        assert len(m.data) <= 300
        assert rows, "each page makes progress"
        seen += [r.seq for r in rows]
        start = int(hdrs["Jl-Next-Seq"])
        pages += 1
    assert seen == list(range(1, 51)) and pages > 5
    hdrs, rows, _ = await _fetch(conn, "F", start=10, end=20)
    assert [r.seq for r in rows] == list(range(10, 20)) and hdrs["Jl-Next-Seq"] == "20"
    hdrs, rows, _ = await _fetch(conn, "F", start=10, max_msgs=3)
    assert [r.seq for r in rows] == [10, 11, 12] and hdrs["Jl-Next-Seq"] == "13"
    # Past the end: empty, next stays at start (never moves a reader backwards or past data).
    hdrs, rows, _ = await _fetch(conn, "F", start=70)
    assert rows == [] and hdrs["Jl-Next-Seq"] == "70" and hdrs["Jl-Count"] == "0"


async def test_fetch_holes_purge_and_start_time(conn: nats.NATS) -> None:
    js = await _fill(conn, 20)
    await js.delete_msg("F", 5)
    await js.delete_msg("F", 6)
    hdrs, rows, _ = await _fetch(conn, "F", start=3, end=9)
    assert [r.seq for r in rows] == [3, 4, 7, 8] and hdrs["Jl-Next-Seq"] == "9"
    ts12 = (await _fetch(conn, "F", start=12, max_msgs=1))[1][0].ts
    hdrs, rows, _ = await _fetch(conn, "F", start=1, start_ts=ts12, max_msgs=1)
    assert rows[0].seq <= 12 and rows[0].ts >= ts12
    await js.purge_stream("F", seq=15)
    hdrs, rows, _ = await _fetch(conn, "F", start=1)
    assert hdrs["Jl-First-Seq"] == "15"  # a reader at 1 lost 1..14: it can tell
    assert [r.seq for r in rows] == list(range(15, 21))


async def test_fetch_errors(conn: nats.NATS) -> None:
    await _fill(conn, 3)
    hdrs, _, _ = await _fetch(conn, "NOPE", start=1)
    assert hdrs["Status"] == "404" and hdrs["Description"] == "Stream Not Found"
    m = await conn.request("$JETLOG.API.FETCH.F", b'{"start": 1, "bogus": 2}', timeout=2)
    assert m.headers is not None and m.headers["Status"] == "400"
    assert "bogus" in m.headers["Jl-Error"]
    m = await conn.request("$JETLOG.API.FETCH.F", b"{not json", timeout=2)
    assert m.headers is not None and m.headers["Status"] == "400"
    m = await conn.request("$JETLOG.API.FETCH.F", b'{"start": 0}', timeout=2)
    assert m.headers is not None and m.headers["Jl-Error"] == "start must be >= 1"
    # One record bigger than the budget: 413 naming it, not a truncated frame.
    hdrs, _, _ = await _fetch(conn, "F", start=2, max_bytes=40)
    assert hdrs["Status"] == "413" and hdrs["Jl-Next-Seq"] == "2"
    # The node keeps serving after all that.
    hdrs, rows, _ = await _fetch(conn, "F")
    assert [r.seq for r in rows] == [1, 2, 3]


async def test_offsets(conn: nats.NATS) -> None:
    js = await _fill(conn, 10)
    await js.add_stream(name="EMPTY", subjects=["e.>"])
    m = await conn.request(
        "$JETLOG.API.OFFSETS", json.dumps({"streams": ["F", "EMPTY", "NOPE"]}).encode(), timeout=2
    )
    got = json.loads(m.data)["streams"]
    info = await js.stream_info("F")
    assert got["F"]["first_seq"] == 1 and got["F"]["hwm"] == 10
    assert got["F"]["last_ts"] >= got["F"]["first_ts"] > 0
    assert got["EMPTY"] == {"first_seq": 1, "hwm": 0, "first_ts": 0, "last_ts": 0}
    assert got["NOPE"] is None
    assert info.state.last_seq == got["F"]["hwm"]
    m = await conn.request("$JETLOG.API.OFFSETS", b'{"streams": "F"}', timeout=2)
    assert m.headers is not None and m.headers["Status"] == "400"


async def test_fetch_jlr1_stored_records_match_jlc1(conn: nats.NATS) -> None:
    """``"format": "jlr1"`` through the real node: the stored records themselves (headers
    included), the same messages as the columnar answer, paged the same way by max_bytes."""
    from jetlog.wire import headers as H
    from jetlog.wire import rawframe

    js = await _fill(conn)
    await js.delete_msg("F", 7)
    _, cols, _ = await _fetch(conn, "F", start=1, headers=True)
    m = await conn.request(
        "$JETLOG.API.FETCH.F", json.dumps({"start": 1, "format": "jlr1"}).encode(), timeout=5
    )
    hdrs = dict(m.headers or {})
    assert hdrs["Jl-Format"] == "jlr1" and hdrs["Jl-Count"] == "49" and hdrs["Jl-Next-Seq"] == "51"
    recs = rawframe.decode(m.data)
    assert [(r.seq, r.ts, r.subject, r.data, H.parse(r.hdr)[2]) for r in recs] == [
        (c.seq, c.ts, c.subject, c.data, c.headers) for c in cols
    ]
    seq, seen = 1, []
    while seq <= 50:
        body = json.dumps({"start": seq, "max_bytes": 300, "format": "jlr1"}).encode()
        m = await conn.request("$JETLOG.API.FETCH.F", body, timeout=5)
        assert len(m.data) <= 300
        seen += [r.seq for r in rawframe.decode(m.data)]
        seq = int((m.headers or {})["Jl-Next-Seq"])
    assert seen == [c.seq for c in cols]
    bad = await conn.request("$JETLOG.API.FETCH.F", b'{"format":"parquet"}', timeout=5)
    assert (bad.headers or {}).get("Status") == "400"
