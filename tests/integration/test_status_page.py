"""The HTTP port's ``/``: a status page that renders members, streams (leader, ISR, lag) and
consumers (pending) from ``/status.json`` and refreshes itself — checked in headless Chromium
(Debian's ``chromium``; the Makefile installs it): the rendered DOM holds the live figures, and a
screenshot is a real, non-blank 1200x900 image."""

from __future__ import annotations

import asyncio
import json
import shutil
import struct
import zlib
from pathlib import Path
from typing import Any

import nats
import pytest

from jetlog.embedded import NatsServer

from .conftest import start_node
from .test_node_features import _http_get


async def _workload(url: str) -> None:
    nc = await nats.connect(url)
    try:
        js = nc.jetstream(timeout=5)
        await js.add_stream(name="ORDERS", subjects=["orders.>"])
        for i in range(7):
            await js.publish("orders.new", f"o{i}".encode())
        await js.add_consumer("ORDERS", durable_name="BILLING")
    finally:
        await nc.close()


async def test_status_json_and_page(tmp_path: Path) -> None:
    async with NatsServer(leafnode=True) as srv:
        node = await start_node(srv, str(tmp_path / "n"), **{"http.listen": "127.0.0.1:0", "name": "edge-1"})
        try:
            assert node.http is not None
            await _workload(srv.url)
            code, page = await _http_get(node.http.port, "/")
            assert code == 200 and "<title>jetlog</title>" in page and "status.json" in page
            code, body = await _http_get(node.http.port, "/status.json")
            st = json.loads(body)
        finally:
            await node.stop()
    assert code == 200
    assert (st["node"], st["ready"], st["members"]) == ("edge-1", True, [])
    assert st["streams"] == [
        {
            "name": "ORDERS",
            "messages": 7,
            "bytes": st["streams"][0]["bytes"],
            "leader": "edge-1",
            "replicas": 1,
            "isr": ["edge-1"],
            "lag": {},
        }
    ]
    assert st["streams"][0]["bytes"] > 7 * 2
    assert st["consumers"] == [
        {"stream": "ORDERS", "name": "BILLING", "num_pending": 7, "num_ack_pending": 0, "num_redelivered": 0}
    ]


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    w, h = struct.unpack(">II", data[16:24])
    return w, h


def _png_distinct_rows(data: bytes) -> int:
    """How many different pixel rows the image has (a blank page has one)."""
    pos, idat, (w, h) = 8, b"", _png_size(data)
    bit_depth, color = data[24], data[25]
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos : pos + 8])
        if kind == b"IDAT":
            idat += data[pos + 8 : pos + 8 + n]
        pos += 12 + n
    raw = zlib.decompress(idat)
    bpp = {2: 3, 6: 4}.get(color, 1) * bit_depth // 8
    stride = 1 + w * bpp
    # Filter bytes differ between rows of equal pixels, so compare rows after "none/up" rows
    # only loosely: distinct raw rows are enough to tell a rendered page from a blank one.
    return len({raw[i * stride + 1 : (i + 1) * stride] for i in range(h)})


async def _chromium(*args: str) -> bytes:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        pytest.skip("headless Chromium not installed (make test installs Debian's chromium package)")
    proc = await asyncio.create_subprocess_exec(
        exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars",
        "--user-data-dir=" + args[0], *args[1:],
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, _ = await asyncio.wait_for(proc.communicate(), 90)
    assert proc.returncode == 0
    return out


async def test_status_page_renders_in_headless_chromium(tmp_path: Path) -> None:
    shot = tmp_path / "status.png"
    async with NatsServer(leafnode=True) as srv:
        node = await start_node(srv, str(tmp_path / "n"), **{"http.listen": "127.0.0.1:0", "name": "edge-2"})
        try:
            assert node.http is not None
            await _workload(srv.url)
            url = f"http://127.0.0.1:{node.http.port}/"
            dom = (
                await _chromium(str(tmp_path / "p1"), "--dump-dom", "--virtual-time-budget=5000", url)
            ).decode()
            await _chromium(
                str(tmp_path / "p2"),
                f"--screenshot={shot}",
                "--window-size=1200,900",
                "--virtual-time-budget=5000",
                url,
            )
            fetched: Any = node.http.monitor.requests if node.http.monitor is not None else {}
        finally:
            await node.stop()
    # The script fetched /status.json and filled the tables.
    assert "<td>ORDERS</td>" in dom and "<td>BILLING</td>" in dom, dom[-3000:]
    assert '<td class="num">7</td>' in dom  # 7 messages, and BILLING's 7 pending
    assert "edge-2" in dom and "ready" in dom
    assert "loading..." not in dom
    assert fetched.get("/status.json", 0) >= 1
    png = shot.read_bytes()
    assert _png_size(png) == (1200, 900)
    assert _png_distinct_rows(png) > 20, "the screenshot is blank"
