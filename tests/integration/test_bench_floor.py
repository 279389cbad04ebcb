"""The relay-floor stand-in of ``jetlog bench --floor`` (``jetlog.bench.floor``), run as the
bench runs it (a plain nats-server and the stand-in process), driven by the stock nats-py client.

A bound is only worth reporting if the stand-in does the work the cases time: every publish is
stored and written before its PubAck, and every get returns what was published."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator

import nats
import pytest
from nats.js.errors import NotFoundError

from jetlog.bench import targets
from jetlog.bench.floor import supports


@pytest.fixture
async def floor() -> AsyncIterator[targets.Env]:
    env = await targets.start("floor")
    try:
        yield env
    finally:
        await env.stop()
    assert env.proc is not None and env.proc.returncode is not None  # nothing left running


async def test_publishes_are_acknowledged_in_order_and_written_before_their_acks(floor: targets.Env) -> None:
    nc = await nats.connect(floor.url)
    try:
        js = nc.jetstream(timeout=5)
        si = await js.add_stream(name="F", subjects=["f.>"], allow_direct=True)
        assert si.config.name == "F" and si.config.allow_direct is True and si.state.messages == 0
        acks = [await js.publish(f"f.{i % 3}", b"payload-%d" % i) for i in range(20)]
        assert [(a.stream, a.seq) for a in acks] == [("F", i + 1) for i in range(20)]
        with open(os.path.join(floor.tmp, "floor.log"), "rb") as f:
            written = f.read(4096)
        assert written.startswith(b"".join(b"payload-%d" % i for i in range(20)))
        info = await js.stream_info("F")
        assert (info.state.messages, info.state.first_seq, info.state.last_seq) == (20, 1, 20)
    finally:
        await nc.close()


async def test_gets_return_what_was_published(floor: targets.Env) -> None:
    nc = await nats.connect(floor.url)
    try:
        js = nc.jetstream(timeout=5)
        await js.add_stream(name="G", subjects=["g.>"], allow_direct=True)
        await js.publish("g.a", b"first")
        await js.publish("g.b", b"second", headers={"X-Key": "v"})
        m = await js.get_msg("G", 2)
        assert (m.subject, m.seq, m.data, m.headers) == ("g.b", 2, b"second", {"X-Key": "v"})
        d = await js.get_msg("G", 1, direct=True)
        assert (d.subject, d.seq, d.data) == ("g.a", 1, b"first")
        assert d.headers is not None and d.headers["Nats-Stream"] == "G"
        last = await js.get_msg("G", subject="g.b", direct=True)
        assert (last.seq, last.data, last.headers["X-Key"]) == (2, b"second", "v")  # type: ignore[index]
        with pytest.raises(NotFoundError):
            await js.get_msg("G", 3)
        with pytest.raises(NotFoundError):
            await js.get_msg("G", 3, direct=True)
        kv = await js.create_key_value(bucket="B")
        await kv.put("k", b"v1")
        await kv.put("k", b"v2")
        e = await kv.get("k")
        assert (e.key, e.value, e.revision) == ("k", b"v2", 2)
        assert await js.delete_stream("G") is True
        with pytest.raises(nats.errors.NoRespondersError):
            await nc.request("g.a", b"after delete", timeout=2)  # its subscription is gone
    finally:
        await nc.close()


def test_the_stand_in_runs_only_the_cases_it_can_answer() -> None:
    from jetlog.bench.cases import all_cases

    names = list(all_cases())
    served = [n for n in names if supports(n)]
    assert "pub-sync 128B" in served and "kv-get" in served and "direct-get" in served
    assert "pub-async 200 streams w1024 128B" in served
    assert not any(supports(n) for n in names if n.startswith(("fetch", "push", "pub-fire")))
