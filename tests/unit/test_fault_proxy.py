"""FaultProxy against a real TCP echo server: forwarding, cut (RST), block (silent partition),
refuse, heal, inject, close."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from jetlog.chaos.proxy import FaultProxy


class Echo:
    """A TCP echo server that counts the connections it has seen and how they ended."""

    def __init__(self) -> None:
        self.server: asyncio.Server | None = None
        self.accepted = 0
        self.endings: list[str] = []
        self.port = 0

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]

    async def _handle(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        self.accepted += 1
        try:
            while True:
                data = await r.read(65536)
                if not data:
                    self.endings.append("eof")
                    break
                w.write(data)
                await w.drain()
        except ConnectionResetError:
            self.endings.append("reset")
        finally:
            w.close()
            with contextlib.suppress(ConnectionError):
                await w.wait_closed()

    async def close(self) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()


async def until(cond: Callable[[], bool], what: str, timeout: float = 5.0) -> None:
    async def wait() -> None:
        while not cond():
            await asyncio.sleep(0.01)

    try:
        await asyncio.wait_for(wait(), timeout)
    except TimeoutError:
        raise AssertionError(f"timed out waiting for {what}") from None


@pytest.fixture
async def echo() -> AsyncIterator[Echo]:
    e = Echo()
    await e.start()
    yield e
    await e.close()


@pytest.fixture
async def proxy(echo: Echo) -> AsyncIterator[FaultProxy]:
    p = FaultProxy("127.0.0.1", echo.port)
    await p.start()
    yield p
    await p.close()


async def roundtrip(
    r: asyncio.StreamReader, w: asyncio.StreamWriter, data: bytes, timeout: float = 5
) -> bytes:
    w.write(data)
    await w.drain()
    return await asyncio.wait_for(r.readexactly(len(data)), timeout)


async def connect(p: FaultProxy) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", p.port)


async def expect_nothing(aw: Awaitable[bytes], within: float = 0.3) -> None:
    """Assert that ``aw`` does not complete within ``within`` seconds (a negative check)."""
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(aw, within)


async def test_forwards_both_ways_with_backpressure(proxy: FaultProxy, echo: Echo) -> None:
    assert proxy.port > 0
    r, w = await connect(proxy)
    assert await roundtrip(r, w, b"hello") == b"hello"
    # 8 MiB through a 256 KiB write buffer: forwarding must pause/resume, not buffer it all.
    blob = os.urandom(8 * 1024 * 1024)

    async def send() -> None:
        for i in range(0, len(blob), 65536):
            w.write(blob[i : i + 65536])
            await w.drain()

    sender = asyncio.create_task(send())
    got = await asyncio.wait_for(r.readexactly(len(blob)), 30)
    await sender
    assert got == blob
    assert proxy.connections == 1 and echo.accepted == 1
    w.close()
    await until(lambda: proxy.connections == 0, "graceful close propagated")
    await until(lambda: echo.endings == ["eof"], "server saw EOF")


async def test_cut_resets_both_sides_and_accepts_new(proxy: FaultProxy, echo: Echo) -> None:
    r, w = await connect(proxy)
    assert await roundtrip(r, w, b"a") == b"a"
    proxy.cut()
    with pytest.raises(ConnectionResetError):
        data = await asyncio.wait_for(r.read(10), 5)
        # Some kernels deliver the RST as EOF first; a write then fails with a reset.
        assert data == b""
        w.write(b"x")
        await w.drain()
        await asyncio.sleep(0.05)
        w.write(b"y")
        await w.drain()
    await until(lambda: echo.endings == ["reset"], "server side reset (not a FIN)")
    assert proxy.connections == 0
    r2, w2 = await connect(proxy)
    assert await roundtrip(r2, w2, b"again") == b"again"
    w2.close()


async def test_block_is_silent_and_heal_delivers(proxy: FaultProxy, echo: Echo) -> None:
    r, w = await connect(proxy)
    assert await roundtrip(r, w, b"before") == b"before"
    proxy.block()
    w.write(b"during")
    await w.drain()
    await expect_nothing(r.readexactly(6))
    assert not r.at_eof() and proxy.connections == 1 and echo.endings == []
    # A new connection is accepted but never reaches the server while blocked.
    r2, w2 = await connect(proxy)
    w2.write(b"held")
    await w2.drain()
    await expect_nothing(r2.readexactly(4))
    assert echo.accepted == 1
    proxy.heal()
    assert await asyncio.wait_for(r.readexactly(6), 5) == b"during"
    assert await asyncio.wait_for(r2.readexactly(4), 5) == b"held"
    assert echo.accepted == 2
    assert await roundtrip(r, w, b"after") == b"after"
    w.close()
    w2.close()


async def test_refuse_new_connections_only(proxy: FaultProxy, echo: Echo) -> None:
    r, w = await connect(proxy)
    assert await roundtrip(r, w, b"x") == b"x"
    proxy.refuse(True)
    r2, w2 = await connect(proxy)  # the TCP handshake completes, then the proxy resets it
    with contextlib.suppress(ConnectionResetError):
        assert await asyncio.wait_for(r2.read(10), 5) == b""
    assert echo.accepted == 1
    assert await roundtrip(r, w, b"still") == b"still"  # existing connection unaffected
    proxy.refuse(False)
    r3, w3 = await connect(proxy)
    assert await roundtrip(r3, w3, b"ok") == b"ok"
    proxy.refuse(True)
    proxy.heal()  # heal ends refuse too
    r4, w4 = await connect(proxy)
    assert await roundtrip(r4, w4, b"healed") == b"healed"
    for wr in (w, w2, w3, w4):
        wr.close()


async def test_inject_towards_client_and_server(proxy: FaultProxy, echo: Echo) -> None:
    r, w = await connect(proxy)
    assert await roundtrip(r, w, b"1") == b"1"
    assert proxy.inject(b"garbage") == 1
    assert await asyncio.wait_for(r.readexactly(7), 5) == b"garbage"
    assert proxy.inject(b"echoed", to_client=False) == 1  # the echo server sends it back
    assert await asyncio.wait_for(r.readexactly(6), 5) == b"echoed"
    w.close()


async def test_target_down_closes_client_and_close_resets(echo: Echo) -> None:
    p = FaultProxy("127.0.0.1", echo.port)
    await p.start()
    r, w = await connect(p)
    assert await roundtrip(r, w, b"z") == b"z"
    await p.close()
    with contextlib.suppress(ConnectionResetError):
        assert await asyncio.wait_for(r.read(10), 5) == b""
    with pytest.raises(OSError):
        await connect(p)
    # A proxy in front of a port nobody listens on: the client is closed at once.
    await echo.close()
    echo.server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)  # keep close() happy
    dead = FaultProxy("127.0.0.1", echo.port)
    await dead.start()
    try:
        r, w = await connect(dead)
        with contextlib.suppress(ConnectionResetError):
            assert await asyncio.wait_for(r.read(10), 5) == b""
        await until(lambda: dead.connections == 0, "failed upstream connect cleaned up")
    finally:
        await dead.close()
