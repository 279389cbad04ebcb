"""Appending messages to a ``FileStore``: one (``append``) or a socket read's worth in one call
(``append_run``, the capture fast path).

Both are ``append_records``: the records are encoded (with their CRCs) into the open batch,
closing it at the batch limit and rolling the segment at the segment limit, and indexed, with
the per-message work hoisted out of the loop: one subject lookup per subject change, the index
columns gathered in arrays and added a stretch at a time (``Index.add_run``), one flusher kick.
A run stores exactly what appending its messages one by one stores (property-tested).
"""

from __future__ import annotations

from itertools import repeat
from typing import TYPE_CHECKING, Protocol

from crc32c import crc32c

from jetlog.log.segment import COMPRESSED
from jetlog.wire import records as rc

if TYPE_CHECKING:
    from jetlog.log.commit import OpenBatch
    from jetlog.log.index import Index
    from jetlog.log.pipeline import Flusher
    from jetlog.log.segment import Segment

_RNC = rc.REC_NOCRC
_CRC = rc.CRC
_TTL = rc.TTL
_HDR = rc.HEADER_SIZE

SPLIT_AT = 4096
"""Payloads of at least this many bytes stay out of their record's bytes (two fewer copies of
each: 16 KiB messages spent ~13 % of the node's CPU in memmove); smaller ones are cheaper to
concatenate than to carry as a second part."""


class AppendHost(Protocol):
    """What ``append_run`` uses of its ``FileStore`` (which satisfies this structurally)."""

    _ix: Index
    _ob: OpenBatch
    _seg: Segment
    _fl: Flusher
    _pend: dict[int, tuple[bytes, bytes]]
    _compressed: bool
    _segment_bytes: int
    _refuse: bool

    def _check_writable(self) -> None: ...
    def _close_batch(self) -> OpenBatch: ...
    def _roll(self) -> OpenBatch: ...


def append_records(
    st: AppendHost, subjects: list[str], hdrs: list[bytes] | None, datas: list[bytes], ts: int, ttl: int = 0
) -> int:
    """Store ``datas[i]`` on ``subjects[i]`` with header block ``hdrs[i]`` (none when ``hdrs``
    is None) and the next sequences, all at store time ``ts`` with TTL ``ttl`` ns (0: none);
    return the last sequence. ``FileStore.append`` is this for one message. Raises
    ``StreamUnavailableError`` (nothing stored) once the store has failed."""
    if st._refuse:
        st._check_writable()
    ix = st._ix
    names = ix.subjects
    ids = names.ids
    raw = names.raw
    pend = st._pend
    pack = _RNC.pack
    cpack = _CRC.pack
    compressed = st._compressed
    seg_max = st._segment_bytes
    ob = st._ob
    seg = st._seg
    seq = first = ix.last_seq + 1
    exp = ts + ttl if ttl else 0
    texp = _TTL.pack(exp) if ttl else b""
    # The index columns of the stretch since the last segment roll (entries of one segment).
    c_sid: list[int] = []
    c_size: list[int] = []
    c_pos: list[int] = []
    c_aux: list[int] = []
    subject = None
    sid = slen = 0
    sb = b""
    if len(subjects) != len(datas) or (hdrs is not None and len(hdrs) != len(datas)):
        raise ValueError("append_records: subjects, hdrs and datas differ in length")
    for subj, hdr, data in zip(subjects, repeat(b"") if hdrs is None else hdrs, datas, strict=False):
        if subj != subject:
            subject = subj
            got = ids.get(subj)
            sid = names.intern(subj) if got is None else got
            sb = raw[sid]
            slen = len(sb)
        hlen = len(hdr)
        dlen = len(data)
        if ttl:
            head = pack(seq, ts, slen, 1, 0, hlen, dlen) + texp + sb + hdr
        else:
            head = pack(seq, ts, slen, 0, 0, hlen, dlen) + sb + hdr
        big = dlen >= SPLIT_AT
        if not big:
            rec = head + data
            rec = cpack(crc32c(rec)) + rec
            rlen = len(rec)
        else:
            # A large payload is not copied into its record: the record is its head (CRC,
            # fields, subject, headers) and the payload itself, joined once when the batch is
            # sealed. The CRC chains over both, the same value as over the joined record.
            rec = cpack(crc32c(data, crc32c(head))) + head
            rlen = len(rec) + dlen
        if ob.body + rlen > ob.limit and (ob.nrec or ob.ops):
            ob = st._close_batch()  # reads ix.last_seq and last_ts: kept current below
        if ob.pos + _HDR + ob.body + rlen > seg_max and seg.nrecords:
            # The entries so far belong to the old segment: index them before it rolls.
            if c_sid:
                ix.add_run(seg, first, ts, c_sid, c_size, c_pos, c_aux)
                seg.max_seq = seq - 1
            first = seq
            c_sid, c_size, c_pos, c_aux = [], [], [], []
            ob = st._roll()
            seg = st._seg
        c_sid.append(sid)
        c_size.append(30 + slen + dlen + (4 + hlen if hlen else 0))  # nats-server's accounting
        if compressed:
            c_pos.append(0)
            c_aux.append(COMPRESSED | ob.body)
        else:
            c_pos.append(ob.pos + _HDR + ob.body)
            c_aux.append(rlen)
        ix.last_seq = seq
        ix.last_ts = ts
        if not seg.nrecords:
            seg.min_seq = seq
        seg.nrecords += 1
        if ttl:
            ix.ttl[seq] = exp
            seg.ttl[seq] = exp
        pend[seq] = (hdr, data)
        ob.parts.append(rec)
        if big:
            ob.parts.append(data)
        ob.body += rlen
        if not ob.nrec:
            ob.first_rec = seq
        ob.nrec += 1
        ob.last_rec = seq
        seq += 1
    last = seq - 1
    if c_sid:
        ix.add_run(seg, first, ts, c_sid, c_size, c_pos, c_aux)
        seg.max_seq = last
    fl = st._fl
    if fl.idle:
        fl.kick()
    return last
