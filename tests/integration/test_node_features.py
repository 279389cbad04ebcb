"""Node features around the API: JetStream domain, HTTP metrics/health, upstream auth on both
links, the `jetlog status` command."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from typing import Any

import nats
import pytest

from jetlog.embedded import NatsServer
from jetlog.transport.barrier import flush_barrier

from .conftest import start_node


async def _http_get(port: int, path: str) -> tuple[int, str]:
    r, w = await asyncio.open_connection("127.0.0.1", port)
    w.write(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    await w.drain()
    data = await asyncio.wait_for(r.read(), 5)
    w.close()
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body.decode()


async def test_domain_api_and_puback(tmp_path: Any) -> None:
    async with NatsServer(leafnode=True) as srv:
        node = await start_node(srv, str(tmp_path / "d"), **{"api.domain": "hub"})
        try:
            nc = await nats.connect(srv.url)
            js = nc.jetstream(domain="hub")
            await js.add_stream(name="DOM", subjects=["dom"])
            ack = await js.publish("dom", b"x")
            assert (ack.stream, ack.seq, ack.domain) == ("DOM", 1, "hub")
            info = await js.account_info()
            assert info.domain == "hub"
            # The plain prefix serves the same account.
            plain = nc.jetstream()
            assert (await plain.stream_info("DOM")).state.messages == 1
            await nc.close()
        finally:
            await node.stop()


async def test_metrics_health_ready(tmp_path: Any) -> None:
    async with NatsServer(leafnode=True) as srv:
        node = await start_node(srv, str(tmp_path / "m"), **{"http.listen": "127.0.0.1:0"})
        try:
            assert node.http is not None
            port = node.http.port
            assert await _http_get(port, "/healthz") == (200, '{\n  "status": "ok"\n}\n')
            assert await _http_get(port, "/readyz") == (200, "ready\n")
            nc = await nats.connect(srv.url)
            js = nc.jetstream()
            await js.add_stream(name="MET", subjects=["met"])
            for _ in range(3):
                await js.publish("met", b"abc")
            with pytest.raises(nats.js.errors.APIError):
                await js.publish("met", b"", headers={"Nats-Expected-Stream": "nope"})
            with pytest.raises(nats.js.errors.NotFoundError):
                await js.stream_info("NOPE")
            sub = await js.pull_subscribe("met", durable="MC", stream="MET")
            msgs = await sub.fetch(3, timeout=5)
            for m in msgs[:2]:
                await m.ack_sync()
            code, body = await _http_get(port, "/metrics")
            await nc.close()
            assert code == 200
            assert 'jetlog_stream_messages{stream="MET"} 3.0' in body
            assert 'jetlog_stream_stored_total{stream="MET"} 3.0' in body
            assert 'jetlog_stream_rejected_total{stream="MET"} 1.0' in body
            assert 'jetlog_stream_pubacks_total{stream="MET"} 3.0' in body
            assert 'jetlog_link_up{link="leafnode"} 1.0' in body
            assert "jetlog_stale_deliveries_dropped_total 0.0" in body  # no stall, and a single node
            # A new stream's segment was never trusted by a lazy open: nothing for the scrub.
            assert 'jetlog_scrub_segments_total{result="damaged",stream="MET"} 0.0' in body
            assert 'jetlog_scrub_segments_total{result="ok",stream="MET"} 0.0' in body
            assert 'jetlog_api_errors_by_code_total{err_code="10059"} 1.0' in body
            assert 'jetlog_consumer_delivered_total{consumer="MC",stream="MET"} 3.0' in body
            assert 'jetlog_consumer_acks_total{consumer="MC",stream="MET"} 2.0' in body
            assert 'jetlog_consumer_num_ack_pending{consumer="MC",stream="MET"} 1.0' in body
            assert 'jetlog_consumer_ack_floor_seq{consumer="MC",stream="MET"} 2.0' in body
            assert 'jetlog_consumer_num_pending{consumer="MC",stream="MET"} 0.0' in body
            # Every commit of the 3 publishes (and the stream's creation) waited on an fdatasync.
            count = float(body.split("jetlog_fsync_seconds_count ")[1].split()[0])
            inf = float(body.split('jetlog_fsync_seconds_bucket{le="+Inf"} ')[1].split()[0])
            assert count == inf >= 3
            # Where they ran: every one counted once (directory fsyncs too, so at least as many).
            where = {
                w: float(body.split(f'jetlog_fsyncs_total{{where="{w}"}} ')[1].split()[0])
                for w in ("loop", "loop_bulk", "helper", "thread")
            }
            assert sum(where.values()) >= count and where["thread"] == 0
            assert "jetlog_raft_term" not in body  # a single node has no Raft
            assert (await _http_get(port, "/nope"))[0] == 404
        finally:
            await node.stop()


async def test_readyz_reports_a_down_leaf_link(tmp_path: Any) -> None:
    async with NatsServer(leafnode=True) as srv:
        node = await start_node(srv, str(tmp_path / "r"), **{"http.listen": "127.0.0.1:0"})
        try:
            assert node.ready() == (True, "ready")
            await node.leaf.close()
            ok, why = node.ready()
            assert not ok and "leafnode" in why
            assert node.http is not None
            assert (await _http_get(node.http.port, "/readyz"))[0] == 503
        finally:
            await node.stop()


async def test_upstream_user_password_on_both_links(tmp_path: Any) -> None:
    srv = NatsServer(
        leafnode=True,
        extra_conf="authorization { users: [ {user: app, password: apppw}, {user: jl, password: jlpw} ] }",
        leaf_conf="authorization { user: jl, password: jlpw }",
    )
    async with srv:
        node = await start_node(
            srv, str(tmp_path / "a"), **{"upstream.user": "jl", "upstream.password": "jlpw"}
        )
        try:
            nc = await nats.connect(srv.url, user="app", password="apppw")
            js = nc.jetstream()
            await js.add_stream(name="AUTH", subjects=["auth.*"])
            await nc.publish("auth.plain", b"captured over the leaf link")
            ack = await js.publish("auth.x", b"y")
            assert ack.seq == 2
            assert (await js.get_msg("AUTH", 1)).data == b"captured over the leaf link"
            await nc.close()
        finally:
            await node.stop()


async def test_wrong_upstream_credentials_fail_start(tmp_path: Any) -> None:
    from jetlog.errors import TransportError

    srv = NatsServer(
        leafnode=True,
        extra_conf="authorization { user: jl, password: jlpw }",
        leaf_conf="authorization { user: jl, password: jlpw }",
    )
    async with srv:
        with pytest.raises(TransportError):
            await start_node(
                srv,
                str(tmp_path / "w"),
                **{"upstream.user": "jl", "upstream.password": "bad", "upstream.max_reconnect_attempts": 0},
            )


async def test_status_command(tmp_path: Any) -> None:
    async with NatsServer(leafnode=True) as srv:
        node = await start_node(srv, str(tmp_path / "s"))
        try:
            nc = await nats.connect(srv.url)
            js = nc.jetstream()
            await js.add_stream(name="ST", subjects=["st"])
            await js.publish("st", b"12345")
            await nc.close()
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "jetlog",
                "status",
                "--nats-url",
                srv.url,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
            out, err = await asyncio.wait_for(proc.communicate(), 30)
            assert proc.returncode == 0, err
            text = out.decode()
            assert "streams: 1" in text
            row = next(ln for ln in text.splitlines() if "│ ST " in ln)
            assert [c.strip() for c in row.strip("│ ").split("│")][:4] == ["ST", "1", "37 B", "1..1"], row
        finally:
            await node.stop()
    _ = json  # keep import used for readers extending these tests


async def test_upstream_restart_both_links_recover(tmp_path: Any) -> None:
    first = NatsServer(leafnode=True)
    await first.start()
    cport, lport = first.ports["client"], first.ports["leafnode"]
    node = await start_node(first, str(tmp_path / "rs"))
    try:
        nc = await nats.connect(first.url)
        js = nc.jetstream()
        await js.add_stream(name="RS", subjects=["rs.*", "$KV.rs.>"])
        await js.publish("rs.a", b"before")
        await nc.close()
        await first.stop()
        second = NatsServer(leafnode=True, client_port=cport, leaf_port=lport)
        await second.start()
        try:

            async def ready() -> None:
                while node.ready() != (True, "ready"):
                    await asyncio.sleep(0.05)

            await asyncio.wait_for(ready(), 20)
            nc = await nats.connect(second.url)
            js = nc.jetstream()

            async def publish_works() -> int:
                while True:
                    try:
                        return (await js.publish("rs.b", b"after", timeout=1)).seq
                    except (nats.errors.TimeoutError, nats.js.errors.NoStreamResponseError):
                        await asyncio.sleep(0.1)

            assert await asyncio.wait_for(publish_works(), 20) == 2
            assert (await js.publish("$KV.rs.k", b"client-link capture")).seq == 3
            await nc.publish("rs.c", b"plain")
            await flush_barrier(nc)

            async def three() -> None:
                while (await js.stream_info("RS")).state.messages < 4:
                    await asyncio.sleep(0.05)

            await asyncio.wait_for(three(), 10)
            assert (await js.get_msg("RS", 1)).data == b"before"
            await nc.close()
        finally:
            await node.stop()
            await second.stop()
    finally:
        if node._started:
            await node.stop()


async def test_serve_logs_json_lines(tmp_path: Any) -> None:
    """``jetlog serve --log-format json``: every stderr line is one JSON object an operator's log
    shipper can read (time, level, logger, message)."""
    import signal

    async with NatsServer(leafnode=True) as srv:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "jetlog", "serve", "--nats-url", srv.url, "--leafnode-url", srv.leaf_url,
            "--data-dir", str(tmp_path / "d"), "--log-format", "json", "--name", "jl-json",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        try:
            assert proc.stdout is not None and proc.stderr is not None
            ready = await asyncio.wait_for(proc.stdout.readline(), 30)
            assert ready.startswith(b"ready ")
        finally:
            proc.send_signal(signal.SIGTERM)
            _, err = await asyncio.wait_for(proc.communicate(), 30)
    lines = [json.loads(line) for line in err.decode().splitlines() if line.strip()]
    assert lines, err
    assert all(set(rec) >= {"time", "level", "logger", "message"} for rec in lines)
    assert all(rec["time"].endswith("+00:00") for rec in lines)
    msgs = [rec["message"] for rec in lines]
    assert any("node jl-json serving JetStream API" in m for m in msgs), msgs
    assert any(m.startswith("node jl-json stopped") for m in msgs), msgs


async def test_serve_refuses_a_data_dir_of_a_newer_format(tmp_path: Any) -> None:
    """A node pointed at a directory a newer jetlog wrote exits with the reason, touching nothing."""
    from jetlog.datadir import FORMAT_VERSION, MARKER

    d = tmp_path / "d"
    d.mkdir()
    (d / MARKER).write_text(json.dumps({"format": FORMAT_VERSION + 1, "jetlog": "9.0.0"}))
    async with NatsServer(leafnode=True) as srv:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "jetlog", "serve", "--nats-url", srv.url, "--leafnode-url", srv.leaf_url,
            "--data-dir", str(d), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 1 and out == b""
    assert f"holds on-disk format {FORMAT_VERSION + 1} (last written by jetlog 9.0.0)" in err.decode()
    assert sorted(p.name for p in d.iterdir()) == [MARKER]
