"""kill -9 a process that appends with group commit, at random moments, and check that every
message it reported durable is there byte for byte, and that nothing beyond is half-visible."""

from __future__ import annotations

import asyncio
import hashlib
import os
import random
import signal
import sys
from pathlib import Path

from jetlog.log import FileStore

REPO = Path(__file__).resolve().parents[2]

CHILD = r"""
import asyncio, hashlib, sys
from jetlog.log import FileStore

def payload(seq):
    return hashlib.blake2b(str(seq).encode()).digest() * (1 + seq % 7)

async def main(path, compression, segment_bytes):
    store = await FileStore.open(path, segment_bytes=segment_bytes, compression=compression)
    store._fl.pipeline_min = 0  # small appends: pipelined behind any job (two in flight)
    out = sys.stdout
    def on_commit(seq):
        out.write(f"C {seq}\n")
        out.flush()
    store.add_commit_listener(on_commit)
    out.write(f"H {store.syncer.pid}\n")  # the fsync helper process
    out.write(f"O {store.last_seq}\n")
    out.flush()
    rounds = 0
    piped = False
    while True:
        for _ in range(40):
            seq = store.last_seq + 1
            assert store.append(f"crash.{seq % 5}", b"NATS/1.0\r\n\r\n" if seq % 3 == 0 else b"", payload(seq), seq) == seq
        rounds += 1
        if rounds % 15 == 0 and store.last_seq - 300 > store.first_seq:
            cutoff = store.last_seq - 300
            out.write(f"p {cutoff}\n")  # intent: this purge may become durable from now on
            out.flush()
            store.purge(seq=cutoff)
            await store.flush()
            out.write(f"P {cutoff}\n")  # durable
            out.flush()
        await asyncio.sleep(0)
        if not piped and len(store._fl.flights) > 1:  # a job written behind one still syncing
            piped = True
            out.write("D 2\n")
            out.flush()

asyncio.run(main(sys.argv[1], sys.argv[2] == "1", int(sys.argv[3])))
"""


def payload(seq: int) -> bytes:
    return hashlib.blake2b(str(seq).encode()).digest() * (1 + seq % 7)


def _exited(pid: int) -> bool:
    """Gone, or a zombie waiting for whoever adopted it (the killed writer was its parent)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


async def _run_child(
    path: str, compression: bool, segment_bytes: int, kill_after: int
) -> tuple[int, int, int, bool]:
    """Run the writer until it reported ``kill_after`` commits, SIGKILL it; return (highest
    reported commit, highest durable purge cutoff, highest purge cutoff it may have issued,
    whether it had two jobs in flight at once). Also checks that the writer's fsync helper
    process does not outlive it."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        CHILD,
        path,
        "1" if compression else "0",
        str(segment_bytes),
        stdout=asyncio.subprocess.PIPE,
        env=env,
        cwd=str(REPO),
    )
    assert proc.stdout is not None
    committed = purged = intent = 0
    piped = False
    commits = 0
    helper = 0
    killed = False
    while True:
        line = await asyncio.wait_for(proc.stdout.readline(), 30)
        if not line:
            break
        kind, val = line.split()
        v = int(val)
        if kind == b"C":
            assert v >= committed
            committed = v
            commits += 1
        elif kind == b"P":
            purged = max(purged, v)
        elif kind == b"p":
            intent = max(intent, v)
        elif kind == b"H":
            helper = v
        elif kind == b"D":
            piped = True
        if commits >= kill_after and not killed:
            proc.send_signal(signal.SIGKILL)  # lines already in the pipe still count
            killed = True
    assert await asyncio.wait_for(proc.wait(), 30) == -signal.SIGKILL
    assert helper > 0
    for _ in range(500):  # its socket reads EOF when the writer dies: it exits
        if _exited(helper):
            break
        await asyncio.sleep(0.01)
    assert _exited(helper), f"fsync helper {helper} outlived its killed writer"
    return committed, purged, intent, piped


async def test_kill_9_during_group_commit(tmp_path: Path) -> None:
    rng = random.Random(int.from_bytes(os.urandom(4), "little"))
    path = str(tmp_path / "store")
    pipelined = 0
    for it in range(6):
        # Small segments: nearly every group commit holds a segment roll (never pipelined).
        # Large ones: group commits are pipelined (two in flight) most of the time.
        seg = 16384 if it < 2 else 1 << 20
        committed, purged, intent, piped = await _run_child(
            path, compression=it % 2 == 1, segment_bytes=seg, kill_after=rng.randint(3, 60)
        )
        pipelined += piped
        assert committed > 0
        store = await FileStore.open(path, segment_bytes=16384)
        try:
            rep = store.recovery
            assert rep.quarantined == () and rep.lost_seqs == (), rep
            assert store.last_seq >= committed
            assert store.committed_seq == store.last_seq
            for s in range(1, store.last_seq + 1):
                m = store.load(s)
                if s < purged:
                    assert m is None, f"seq {s} survived a durable purge below {purged}"
                    continue
                if m is None:
                    # only an un-acknowledged tail or an issued purge may explain a missing message
                    assert s > committed or s < intent, f"durable seq {s} lost (committed {committed})"
                    continue
                assert m.data == payload(s), f"seq {s} has wrong bytes"
                assert m.subject == f"crash.{s % 5}" and m.ts == s
                assert m.hdr == (b"NATS/1.0\r\n\r\n" if s % 3 == 0 else b"")
            # the tail beyond the last reported commit is either absent or complete, never torn
            start = max(committed + 1, intent)
            live_tail = [s for s in range(start, store.last_seq + 1) if store.load(s) is not None]
            assert live_tail == list(range(start, start + len(live_tail)))
        finally:
            await store.close()
    assert pipelined, "no writer ever had two group commits in flight"
