"""A plain reference model of the ``MsgStore`` contract (dicts and loops), used by the store
behaviour and property tests, and tests of the model itself."""

from __future__ import annotations

from typing import Any

from jetlog.log.store import StoredMsg, StoreState, SubjectState
from jetlog.wire.subjects import matches

FILTERS = [None, ">", "a.*", "a.>", "*.b", "a.b", "a.b.c", "x.y", "kv.>", "kv.*", "none.here", "*.*.*"]
SUBJECTS = ["a.b", "a.c", "a.b.c", "x.y", "kv.k1", "kv.k2", "kv.k3", "é.ü"]


def _match(filt: str | None, subject: str) -> bool:
    return filt is None or filt == ">" or matches(filt, subject)


class Model:
    """Everything a store must answer, computed the slow obvious way."""

    def __init__(self, first_seq: int = 1, file: bool = True) -> None:
        self.live: dict[int, tuple[str, bytes, bytes, int, int]] = {}
        self.ever: dict[int, tuple[str, bytes, bytes, int, int]] = {}
        self.last_seq = max(first_seq, 1) - 1
        self.last_ts = 0
        self.file = file

    def copy(self) -> Model:
        m = Model(file=self.file)
        m.live = dict(self.live)
        m.ever = self.ever
        m.last_seq = self.last_seq
        m.last_ts = self.last_ts
        return m

    def size(self, seq: int) -> int:
        subj, hdr, data, _, _ = self.live[seq]
        if self.file:
            return 30 + len(subj.encode()) + len(data) + (4 + len(hdr) if hdr else 0)
        return len(subj.encode()) + len(hdr) + len(data) + 16

    # ---- mutations ------------------------------------------------------------------------
    def append(self, subject: str, hdr: bytes, data: bytes, ts: int, ttl: int = 0) -> int:
        self.last_seq += 1
        rec = (subject, hdr, data, ts, ts + ttl if ttl else 0)
        self.live[self.last_seq] = rec
        self.ever[self.last_seq] = rec
        self.last_ts = ts
        return self.last_seq

    def skip(self, count: int, ts: int) -> int:
        self.last_seq += count
        self.last_ts = ts
        return self.last_seq

    def remove(self, seq: int) -> bool:
        return self.live.pop(seq, None) is not None

    def purge(self, subject: str | None = None, seq: int = 0, keep: int = 0) -> int:
        cands = sorted(s for s, m in self.live.items() if _match(subject, m[0]))
        if seq > 0:
            cands = [s for s in cands if s < seq]
        elif keep > 0:
            cands = cands[: max(len(cands) - keep, 0)]
        for s in cands:
            del self.live[s]
        return len(cands)

    # ---- reads ----------------------------------------------------------------------------
    def msg(self, seq: int) -> StoredMsg | None:
        m = self.live.get(seq)
        return None if m is None else StoredMsg(seq, m[0], m[1], m[2], m[3])

    def first_seq(self) -> int:
        return min(self.live) if self.live else self.last_seq + 1

    def state(self) -> StoreState:
        first = self.first_seq()
        n = len(self.live)
        return StoreState(
            messages=n,
            bytes=sum(self.size(s) for s in self.live),
            first_seq=first,
            first_ts=self.live[first][3] if n else 0,
            last_seq=self.last_seq,
            last_ts=self.last_ts,
            num_subjects=len({m[0] for m in self.live.values()}),
            num_deleted=(self.last_seq - first + 1 - n) if n else 0,
        )

    def next_seq(self, start: int, subject: str | None = None, max_seq: int = 0) -> int:
        for s in sorted(self.live):
            if s >= start and (not max_seq or s <= max_seq) and _match(subject, self.live[s][0]):
                return s
        return 0

    def last(self, subject: str | None = None, max_seq: int = 0) -> int:
        for s in sorted(self.live, reverse=True):
            if (not max_seq or s <= max_seq) and _match(subject, self.live[s][0]):
                return s
        return 0

    def seq_for_time(self, ts: int) -> int:
        for s in sorted(self.live):
            if self.live[s][3] >= ts:
                return s
        return self.last_seq + 1

    def subjects_state(self, subject: str | None = None) -> dict[str, SubjectState]:
        out: dict[str, list[int]] = {}
        for s in sorted(self.live):
            subj = self.live[s][0]
            if _match(subject, subj):
                out.setdefault(subj, []).append(s)
        return {k: SubjectState(len(v), v[0], v[-1]) for k, v in out.items()}

    def num_pending(self, start: int, subject: str | None = None, last_per_subject: bool = False) -> int:
        if last_per_subject:
            return sum(1 for ss in self.subjects_state(subject).values() if ss.last >= start)
        return sum(1 for s, m in self.live.items() if s >= start and _match(subject, m[0]))

    def deleted_seqs(self) -> list[int]:
        if not self.live:
            return []
        return [s for s in range(min(self.live), self.last_seq + 1) if s not in self.live]

    def ttl_entries(self) -> list[tuple[int, int]]:
        return sorted((s, m[4]) for s, m in self.live.items() if m[4])


def check_store(store: Any, model: Model, *, full: bool = True, lost: tuple[int, ...] = ()) -> None:
    """Assert that ``store`` answers every query exactly like ``model``."""
    st = store.state()
    exp = model.state()
    assert st[:8] == exp[:8], f"state {st} != {exp}"
    assert store.last_seq == model.last_seq
    assert store.first_seq == exp.first_seq
    assert store.msgs == exp.messages and store.bytes == exp.bytes
    seqs = sorted(model.live)
    probe = list(range(max(1, exp.first_seq - 2), model.last_seq + 3)) if full else seqs[:3] + seqs[-3:]
    for s in probe:
        assert store.load(s) == model.msg(s), f"load({s})"
        assert store.msg_size(s) == (model.size(s) if s in model.live else 0)
    assert store.deleted_seqs() == model.deleted_seqs()
    assert sorted(store.ttl_entries()) == model.ttl_entries()
    starts = sorted(
        {
            1,
            exp.first_seq,
            exp.first_seq + 1,
            (exp.first_seq + model.last_seq) // 2,
            model.last_seq,
            model.last_seq + 1,
        }
    )
    for f in FILTERS:
        assert store.subjects_state(f) == model.subjects_state(f), f"subjects_state({f})"
        for mx in (0, (exp.first_seq + model.last_seq) // 2):
            ls = store.load_last(f, mx)
            assert (ls.seq if ls else 0) == model.last(f, mx), f"load_last({f}, {mx})"
        for s in starts:
            assert store.num_pending(s, f) == model.num_pending(s, f), f"num_pending({s}, {f})"
            assert store.num_pending(s, f, True) == model.num_pending(s, f, True), (
                f"num_pending({s}, {f}, last)"
            )
            for mx in (0, model.last_seq - 1):
                assert store.next_seq(s, f, mx) == model.next_seq(s, f, mx), f"next_seq({s}, {f}, {mx})"
            nxt = store.load_next(s, f)
            assert nxt == model.msg(model.next_seq(s, f)), f"load_next({s}, {f})"
    tss = sorted({m[3] for m in model.live.values()})
    for t in [-1, *tss[:2], *tss[-2:], (tss[-1] + 1) if tss else 5]:
        assert store.seq_for_time(t) == model.seq_for_time(t), f"seq_for_time({t})"


def test_model_basics() -> None:
    m = Model(first_seq=5)
    assert m.state().first_seq == 5 and m.state().last_seq == 4
    assert m.append("a.b", b"", b"x", 10) == 5
    m.skip(2, 11)
    assert m.append("a.c", b"h", b"y", 12) == 8
    assert m.deleted_seqs() == [6, 7]
    assert m.purge("a.*", keep=1) == 1
    assert m.state().messages == 1 and m.state().first_seq == 8
