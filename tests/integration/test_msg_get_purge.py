"""MSG.GET, MSG.DELETE and PURGE conformance (spec §6.1-6.3): jetlog and nats-server -js."""

from __future__ import annotations

import base64

import nats
import pytest
from nats.js.errors import APIError, NotFoundError

from .jsutil import api, error_of

T = "io.nats.jetstream.api.v1."


async def _fill(js: nats.js.JetStreamContext) -> None:
    await js.add_stream(name="G", subjects=["g.*"])
    for subj, data in [("g.a", b"a1"), ("g.b", b"b1"), ("g.a", b"a2"), ("g.c", b""), ("g.b", b"b2")]:
        await js.publish(subj, data)


async def test_get_by_seq_last_next(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await _fill(js)
    r = await api(nc, "$JS.API.STREAM.MSG.GET.G", {"seq": 3})
    assert r["type"] == T + "stream_msg_get_response"
    msg = r["message"]
    assert (msg["subject"], msg["seq"], base64.b64decode(msg["data"])) == ("g.a", 3, b"a2")
    assert "hdrs" not in msg and msg["time"].endswith("Z")
    r = await api(nc, "$JS.API.STREAM.MSG.GET.G", {"seq": 4})
    assert "data" not in r["message"]  # empty payload: key omitted
    r = await api(nc, "$JS.API.STREAM.MSG.GET.G", {"last_by_subj": "g.b"})
    assert r["message"]["seq"] == 5
    r = await api(nc, "$JS.API.STREAM.MSG.GET.G", {"last_by_subj": "g.>"})
    assert r["message"]["seq"] == 5
    r = await api(nc, "$JS.API.STREAM.MSG.GET.G", {"next_by_subj": "g.a", "seq": 2})
    assert r["message"]["seq"] == 3
    r = await api(nc, "$JS.API.STREAM.MSG.GET.G", {"next_by_subj": "g.b", "seq": None})
    assert r["message"]["seq"] == 2
    m = await js.get_last_msg("G", "g.a")
    assert m.seq == 3 and m.data == b"a2"
    m = await js.get_msg("G", subject="g.b", next=True, seq=3)
    assert m.seq == 5


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b"", (400, 10003, "bad request")),
        ({}, (400, 10003, "bad request")),
        ({"seq": 1, "last_by_subj": "g.a"}, (400, 10003, "bad request")),
        ({"last_by_subj": "g.a", "next_by_subj": "g.a"}, (400, 10003, "bad request")),
        ({"seq": 1, "batch": 2}, (400, 10003, "bad request")),
        ({"seq": 99}, (404, 10037, "no message found")),
        ({"last_by_subj": "g.zzz"}, (404, 10037, "no message found")),
        ({"seq": 1, "bogus": True}, (400, 10025, 'invalid JSON: json: unknown field "bogus"')),
    ],
)
async def test_get_errors(nc: nats.NATS, body: object, expected: tuple[int, int, str]) -> None:
    js = nc.jetstream()
    await _fill(js)
    r = await api(nc, "$JS.API.STREAM.MSG.GET.G", body)
    assert error_of(r) == expected


async def test_get_unknown_stream(nc: nats.NATS) -> None:
    r = await api(nc, "$JS.API.STREAM.MSG.GET.NOPE", {"seq": 1})
    assert error_of(r) == (404, 10059, "stream not found")


async def test_get_by_start_time(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await _fill(js)
    r = await api(nc, "$JS.API.STREAM.MSG.GET.G", {"seq": 3})
    t = r["message"]["time"]
    r = await api(nc, "$JS.API.STREAM.MSG.GET.G", {"start_time": t})
    assert r["message"]["seq"] == 3
    r = await api(nc, "$JS.API.STREAM.MSG.GET.G", {"start_time": "2000-01-01T00:00:00Z"})
    assert r["message"]["seq"] == 1


async def test_delete_msg(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await _fill(js)
    assert await js.delete_msg("G", 2) is True
    with pytest.raises(NotFoundError):
        await js.get_msg("G", 2)
    r = await api(nc, "$JS.API.STREAM.MSG.DELETE.G", {"seq": 2})
    assert error_of(r) == (400, 10043, "sequence 2 not found")
    r = await api(nc, "$JS.API.STREAM.MSG.DELETE.G", {"seq": 3, "no_erase": True})
    assert r == {"type": T + "stream_msg_delete_response", "success": True}
    r = await api(nc, "$JS.API.STREAM.MSG.DELETE.G", b"")
    assert error_of(r) == (400, 10003, "bad request")
    r = await api(nc, "$JS.API.STREAM.MSG.DELETE.G", b"7")
    assert error_of(r)[1] == 10025
    info = await js.stream_info("G")
    assert info.state.messages == 3 and info.state.num_deleted == 2


async def test_delete_denied(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await js.add_stream(name="DD", subjects=["dd"], deny_delete=True)
    await js.publish("dd", b"1")
    r = await api(nc, "$JS.API.STREAM.MSG.DELETE.DD", {"seq": 1})
    assert error_of(r) == (500, 10057, "message delete not permitted")


async def test_purge_variants(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await _fill(js)
    r = await api(nc, "$JS.API.STREAM.PURGE.G", {"filter": "g.a"})
    assert r == {"type": T + "stream_purge_response", "success": True, "purged": 2}
    r = await api(nc, "$JS.API.STREAM.PURGE.G", {"seq": 5, "keep": 1})
    assert r == {
        "type": T + "stream_purge_response",
        "error": {"code": 400, "err_code": 10003, "description": "bad request"},
        "purged": 0,
    }
    r = await api(nc, "$JS.API.STREAM.PURGE.G", {"filter": "g.>", "keep": 1})
    assert r["purged"] == 2
    info = await js.stream_info("G")
    assert info.state.messages == 1 and info.state.first_seq == 5
    for i in range(3):
        await js.publish("g.x", str(i).encode())
    r = await api(nc, "$JS.API.STREAM.PURGE.G", {"seq": 7})
    assert r["purged"] == 2  # seqs 5 and 6
    r = await api(nc, "$JS.API.STREAM.PURGE.G", b"garbage")  # non-JSON body purges everything
    assert r["purged"] == 2
    info = await js.stream_info("G")
    assert (info.state.messages, info.state.first_seq, info.state.last_seq) == (0, 9, 8)
    r = await api(nc, "$JS.API.STREAM.INFO.G")
    assert r["state"]["last_ts"] != "0001-01-01T00:00:00Z"  # kept after a purge
    assert r["state"]["first_ts"] == "0001-01-01T00:00:00Z"


async def test_purge_denied_and_nats_py(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await js.add_stream(name="DP", subjects=["dp"], deny_purge=True)
    with pytest.raises(APIError) as e:
        await js.purge_stream("DP")
    assert (e.value.code, e.value.err_code, e.value.description) == (500, 10110, "stream purge not permitted")
    await js.add_stream(name="PP", subjects=["pp.*"])
    for i in range(5):
        await js.publish(f"pp.{i % 2}", b"x")
    assert await js.purge_stream("PP", subject="pp.0", keep=1) is True
    info = await js.stream_info("PP", subjects_filter=">")
    assert info.state.subjects == {"pp.0": 1, "pp.1": 2}
