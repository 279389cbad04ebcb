"""A corrupt segment is quarantined and reported without taking the node or other streams down;
a torn tail is truncated; a corrupt stream metadata file leaves that stream offline only."""

from __future__ import annotations

import asyncio
import glob
import os

import nats
import pytest

from jetlog.devcluster import free_port
from jetlog.embedded import NatsServer

from .jsutil import api
from .nodeproc import NodeProcess


async def _fill(js: nats.js.JetStreamContext, name: str, n: int) -> None:
    await js.add_stream(name=name, subjects=[f"{name.lower()}.*"])
    for i in range(n):
        await js.publish(f"{name.lower()}.x", f"{name}-{i}".encode() * 20)


async def _filled_node(srv: NatsServer, data: str, name: str, n: int) -> NodeProcess:
    """A node that stored ``n`` messages in stream ``name`` and was stopped cleanly."""
    node = NodeProcess(srv, data)
    nc = await nats.connect(await node.start())
    await _fill(nc.jetstream(), name, n)
    await nc.close()
    assert await node.terminate() == 0
    return node


def _flip_middle(seg: str) -> None:
    """Invert 64 bytes in the middle of a segment file (bit rot)."""
    size = os.path.getsize(seg)
    with open(seg, "r+b") as f:
        f.seek(size // 2)
        chunk = f.read(64)
        f.seek(size // 2)
        f.write(bytes(b ^ 0xFF for b in chunk))


async def _http_get(port: int, path: str) -> str:
    r, w = await asyncio.open_connection("127.0.0.1", port)
    w.write(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    await w.drain()
    data = await asyncio.wait_for(r.read(), 5)
    w.close()
    return data.partition(b"\r\n\r\n")[2].decode()


def _segments(data_dir: str, stream: str) -> list[str]:
    return sorted(glob.glob(os.path.join(data_dir, "streams", stream, "log", "*.log")))


async def test_corrupt_segment_quarantined_node_stays_up(tmp_path) -> None:  # type: ignore[no-untyped-def]
    data = str(tmp_path / "data")
    async with NatsServer(leafnode=True) as srv:
        node = NodeProcess(srv, data)
        url = await node.start()
        nc = await nats.connect(url)
        js = nc.jetstream()
        await _fill(js, "GOOD", 50)
        await _fill(js, "BAD", 50)
        await nc.close()
        assert await node.terminate() == 0

        segs = _segments(data, "BAD")
        assert segs, "no segment files"
        _flip_middle(segs[0])
        # Make the index agree with nothing so recovery must scan (and meet the damage).
        for idx in glob.glob(os.path.join(data, "streams", "BAD", "log", "*.idx")):
            os.unlink(idx)

        url = await node.start()
        nc = await nats.connect(url)
        try:
            js = nc.jetstream()
            good = await js.stream_info("GOOD")
            assert good.state.messages == 50
            assert (await js.get_msg("GOOD", 50)).data == b"GOOD-49" * 20
            r = await api(nc, "$JS.API.STREAM.INFO.BAD")
            st = r["state"]
            assert st["last_seq"] == 50  # sequences are never reused
            assert "lost" in st and st["lost"]["msgs"], st
            lost = set(st["lost"]["msgs"])
            assert st["messages"] == 50 - len(lost)
            for seq in range(1, 51):
                if seq in lost:
                    continue
                m = await js.get_msg("BAD", seq)
                assert m.data == f"BAD-{seq - 1}".encode() * 20  # never wrong bytes
            # The stream still takes writes.
            assert (await js.publish("bad.x", b"after")).seq == 51
            quarantine = glob.glob(os.path.join(data, "streams", "BAD", "log", "quarantine", "*"))
            assert quarantine
        finally:
            await nc.close()
            assert await node.terminate() == 0
        assert any("quarantin" in line.lower() or "corrupt" in line.lower() for line in node.stderr_lines)


async def test_torn_tail_truncated(tmp_path) -> None:  # type: ignore[no-untyped-def]
    data = str(tmp_path / "data")
    async with NatsServer(leafnode=True) as srv:
        node = NodeProcess(srv, data)
        url = await node.start()
        nc = await nats.connect(url)
        await _fill(nc.jetstream(), "TORN", 20)
        await nc.close()
        await node.kill()
        seg = _segments(data, "TORN")[-1]
        with open(seg, "ab") as f:  # half a batch: what a crash mid-write leaves
            f.write(b"JLB1" + os.urandom(37))
        url = await node.start()
        nc = await nats.connect(url)
        try:
            js = nc.jetstream()
            info = await js.stream_info("TORN")
            assert (info.state.messages, info.state.last_seq) == (20, 20)
            assert (await js.publish("torn.x", b"next")).seq == 21
            assert (await js.get_msg("TORN", 21)).data == b"next"
        finally:
            await nc.close()
            await node.terminate()


async def test_corrupt_stream_metadata_leaves_only_that_stream_offline(tmp_path) -> None:  # type: ignore[no-untyped-def]
    data = str(tmp_path / "data")
    async with NatsServer(leafnode=True) as srv:
        node = NodeProcess(srv, data)
        url = await node.start()
        nc = await nats.connect(url)
        js = nc.jetstream()
        # Several streams read by the load thread in turn, the bad one among them.
        names = ["A", "B", "META", "OK", "P", "Q"]
        for i, name in enumerate(names):
            await _fill(js, name, 3 + i)
        await nc.close()
        assert await node.terminate() == 0
        with open(os.path.join(data, "streams", "META", "stream.json"), "wb") as f:
            f.write(b'{"config": {"name": "META", "subj')
        url = await node.start()
        nc = await nats.connect(url)
        try:
            js = nc.jetstream()
            for i, name in enumerate(names):
                if name != "META":
                    assert (await js.stream_info(name)).state.messages == 3 + i
            r = await api(nc, "$JS.API.STREAM.LIST")
            assert sorted(s["config"]["name"] for s in r["streams"]) == ["A", "B", "OK", "P", "Q"]
            assert "META" in r.get("offline", {})
            with pytest.raises(nats.js.errors.NotFoundError):
                await js.stream_info("META")
        finally:
            await nc.close()
            await node.terminate()


async def test_damage_under_an_intact_index_is_never_served_and_quarantined_next_start(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The node's default open is lazy: a segment whose index vouches for it is not read at
    start. Damaged bytes under an intact index are still never served (reads check each
    record's CRC), the background scrub reports them, and the next start quarantines them."""
    data = str(tmp_path / "data")
    async with NatsServer(leafnode=True) as srv:
        node = await _filled_node(srv, data, "ROT", 50)
        _flip_middle(_segments(data, "ROT")[0])  # the index file left as it was
        http = free_port()
        node.extra_args = ["--http", f"127.0.0.1:{http}"]

        url = await node.start()
        nc = await nats.connect(url)
        try:
            js = nc.jetstream()
            served, refused = 0, 0
            for seq in range(1, 51):
                try:
                    m = await js.get_msg("ROT", seq)
                except nats.js.errors.APIError as e:
                    assert (e.code, e.err_code) == (503, 10077) and "corrupt segment" in str(e.description)
                    refused += 1
                    continue
                assert m.data == f"ROT-{seq - 1}".encode() * 20  # never wrong bytes
                served += 1
            assert refused >= 1 and served + refused == 50
            for _ in range(200):
                if any("does not match the CRC its index recorded" in x for x in node.stderr_lines):
                    break
                await asyncio.sleep(0.05)
            else:
                raise AssertionError(
                    "the scrub did not report the damage:\n" + "\n".join(node.stderr_lines[-20:])
                )
            metrics = await _http_get(http, "/metrics")
            assert 'jetlog_scrub_segments_total{result="damaged",stream="ROT"} 1.0' in metrics
        finally:
            await nc.close()
            assert await node.terminate() == 0

        url = await node.start()
        nc = await nats.connect(url)
        try:
            r = await api(nc, "$JS.API.STREAM.INFO.ROT")
            st = r["state"]
            assert "lost" in st and st["lost"]["msgs"], st
            lost = set(st["lost"]["msgs"])
            assert st["messages"] == 50 - len(lost) and len(lost) >= refused
            js = nc.jetstream()
            for seq in sorted(set(range(1, 51)) - lost):
                assert (await js.get_msg("ROT", seq)).data == f"ROT-{seq - 1}".encode() * 20
        finally:
            await nc.close()
            assert await node.terminate() == 0
