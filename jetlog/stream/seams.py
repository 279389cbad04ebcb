"""What a stream shares with the code around it: where it sends replies (``Outbound``), the
cluster's side of a replicated stream (``Replication``), its roles, listener types and
counters. Kept apart from ``stream.py`` so the stream's base classes can name them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from jetlog.errors import ApiError


class Outbound(Protocol):
    """Where a stream sends replies (PubAcks) and republished messages."""

    def send(self, subject: str, payload: bytes, hdr: bytes = b"") -> None:
        """Publish one message (no reply subject). Must not block."""
        ...


StoredListener = Callable[[int, str], None]
"""Called with (seq, subject) after a message is stored (consumers will hook in here)."""

CommitListener = Callable[[int], None]
"""Called with the new committed sequence whenever it advances."""

STANDALONE, LEADER, FOLLOWER = "standalone", "leader", "follower"


class Replication(Protocol):
    """The cluster's side of a replicated stream (the seam ``stream/`` sees; ``cluster/``
    implements it). A standalone stream has none: committed = the store's durable sequence."""

    def on_durable(self, seq: int) -> None:
        """The local store made everything up to ``seq`` durable (called from its commit
        listener). The replication side computes the committed mark and calls
        :meth:`Stream.advance` when it moves."""
        ...

    def publish_error(self) -> ApiError | None:
        """An error to answer a publish with right now (too few in-sync replicas), or None
        when the leader may append."""
        ...

    async def sync(self) -> None:
        """Wait until everything stored so far is durable on every in-sync replica."""
        ...

    def fenced(self) -> bool:
        """True while this replica must not act as the leader (it lost the Raft group: another
        node may lead by now). Publishes are then held unanswered for a few seconds and handled
        once the fence lifts, or dropped when this node turns out deposed: the real leader
        answers them (``stream/held.py``)."""
        ...

    def unanswered_error(self) -> ApiError | None:
        """While fenced: the error to answer a publish that cannot wait any longer with (held
        past ``stream.held.HOLD_MAX``, or beyond its bytes), or None to drop it unanswered
        because another node may lead by now and answer it."""
        ...

    def lease_until(self) -> float | None:
        """Until when (``time.monotonic``) a consumer delivery decided now may still be written
        (it must reach the upstream server before another leader may deliver); None while
        deliveries must wait: the leader has no sign that it still leads (no in-sync follower
        has fetched from it for a while — they may follow another leader by now, which
        delivers in its place); ``math.inf`` when there is no one to lose the lease to."""
        ...

    def committed_wanted(self) -> None:
        """A reader waits for messages stored here to be known committed: learn the committed
        mark now if it may have moved (a follower asks its leader; the leader knows)."""
        ...


class StreamStats:
    """Plain counters (cheap to bump per message; exported by the metrics collector)."""

    __slots__ = ("duplicates", "pubacks", "received", "rejected", "stored")

    def __init__(self) -> None:
        self.pubacks = 0  # PubAcks issued (each sent once its message is committed)
        self.received = 0
        self.stored = 0
        self.duplicates = 0
        self.rejected = 0
