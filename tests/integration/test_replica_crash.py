"""kill -9 a follower process while it replicates a leader's log (``read_batches`` →
``append_batches``, chunked big batches, group commit), at random moments, several times: it
must come back at a batch boundary of the leader's log, at or after every position it reported
durable, equal to a store fed that prefix, and then catch up to exactly the leader."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import sys
from pathlib import Path

from jetlog.log import FileStore
from tests.unit.replica_util import batch_list, replicate, snapshot

REPO = Path(__file__).resolve().parents[2]

CHILD = r"""
import asyncio, random, sys
from jetlog.log import FileStore

async def main(leader_dir, follower_dir, seed):
    rng = random.Random(seed)
    leader = await FileStore.open(leader_dir, segment_bytes=16384, auto_compact=False)
    follower = await FileStore.open(follower_dir, segment_bytes=16384, auto_compact=False)
    out = sys.stdout
    def on_commit(seq):
        s, k = follower.durable_end()
        out.write(f"D {s} {k}\n")
        out.flush()
    follower.add_commit_listener(on_commit)
    out.write("S\n")
    out.flush()
    buf = bytearray()
    off = 0
    while True:
        r = leader.read_batches(follower.log_end(), rng.choice([40, 300, 2000, 8000]), off)
        if r.partial:
            buf += r.data
            off += len(r.data)
            if r.complete:
                follower.append_batches(bytes(buf))
                buf.clear()
                off = 0
                out.write("A\n")
                out.flush()
        elif r.nbatches:
            follower.append_batches(r.data)
            out.write("A\n")
            out.flush()
        else:
            await follower.flush()
            out.write("E\n")
            out.flush()
            await asyncio.sleep(3600)
        await asyncio.sleep(0)

asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
"""


async def _build_leader(path: str, rng: random.Random) -> None:
    st = await FileStore.open(path, segment_bytes=16384, auto_compact=False, compression=rng.random() < 0.5)
    ts = 1
    for i in range(4000):
        ts += 1
        size = 120_000 if i % 997 == 0 else rng.randint(0, 300)
        st.append(
            f"o.{i % 7}",
            b"NATS/1.0\r\nA: b\r\n\r\n" if i % 3 else b"",
            os.urandom(size),
            ts,
            9000 if i % 11 == 0 else 0,
        )
        if i % 5 == 4:
            st.seal()
        if i % 50 == 49:
            st.remove(rng.randint(st.first_seq, st.last_seq))
            st.seal()
        if i % 400 == 399:
            st.purge(subject=f"o.{rng.randint(0, 6)}", keep=5)
        if i % 700 == 0:
            st.skip(2, ts=ts)
        if i % 1500 == 1499:
            await st.begin_epoch(i)
    await st.close()


async def _run_child(
    leader: str, follower: str, seed: int, kill_after: int, after_commit: bool
) -> tuple[tuple[int, int], bool]:
    """Run the follower until it reported ``kill_after`` appends, SIGKILL it; return the highest
    durable position it reported and whether it had caught up. With ``after_commit``, appends
    count only once the round reported a durable position: a reopened store's first job rolls
    the writer segment (a sync of the old one, through the fsync helper the new process is still
    starting), so a kill counted from the start can land before anything new is written, round
    after round on a slow machine, and the test would never get past its start."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", CHILD, leader, follower, str(seed),
        stdout=asyncio.subprocess.PIPE, env=env, cwd=str(REPO),
    )  # fmt: skip
    assert proc.stdout is not None
    durable = (-1, -1)
    appends = 0
    done = False
    while True:
        line = await asyncio.wait_for(proc.stdout.readline(), 60)
        if not line:
            break
        parts = line.split()
        if parts[0] == b"D":
            pos = (int(parts[1]), int(parts[2]))
            assert pos >= durable
            durable = pos
        elif parts[0] == b"A" and (durable != (-1, -1) or not after_commit):
            appends += 1
        elif parts[0] == b"E":
            done = True
        if (appends >= kill_after or done) and proc.returncode is None:
            proc.send_signal(signal.SIGKILL)  # lines already in the pipe still count
    assert await asyncio.wait_for(proc.wait(), 30) == -signal.SIGKILL
    return durable, done


async def test_kill_9_follower_during_replication(tmp_path: Path) -> None:
    seed = int.from_bytes(os.urandom(4), "little")
    rng = random.Random(seed)
    ldir, fdir = str(tmp_path / "leader"), str(tmp_path / "follower")
    await _build_leader(ldir, rng)
    leader = await FileStore.open(ldir, segment_bytes=16384, auto_compact=False)
    want = batch_list(leader)
    want_pos = [p for p, _ in want]
    await leader.close()
    ends = []
    for round_ in range(6):
        # Even rounds are killed after they committed something (progress), odd ones anywhere,
        # the reopened store's first job included.
        child_seed, kill_after = rng.randint(0, 1 << 30), rng.randint(5, 150)
        durable, done = await _run_child(ldir, fdir, child_seed, kill_after, after_commit=round_ % 2 == 0)
        fl = await FileStore.open(fdir, segment_bytes=16384, auto_compact=False)
        end = fl.log_end()
        assert end >= durable, f"round {round_}: lost a durable position (seed {seed})"
        assert end == (0, -1) or end in want_pos, f"round {round_}: {end} is no batch boundary"
        n = want_pos.index(end) + 1 if end != (0, -1) else 0
        assert batch_list(fl) == want[:n]
        ref = await FileStore.open(str(tmp_path / f"ref{round_}"), segment_bytes=16384, auto_compact=False)
        if n:
            ref.append_batches(b"".join(b for _, b in want[:n]))
        assert snapshot(ref) == snapshot(fl), f"round {round_} (seed {seed})"
        await ref.destroy()
        await fl.close()
        ends.append(end)
        if done:
            break
    assert len(set(ends)) > 1 or ends[-1] == want_pos[-1], f"no progress: {ends} (seed {seed})"
    leader = await FileStore.open(ldir, segment_bytes=16384, auto_compact=False)
    fl = await FileStore.open(fdir, segment_bytes=16384, auto_compact=False)
    await replicate(leader, fl, 5000)
    await fl.flush()
    assert snapshot(fl) == snapshot(leader) and batch_list(fl) == want
    assert fl.epochs() == leader.epochs()
    await leader.close()
    await fl.close()
