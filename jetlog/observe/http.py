"""A tiny HTTP endpoint: ``/metrics`` (Prometheus text), ``/healthz``, ``/readyz``.

Hand-rolled on ``asyncio.start_server`` (GET only, one response per connection) so it runs on
the node's loop with no extra thread or framework.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

log = logging.getLogger("jetlog.http")


class HttpEndpoint:
    """Serves metrics and health on ``host:port``."""

    def __init__(
        self,
        listen: str,
        registry: CollectorRegistry,
        ready: Callable[[], tuple[bool, str]],
    ) -> None:
        host, _, port = listen.rpartition(":")
        self.host = host or "127.0.0.1"
        self.port = int(port)
        self.registry = registry
        self.ready = ready
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        """Bind and serve."""
        self._server = await asyncio.start_server(self._handle, self.host, self.port)
        sock = self._server.sockets[0].getsockname()
        self.port = sock[1]
        log.info("http endpoint on %s:%d", self.host, self.port)

    async def close(self) -> None:
        """Stop serving."""
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = await asyncio.wait_for(reader.readline(), 5)
            # Drain the request headers.
            while True:
                h = await asyncio.wait_for(reader.readline(), 5)
                if h in (b"\r\n", b"\n", b""):
                    break
            parts = line.decode("latin-1").split()
            path = parts[1].split("?")[0] if len(parts) >= 2 else "/"
            if len(parts) < 2 or parts[0] != "GET":
                status, ctype, body = "405 Method Not Allowed", "text/plain", b"GET only\n"
            elif path == "/metrics":
                status, ctype, body = "200 OK", CONTENT_TYPE_LATEST, generate_latest(self.registry)
            elif path == "/healthz":
                status, ctype, body = "200 OK", "text/plain", b"ok\n"
            elif path == "/readyz":
                ok, why = self.ready()
                status = "200 OK" if ok else "503 Service Unavailable"
                ctype, body = "text/plain", (why + "\n").encode()
            else:
                status, ctype, body = "404 Not Found", "text/plain", b"not found\n"
            head = (
                f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
                "Connection: close\r\n\r\n"
            ).encode()
            writer.write(head + body)
            await writer.drain()
        except (TimeoutError, ConnectionError, UnicodeDecodeError) as e:
            log.debug("http request failed: %s", e)
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
