"""Offsets, admission control and partition planning (pure functions, no I/O).

An offset is ``{"ORDERS": 1001, "PAYMENTS": 77}``: per stream, the **next sequence to read**
(Kafka's convention). Spark serialises offsets with ``json.dumps`` and compares the *strings*
(it caches partition planning by them), so every offset handed to Spark is canonical: keys
sorted, plain ints. A micro-batch ``[start, end)`` becomes contiguous sequence ranges, one Spark
task each. Deleted sequences are simply holes in a range: counting is in sequence numbers, as
Kafka counts offsets.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple

from jetlog.spark.options import EARLIEST, LATEST


class DataLossError(RuntimeError):
    """Data the query still needed was removed (retention limits, purge, stream deletion)."""


class StreamPosition(NamedTuple):
    """What a stream holds: ``first_seq`` as JetStream reports it (0 or last+1 when empty) and
    ``hwm``, the last *committed* sequence (0 when nothing was ever stored)."""

    first_seq: int
    hwm: int

    @property
    def earliest(self) -> int:
        """The next sequence to read from the oldest stored message."""
        return max(self.first_seq, 1)

    @property
    def latest(self) -> int:
        """The next sequence to read after everything committed."""
        return self.hwm + 1


@dataclass(frozen=True)
class SeqRange:
    """Sequences ``start <= seq < end`` of one stream."""

    stream: str
    start: int
    end: int

    def __len__(self) -> int:
        return max(0, self.end - self.start)


def canonical(offsets: Mapping[str, int]) -> dict[str, int]:
    """Sorted keys, int values: the only form ever returned to Spark."""
    return {k: int(offsets[k]) for k in sorted(offsets)}


def parse_offset(offset: Mapping[str, object], what: str = "offset") -> dict[str, int]:
    """An offset as Spark hands it back (decoded JSON from the checkpoint) → ``{stream: seq}``."""
    out: dict[str, int] = {}
    for k, v in offset.items():
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(
                f"{what}: invalid sequence {v!r} for stream {k!r} (checkpoint from another source?)"
            )
        out[str(k)] = v
    return out


def resolve_spec(
    spec: Mapping[str, int], positions: Mapping[str, StreamPosition | None], option: str
) -> dict[str, int]:
    """Turn a per-stream spec (sequence, EARLIEST, LATEST) into sequences, using ``positions``."""
    out: dict[str, int] = {}
    for s, v in spec.items():
        if v in (EARLIEST, LATEST):
            pos = positions.get(s)
            if pos is None:
                raise DataLossError(f"stream {s} not found (needed to resolve option {option})")
            out[s] = pos.earliest if v == EARLIEST else pos.latest
        else:
            out[s] = v
    return canonical(out)


def split_budget(start: Mapping[str, int], latest: Mapping[str, int], max_rows: int) -> dict[str, int]:
    """End offsets admitting at most ``max_rows`` sequences in total.

    The budget is shared in proportion to each stream's backlog (each share floored, as Kafka
    does), then the rounding remainder is handed out in stream-name order, so the result is
    deterministic and uses the whole budget whenever the backlog is larger than it.
    """
    avail = {s: max(0, latest[s] - start[s]) for s in latest}
    total = sum(avail.values())
    if total <= max_rows:
        return canonical({s: start[s] + avail[s] for s in latest})
    end: dict[str, int] = {}
    used = 0
    for s in sorted(latest):
        share = avail[s] * max_rows // total
        end[s] = start[s] + share
        used += share
    left = max_rows - used
    for s in sorted(latest):
        if left <= 0:
            break
        take = min(left, start[s] + avail[s] - end[s])
        end[s] += take
        left -= take
    return canonical(end)


def plan_ranges(
    start: Mapping[str, int], end: Mapping[str, int], min_partitions: int, max_records: int
) -> list[SeqRange]:
    """Split ``[start, end)`` into contiguous ranges: at most ``max_records`` sequences each and
    at least ``min_partitions`` ranges overall (a hint, as in Kafka: extra splits go to streams in
    proportion to their size; a range never gets smaller than one sequence)."""
    sizes = {s: end[s] - start.get(s, end[s]) for s in sorted(end)}
    sizes = {s: n for s, n in sizes.items() if n > 0}
    total = sum(sizes.values())
    if not total:
        return []
    parts = {s: -(-n // max_records) for s, n in sizes.items()}
    if sum(parts.values()) < min_partitions:
        for s, n in sizes.items():
            want = -(-n * min_partitions // total)  # ceil(n * min_partitions / total)
            parts[s] = min(n, max(parts[s], want))
    out: list[SeqRange] = []
    for s, n in sizes.items():
        k = parts[s]
        base, extra = divmod(n, k)
        lo = start[s]
        for i in range(k):
            hi = lo + base + (1 if i < extra else 0)
            out.append(SeqRange(s, lo, hi))
            lo = hi
    return out


def data_loss_message(stream: str, first_lost: int, last_lost: int, first_seq: int) -> str:
    """The error text for sequences removed before the query read them."""
    return (
        f"stream {stream}: sequences {first_lost}..{last_lost} were removed (retention limits or a purge) "
        f"before the query read them; the first stored sequence is now {first_seq}. "
        "Set failOnDataLoss=false to skip lost data."
    )


def apply_data_loss_rule(
    start: Mapping[str, int],
    end: Mapping[str, int],
    positions: Mapping[str, StreamPosition | None],
    fail: bool,
    new_streams: frozenset[str] = frozenset(),
) -> dict[str, int]:
    """Check a batch's start offsets against what the streams still hold.

    A start below ``first_seq`` means retention or a purge removed sequences the query had not
    read yet: raise :class:`DataLossError` naming the stream and range (``fail``), or move the
    start up to ``first_seq`` (skipping them). Streams in ``new_streams`` (added to the query
    after its checkpoint was written) start at whatever is stored, silently. A stream that no
    longer exists is an error too, or skipped. Only streams with a non-empty range are checked.
    """
    out = dict(start)
    for s, e in end.items():
        b = start.get(s, 1)
        if e <= b:
            continue
        pos = positions.get(s)
        if pos is None:
            if fail:
                raise DataLossError(
                    f"stream {s} no longer exists but the query has not read sequences {b}..{e - 1}. "
                    "Set failOnDataLoss=false to skip lost data."
                )
            out[s] = e
            continue
        if b < pos.first_seq:
            if fail and s not in new_streams:
                raise DataLossError(data_loss_message(s, b, min(pos.first_seq, e) - 1, pos.first_seq))
            out[s] = min(pos.first_seq, e)
        else:
            out[s] = b
    return out
