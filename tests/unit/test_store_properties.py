"""Stateful property tests: both stores against the plain model, including (file store) clean
reopen, crash with a torn tail at a random offset, bit flips anywhere, and compaction."""

from __future__ import annotations

import asyncio
import glob
import os
import shutil
import tempfile
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

import jetlog.log.index as index_mod
from jetlog.errors import StorageError
from jetlog.log import FileStore, MemStore
from jetlog.log import scrub as scrub_mod
from jetlog.log.syncer import Syncer, acquire_syncer
from jetlog.wire import records as rc
from tests.unit.test_store_model import FILTERS, SUBJECTS, Model, check_store
from tests.unit.test_store_pipeline import GatedSync

HDR = b"NATS/1.0\r\nX: y\r\n\r\n"
SETTINGS = settings(
    max_examples=25,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


def _live_seqs(store: Any) -> list[int]:
    out = []
    s = store.next_seq(1)
    while s:
        out.append(s)
        s = store.next_seq(s + 1)
    return out


def _matches(store: Any, model: Model) -> bool:
    if store.state()[:8] != model.state()[:8]:
        return False
    return all(store.load(s) == model.msg(s) for s in model.live)


class MemMachine(RuleBasedStateMachine):
    """MemStore (and the shared index/read code) against the model."""

    file = False

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.ts = 1000
        self.store: Any = None
        self.model = Model(file=self.file)

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    @initialize(first_seq=st.sampled_from([1, 1, 500]), compression=st.booleans())
    def open(self, first_seq: int, compression: bool) -> None:
        self.model = Model(first_seq=first_seq, file=self.file)
        self.first_seq = first_seq
        self.compression = compression
        self.store = self.run(self._open())
        self.durable()

    async def _open(self) -> Any:
        return MemStore(first_seq=self.first_seq)

    def durable(self) -> None:
        """Hook: everything so far is durable."""

    def mutated(self) -> None:
        """Hook: the model changed."""

    def settle(self) -> None:
        """Hook: let every sync in flight complete (before anything that waits for them)."""

    def teardown(self) -> None:
        if self.store is not None:
            self.settle()
            self.run(self.store.close())
        self.before_loop_close()
        self.loop.close()

    def before_loop_close(self) -> None:
        """Hook: release what belongs to this example's loop."""

    # ---- mutations ------------------------------------------------------------------------
    @rule(
        subject=st.sampled_from(SUBJECTS),
        hdr=st.sampled_from([b"", HDR]),
        data=st.binary(max_size=300),
        ttl=st.sampled_from([0, 0, 0, 7000]),
        n=st.integers(1, 4),
    )
    def append(self, subject: str, hdr: bytes, data: bytes, ttl: int, n: int) -> None:
        for _ in range(n):
            self.ts += 1
            assert self.store.append(subject, hdr, data, self.ts, ttl) == self.model.append(
                subject, hdr, data, self.ts, ttl
            )
            self.mutated()

    @rule(count=st.integers(1, 3))
    def skip(self, count: int) -> None:
        self.ts += 1
        assert self.store.skip(count, ts=self.ts) == self.model.skip(count, self.ts)
        self.mutated()

    @rule(data=st.data())
    def remove(self, data: Any) -> None:
        live = sorted(self.model.live)
        if live and data.draw(st.booleans()):
            seq = data.draw(st.sampled_from(live))
        else:
            seq = data.draw(st.integers(0, self.model.last_seq + 2))
        erase = data.draw(st.booleans())
        assert self.store.remove(seq, erase) == self.model.remove(seq)
        self.mutated()

    @rule(
        subject=st.sampled_from(FILTERS), mode=st.sampled_from(["all", "seq", "keep"]), n=st.integers(0, 40)
    )
    def purge(self, subject: str | None, mode: str, n: int) -> None:
        kw: dict[str, Any] = {"subject": subject}
        if mode == "seq":
            kw["seq"] = self.model.first_seq() + n // 2
        elif mode == "keep":
            kw["keep"] = n // 4
        assert self.store.purge(**kw) == self.model.purge(**kw)
        self.mutated()

    @rule()
    def flush(self) -> None:
        self.settle()
        self.run(self.store.flush())
        assert self.store.committed_seq == self.model.last_seq
        self.durable()

    @invariant()
    def agrees(self) -> None:
        if self.store is not None:
            check_store(self.store, self.model)


class FileMachine(MemMachine):
    """FileStore: the same, plus reopen, crash + torn tail, bit flips and compaction."""

    file = True

    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="jetlog-prop-")
        self.history: list[Model] = []
        self.sizes: dict[str, int] = {}
        # One reference for the whole example: reopening a store then reuses the loop's fsync
        # helper instead of starting a new process each time (that path has its own tests).
        self.syncer: Syncer = self.run(self._acquire())

    @staticmethod
    async def _acquire() -> Syncer:
        return acquire_syncer()

    def before_loop_close(self) -> None:
        self.run(self.syncer.release())

    async def _open(self) -> Any:
        store = await FileStore.open(
            os.path.join(self.dir, "s"),
            first_seq=self.first_seq,
            segment_bytes=4096,
            compression=self.compression,
            auto_compact=False,
            **self.store_kw(),
        )
        store.add_commit_listener(lambda seq: self._committed(store, seq))
        self.reported = store.committed_seq
        return store

    def store_kw(self) -> dict[str, Any]:
        return {}

    def _committed(self, store: Any, seq: int) -> None:
        # group commits (pipelined or not) are reported in order, each once
        assert seq > self.reported and seq == store.committed_seq <= store.last_seq
        self.reported = seq

    def durable(self) -> None:
        self.history = [self.model.copy()]
        self.sizes = {s.path: s.size for s in self.store.segments}

    def mutated(self) -> None:
        self.history.append(self.model.copy())

    def teardown(self) -> None:
        super().teardown()
        shutil.rmtree(self.dir, ignore_errors=True)

    @rule()
    def reopen(self) -> None:
        self.settle()
        self.run(self.store.close())
        self.store = self.run(self._open())
        rep = self.store.recovery
        assert (rep.truncated_bytes, rep.quarantined, rep.lost_seqs) == (0, (), ())
        self.durable()

    @rule(steps=st.integers(1, 6), wait=st.booleans())
    def let_jobs_run(self, steps: int, wait: bool) -> None:
        """Let the flusher take, write and commit some jobs without a flush: states with
        jobs in flight (pipelined) are what the invariant then reads."""

        async def spin() -> None:
            for _ in range(steps):
                await asyncio.sleep(0.001 if wait else 0)

        self.run(spin())

    @rule()
    def compact(self) -> None:
        self.settle()
        self.run(self.store.compact())

    @rule(frac=st.floats(0, 1))
    def crash_with_torn_tail(self, frac: float) -> None:
        """Everything un-flushed was being written when the process died: the last segment is
        cut anywhere after its last durable byte. The store must come back as the model at
        some batch boundary at or after the last flush — never half a batch."""
        self.settle()
        self.run(self.store.flush())
        last = self.store.segments[-1]
        start = self.sizes.get(last.path, 0)
        cut = start + int(frac * (last.size - start))
        self.run(self.store._abandon())
        os.truncate(last.path, cut)
        self.store = self.run(self._open())
        for snap in self.history:
            if _matches(self.store, snap):
                self.model = snap.copy()
                break
        else:
            raise AssertionError(f"recovered state {self.store.state()} is no flushed-or-later prefix")
        assert self.store.recovery.quarantined == ()
        self.durable()

    @rule(data=st.data())
    def flip_a_bit(self, data: Any) -> None:
        """A bit flips in some file at rest: open never fails, never returns wrong bytes, and
        every message it cannot return is reported lost."""
        path = self._flip(data)
        self.store = self.run(self._open())
        self._check_flipped(path)

    def _flip(self, data: Any) -> str:
        self.settle()
        self.run(self.store.close())
        files = sorted(p for p in glob.glob(os.path.join(self.dir, "s", "*.*")) if os.path.getsize(p))
        files = [p for p in files if p.endswith((".log", ".idx"))]
        # Fixed ranges taken modulo what is there: file sizes follow batch boundaries, which
        # follow when syncs complete (another process); ranges drawn from them would differ
        # between runs of one example (Hypothesis: FlakyStrategyDefinition, not a failure).
        path = files[data.draw(st.integers(0, 1 << 16)) % len(files)]
        with open(path, "rb") as f:
            raw = bytearray(f.read())
        bit = data.draw(st.integers(0, 1 << 40)) % (len(raw) * 8)
        raw[bit // 8] ^= 1 << (bit % 8)
        with open(path, "wb") as f:
            f.write(raw)
        return path

    def _check_flipped(self, path: str, before: Any = None) -> None:
        """``before``: the report of an earlier open since the flip (lazy: the damage may be
        reported by either open)."""
        rep = self.store.recovery
        lost = set(rep.lost_seqs) | set(before.lost_seqs if before is not None else ())
        quarantined = rep.quarantined or (before.quarantined if before is not None else ())
        assert self.store.last_seq == self.model.last_seq  # sequences are never reused
        for s in range(1, self.model.last_seq + 1):
            m = self.store.load(s)
            if m is not None:
                subj, hdr, payload, ts, _ = self.model.ever[s]
                assert (m.subject, m.hdr, m.data, m.ts) == (subj, hdr, payload, ts), f"wrong bytes for {s}"
                if s not in self.model.live:
                    assert quarantined, f"{s} came back without a reported corruption"
            elif s in self.model.live:
                assert s in lost, f"{s} vanished without being reported lost"
        if path.endswith(".idx"):
            assert not quarantined and not lost
        # continue from what the store holds
        alive = _live_seqs(self.store)
        self.model.live = {s: self.model.ever[s] for s in alive}
        self.model.last_ts = self.store.state().last_ts
        self.durable()


class LazyFileMachine(FileMachine):
    """The file store opened lazily (``lazy_verify``, the node's default for single-node
    streams): every rule of the full machine holds, and a flipped bit is never served as wrong
    bytes; the scrub finds it, and the next open reports exactly what a full open does."""

    def __init__(self) -> None:
        self._delay = scrub_mod.START_DELAY
        scrub_mod.START_DELAY = 0.0
        super().__init__()

    def teardown(self) -> None:
        scrub_mod.START_DELAY = self._delay
        super().teardown()

    def store_kw(self) -> dict[str, Any]:
        return {"lazy_verify": True}

    @rule(data=st.data())
    def flip_a_bit(self, data: Any) -> None:
        path = self._flip(data)
        self.store = self.run(self._open())
        for s in range(1, self.model.last_seq + 1):
            try:
                m = self.store.load(s)
            except (StorageError, rc.BatchError):
                continue  # damaged under a trusted index: refused, reported after the scrub
            if m is not None and s in self.model.ever:
                subj, hdr, payload, ts, _ = self.model.ever[s]
                assert (m.subject, m.hdr, m.data, m.ts) == (subj, hdr, payload, ts), f"wrong bytes for {s}"
        before = self.store.recovery
        self.run(self.store.scrub.wait())
        self.run(self.store.close())
        self.store = self.run(self._open())
        self._check_flipped(path, before)


class GatedFileMachine(FileMachine):
    """FileStore whose fdatasyncs complete only when a rule says so, in any order: jobs stay in
    flight (two at once, pipelined) across rules, later jobs' syncs often finish first, and the
    invariant reads records in both jobs in flight and in the open batch."""

    def store_kw(self) -> dict[str, Any]:
        self.gs = GatedSync()
        return {"syncer": self.gs}

    def settle(self) -> None:
        # For the next ``run`` only (a flush or close waits for syncs): every sync completes.
        self.gs.hold = False
        while self.gs.held:
            self.gs.complete(0)

    def mutated(self) -> None:
        super().mutated()
        self.run(asyncio.sleep(0))  # the flusher takes a job whenever a slot is free

    def run(self, coro: Any) -> Any:
        try:
            return super().run(coro)
        finally:
            if hasattr(self, "gs"):
                self.gs.hold = True

    @rule(data=st.data())
    def complete_sync(self, data: Any) -> None:
        if self.gs.held:
            self.gs.complete(data.draw(st.integers(0, len(self.gs.held) - 1)))
        self.run(asyncio.sleep(0))


class SmallBlockMemMachine(MemMachine):
    """The memory store with 3-entry index blocks: every cross-block path of the index runs."""

    def __init__(self) -> None:
        super().__init__()
        self._saved = index_mod.BLOCK_MAX
        index_mod.BLOCK_MAX = 3

    def teardown(self) -> None:
        index_mod.BLOCK_MAX = self._saved
        super().teardown()


TestMemStoreProperties = MemMachine.TestCase
TestMemStoreProperties.settings = settings(SETTINGS, max_examples=60)
TestFileStoreProperties = FileMachine.TestCase
TestFileStoreProperties.settings = settings(
    SETTINGS, max_examples=int(os.environ.get("JETLOG_PROP_EXAMPLES", "100"))
)
TestLazyFileStoreProperties = LazyFileMachine.TestCase
TestLazyFileStoreProperties.settings = settings(
    SETTINGS, max_examples=int(os.environ.get("JETLOG_PROP_EXAMPLES_LAZY", "60"))
)
TestGatedFileStoreProperties = GatedFileMachine.TestCase
TestGatedFileStoreProperties.settings = settings(
    SETTINGS, max_examples=int(os.environ.get("JETLOG_PROP_EXAMPLES_GATED", "60"))
)
TestSmallBlockProperties = SmallBlockMemMachine.TestCase
TestSmallBlockProperties.settings = settings(
    SETTINGS, max_examples=int(os.environ.get("JETLOG_PROP_EXAMPLES_SMALL", "60"))
)
