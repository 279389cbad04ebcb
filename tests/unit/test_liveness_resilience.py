"""The heartbeat loop survives a send that fails in an unexpected way (chaos finding 9: a reset
connection made uvloop raise RuntimeError from the client link's write, the liveness task died,
and the node looked gone to the others for ever, never rejoining the ISR)."""

from __future__ import annotations

import asyncio
from typing import Any

from jetlog.cluster.liveness import Liveness
from jetlog.errors import TransportError


class FlakyClient:
    """A client link whose sends fail in the ways a dying connection makes them fail."""

    def __init__(self, failures: list[BaseException]) -> None:
        self.failures = failures
        self.sent: list[tuple[str, bytes]] = []

    async def subscribe_raw(self, subject: str, cb: Any, queue: str = "") -> int:
        return 1

    async def unsubscribe(self, sid: int) -> None:
        return None

    def send(self, subject: str, payload: bytes, hdr: bytes = b"") -> None:
        if self.failures:
            raise self.failures.pop(0)
        self.sent.append((subject, payload))


async def test_heartbeats_continue_after_unexpected_send_failures() -> None:
    client = FlakyClient(
        [RuntimeError("unable to perform operation on <TCPTransport closed=True>"), TransportError("down")]
    )
    lv = Liveness(client, "$JETLOG.c.HB", "n1", ["n1", "n2"], interval=0.01, raft_ok=lambda: True)
    await lv.start()
    try:
        for _ in range(300):
            if len(client.sent) >= 3:
                break
            await asyncio.sleep(0.01)
        assert len(client.sent) >= 3, client.sent
        assert lv._task is not None and not lv._task.done()
    finally:
        await lv.stop()
