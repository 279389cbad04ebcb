"""Appending messages to a ``FileStore``: one (``append``) or a socket read's worth in one call
(``append_run``, the capture fast path).

Both are ``append_records``: the records are encoded (with their CRCs) into the open batch,
closing it at the batch limit and rolling the segment at the segment limit, and indexed, with
the per-message work hoisted out of the loop: one subject lookup per subject change, the index
columns gathered in arrays and added a stretch at a time (``Index.add_run``), one flusher kick.
A run stores exactly what appending its messages one by one stores (property-tested).
"""

from __future__ import annotations

from itertools import accumulate, repeat
from typing import TYPE_CHECKING, Protocol

from jetlog.log.segment import COMPRESSED
from jetlog.wire import records as rc
from jetlog.wire.crc import crc32c
from jetlog.wire.subjects import subject_bytes

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


UNIFORM_MIN = 4
"""Runs of at least this many messages try ``_append_uniform`` (below it the loop is as cheap)."""


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
    if hdrs is None and not ttl and not compressed and len(datas) >= UNIFORM_MIN:
        last = _append_uniform(st, subjects, datas, ts)
        if last:
            return last
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


def _append_uniform(st: AppendHost, subjects: list[str], datas: list[bytes], ts: int) -> int:
    """The capture run's common case, a list at a time: one subject, no headers, no TTL, an
    uncompressed store, every payload small enough to copy into its record, and the whole run
    fitting the open batch and the writer segment (so no batch closes and no segment rolls
    within it). Stores exactly what ``append_records``' loop stores (the same records, index
    columns and batch state; property-tested against one-by-one appends); returns the last
    sequence, or 0 when the run is not such a case (nothing done: the loop takes it)."""
    subj = subjects[0]
    n = len(datas)
    if subjects.count(subj) != n:
        return 0
    ix = st._ix
    names = ix.subjects
    sid = names.ids.get(subj)
    sb = names.raw[sid] if sid is not None else subject_bytes(subj)
    slen = len(sb)
    lens = list(map(len, datas))
    if max(lens) >= SPLIT_AT:
        return 0
    fixed = _CRC.size + _RNC.size + slen
    total = n * fixed + sum(lens)
    ob = st._ob
    # BOUNDS: the loop closes the open batch before a record that would take it past its limit
    # and rolls the segment before one that would take it past the segment size; a run inside
    # both does neither, so it can be laid down at once.
    if ob.body + total > ob.limit or ob.pos + _HDR + ob.body + total > st._segment_bytes:
        return 0
    if sid is None:
        sid = names.intern(subj)
    seg = st._seg
    first = ix.last_seq + 1
    last = first + n - 1
    pack = _RNC.pack
    cpack = _CRC.pack
    seqs = range(first, last + 1)
    recs = [pack(q, ts, slen, 0, 0, 0, dl) + sb + d for q, dl, d in zip(seqs, lens, datas, strict=True)]
    recs = [cpack(crc32c(r)) + r for r in recs]
    rlens = [fixed + dl for dl in lens]
    # Each record's file offset: the batch body so far, then the records before it.
    c_pos = list(accumulate(rlens[:-1], initial=ob.pos + _HDR + ob.body))
    acct = 30 + slen  # nats-server's accounting, as in the loop (no headers)
    ix.add_run(seg, first, ts, [sid] * n, [acct + dl for dl in lens], c_pos, rlens)
    seg.max_seq = last
    ix.last_seq = last
    ix.last_ts = ts
    if not seg.nrecords:
        seg.min_seq = first
    seg.nrecords += n
    st._pend.update(zip(seqs, zip(repeat(b""), datas, strict=False), strict=True))
    ob.parts.extend(recs)
    ob.body += total
    if not ob.nrec:
        ob.first_rec = first
    ob.nrec += n
    ob.last_rec = last
    fl = st._fl
    if fl.idle:
        fl.kick()
    return last
