"""The history checker: pure functions from a :class:`~jetlog.chaos.history.History` to the
anomalies it shows. No I/O, no clocks, so it is unit-tested on synthetic histories.

Kinds (``KINDS``), each counted per affected message or sequence:

* ``lost`` — a PubAck said "stored at seq s", but a replica that reaches s holds something else
  there (or nothing, or other bytes), or no replica reaches s, or s is above the final
  high-water mark.
* ``duplicated`` — one ``Nats-Msg-Id`` stored at two sequences of a replica (the publisher
  retried with the same id, so deduplication must keep one).
* ``reordered`` — a publisher awaits each ack before the next message, so its acknowledged
  messages must appear (and be acknowledged) in publish order.
* ``divergent`` — two replicas hold different messages at a sequence both hold at or below the
  high-water mark.
* ``redelivered`` — a consumer worker received a message again after an ``AckSync`` for it was
  answered (same worker: anything its connection delivered after the confirmation; another
  worker: received later than the confirmation by more than ``CROSS_WORKER_GRACE``). Confirms
  whose ack went out late (``latency`` ≥ ``ack_wait``/2) are not judged: the server may
  legitimately have redelivered before it saw that ack. The detail shows both deliveries'
  ack-subject tokens and labels a first delivery whose consumer sequence is below one the
  worker had already received ("older consumer state", see ``_older_state``); it is still
  counted, as the history cannot tell when such a stale state made it.
* ``undelivered`` — a committed message no consumer worker ever received.
* ``phantom`` — a delivery that is not the committed message at its stream sequence
  (deliveries must never go above the high-water mark).
* ``stuck`` — after healing, a publish was not acknowledged in time, the consumer did not drain,
  or a replica did not become current again (the runner's notes).
"""

from __future__ import annotations

import itertools
import time
from collections import defaultdict
from dataclasses import dataclass

from jetlog.chaos.history import Confirm, Delivery, History, Stored, header_msg_id, parse_msg_id, payload

KINDS = ("lost", "duplicated", "reordered", "divergent", "redelivered", "undelivered", "phantom", "stuck")
CROSS_WORKER_GRACE = 0.2  # seconds; deliveries to another connection are ordered by wall clock only
MAX_DETAIL = 12  # per kind: anomalies beyond this are counted, their details summarized


@dataclass(frozen=True)
class Anomaly:
    """One finding: its kind (one of ``KINDS``) and a human-readable description."""

    kind: str
    detail: str


def check(h: History) -> list[Anomaly]:
    """Every anomaly in ``h`` (an empty list for a correct history)."""
    out: list[Anomaly] = []
    ids = {node: _ids(log) for node, log in h.replicas.items()}
    hw = h.hw if h.hw else _fallback_hw(h)
    out += _lost(h, hw)
    out += _duplicated(ids)
    out += _reordered(h, ids)
    out += _divergent(h.replicas, hw)
    if h.consumer:
        committed = _committed(h.replicas, hw)
        out += _redelivered(h)
        out += _undelivered(h, committed)
        # Unknown HW: a delivery up to the end every replica holds may have been committed
        # (its PubAck lost); judge deliveries against that end, not the acks.
        reach = hw if h.hw else max(hw, _common_end(h.replicas))
        out += _phantom(h, committed if reach == hw else _committed(h.replicas, reach), reach)
    out += _stuck(h)
    return out


def counts(anomalies: list[Anomaly]) -> dict[str, int]:
    """Anomalies per kind (every kind present, zero included)."""
    c = dict.fromkeys(KINDS, 0)
    for a in anomalies:
        c[a.kind] = c.get(a.kind, 0) + 1
    return c


def summarize(anomalies: list[Anomaly], limit: int = MAX_DETAIL) -> list[str]:
    """Report lines: up to ``limit`` details per kind, then how many more."""
    by_kind: dict[str, list[Anomaly]] = defaultdict(list)
    for a in anomalies:
        by_kind[a.kind].append(a)
    lines: list[str] = []
    for kind, items in by_kind.items():
        lines.extend(f"{kind}: {a.detail}" for a in items[:limit])
        if len(items) > limit:
            lines.append(f"{kind}: ... and {len(items) - limit} more")
    return lines


# ---- helpers --------------------------------------------------------------------------------


def _ids(log: dict[int, Stored]) -> dict[str, list[int]]:
    by_id: dict[str, list[int]] = defaultdict(list)
    for seq in sorted(log):
        mid = header_msg_id(log[seq][1])
        if mid is not None:
            by_id[mid].append(seq)
    return by_id


def _common_end(replicas: dict[str, dict[int, Stored]]) -> int:
    return min((max(log) if log else 0) for log in replicas.values()) if replicas else 0


def _fallback_hw(h: History) -> int:
    """The high-water mark when the run could not read it (a stuck stream answers no INFO):
    the highest acknowledged sequence — everything acknowledged is committed, and nothing
    above it is known to be — or, without acks, the end every replica reaches."""
    if h.acks:
        return max(a.seq for a in h.acks)
    return _common_end(h.replicas)


def _lost(h: History, hw: int) -> list[Anomaly]:
    out = []
    for a in h.acks:
        want = payload(a.pid, a.i)
        bad: list[str] = []
        reached = 0
        for node, log in sorted(h.replicas.items()):
            if not log or a.seq > max(log):
                continue
            reached += 1
            got = log.get(a.seq)
            if got is None:
                bad.append(f"{node}: seq {a.seq} missing")
            elif header_msg_id(got[1]) != a.mid:
                bad.append(f"{node}: seq {a.seq} holds {header_msg_id(got[1])}")
            elif got[2] != want:
                bad.append(f"{node}: seq {a.seq} has other bytes")
        if h.replicas and not reached:
            bad.append("no replica reaches its seq")
        if hw and a.seq > hw:
            bad.append(f"acked above the final high-water mark {hw}")
        if bad:
            out.append(Anomaly("lost", f"{a.mid} acked at seq {a.seq}: " + "; ".join(bad)))
    return out


def _duplicated(ids: dict[str, dict[str, list[int]]]) -> list[Anomaly]:
    seqs_by_mid: dict[str, dict[str, list[int]]] = defaultdict(dict)
    for node, by_id in ids.items():
        for mid, seqs in by_id.items():
            if len(seqs) > 1:
                seqs_by_mid[mid][node] = seqs
    return [
        Anomaly("duplicated", f"{mid} stored at " + ", ".join(f"{n}: {s}" for n, s in sorted(where.items())))
        for mid, where in sorted(seqs_by_mid.items())
    ]


def _reordered(h: History, ids: dict[str, dict[str, list[int]]]) -> list[Anomaly]:
    out = []
    by_pub: dict[int, list[tuple[int, int, str]]] = defaultdict(list)
    for a in h.acks:
        by_pub[a.pid].append((a.i, a.seq, a.mid))
    for pid, acks in sorted(by_pub.items()):
        acks.sort()
        # The acks themselves: a later message acknowledged at a lower sequence.
        for (_, s0, m0), (_, s1, m1) in itertools.pairwise(acks):
            if s1 <= s0:
                out.append(Anomaly("reordered", f"p{pid}: {m1} acked at seq {s1}, {m0} at {s0}"))
                break
        # Where each replica stores them.
        for node, by_id in sorted(ids.items()):
            last = (0, "")
            for _, _, mid in acks:
                seqs = by_id.get(mid)
                if not seqs:
                    continue
                if seqs[0] <= last[0]:
                    out.append(
                        Anomaly(
                            "reordered", f"p{pid} on {node}: {mid} at seq {seqs[0]}, {last[1]} at {last[0]}"
                        )
                    )
                    break
                last = (seqs[0], mid)
    return out


def _divergent(replicas: dict[str, dict[int, Stored]], hw: int) -> list[Anomaly]:
    out = []
    nodes = sorted(replicas)
    for seq in range(1, hw + 1):
        held = {n: replicas[n][seq] for n in nodes if seq in replicas[n]}
        if len(set(held.values())) > 1:
            desc = ", ".join(f"{n}: {header_msg_id(v[1]) or v[0]}" for n, v in held.items())
            out.append(Anomaly("divergent", f"seq {seq}: {desc}"))
    return out


def _committed(replicas: dict[str, dict[int, Stored]], hw: int) -> dict[int, str]:
    """seq -> msg id of the committed log (any replica holding the seq; divergence is reported
    on its own)."""
    out: dict[int, str] = {}
    for log in replicas.values():
        for seq, v in log.items():
            if seq <= hw and seq not in out:
                mid = header_msg_id(v[1])
                if mid is not None and parse_msg_id(mid) is not None:
                    out[seq] = mid
    return out


def _redelivered(h: History) -> list[Anomaly]:
    out = []
    # Keyed by (id, seq): a duplicated copy at another seq is a different message (and
    # reported as ``duplicated``).
    judged: dict[tuple[str, int], Confirm] = {}
    for conf in h.confirms:
        if conf.latency < h.ack_wait / 2 and (conf.mid, conf.sseq) not in judged:
            judged[conf.mid, conf.sseq] = conf
    by_worker: dict[int, list[Delivery]] = defaultdict(list)
    for d in h.deliveries:
        by_worker[d.worker].append(d)
    for ds in by_worker.values():
        ds.sort(key=lambda d: d.order)
    for d in h.deliveries:
        c = judged.get((d.mid, d.sseq))
        if c is None:
            continue
        after = d.order > c.order if d.worker == c.worker else d.t > c.t + CROSS_WORKER_GRACE
        if not after:
            continue
        acked = _acked_delivery(by_worker[c.worker], c)
        text = (
            f"{d.mid} (seq {d.sseq}) delivered to worker {d.worker} ({_tokens(d)}) "
            f"{d.t - c.t:.3f}s after worker {c.worker}'s AckSync was confirmed{_wall(h, d.t)}"
        )
        if acked is not None:
            text += f"; the acknowledged delivery: {_tokens(acked)}"
        older = _older_state(by_worker[d.worker], d)
        if older is not None:
            text += (
                f" [older consumer state: cseq {d.cseq} below cseq {older.cseq} (seq {older.sseq}) "
                f"that worker {d.worker} received {d.t - older.t:.3f}s before it, so a stale "
                "state sent it as a first delivery: a deposed leader's frame made before the "
                "ack and received late, or a delivery made after it by a deposed leader or by "
                "a leader whose state lacks the ack; the history cannot tell which]"
            )
        out.append(Anomaly("redelivered", text))
    return out


def _tokens(d: Delivery) -> str:
    """A delivery's ack-subject tokens, as far as recorded. For a first delivery, ``sseq +
    pending`` is the sender's last stream sequence when it made it (a redelivery's pending
    counts from the sender's delivered sequence instead, which the subject does not carry)."""
    if not d.cseq:
        return f"delivery {d.dcount}"
    end = f" (sender's stream end {d.sseq + d.pending})" if d.dcount == 1 else ""
    return f"delivery {d.dcount}, cseq {d.cseq}, pending {d.pending}{end}, ts {d.ts}"


def _wall(h: History, t: float) -> str:
    if not h.wall_offset:
        return ""
    wall = h.wall_offset + t
    return f", received at {time.strftime('%H:%M:%S', time.localtime(wall))}.{int(wall % 1 * 1000):03d}"


def _acked_delivery(ds: list[Delivery], c: Confirm) -> Delivery | None:
    """The delivery ``c`` confirmed the ack of: the last one of its message the same worker
    received before the confirmation (``ds``: that worker's deliveries in arrival order)."""
    best = None
    for d in ds:
        if d.order > c.order:
            break
        if d.mid == c.mid and d.sseq == c.sseq:
            best = d
    return best


def _older_state(ds: list[Delivery], late: Delivery) -> Delivery | None:
    """Evidence that ``late``, a *first* delivery (count 1), came from a consumer state other
    than the one that sent an earlier delivery to the same connection: that earlier delivery
    carries a higher consumer sequence. One consumer state numbers its deliveries in increasing
    order and one leader's frames reach a connection in the order sent, so ``late`` was made by
    another, older state (it had counted fewer deliveries, and had never delivered this
    message). That says *which* state sent it, not *when*: a deposed leader's stale state sends
    the same frame before its deposition as after resuming from a freeze, so this is a label,
    never an excuse. ``ds``: the worker's deliveries in arrival order. None without such
    evidence (or without recorded consumer sequences)."""
    if late.dcount != 1 or not late.cseq:
        return None
    best = None
    for d in ds:
        if d.order >= late.order:
            break
        if d.cseq > late.cseq and (best is None or d.cseq > best.cseq):
            best = d
    return best


def _undelivered(h: History, committed: dict[int, str]) -> list[Anomaly]:
    got = {d.mid for d in h.deliveries}
    missing = [(seq, mid) for seq, mid in sorted(committed.items()) if mid not in got]
    return [Anomaly("undelivered", f"{mid} (seq {seq}) never delivered") for seq, mid in missing]


def _phantom(h: History, committed: dict[int, str], hw: int) -> list[Anomaly]:
    out = []
    seen: set[tuple[str, int]] = set()
    for d in h.deliveries:
        if (d.mid, d.sseq) in seen:
            continue
        seen.add((d.mid, d.sseq))
        if d.sseq > hw:
            out.append(
                Anomaly("phantom", f"{d.mid} delivered at seq {d.sseq} above the high-water mark {hw}")
            )
        elif committed.get(d.sseq) != d.mid:
            out.append(
                Anomaly("phantom", f"{d.mid} delivered at seq {d.sseq}, which holds {committed.get(d.sseq)}")
            )
    return out


def _stuck(h: History) -> list[Anomaly]:
    out = [Anomaly("stuck", s) for s in h.stuck]
    if h.probe_s is None:
        out.append(Anomaly("stuck", "a publish after healing was never acknowledged"))
    if h.consumer and not h.consumer_drained:
        out.append(Anomaly("stuck", "the consumer did not receive every committed message after healing"))
    return out
