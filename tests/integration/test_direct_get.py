"""Direct Get conformance (ADR-31, spec §6.4): every form, against jetlog and nats-server -js."""

from __future__ import annotations

import json

import nats
import pytest
from nats.aio.msg import Msg

from jetlog.transport.barrier import flush_barrier

from .jsutil import api


async def _dg(nc: nats.NATS) -> nats.js.JetStreamContext:
    js = nc.jetstream()
    await js.add_stream(name="DG", subjects=["dg.*"], allow_direct=True)
    await js.publish("dg.a", b"one")
    await js.publish("dg.b", b"two", headers={"Foo": "bar"})
    await js.publish("dg.a", b"three")
    return js


def _status(m: Msg) -> tuple[str, str]:
    assert m.headers is not None
    return m.headers.get("Status", ""), m.headers.get("Description", "")


async def _collect(nc: nats.NATS, subject: str, body: bytes, timeout: float = 2.0) -> list[Msg]:
    """Send one request and collect replies until a status message ends the batch."""
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    await nc.publish(subject, body, reply=inbox)
    out = []
    try:
        while True:
            m = await sub.next_msg(timeout=timeout)
            out.append(m)
            if m.headers and m.headers.get("Status"):
                break
    finally:
        await sub.unsubscribe()
    return out


async def test_direct_get_by_seq_headers_appended(nc: nats.NATS) -> None:
    await _dg(nc)
    m = await nc.request("$JS.API.DIRECT.GET.DG", b'{"seq":2}', timeout=2)
    assert m.data == b"two"
    assert list(m.headers.items()) == [
        ("Foo", "bar"),
        ("Nats-Stream", "DG"),
        ("Nats-Subject", "dg.b"),
        ("Nats-Sequence", "2"),
        ("Nats-Time-Stamp", m.headers["Nats-Time-Stamp"]),
    ]
    assert m.headers["Nats-Time-Stamp"].endswith("Z")
    m = await nc.request("$JS.API.DIRECT.GET.DG", b'{"seq":2,"no_hdr":true}', timeout=2)
    assert m.data == b"two" and not m.headers


async def test_direct_get_last_by_subject_forms(nc: nats.NATS) -> None:
    js = await _dg(nc)
    m = await nc.request("$JS.API.DIRECT.GET.DG.dg.a", b"", timeout=2)
    assert m.data == b"three" and m.headers["Nats-Sequence"] == "3"
    m = await nc.request("$JS.API.DIRECT.GET.DG", b'{"last_by_subj":"dg.b"}', timeout=2)
    assert m.headers["Nats-Sequence"] == "2"
    m = await nc.request("$JS.API.DIRECT.GET.DG.dg.zz", b"", timeout=2)
    assert _status(m) == ("404", "Message Not Found") and m.data == b""
    m = await nc.request("$JS.API.DIRECT.GET.DG.dg.a", b'{"seq":1}', timeout=2)
    assert _status(m) == ("408", "Bad Request")
    m = await nc.request("$JS.API.DIRECT.GET.DG", b"", timeout=2)
    assert _status(m) == ("408", "Empty Request")
    m = await nc.request("$JS.API.DIRECT.GET.DG", b"{}", timeout=2)
    assert _status(m) == ("408", "Empty Request")
    m = await nc.request("$JS.API.DIRECT.GET.DG", b"{nope", timeout=2)
    assert _status(m) == ("408", "Malformed Request")
    m = await nc.request("$JS.API.DIRECT.GET.DG", b'{"seq":1,"last_by_subj":"dg.a"}', timeout=2)
    assert _status(m) == ("408", "Bad Request")
    m = await nc.request("$JS.API.DIRECT.GET.DG", b'{"seq":1,"unknown_field":1}', timeout=2)
    assert m.data == b"one"  # lenient decoding on this endpoint
    # nats-py direct get paths
    msg = await js.get_msg("DG", 1, direct=True)
    assert msg.data == b"one" and msg.subject == "dg.a"
    last = await js.get_last_msg("DG", "dg.b", direct=True)
    assert last.seq == 2 and last.headers["Foo"] == "bar"


async def test_direct_get_missing_or_not_direct_stream_no_responders(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await js.add_stream(name="ND", subjects=["nd"])
    with pytest.raises(nats.errors.NoRespondersError):
        await nc.request("$JS.API.DIRECT.GET.ND", b'{"seq":1}', timeout=2)
    with pytest.raises(nats.errors.NoRespondersError):
        await nc.request("$JS.API.DIRECT.GET.MISSING", b'{"seq":1}', timeout=2)


async def test_direct_get_batch_eob(nc: nats.NATS) -> None:
    await _dg(nc)
    msgs = await _collect(nc, "$JS.API.DIRECT.GET.DG", b'{"seq":1,"batch":5}')
    assert [m.data for m in msgs[:-1]] == [b"one", b"two", b"three"]
    assert [m.headers["Nats-Num-Pending"] for m in msgs[:-1]] == ["2", "1", "0"]
    assert [m.headers["Nats-Last-Sequence"] for m in msgs[:-1]] == ["0", "1", "2"]
    eob = msgs[-1]
    assert _status(eob) == ("204", "EOB") and eob.data == b""
    assert eob.headers["Nats-Num-Pending"] == "0" and eob.headers["Nats-Last-Sequence"] == "3"
    msgs = await _collect(nc, "$JS.API.DIRECT.GET.DG", b'{"seq":1,"batch":2}')
    assert [m.data for m in msgs[:-1]] == [b"one", b"two"]
    assert msgs[-1].headers["Nats-Num-Pending"] == "1"
    msgs = await _collect(nc, "$JS.API.DIRECT.GET.DG", b'{"seq":1,"batch":5,"next_by_subj":"dg.a"}')
    assert [m.headers["Nats-Sequence"] for m in msgs[:-1]] == ["1", "3"]
    msgs = await _collect(nc, "$JS.API.DIRECT.GET.DG", b'{"seq":1,"batch":5,"max_bytes":5}')
    assert [m.data for m in msgs[:-1]] == [b"one"]  # 4+3 >= 5 stops after the first
    assert msgs[-1].headers["Nats-Num-Pending"] == "2"
    msgs = await _collect(nc, "$JS.API.DIRECT.GET.DG", b'{"seq":9,"batch":5}')
    assert len(msgs) == 1 and _status(msgs[0]) == ("404", "Message Not Found")


async def test_direct_get_start_time(nc: nats.NATS) -> None:
    await _dg(nc)
    r = await api(nc, "$JS.API.STREAM.MSG.GET.DG", {"seq": 2})
    t = r["message"]["time"]
    msgs = await _collect(nc, "$JS.API.DIRECT.GET.DG", json.dumps({"start_time": t, "batch": 10}).encode())
    assert [m.headers["Nats-Sequence"] for m in msgs[:-1]] == ["2", "3"]
    m = await nc.request("$JS.API.DIRECT.GET.DG", json.dumps({"start_time": t}).encode(), timeout=2)
    assert m.headers["Nats-Sequence"] == "2"


async def test_direct_get_multi_last(nc: nats.NATS) -> None:
    await _dg(nc)
    msgs = await _collect(nc, "$JS.API.DIRECT.GET.DG", b'{"multi_last":["dg.*"]}')
    assert [(m.headers["Nats-Subject"], m.headers["Nats-Sequence"]) for m in msgs[:-1]] == [
        ("dg.b", "2"),
        ("dg.a", "3"),
    ]
    eob = msgs[-1]
    assert _status(eob) == ("204", "EOB")
    assert eob.headers["Nats-UpTo-Sequence"] == "3" and eob.headers["Nats-Num-Pending"] == "0"
    msgs = await _collect(nc, "$JS.API.DIRECT.GET.DG", b'{"multi_last":["dg.*"],"up_to_seq":2}')
    assert [m.headers["Nats-Sequence"] for m in msgs[:-1]] == ["1", "2"]
    assert msgs[-1].headers["Nats-UpTo-Sequence"] == "2"
    msgs = await _collect(nc, "$JS.API.DIRECT.GET.DG", b'{"multi_last":["dg.a","dg.b"],"batch":1}')
    assert [m.headers["Nats-Sequence"] for m in msgs[:-1]] == ["2"]
    assert msgs[-1].headers["Nats-Num-Pending"] == "1"
    msgs = await _collect(nc, "$JS.API.DIRECT.GET.DG", b'{"multi_last":["nomatch"]}')
    assert len(msgs) == 1 and _status(msgs[0]) == ("404", "No Results")
    r = await api(nc, "$JS.API.STREAM.MSG.GET.DG", {"seq": 1})
    t1 = r["message"]["time"]
    msgs = await _collect(
        nc, "$JS.API.DIRECT.GET.DG", json.dumps({"multi_last": ["dg.*"], "up_to_time": t1}).encode()
    )
    assert len(msgs) == 1 and _status(msgs[0]) == ("404", "No Results")


async def test_direct_get_multi_last_413(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await js.add_stream(name="BIG", subjects=["big.*"], allow_direct=True)
    for i in range(1030):
        await nc.publish(f"big.{i}", b"x")
    await flush_barrier(nc)
    import asyncio

    async def full() -> None:
        while (await js.stream_info("BIG")).state.messages < 1030:
            await asyncio.sleep(0.05)

    await asyncio.wait_for(full(), 10)
    msgs = await _collect(nc, "$JS.API.DIRECT.GET.BIG", b'{"multi_last":["big.*"]}')
    assert len(msgs) == 1 and _status(msgs[0]) == ("413", "Too Many Results")
