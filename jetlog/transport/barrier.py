"""A nats-py ``flush()`` that is a barrier.

nats-py 2.16's ``Client.flush()`` writes its PING straight to the socket, while commands made
just before it (a ``SUB``, ``PUB``s) still wait in the client's pending list for its flusher
task. The bytes then leave as ``PING SUB ...``: the PONG can come back before the server has
registered the subscription, and a publish from another connection right after the flush finds
no interest (a no-responders status, or a message lost). CI met exactly that once in ~3,000
tests. :func:`flush_barrier` writes the pending commands first, so its PONG means the server
has processed everything sent before it.
"""

from __future__ import annotations

from nats.aio.client import Client


async def flush_barrier(nc: Client, timeout: float = 5.0) -> None:
    """Write ``nc``'s queued commands, then round-trip a PING: on return the server has
    processed every command sent on ``nc`` before the call.

    Raises what ``Client.flush`` raises (nats-py's timeout and connection errors).
    """
    transport = nc._transport
    if nc._pending and transport is not None and nc.is_connected:
        # Same order the flusher task would give, only now: a synchronous write cannot
        # interleave with the flusher's own (it finds the list empty afterwards).
        transport.writelines(nc._pending)
        nc._pending = []
        nc._pending_data_size = 0
    await nc.flush(timeout)  # type: ignore[arg-type]  # nats-py annotates int; wait_for takes float
