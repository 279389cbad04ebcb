"""Bulk committed-range reads for the Spark source (and any tool that reads a stream in bulk).

``$JETLOG.API.FETCH.<stream>`` answers one request with one reply holding a whole range of
records as a JLC1 columnar frame (:mod:`jetlog.wire.columnar`), instead of one NATS message per
record as Direct Get does. Request (JSON, unknown fields refused)::

    {"start": 1001, "end": 5001, "max_bytes": 1048576, "max_msgs": 0, "headers": false,
     "start_ts": 0, "format": "jlc1"}

``"format": "jlr1"`` asks for the stored records themselves instead (:mod:`jetlog.wire.rawframe`;
reply header ``Jl-Format: jlr1``): the node ships runs of segment bytes, the reader decodes.

Reply headers: ``Jl-Stream``, ``Jl-Next-Seq`` (first sequence not covered; the reader loops on
it), ``Jl-Hwm`` (the responder's committed high-water mark: no row beyond it is ever returned),
``Jl-First-Seq`` (first sequence still stored: a reader whose start is below it lost data to
retention or purge) and ``Jl-Count``. Errors are status-only replies (404 unknown stream,
400 bad request with ``Jl-Error``, 413 when one record alone exceeds the byte budget).

``$JETLOG.API.OFFSETS`` answers ``{"streams": [names]}`` with the first sequence and committed
high-water mark of each stream in one round trip (``null`` for an unknown stream).

Both read through :func:`committed_hw`, so when replication arrives and "committed" becomes the
replicated high-water mark, readers do not change. This module is pure logic over a store.
"""

from __future__ import annotations

from typing import Any

import msgspec

from jetlog.log.filestore import FileStore
from jetlog.log.rawread import read_runs, runs_from_messages
from jetlog.log.store import MsgStore
from jetlog.wire import columnar, rawframe
from jetlog.wire import headers as H
from jetlog.wire.subjects import subject_bytes

FETCH_PREFIX = "$JETLOG.API.FETCH."
OFFSETS_SUBJECT = "$JETLOG.API.OFFSETS"

FORMATS = ("jlc1", "jlr1")

# Room left in a reply for the header block and the NATS protocol line.
REPLY_RESERVE = 1024

Frame = tuple[bytes, bytes]

NOT_FOUND: Frame = (H.status(404, "Stream Not Found"), b"")


class FetchRequest(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """A bulk read of ``start <= seq < end`` (``end`` 0: up to the high-water mark)."""

    start: int = 1
    end: int = 0
    max_bytes: int = 0
    max_msgs: int = 0
    headers: bool = False
    start_ts: int = 0
    format: str = "jlc1"
    """``jlc1``: columns built by the node; ``jlr1``: stored records passed through (the
    reader checks and columnizes them; ``headers`` does not apply, records carry theirs)."""


class OffsetsRequest(msgspec.Struct, forbid_unknown_fields=True):
    """Offsets of several streams."""

    streams: list[str]


class StreamOffsets(msgspec.Struct):
    """``first_seq`` still stored, committed high-water mark ``hwm`` and their timestamps."""

    first_seq: int
    hwm: int
    first_ts: int
    last_ts: int


class OffsetsReply(msgspec.Struct):
    streams: dict[str, StreamOffsets | None]


_fetch_decoder = msgspec.json.Decoder(FetchRequest)
_offsets_decoder = msgspec.json.Decoder(OffsetsRequest)
_encoder = msgspec.json.Encoder()


def committed_hw(stream: Any) -> int:
    """The last sequence readers may see on this node.

    Single node: fsynced and acknowledged (the store's committed sequence). The cluster turns
    this into the replicated high-water mark; every committed read goes through here.
    """
    return int(stream.committed_seq)


def bad_request(detail: str) -> Frame:
    """400 with the reason in ``Jl-Error`` (header values cannot hold CR/LF)."""
    clean = detail.replace("\r", " ").replace("\n", " ")[:200]
    return (H.status(400, "Bad Request", [("Jl-Error", clean)]), b"")


def decode_fetch(body: bytes) -> FetchRequest | str:
    """The request, or the reason it is refused."""
    if not body.strip():
        return FetchRequest()
    try:
        req = _fetch_decoder.decode(body)
    except (msgspec.DecodeError, UnicodeDecodeError) as e:  # msgspec: invalid UTF-8 in a string
        return f"invalid request: {e}"
    if req.start < 1:
        return "start must be >= 1"
    if req.end < 0 or req.max_bytes < 0 or req.max_msgs < 0 or req.start_ts < 0:
        return "end, max_bytes, max_msgs and start_ts must not be negative"
    if req.format not in FORMATS:
        return f"format must be one of {', '.join(FORMATS)}"
    return req


def _split_headers(hdr: bytes) -> list[tuple[bytes, bytes]]:
    if not hdr:
        return []
    _code, _desc, pairs = H.parse(hdr)
    return [(k.encode(), v.encode()) for k, v in pairs]


def fetch(name: str, store: MsgStore, hw: int, req: FetchRequest, max_payload: int) -> Frame:
    """Answer one bulk read from ``store`` bounded by the committed mark ``hw``."""
    budget = max_payload - REPLY_RESERVE
    if req.max_bytes:
        budget = min(budget, req.max_bytes)
    start = req.start
    if req.start_ts:
        # First sequence stamped at or after start_ts (nothing: past the end).
        at = store.seq_for_time(req.start_ts)
        start = max(start, at if at else hw + 1)
    first = store.first_seq
    stop = hw + 1 if not req.end else min(req.end, hw + 1)  # exclusive
    if req.format == "jlr1":
        return _fetch_raw(name, store, hw, first, start, stop, budget, req.max_msgs or (1 << 62))
    seqs: list[int] = []
    tss: list[int] = []
    subjects: list[bytes] = []
    datas: list[bytes] = []
    hdrs: list[list[tuple[bytes, bytes]]] | None = [] if req.headers else None
    used = columnar.FRAME_OVERHEAD
    limit = req.max_msgs or (1 << 62)
    next_seq = max(start, 1)
    for m in store.iter_range(start, stop - 1):
        subj = subject_bytes(m.subject)
        pairs = _split_headers(m.hdr) if hdrs is not None else None
        size = columnar.ROW_OVERHEAD + len(subj) + len(m.data)
        if pairs is not None:
            size += columnar.ROW_HEADER_OVERHEAD + sum(
                columnar.ENTRY_OVERHEAD + len(k) + len(v) for k, v in pairs
            )
        if len(seqs) >= limit or (used + size > budget and seqs):
            break
        if used + size > budget:
            # One record alone does not fit: say which, so the reader can report it.
            return (H.status(413, "Message Too Large", _meta(name, m.seq, hw, first, 0)), b"")
        used += size
        seqs.append(m.seq)
        tss.append(m.ts)
        subjects.append(subj)
        datas.append(m.data)
        if hdrs is not None and pairs is not None:
            hdrs.append(pairs)
        next_seq = m.seq + 1
    else:
        next_seq = max(next_seq, stop)
    payload = columnar.encode(seqs, tss, subjects, datas, hdrs)
    return (H.encode(_meta(name, next_seq, hw, first, len(seqs))), payload)


def _fetch_raw(
    name: str, store: MsgStore, hw: int, first: int, start: int, stop: int, budget: int, limit: int
) -> Frame:
    """The JLR1 answer: runs of stored records (see :mod:`jetlog.log.rawread`)."""
    if isinstance(store, FileStore):
        got = read_runs(store, start, stop, budget, limit, check_cuts=True)
    else:
        got = runs_from_messages(store.iter_range(start, stop - 1), start, stop, budget, limit)
    if got.too_big:
        return (H.status(413, "Message Too Large", _meta(name, got.too_big, hw, first, 0)), b"")
    meta = _meta(name, max(got.next_seq, start), hw, first, got.nrec)
    meta.append(("Jl-Format", "jlr1"))
    return (H.encode(meta), b"".join(rawframe.encode(got.runs)))


def _meta(name: str, next_seq: int, hw: int, first: int, count: int) -> list[tuple[str, str]]:
    return [
        ("Jl-Stream", name),
        ("Jl-Next-Seq", str(next_seq)),
        ("Jl-Hwm", str(hw)),
        ("Jl-First-Seq", str(first)),
        ("Jl-Count", str(count)),
    ]


def decode_offsets(body: bytes) -> OffsetsRequest | str:
    """The offsets request, or the reason it is refused."""
    try:
        return _offsets_decoder.decode(body)
    except (msgspec.DecodeError, UnicodeDecodeError) as e:  # msgspec: invalid UTF-8 in a string
        return f"invalid request: {e}"


def offsets_reply(streams: dict[str, Any | None]) -> bytes:
    """JSON offsets of the named streams (``None`` entries: unknown streams)."""
    out: dict[str, StreamOffsets | None] = {}
    for name, stream in streams.items():
        if stream is None:
            out[name] = None
            continue
        st = stream.store.state()
        hw = committed_hw(stream)
        last_ts = st.last_ts if hw >= st.last_seq else _ts_at_or_before(stream.store, hw)
        out[name] = StreamOffsets(st.first_seq, hw, st.first_ts, last_ts)
    return _encoder.encode(OffsetsReply(out))


def _ts_at_or_before(store: MsgStore, hw: int) -> int:
    m = store.load_last(None, hw) if hw else None
    return m.ts if m is not None else 0
