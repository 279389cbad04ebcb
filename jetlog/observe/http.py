"""A tiny HTTP endpoint: ``/metrics`` (Prometheus text), ``/readyz``, and nats-server's
monitoring documents ``/jsz``, ``/varz``, ``/healthz`` (``observe/monitor.py``).

Hand-rolled on ``asyncio.start_server`` (GET only, one response per connection) so it runs on
the node's loop with no extra thread or framework.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import parse_qs

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from jetlog.errors import ConfigError
from jetlog.observe import statuspage
from jetlog.observe.monitor import Monitor

log = logging.getLogger("jetlog.http")


class HttpEndpoint:
    """Serves metrics and health on ``host:port``."""

    def __init__(
        self,
        listen: str,
        registry: CollectorRegistry,
        ready: Callable[[], tuple[bool, str]],
        monitor: Monitor | None = None,
    ) -> None:
        host, _, port = listen.rpartition(":")
        self.host = host or "127.0.0.1"
        self.port = int(port)
        self.registry = registry
        self.ready = ready
        self.monitor = monitor
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        """Bind and serve. Raises ``ConfigError`` (``http.listen``) if the address cannot be
        bound: the node then stops in order, as for any other bad setting."""
        try:
            self._server = await asyncio.start_server(self._handle, self.host, self.port)
        except OSError as e:
            raise ConfigError("http.listen", f"cannot listen on {self.host}:{self.port}: {e}") from e
        sock = self._server.sockets[0].getsockname()
        self.port = sock[1]
        log.info("http endpoint on %s:%d", self.host, self.port)

    async def close(self) -> None:
        """Stop serving."""
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    def _route(self, path: str, query: dict[str, list[str]]) -> tuple[str, str, bytes]:
        mon = self.monitor
        if mon is not None and path in ("/jsz", "/varz", "/healthz", "/status.json"):
            mon.count(path)
        if path == "/metrics":
            return "200 OK", CONTENT_TYPE_LATEST, generate_latest(self.registry)
        if path == "/readyz":
            ok, why = self.ready()
            return ("200 OK" if ok else "503 Service Unavailable"), "text/plain", (why + "\n").encode()
        if path == "/healthz":
            code, doc = mon.healthz(query) if mon is not None else (200, {"status": "ok"})
            return _json(code, doc)
        if mon is not None and path == "/jsz":
            return _json(200, mon.jsz(query))
        if mon is not None and path == "/varz":
            return _json(200, mon.varz())
        if mon is not None and path == "/status.json":
            return _json(200, mon.status())
        if mon is not None and path in ("/", "/index.html"):
            return "200 OK", "text/html; charset=utf-8", statuspage.PAGE
        return "404 Not Found", "text/plain", b"not found\n"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = await asyncio.wait_for(reader.readline(), 5)
            # Drain the request headers.
            while True:
                h = await asyncio.wait_for(reader.readline(), 5)
                if h in (b"\r\n", b"\n", b""):
                    break
            parts = line.decode("latin-1").split()
            target = parts[1] if len(parts) >= 2 else "/"
            path, _, qs = target.partition("?")
            if len(parts) < 2 or parts[0] != "GET":
                status, ctype, body = "405 Method Not Allowed", "text/plain", b"GET only\n"
            else:
                status, ctype, body = self._route(path, parse_qs(qs, keep_blank_values=True))
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


def _json(code: int, doc: Mapping[str, Any]) -> tuple[str, str, bytes]:
    # Indented like nats-server's monitoring port (people read these with curl).
    status = "200 OK" if code == 200 else "503 Service Unavailable"
    return status, "application/json", json.dumps(doc, indent=2).encode() + b"\n"
