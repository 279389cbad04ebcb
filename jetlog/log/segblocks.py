"""The index's blocks a segment at a time: building them from a segment's columns and loading
them (recovery), swapping or dropping a segment's blocks (compaction, retention), and reading a
segment's columns back (its index file).

Apart from ``index.py``, which holds the per-message work (``Index.add``, lookups, removals),
because these run once per segment, never per message, and only for the file store. They are
functions on an ``Index``, not its methods: ``index.py`` does not import this module, and
``make_blocks`` reads ``index.BLOCK_MAX`` when called (tests shrink it), as
``replica.index_extend`` does.
"""

from __future__ import annotations

from array import array
from itertools import compress
from typing import Any

from jetlog.log import index as _index
from jetlog.log.columns import extend_col
from jetlog.log.index import Block, Index


def make_blocks(
    ix: Index,
    seg: Any,
    seqs: array[int],
    ts: array[int],
    sid: array[int],
    size: array[int],
    pos: array[int],
    aux: array[int],
    live: bytearray,
    keep_dead: bool,
    sums: tuple[int, array[int] | None] = (0, None),
) -> list[Block]:
    """Blocks for a segment's columns (dead entries dropped unless ``keep_dead``). Does not
    touch any counter. ``sums``: ``(chunk, per-chunk sums of size)`` from an index file
    (``SegmentData.size_sums``), used when chunks are blocks and every entry is live."""
    bmax = _index.BLOCK_MAX  # looked up now: tests shrink it
    chunk, per = sums
    dead = live.count(0)
    if chunk != bmax or dead:
        per = None
    if not keep_dead and dead:
        seqs = array("Q", compress(seqs, live))
        ts = array("q", compress(ts, live))
        sid = array("I", compress(sid, live))
        size = array("I", compress(size, live))
        pos = array("I", compress(pos, live))
        aux = array("I", compress(aux, live))
        live = bytearray(b"\x01") * len(seqs)
        dead = 0
    out: list[Block] = []
    for c in range(0, len(seqs), bmax):
        e = c + bmax
        blk = Block(seg, keep_dead, ix.payload)
        blk.seqs, blk.ts, blk.sid = seqs[c:e], ts[c:e], sid[c:e]
        blk.size, blk.pos, blk.aux = size[c:e], pos[c:e], aux[c:e]
        blk.live = live[c:e]
        blk.nlive = blk.live.count(1) if dead else len(blk.live)
        # All live (recovery of a store without removals): no mask to apply, and with the
        # file's sums not even a pass over the sizes (a Python step per entry).
        if per is not None:
            blk.live_bytes = per[c // bmax]
        elif blk.nlive == len(blk.live):
            blk.live_bytes = sum(blk.size)
        else:
            blk.live_bytes = sum(compress(blk.size, blk.live))
        out.append(blk)
    if keep_dead and out:
        # A writer segment's last block is where appends go (``add``, ``add_run``,
        # ``replica.index_extend``): it must own its columns. The others are never grown
        # or written to (compaction and pruning build new arrays; positions are set only
        # for entries still being appended).
        out[-1].own()
    return out


def bulk_load(
    ix: Index,
    seg: Any,
    seqs: array[int],
    ts: array[int],
    sid: array[int],
    size: array[int],
    pos: array[int],
    aux: array[int],
    live: bytearray,
    keep_dead: bool,
    sums: tuple[int, array[int] | None] = (0, None),
    one_sid: int | None = None,
) -> None:
    """Append a segment's columns (sequences above every existing entry) with liveness.
    ``sums``: see :func:`make_blocks`; ``one_sid``: the subject of every entry, when the
    caller knows there is one (a segment whose subject table has one name)."""
    subjects = ix.subjects
    for blk in make_blocks(ix, seg, seqs, ts, sid, size, pos, aux, live, keep_dead, sums):
        ix.blocks.append(blk)
        ix.firsts.append(blk.seqs[0])
        if blk.nlive:
            if blk.nlive == len(blk.seqs):
                if one_sid is not None:
                    subjects.extend(one_sid, blk.seqs)
                else:
                    subjects.add_many(blk.seqs, blk.sid)
            else:
                subjects.add_many(
                    array("Q", compress(blk.seqs, blk.live)), array("I", compress(blk.sid, blk.live))
                )
            if not ix.msgs:
                ix.first = blk.seqs[blk.live.find(1)]
            ix.msgs += blk.nlive
            ix.bytes += blk.live_bytes
            if seg is not None:
                seg.nlive += blk.nlive


def replace_blocks(ix: Index, seg: Any, blocks: list[Block]) -> None:
    """Swap the blocks of ``seg`` for ``blocks`` (same live messages, new locations)."""
    keep = [b for b in ix.blocks if b.seg is not seg]
    keep.extend(b for b in blocks if b.seqs)
    keep.sort(key=lambda b: b.seqs[0])
    ix.blocks = keep
    ix.firsts = [b.seqs[0] for b in keep]


def drop_segments(ix: Index, segs: set[Any]) -> None:
    """Forget the blocks of deleted segments (nothing in them is live)."""
    ix.blocks = [b for b in ix.blocks if b.seg not in segs]
    ix.firsts = [b.seqs[0] for b in ix.blocks]


def segment_columns(ix: Index, seg: Any) -> tuple[array[int], ...]:
    """Concatenated (seqs, ts, sid, size, pos, aux) of every entry of ``seg``."""
    cols: tuple[array[int], ...] = (
        array("Q"),
        array("q"),
        array("I"),
        array("I"),
        array("I"),
        array("I"),
    )
    for b in ix.blocks:
        if b.seg is seg:
            for dst, src in zip(cols, (b.seqs, b.ts, b.sid, b.size, b.pos, b.aux), strict=True):
                extend_col(dst, src)
    return cols


def segment_live_seqs(ix: Index, seg: Any) -> array[int]:
    """Live sequences of ``seg``, ascending."""
    out = array("Q")
    for b in ix.blocks:
        if b.seg is seg and b.nlive:
            out.extend(compress(b.seqs, b.live))
    return out
