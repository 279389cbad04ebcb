"""kill -9 a jetlog process during a publish flood; after restart every acknowledged message is
there byte for byte and nothing unacknowledged is half-visible."""

from __future__ import annotations

import asyncio
import random

import nats
import pytest

from jetlog.embedded import NatsServer

from .jsutil import api, publish_req
from .nodeproc import NodeProcess, node_and_client


def _message(i: int) -> tuple[str, dict[str, str] | None, bytes]:
    """The i-th published message (deterministic, so any stored message can be checked)."""
    subject = f"flood.{i % 7}"
    headers = {"Idx": str(i), "Nats-Msg-Id": f"m-{i}"} if i % 3 == 0 else None
    payload = f"{i}:".encode() + bytes([i % 251]) * (i % 300)
    return subject, headers, payload


async def _flood(js: nats.js.JetStreamContext, acked: dict[int, int], stop: asyncio.Event) -> None:
    """Publish async in windows; record seq -> message index for every PubAck received."""
    i = 0
    while not stop.is_set():
        futs = []
        for _ in range(64):
            subject, headers, payload = _message(i)
            futs.append((i, await js.publish_async(subject, payload, headers=headers)))
            i += 1
        for idx, fut in futs:
            try:
                ack = await fut
            except (TimeoutError, nats.errors.Error, asyncio.CancelledError):
                return
            acked[ack.seq] = idx


@pytest.mark.slow
async def test_kill_9_during_publish_flood(tmp_path) -> None:  # type: ignore[no-untyped-def]
    rng = random.Random(7)
    async with NatsServer(leafnode=True) as srv:
        node = NodeProcess(srv, str(tmp_path / "data"), ["--log-level", "warning"])
        url = await node.start()
        nc = await nats.connect(url, max_reconnect_attempts=-1, reconnect_time_wait=0.2)
        try:
            js = nc.jetstream(timeout=2, publish_async_max_pending=512)
            await js.add_stream(name="FLOOD", subjects=["flood.*"], max_msgs_per_subject=10_000)
            all_acked: dict[int, int] = {}
            timestamps: dict[int, str] = {}
            for _round in range(3):
                acked: dict[int, int] = {}
                stop = asyncio.Event()
                flood = asyncio.create_task(_flood(js, acked, stop))
                await asyncio.sleep(rng.uniform(0.4, 1.2))
                # Remember the store time of a few acked messages to check it survives.
                for seq in list(acked)[:: max(1, len(acked) // 5)][:5]:
                    r = await api(nc, "$JS.API.STREAM.MSG.GET.FLOOD", {"seq": seq})
                    timestamps[seq] = r["message"]["time"]
                await node.kill()
                stop.set()
                flood.cancel()
                await asyncio.gather(flood, return_exceptions=True)
                assert len(acked) > 500, f"only {len(acked)} acks before the kill"
                print(f"round {_round}: {len(acked)} acked before kill -9")
                all_acked.update(acked)
                await node.start()
                info = await js.stream_info("FLOOD")
                assert info.state.last_seq >= max(all_acked)
                for seq, t in timestamps.items():
                    r = await api(nc, "$JS.API.STREAM.MSG.GET.FLOOD", {"seq": seq})
                    assert r["message"]["time"] == t, seq
                for seq, idx in all_acked.items():
                    m = await js.get_msg("FLOOD", seq)
                    subject, headers, payload = _message(idx)
                    assert (m.subject, m.data) == (subject, payload), seq
                    if headers:
                        assert m.headers == headers
                    else:
                        assert not m.headers
                # Anything stored beyond the acked set must be a complete published message.
                for seq in range(1, info.state.last_seq + 1):
                    if seq in all_acked:
                        continue
                    try:
                        m = await js.get_msg("FLOOD", seq)
                    except nats.js.errors.NotFoundError:
                        continue
                    idx = int(m.data.split(b":")[0])
                    assert (m.subject, m.data) == _message(idx)[::2]
        finally:
            await nc.close()
            await node.terminate()


async def test_expected_last_msg_id_after_a_restart(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The last message id a restarted node compares ``Nats-Expected-Last-Msg-Id`` with is
    the stored last message's (read when first asked), and a publish since replaces it."""
    async with node_and_client(str(tmp_path / "data")) as (node, nc):
        js = nc.jetstream(timeout=3)
        await js.add_stream(name="LM", subjects=["lm.*"])
        await js.add_stream(name="LN", subjects=["ln.*"])
        await js.publish("lm.a", b"1", headers={"Nats-Msg-Id": "id-1"})
        await js.publish("lm.a", b"2", headers={"Nats-Msg-Id": "id-2"})
        await js.publish("ln.a", b"1", headers={"Nats-Msg-Id": "id-9"})
        await js.publish("ln.a", b"2")  # the last message has no id
        for restart in ("terminate", "kill"):
            await (node.terminate() if restart == "terminate" else node.kill())
            await node.start()
            r = await publish_req(nc, "lm.a", b"x", {"Nats-Expected-Last-Msg-Id": "id-1"})
            assert r["error"] == {
                "code": 400,
                "err_code": 10070,
                "description": "wrong last msg ID: id-2",
            }
            r = await publish_req(nc, "ln.a", b"x", {"Nats-Expected-Last-Msg-Id": "id-9"})
            assert r["error"] == {"code": 400, "err_code": 10070, "description": "wrong last msg ID: "}
        r = await publish_req(nc, "lm.a", b"3", {"Nats-Expected-Last-Msg-Id": "id-2", "Nats-Msg-Id": "id-3"})
        assert r == {"stream": "LM", "seq": 3}
        await node.terminate()
        await node.start()
        r = await publish_req(nc, "ln.a", b"y", {"Nats-Msg-Id": "id-10"})
        assert r == {"stream": "LN", "seq": 3}
        r = await publish_req(nc, "ln.a", b"z", {"Nats-Expected-Last-Msg-Id": "id-10"})
        assert r == {"stream": "LN", "seq": 4}
        r = await publish_req(nc, "lm.a", b"x", {"Nats-Expected-Last-Msg-Id": "id-2"})
        assert r["error"]["description"] == "wrong last msg ID: id-3"


async def test_kill_9_after_a_quiet_spell_recovers_from_the_writer_index(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A node that was quiet for a while before it died had written its writer segment's index
    file (``maintenance.WRITER_INDEX_QUIET``): the restart scans only what came after it, and
    every acknowledged message is there."""
    import glob
    import os
    import time

    data = str(tmp_path / "data")
    async with NatsServer(leafnode=True) as srv:
        node = NodeProcess(srv, data, ["--log-level", "info"])
        url = await node.start()
        nc = await nats.connect(url, max_reconnect_attempts=-1, reconnect_time_wait=0.2)
        try:
            js = nc.jetstream(timeout=5, publish_async_max_pending=512)
            await js.add_stream(name="QUIET", subjects=["quiet.>"])
            payload = b"q" * 200
            futs = [await js.publish_async("quiet.a", payload) for _ in range(8_000)]  # ~2 MB
            assert [(await f).seq for f in futs][-1] == 8_000
            deadline = time.monotonic() + 15
            while not glob.glob(os.path.join(data, "streams", "QUIET", "log", "*.idx")):
                assert time.monotonic() < deadline, "the quiet writer's index file was never written"
                await asyncio.sleep(0.1)
            for i in range(50):  # after the index file: found by the scan
                assert (await js.publish("quiet.b", b"after %d" % i)).seq == 8_001 + i
            await node.kill()
            await node.start()
            info = await js.stream_info("QUIET")
            assert (info.state.messages, info.state.last_seq) == (8_050, 8_050)
            assert (await js.get_msg("QUIET", 8_050)).data == b"after 49"
            assert (await js.get_msg("QUIET", 1)).data == payload
            assert (await js.publish("quiet.c", b"next")).seq == 8_051
        finally:
            await nc.close()
            await node.terminate()
