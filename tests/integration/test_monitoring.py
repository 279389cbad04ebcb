"""nats-server's monitoring documents on jetlog's HTTP port: ``/jsz``, ``/varz``, ``/healthz``
in the shapes of a real ``nats-server -js`` monitoring port (the same actions on both, then the
key sets compared), so prometheus-nats-exporter and dashboards read a jetlog node unchanged."""

from __future__ import annotations

import asyncio
import json
import socket
from typing import Any

import nats

from jetlog.embedded import NatsServer

from .conftest import start_node

# Keys nats-server has and jetlog leaves out, each for a reason (documented in
# docs/operations.md): Go runtime and client-listener facts of a server jetlog is not.
VARZ_NATS_ONLY = {
    "git_commit", "go", "port", "max_connections", "ping_interval", "ping_max", "http_base_path",
    "https_port", "auth_timeout", "max_control_line", "max_pending", "cluster", "gateway", "leaf",
    "mqtt", "websocket", "tls_timeout", "write_deadline", "gomaxprocs", "total_connections",
    "routes", "remotes", "in_msgs", "in_bytes", "in_client_msgs", "in_client_bytes", "out_msgs",
    "out_bytes", "out_client_msgs", "out_client_bytes", "slow_consumers", "stale_connections",
    "stalled_clients", "subscriptions", "config_load_time", "config_digest", "feature_flags",
    "system_account", "slow_consumer_stats", "stale_connection_stats", "disk_io_wait_stats",
}  # fmt: skip


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _get(port: int, path: str) -> tuple[int, Any]:
    r, w = await asyncio.open_connection("127.0.0.1", port)
    w.write(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
    await w.drain()
    data = await asyncio.wait_for(r.read(), 5)
    w.close()
    head, _, body = data.partition(b"\r\n\r\n")
    if b"chunked" in head.lower():
        body = _unchunk(body)
    assert b"application/json" in head, head
    return int(head.split()[1]), json.loads(body)


def _unchunk(body: bytes) -> bytes:
    out = b""
    while body:
        size, _, rest = body.partition(b"\r\n")
        n = int(size, 16)
        if n == 0:
            break
        out += rest[:n]
        body = rest[n + 2 :]
    return out


async def _workload(url: str) -> None:
    nc = await nats.connect(url)
    try:
        js = nc.jetstream(timeout=5)
        await js.add_stream(name="MON", subjects=["mon.>"])
        for i in range(5):
            await js.publish(f"mon.{i % 2}", b"0123456789")
        await js.add_consumer("MON", durable_name="D1")
        sub = await js.pull_subscribe("mon.>", durable="D1", stream="MON")
        for m in await sub.fetch(2, timeout=5):
            await m.ack_sync()
    finally:
        await nc.close()


def _keys(d: dict[str, Any]) -> set[str]:
    return set(d)


async def test_jsz_varz_healthz_shapes_match_nats_server(tmp_path: Any) -> None:
    mport = _free_port()
    async with NatsServer(jetstream=True, extra_conf=f"http_port: {mport}\n") as real:
        await _workload(real.url)
        full = "/jsz?accounts=true&streams=true&consumers=true&config=true"
        _, n_jsz = await _get(mport, full)
        _, n_plain = await _get(mport, "/jsz")
        _, n_varz = await _get(mport, "/varz")
        n_health = await _get(mport, "/healthz")
        n_health_js = await _get(mport, "/healthz?js-enabled-only=true")

    async with NatsServer(leafnode=True) as srv:
        node = await start_node(srv, str(tmp_path / "n"), **{"http.listen": "127.0.0.1:0"})
        try:
            assert node.http is not None
            port = node.http.port
            await _workload(srv.url)
            _, j_jsz = await _get(port, full)
            _, j_plain = await _get(port, "/jsz")
            _, j_varz = await _get(port, "/varz")
            j_health = await _get(port, "/healthz")
            j_health_js = await _get(port, "/healthz?js-enabled-only=true")
            j_server = await _get(port, "/healthz?js-server-only=true")
        finally:
            await node.stop()

    # /healthz: the same documents.
    assert j_health == n_health == (200, {"status": "ok"})
    assert j_health_js == n_health_js == (200, {"status": "ok"})
    assert j_server == (200, {"status": "ok"})

    # /jsz without options: every top-level key of nats-server's, and the same totals.
    assert _keys(n_plain) <= _keys(j_plain), _keys(n_plain) - _keys(j_plain)
    for k in ("streams", "consumers", "messages", "accounts"):
        assert j_plain[k] == n_plain[k], k
    assert j_plain["api"]["level"] == n_plain["api"]["level"] == 5
    assert j_plain["api"]["total"] > 0
    assert j_plain["storage"] > 0 and j_plain["memory"] == 0
    assert "account_details" not in j_plain and "account_details" not in n_plain

    # /jsz with every detail: the same nesting, stream and consumer details key by key.
    assert _keys(n_jsz) <= _keys(j_jsz)
    (n_acc,) = n_jsz["account_details"]
    (j_acc,) = j_jsz["account_details"]
    assert _keys(n_acc) == _keys(j_acc)
    assert (j_acc["name"], j_acc["id"]) == (n_acc["name"], n_acc["id"]) == ("$G", "$G")
    (n_sd,) = n_acc["stream_detail"]
    (j_sd,) = j_acc["stream_detail"]
    assert _keys(n_sd) == _keys(j_sd)
    assert j_sd["name"] == "MON" and j_sd["cluster"] == {"leader": j_jsz["server_id"]}
    assert _keys(n_sd["config"]) <= _keys(j_sd["config"])
    assert _keys(n_sd["state"]) <= _keys(j_sd["state"])
    assert j_sd["state"]["messages"] == n_sd["state"]["messages"] == 5
    assert j_sd["state"]["num_subjects"] == n_sd["state"]["num_subjects"] == 2
    (n_cd,) = n_sd["consumer_detail"]
    (j_cd,) = j_sd["consumer_detail"]
    assert _keys(n_cd) <= _keys(j_cd), _keys(n_cd) - _keys(j_cd)
    for k in ("stream_name", "name", "num_ack_pending", "num_pending", "num_redelivered"):
        assert j_cd[k] == n_cd[k], k
    assert j_cd["ack_floor"]["stream_seq"] == n_cd["ack_floor"]["stream_seq"] == 2

    # /varz: nothing jetlog invents; everything of nats-server's but the listed Go-server facts.
    assert _keys(j_varz) <= _keys(n_varz), _keys(j_varz) - _keys(n_varz)
    assert _keys(n_varz) - VARZ_NATS_ONLY <= _keys(j_varz), _keys(n_varz) - VARZ_NATS_ONLY - _keys(j_varz)
    assert _keys(n_varz["jetstream"]) <= _keys(j_varz["jetstream"])
    assert _keys(n_varz["jetstream"]["stats"]) == _keys(j_varz["jetstream"]["stats"])
    assert j_varz["jetstream"]["stats"]["api"]["total"] > 0
    assert j_varz["connections"] == 2 and j_varz["leafnodes"] == 1
    assert j_varz["mem"] > 1_000_000 and j_varz["uptime"].endswith("s")
    assert j_varz["http_req_stats"]["/jsz"] == 2


async def test_jsz_filters_and_not_ready_health(tmp_path: Any) -> None:
    async with NatsServer(leafnode=True) as srv:
        node = await start_node(srv, str(tmp_path / "f"), **{"http.listen": "127.0.0.1:0"})
        try:
            assert node.http is not None
            port = node.http.port
            nc = await nats.connect(srv.url)
            js = nc.jetstream(timeout=5)
            for name in ("A", "B", "C"):
                await js.add_stream(name=name, subjects=[f"{name.lower()}.>"])
            await nc.close()
            _, doc = await _get(port, "/jsz?streams=true&leader-only=true")
            (acc,) = doc["account_details"]
            assert [s["name"] for s in acc["stream_detail"]] == ["A", "B", "C"]
            assert "config" not in acc["stream_detail"][0]
            _, doc = await _get(port, "/jsz?acc=$G&streams=true&config=true")
            assert doc["account_details"][0]["stream_detail"][1]["config"]["subjects"] == ["b.>"]
            # As on nats-server: offset and limit page the accounts (one), another is absent.
            for q in ("acc=OTHER&streams=true", "streams=true&offset=1"):
                _, doc = await _get(port, f"/jsz?{q}")
                assert "account_details" not in doc and doc["total"] == 1, q
            # A node whose leaf link is down is alive, not ready.
            await node.leaf.close()
            code, body = await _get(port, "/healthz?js-server-only=true")
            assert (code, body) == (
                503,
                {"status": "unavailable", "status_code": 503, "error": "leafnode link down"},
            )
            assert await _get(port, "/healthz") == (200, {"status": "ok"})
        finally:
            await node.stop()
