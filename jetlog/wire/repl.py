"""Replication messages between a stream leader and its followers (sans-I/O).

Every message is one NATS payload: ``u32 head_len | msgpack(head) | body``. The head is a small
msgspec struct; the body is raw bytes that must not be copied through msgpack (stored record
batches verbatim, consumer-log records). Requests go to ``$JETLOG.<cluster>.R.<leader node>``
and are answered on the requester's inbox; the reply is always a :class:`FetchReply` or
:class:`EpochEndReply` even for errors, so a follower never waits for a timeout to learn that
it asked the wrong node.

A fetch is also the follower's acknowledgement and heartbeat: ``pos`` is the position of the
follower's last *durable* batch and ``cidx`` the number of consumer-log records it holds durably
(see ``docs/cluster.md`` §3-§5).
"""

from __future__ import annotations

import struct

import msgspec

from jetlog.errors import JetlogError

_LEN = struct.Struct("<I")

Pos = tuple[int, int]

# Reply codes.
OK = 0
NOT_LEADER = 1
"""The addressee does not lead this stream at the requested epoch (the follower's view is older
or newer than the responder's); the follower re-reads the metadata."""
OUT_OF_RANGE = 2
"""The follower's position is below the leader's first batch: reset and fetch from ``start``."""
UNKNOWN_POS = 3
"""The follower's position is not a position of the leader's log: redo epoch truncation."""
NO_STREAM = 4
"""The responder holds no such stream."""
ERROR = 5
"""Anything else (``error`` says what)."""


class ReplError(JetlogError):
    """A replication message could not be decoded."""


LEFT_UNKNOWN = -2
"""``FetchRequest.left_ms`` of a follower that does not send it."""
LEFT_NONE = -1


class FetchRequest(msgspec.Struct, tag="fetch", forbid_unknown_fields=False):
    """Follower → leader: give me what follows ``pos``."""

    stream: str
    replica: str
    epoch: int
    pos: Pos
    chunk: int = 0
    """Bytes of a partially received batch already held (a batch bigger than one reply)."""
    hw: int = 0
    """The HW the follower already knows: a caught-up follower is told when it moves (on the next
    message's reply, or within the leader's ``HW_LINGER``)."""
    cepoch: int = 0
    """Lineage of the follower's consumer records (the leader epoch that produced them)."""
    cidx: int = 0
    """Consumer-log records the follower holds durably in that lineage."""
    csnap: int = 0
    """Bytes of a consumer snapshot being transferred already held (0 = none in progress)."""
    max_bytes: int = 1 << 20
    wait_ms: int = 0
    eager_hw: bool = False
    """Answer an HW move at once, not up to the leader's ``HW_LINGER`` later: readers on this
    follower waited for its committed mark lately (read-after-write through a follower)."""
    left_ms: int = LEFT_UNKNOWN
    """Milliseconds since this follower last got a fetch reply from another leadership of the
    stream (another leader or epoch), until it gets one from this leader; -1: none on record
    (it followed nobody else in this process). That reply may have let the previous leader go
    on delivering for its ``hold_after``; the new leader waits that long before it delivers
    (see ``StreamLeader.deliveries_held``). Absent (a follower from before this field): the
    leader assumes "just now" for the first fetch."""


class EpochEndRequest(msgspec.Struct, tag="epoch_end", forbid_unknown_fields=False):
    """Follower → leader (KIP-279): where does epoch ``epoch`` end in your log?"""

    stream: str
    replica: str
    epoch: int
    """The largest epoch in the follower's checkpoint."""
    leader_epoch: int
    """The epoch the follower believes the leader leads at."""


class HwRequest(msgspec.Struct, tag="hw", forbid_unknown_fields=False):
    """Follower → leader: your high-water mark now, please (answered with a :class:`FetchReply`
    holding only ``code``, ``epoch`` and ``hw``). A reader on the follower waits for it; this
    is not a fetch and acknowledges nothing. A leader that does not know it answers ERROR."""

    stream: str
    replica: str
    epoch: int


Request = FetchRequest | EpochEndRequest | HwRequest


class FetchReply(msgspec.Struct, forbid_unknown_fields=False):
    """Leader → follower."""

    code: int
    epoch: int = 0
    hw: int = 0
    """The leader's high-water mark (a sequence: everything at or below it is committed)."""
    last: Pos = (0, -1)
    """Position of the last whole batch in the body (``pos`` when none)."""
    partial: int = 0
    """Non-zero when the body is one chunk of a batch: the batch's total stored size."""
    leo: Pos = (0, -1)
    """The leader's log end (how far behind the follower is)."""
    start: Pos = (0, -1)
    """The leader's first position (with OUT_OF_RANGE: where to reset to)."""
    first_seq: int = 0
    """The stream's first sequence on the leader (for a reset)."""
    floor: int = 0
    """Replica floor: no replica may compact a segment at or beyond this sequence."""
    cepoch: int = 0
    cidx: int = 0
    """Consumer-log position after the records in ``crecs`` (or of the snapshot)."""
    csnap: int = 0
    """Non-zero when ``crecs`` is (a chunk of) a full consumer snapshot of that total size."""
    coff: int = 0
    """Offset of the snapshot chunk in ``crecs`` within the whole snapshot."""
    error: str = ""
    crecs: bytes = b""


class EpochEndReply(msgspec.Struct, forbid_unknown_fields=False):
    """Leader → follower: ``epoch`` is the largest epoch ≤ the one asked that the leader knows
    (-1: none), ``end`` the position where it ends in the leader's log."""

    code: int
    epoch: int = -1
    end: Pos = (0, -1)
    leader_epoch: int = 0
    error: str = ""


_req_dec = msgspec.msgpack.Decoder(Request)
_fetch_reply_dec = msgspec.msgpack.Decoder(FetchReply)
_epoch_reply_dec = msgspec.msgpack.Decoder(EpochEndReply)
_enc = msgspec.msgpack.Encoder()


def encode(head: msgspec.Struct, body: bytes = b"") -> bytes:
    """One message: length-prefixed msgpack head, then the raw body."""
    h = _enc.encode(head)
    return _LEN.pack(len(h)) + h + body


def _split(data: bytes) -> tuple[memoryview, bytes]:
    if len(data) < 4:
        raise ReplError("replication message too short")
    (n,) = _LEN.unpack_from(data)
    if 4 + n > len(data):
        raise ReplError("replication message head truncated")
    mv = memoryview(data)
    return mv[4 : 4 + n], data[4 + n :]


def decode_request(data: bytes) -> tuple[Request, bytes]:
    """Decode a request (head, body)."""
    head, body = _split(data)
    try:
        return _req_dec.decode(head), body
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        raise ReplError(f"bad replication request: {e}") from None


def decode_fetch_reply(data: bytes) -> tuple[FetchReply, bytes]:
    """Decode a fetch reply (head, batches)."""
    head, body = _split(data)
    try:
        return _fetch_reply_dec.decode(head), body
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        raise ReplError(f"bad fetch reply: {e}") from None


def decode_epoch_reply(data: bytes) -> EpochEndReply:
    """Decode an epoch-end reply."""
    head, _ = _split(data)
    try:
        return _epoch_reply_dec.decode(head)
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        raise ReplError(f"bad epoch-end reply: {e}") from None


def pos_of(value: object) -> Pos:
    """A position from its decoded form (msgpack gives lists)."""
    if isinstance(value, list | tuple) and len(value) == 2:
        return int(value[0]), int(value[1])
    raise ReplError(f"not a position: {value!r}")
