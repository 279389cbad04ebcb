"""What a chaos run records: the history the checker judges (``checker.py``), as plain data.

A history is built by the workload (``workload.py``: publisher acks, consumer deliveries and
confirmed acks), by the runner at the end of a schedule (the high-water mark, whether the stream
and the consumer recovered after healing) and by reading every replica's log from its files
after the nodes are stopped (``workload.read_replica``). Nothing here does I/O, so synthetic
histories test the checker.

Message identity: publisher ``p`` publishes message ``i`` with ``Nats-Msg-Id: p<p>-<i>`` and the
deterministic payload :func:`payload`, so any stored copy can be checked byte for byte.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# seq -> (subject, headers, data): one replica's live messages, as read from its files.
Stored = tuple[str, bytes, bytes]


def msg_id(pid: int, i: int) -> str:
    """The ``Nats-Msg-Id`` of message ``i`` of publisher ``pid``."""
    return f"p{pid}-{i}"


def parse_msg_id(mid: str) -> tuple[int, int] | None:
    """``(pid, i)`` of a workload message id, None for any other id."""
    if not mid.startswith("p") or "-" not in mid:
        return None
    a, _, b = mid[1:].partition("-")
    if not (a.isdigit() and b.isdigit()):
        return None
    return int(a), int(b)


def payload(pid: int, i: int) -> bytes:
    """Message ``i`` of publisher ``pid`` (deterministic, 5 to ~210 bytes)."""
    return f"p{pid}-{i}:".encode() + bytes([(pid * 31 + i) % 251]) * (i % 200)


def header_msg_id(hdr: bytes) -> str | None:
    """The ``Nats-Msg-Id`` in a stored NATS header block, if any."""
    if not hdr:
        return None
    for line in hdr.decode(errors="replace").split("\r\n"):
        name, sep, value = line.partition(":")
        if sep and name.strip().lower() == "nats-msg-id":
            return value.strip()
    return None


@dataclass
class Ack:
    """A PubAck a publisher received: message ``i`` of ``pid`` stored at ``seq``."""

    pid: int
    i: int
    seq: int
    t: float  # monotonic time the ack arrived
    duplicate: bool = False  # the ack said the id was a duplicate (an earlier try was stored)

    @property
    def mid(self) -> str:
        return msg_id(self.pid, self.i)


@dataclass
class Delivery:
    """A message a consumer worker received. ``order`` numbers everything the worker received
    (deliveries and ack confirmations) in the order its connection delivered it.

    The ack subject's tokens (``$JS.ACK.<stream>.<consumer>.<dcount>.<sseq>.<cseq>.<ts>.<pending>``)
    come from the consumer state of the leader that made the delivery: ``cseq`` is that state's
    count of deliveries (one state hands out strictly increasing ones), ``pending`` the messages
    its stream held after this one then (``sseq + pending``: its stream's last sequence when it
    made the delivery), ``ts`` the stored message's timestamp (the same in every copy). 0: not
    recorded (older histories)."""

    worker: int
    order: int
    t: float
    mid: str
    sseq: int  # stream sequence from the ack subject
    dcount: int  # delivery count from the ack subject
    cseq: int = 0  # consumer sequence from the ack subject
    pending: int = 0  # pending count from the ack subject
    ts: int = 0  # message timestamp (ns) from the ack subject


@dataclass
class Confirm:
    """An ``AckSync`` the server answered: the ack of ``mid`` is durable on the consumer's
    replicas, so ``mid`` must never be delivered again. ``latency``: seconds between receiving
    the delivery and sending its ack (a confirm is only meaningful when that is well under
    ``ack_wait``: otherwise the server may have redelivered before it saw the ack)."""

    worker: int
    order: int
    t: float
    mid: str
    latency: float
    sseq: int = 0  # the stream sequence of the delivery it acked


@dataclass
class History:
    """Everything one schedule recorded (see the module docstring)."""

    stream: str = "CHAOS"
    acks: list[Ack] = field(default_factory=list)
    deliveries: list[Delivery] = field(default_factory=list)
    confirms: list[Confirm] = field(default_factory=list)
    replicas: dict[str, dict[int, Stored]] = field(default_factory=dict)
    hw: int = 0  # the stream's committed last sequence once every replica was current again
    ack_wait: float = 4.0
    consumer: bool = True  # a consumer ran (deliveries are checked)
    consumer_drained: bool = True  # it received every committed message before the deadline
    probe_s: float | None = 0.0  # seconds until a publish after healing was acked (None: never)
    stuck: list[str] = field(default_factory=list)  # recovery failures the runner saw
    # time.time() - time.monotonic() when the run began: adds the wall-clock time of the node
    # logs (and of consumer-log records) to the monotonic times above (0: unknown).
    wall_offset: float = 0.0
