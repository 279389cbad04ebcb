"""Consumer-state log records: their format, encoding, and replay (sans-I/O).

Records (little-endian; each ``u32 crc32c | u32 length | u8 type | payload``, the CRC covering
length, type and payload):

=====  =========  ============================================================================
type   name       payload
=====  =========  ============================================================================
1      CREATE     u32 cid, u8 ack policy, i64 created, u16 name length, name, config JSON
2      UPDATE     u32 cid, config JSON
3      DELETE     u32 cid
4      START      u32 cid, u64 first stream seq to consider
5      DELIVER    u32 cid, u64 stream seq, i64 time (the consumer sequence is implied)
6      ACK        u32 cid, u64 stream seq, u64 consumer seq (from the ack subject)
7      DROP       u32 cid, u64 stream seq (reached max_deliver)
8      FORGET     u32 cid, u64 stream seq (left the stream)
9      PURGE      u32 cid, u64 seq (stream purged below seq)
10     PAUSE      u32 cid, i64 pause until (0 = not paused)
11     STATE      u32 cid, snapshot of a ConsumerState (compaction)
=====  =========  ============================================================================

Replaying a record calls the same ``ConsumerState`` method the live consumer called, so the
recovered state is exactly what was persisted.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from jetlog.consumer.state import ConsumerState, Pending
from jetlog.wire.crc import crc32c

ConsumerTuple = tuple[int, str, bytes, int, ConsumerState, int]
"""One durable consumer in a compacted image: (cid, name, config, created, state, pause_until)."""

CREATE, UPDATE, DELETE, START, DELIVER, ACK, DROP, FORGET, PURGE, PAUSE, STATE = range(1, 12)
POLICIES = ("none", "all", "explicit")

HDR = struct.Struct("<IIB")  # crc, length (of type + payload), type
CID = struct.Struct("<I")
CID_SEQ = struct.Struct("<IQ")
CID_SEQ_TS = struct.Struct("<IQq")
CID_SEQ_SEQ = struct.Struct("<IQQ")
CID_TS = struct.Struct("<Iq")
CREATE_HEAD = struct.Struct("<IBqH")
SNAP = struct.Struct("<IQQQQqqII")
PEND = struct.Struct("<QQq")
REDEL = struct.Struct("<QI")


@dataclass
class Recovered:
    """A consumer as the log describes it."""

    cid: int
    name: str
    config: bytes
    created: int
    state: ConsumerState
    pause_until: int = 0
    deleted: bool = False


@dataclass
class Replay:
    """What a replay of the log recovered: the consumers by id, and the next id to give."""

    consumers: dict[int, Recovered] = field(default_factory=dict)
    next_cid: int = 1


U32 = struct.Struct("<I")
LEN_TYPE = struct.Struct("<IB")
# The two records written per delivered and acknowledged message, packed in one call each
# (length, type and payload: what ``_record`` builds from the parts).
DELIVER_TAIL = struct.Struct("<IBIQq")
ACK_TAIL = struct.Struct("<IBIQQ")


def record(rtype: int, payload: bytes) -> bytes:
    """One record: ``u32 crc32c | u32 length | u8 type | payload``."""
    tail = LEN_TYPE.pack(len(payload) + 1, rtype) + payload
    return U32.pack(crc32c(tail)) + tail


def encode_snapshot(cid: int, st: ConsumerState, pause_until: int) -> bytes:
    """STATE record payload for ``st``."""
    parts = [
        SNAP.pack(
            cid,
            st.dseq,
            st.sseq,
            st.floor_dseq,
            st.floor_sseq,
            st.last_delivered_ts,
            pause_until,
            len(st.pending),
            len(st.redelivered),
        )
    ]
    parts.extend(PEND.pack(s, p.dseq, p.ts) for s, p in sorted(st.pending.items()))
    parts.extend(REDEL.pack(s, n) for s, n in sorted(st.redelivered.items()))
    return b"".join(parts)


def _apply(rp: Replay, rtype: int, p: bytes | memoryview) -> None:
    if rtype == CREATE:
        cid, pol, created, nlen = CREATE_HEAD.unpack_from(p)
        off = CREATE_HEAD.size
        name = bytes(p[off : off + nlen]).decode()
        cfg = bytes(p[off + nlen :])
        policy = POLICIES[pol] if pol < len(POLICIES) else "explicit"
        rp.consumers[cid] = Recovered(cid, name, cfg, created, ConsumerState(policy))
        rp.next_cid = max(rp.next_cid, cid + 1)
        return
    (cid,) = CID.unpack_from(p)
    c = rp.consumers.get(cid)
    if c is None:
        return  # a record of a consumer whose CREATE was compacted away with its DELETE
    st = c.state
    if rtype == DELIVER:
        _, sseq, ts = CID_SEQ_TS.unpack_from(p)
        st.deliver(sseq, ts)
    elif rtype == ACK:
        _, sseq, dseq = CID_SEQ_SEQ.unpack_from(p)
        st.ack(sseq, dseq, 0)
    elif rtype == UPDATE:
        c.config = bytes(p[CID.size :])
    elif rtype == DELETE:
        c.deleted = True
        del rp.consumers[cid]
    elif rtype == START:
        st.start_at(CID_SEQ.unpack_from(p)[1])
    elif rtype == DROP:
        st.drop_max_delivered(CID_SEQ.unpack_from(p)[1])
    elif rtype == FORGET:
        st.forget(CID_SEQ.unpack_from(p)[1])
    elif rtype == PURGE:
        st.purge_below(CID_SEQ.unpack_from(p)[1])
    elif rtype == PAUSE:
        c.pause_until = CID_TS.unpack_from(p)[1]
    elif rtype == STATE:
        (_, dseq, sseq, fd, fs, lts, pause, npend, nredel) = SNAP.unpack_from(p)
        fresh = ConsumerState(st.ack_policy, dseq, sseq, fd, fs, last_delivered_ts=lts)
        off = SNAP.size
        for _ in range(npend):
            s, d, ts = PEND.unpack_from(p, off)
            off += PEND.size
            fresh.pending[s] = Pending(d, ts)
            fresh._order.append(s)
        for _ in range(nredel):
            s, n = REDEL.unpack_from(p, off)
            off += REDEL.size
            fresh.redelivered[s] = n
        c.state = fresh
        c.pause_until = pause


def replay(data: bytes) -> tuple[Replay, int, bool]:
    """Apply every whole record of ``data``; return (result, bytes of valid prefix, corrupt)."""
    rp = Replay()
    off, n = 0, len(data)
    mv = memoryview(data)
    while off + HDR.size <= n:
        crc, length, rtype = HDR.unpack_from(data, off)
        end = off + 8 + length
        if length < 1 or end > n:
            # Incomplete record at the end: a torn tail.
            return rp, off, False
        if crc32c(mv[off + 4 : end]) != crc:
            # Garbage at the very end is a torn tail; a bad record followed by more data is not.
            return rp, off, end < n
        try:
            _apply(rp, rtype, mv[off + 9 : end])
        except (struct.error, UnicodeDecodeError, IndexError):
            return rp, off, True
        off = end
    return rp, off, off != n and n - off >= HDR.size


def replayed(rp: Replay) -> list[ConsumerTuple]:
    """The consumers a replay recovered, as an image lists them (``encode_image``)."""
    return [(c.cid, c.name, c.config, c.created, c.state, c.pause_until) for c in rp.consumers.values()]


def encode_image(consumers: list[ConsumerTuple]) -> bytes:
    """The compacted log: one CREATE + STATE record per consumer."""
    parts = []
    for cid, name, cfg, created, st, pause in consumers:
        nb = name.encode()
        pol = POLICIES.index(st.ack_policy) if st.ack_policy in POLICIES else 2
        parts.append(record(CREATE, CREATE_HEAD.pack(cid, pol, created, len(nb)) + nb + cfg))
        parts.append(record(STATE, encode_snapshot(cid, st, pause)))
    return b"".join(parts)
