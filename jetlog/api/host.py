"""What the API handlers need from the node that hosts them, and from the router that sends
their replies: two narrow Protocols.

The handlers (:mod:`jetlog.api.router`, :mod:`jetlog.api.streams`, :mod:`jetlog.api.consumers`)
depend on these instead of on ``jetlog.node.Node`` and ``ApiRouter``, so the node can import the
router without an import cycle (the node satisfies :class:`ApiHost` structurally).
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from jetlog.config import NodeConfig
    from jetlog.stream.manager import StreamManager
    from jetlog.transport.capture import Egress
    from jetlog.transport.client import ClientLink
    from jetlog.transport.leaf import LeafConnection


class ApiHost(Protocol):
    """The parts of a node the API handlers use."""

    @property
    def cfg(self) -> NodeConfig:
        """The node's configuration (name, API domain and limits)."""
        ...

    @property
    def client(self) -> ClientLink:
        """The client link (API subscriptions, replies, server version, max_payload)."""
        ...

    @property
    def leaf(self) -> LeafConnection:
        """The leaf link (interest checks)."""
        ...

    @property
    def egress(self) -> Egress:
        """The outgoing path that keeps replies in order with deliveries."""
        ...

    @property
    def streams(self) -> StreamManager | None:
        """The stream catalog (None before the node has loaded it)."""
        ...


class ApiReplies(Protocol):
    """The parts of the router the stream and consumer handlers use."""

    @property
    def total(self) -> int:
        """JSON API replies counted so far."""
        ...

    @property
    def errors(self) -> int:
        """Error replies counted so far."""
        ...

    def reply_json(
        self,
        reply: str | None,
        body: bytes,
        *,
        error: bool = False,
        count: bool = True,
        ordered: bool = False,
    ) -> None:
        """Send a JSON API reply and count it."""
        ...

    def spawn(self, coro: Awaitable[None], what: str) -> None:
        """Run a handler coroutine as an owned task."""
        ...
