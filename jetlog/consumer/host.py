"""What a consumer uses of the set that owns it, and what that set uses of its stream: two
narrow Protocols.

They keep the imports one-way: ``stream.stream`` -> ``consumer.manager`` (``ConsumerSet``) ->
``consumer.consumer`` (``Consumer``) -> here. ``ConsumerSet`` satisfies :class:`ConsumerHost`
and ``Stream`` satisfies :class:`ConsumerStream` structurally; neither is imported here (the
consumer passed to the host's callbacks is typed ``Any`` for the same reason).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from jetlog.consumer.store import ConsumerLog
    from jetlog.log.store import MsgStore
    from jetlog.stream.policy import StreamPolicy


class ConsumerStream(Protocol):
    """The parts of a stream its consumers use."""

    @property
    def name(self) -> str:
        """The stream's name."""
        ...

    @property
    def config(self) -> Any:
        """The stream's configuration."""
        ...

    @property
    def store(self) -> MsgStore:
        """The stream's message store."""
        ...

    @property
    def policy(self) -> StreamPolicy:
        """The stream's retention and limits, parsed."""
        ...

    @property
    def committed_seq(self) -> int:
        """The highest sequence readers may see."""
        ...

    def delivery_lease(self) -> float | None:
        """None: deliveries must wait (a replicated stream's leader unsure it still leads);
        else until when (``time.monotonic``) deliveries decided now may be written."""
        ...

    def add_commit_listener(self, listener: Callable[[int], None]) -> None:
        """Be told whenever ``committed_seq`` advances."""
        ...

    def set_interest_check(self, check: Callable[[str], bool] | None) -> None:
        """For interest retention: does any consumer want messages on this subject?"""
        ...


class ConsumerHost(Protocol):
    """The parts of the consumer set a consumer uses (``c`` is the calling consumer)."""

    @property
    def stream(self) -> ConsumerStream:
        """The stream the consumers read."""
        ...

    @property
    def leaf(self) -> Any:
        """The leaf link deliveries leave on."""
        ...

    @property
    def clog(self) -> ConsumerLog | None:
        """The consumer-state log (None: nothing persisted)."""
        ...

    def ack_prefix(self, name: str) -> bytes:
        """``$JS.ACK.<stream>.<consumer>.``"""
        ...

    def update(self, c: Any, config: Any) -> None:
        """Apply a validated update (persisted first)."""
        ...

    def wants_commits(self, c: Any) -> None:
        """``c`` has gained somewhere to deliver (a pull request, push interest): kick it when
        new messages commit."""
        ...

    def pull_request(self, c: Any, reply: str, body: bytes, hdr: bytes) -> None:
        """Handle a pull request for ``c``."""
        ...

    def on_acked(self, c: Any, seqs: list[int]) -> None:
        """``c`` acked (or terminated) ``seqs``: retention may release them."""
        ...

    def on_delivered_none(self, c: Any, seq: int) -> None:
        """An ack-none consumer delivered ``seq``."""
        ...

    def reply_after_sync(self, c: Any, reply: str) -> None:
        """Answer an ack's reply once the consumer state is durable."""
        ...

    def delete_inactive(self, c: Any) -> None:
        """Inactivity cleanup of ``c``."""
        ...

    def advisory_max_deliveries(self, c: Any, seq: int, deliveries: int) -> None:
        """Publish the max-deliveries advisory."""
        ...

    def advisory_terminated(self, c: Any, seq: int, dseq: int, deliveries: int, reason: str) -> None:
        """Publish the terminated advisory."""
        ...

    def advisory_pause(self, c: Any) -> None:
        """Publish the pause advisory."""
        ...

    def advisory_nak(self, c: Any, seq: int, dseq: int, deliveries: int) -> None:
        """Publish the NAK advisory."""
        ...
