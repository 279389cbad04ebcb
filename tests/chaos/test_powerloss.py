"""Simulated power loss: the sync ledger of a real ``FileStore`` (in a child process with
``$JETLOG_SYNC_LEDGER`` set) matches what it made durable, and ``drop_unsynced`` cuts an
unsynced tail back so the store reopens with exactly the committed messages."""

from __future__ import annotations

import asyncio
import os
import random
import subprocess
import sys
import textwrap

from jetlog.chaos.powerloss import LEDGER_ENV, drop_unsynced, durable_sizes
from jetlog.log import FileStore

CHILD = textwrap.dedent(
    """
    import asyncio, sys
    from jetlog.log import FileStore

    async def main():
        st = await FileStore.open(sys.argv[1], segment_bytes=4096)
        for i in range(int(sys.argv[2])):
            st.append("s.x", b"", b"m%d-" % i + b"x" * 100, ts=i + 1)
            if i % 10 == 9:
                await st.flush()
        await st.flush()
        print(st.last_seq, flush=True)
        await st.close()

    asyncio.run(main())
    """
)


CRASH = textwrap.dedent(
    """
    import asyncio, os, sys
    from jetlog.log import FileStore

    async def main():
        st = await FileStore.open(sys.argv[1])
        for i in range(100):
            st.append("s.x", b"", b"d%d-" % i + b"x" * 200, ts=i + 1)
        await st.close()
        # interval mode, no sync due for an hour: written to the (preallocated) file, not synced
        st = await FileStore.open(sys.argv[1], fsync="interval", sync_interval=3600)
        for i in range(100, 200):
            st.append("s.x", b"", b"d%d-" % i + b"x" * 200, ts=i + 1)
            if i % 10 == 9:
                await st.flush()
        print(st.last_seq, flush=True)
        os._exit(0)  # a crash: nothing closed, nothing synced

    asyncio.run(main())
    """
)


def _child(store: str, ledger: str, n: int, code: str = CHILD) -> int:
    env = {**os.environ, LEDGER_ENV: ledger}
    out = subprocess.run(
        [sys.executable, "-c", code, store, str(n)], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    return int(out.stdout.strip())


def _segments(store: str) -> dict[str, int]:
    return {
        os.path.join(store, f): os.path.getsize(os.path.join(store, f))
        for f in os.listdir(store)
        if f.endswith(".log") or f.endswith(".seg")
    }


async def test_ledger_matches_synced_files_and_drop_cuts_unsynced_tail(tmp_path) -> None:
    store, ledger = str(tmp_path / "store"), str(tmp_path / "ledger")
    last = await asyncio.to_thread(_child, store, ledger, 120)
    assert last == 120
    sizes = durable_sizes(ledger, str(tmp_path))
    segs = {p: s for p, s in sizes.items() if os.path.exists(p)}
    # Several segments (4 KiB each), each recorded with the size it had on disk when synced.
    assert len(segs) >= 3
    for path, durable in segs.items():
        assert os.path.getsize(path) == durable, path
    # A write that never got its fsync: the page cache has it, a power loss would not.
    tail = max(segs, key=lambda p: os.path.getmtime(p))
    with open(tail, "ab") as f:
        f.write(b"\x17" * 300)
    dropped = drop_unsynced(ledger, str(tmp_path))
    assert [(d.path, d.size - d.durable) for d in dropped] == [(tail, 300)]
    # A segment keeps its allocated size: zeros where the lost write was.
    assert os.path.getsize(tail) == segs[tail] + 300
    with open(tail, "rb") as f:
        f.seek(segs[tail])
        assert f.read() == bytes(300)
    st = await FileStore.open(store, syncer="thread")
    try:
        assert st.last_seq == 120
        assert st.load(120) is not None and st.load(120).data.startswith(b"m119-")  # type: ignore[union-attr]
    finally:
        await st.close()
    # Nothing more to drop; files of other directories are never touched.
    assert drop_unsynced(ledger, str(tmp_path)) == []
    assert durable_sizes(ledger, str(tmp_path / "elsewhere")) == {}


def test_durable_sizes_replay_order(tmp_path) -> None:
    d = tmp_path / "l"
    d.mkdir()
    f = str(tmp_path / "data" / "a.seg")
    # Two process lives: the second registers the file again (after a restart) at a smaller
    # size, then syncs more; a torn last line and another directory's file are ignored.
    (d / "1.ledger").write_text(f"10 R 0 {f}\n20 S 500 {f}\n30 S 400 {f}\n")
    (d / "2.ledger").write_text(f"40 R 450 {f}\n50 S 470 {f}\n60 S 9 /other/b.seg\n70 S 99")
    assert durable_sizes(str(d), str(tmp_path / "data")) == {f: 470}


async def test_unsynced_pages_kept_out_of_order_are_cut_as_a_torn_tail(tmp_path) -> None:
    """A preallocated segment after a power loss that kept some pages of its unsynced tail and
    not others: recovery keeps everything synced and a prefix of the rest, as a torn tail,
    never a quarantine."""
    store, ledger = str(tmp_path / "store"), str(tmp_path / "ledger")
    assert await asyncio.to_thread(_child, store, ledger, 0, CRASH) == 200
    (seg,) = [os.path.join(store, f) for f in os.listdir(store) if f.endswith(".log")]
    durable = durable_sizes(ledger, str(tmp_path))[seg]
    size = os.path.getsize(seg)
    (dropped,) = drop_unsynced(ledger, str(tmp_path), random.Random(7))
    assert dropped.durable == durable and dropped.size - durable > 3 * 4096  # pages to lose
    assert os.path.getsize(seg) == size
    with open(seg, "rb") as f:
        f.seek(durable // 4096 * 4096)
        tail = f.read()
    pages = [tail[k : k + 4096] for k in range(0, len(tail), 4096)]
    # the seed leaves a lost (zero) page before a kept one: zeros, then data
    first_lost = next(k for k, p in enumerate(pages) if p.count(0) == len(p))
    assert any(p.count(0) != len(p) for p in pages[first_lost + 1 :])
    st = await FileStore.open(store, syncer="thread")
    try:
        assert st.recovery.quarantined == () and st.recovery.lost_seqs == ()
        assert st.recovery.truncated_bytes > 0
        assert 100 <= st.last_seq < 200
        for seq in range(1, st.last_seq + 1):
            msg = st.load(seq)
            assert msg is not None and msg.data.startswith(b"d%d-" % (seq - 1))
        assert st.append("s.x", b"", b"next", ts=999) == st.last_seq
    finally:
        await st.close()


MANY = textwrap.dedent(
    """
    import asyncio, sys
    from jetlog.log import FileStore

    async def main():
        stores = [await FileStore.open(f"{sys.argv[1]}/s{k}", segment_bytes=4096) for k in range(6)]
        for i in range(int(sys.argv[2])):
            for st in stores:  # one message into every store in the same pass
                st.append("s.x", b"", b"m%d-" % i + b"x" * 100, ts=i + 1)
            await asyncio.gather(*(st.flush() for st in stores))
        s = stores[0].syncer
        print(s.stats["syncfs"], s.stats["shared"], *(st.last_seq for st in stores), flush=True)
        import os
        os._exit(0)  # a crash right after the last acknowledgement: nothing closed

    asyncio.run(main())
    """
)


async def test_stores_synced_together_by_syncfs_keep_every_commit_after_a_power_loss(tmp_path) -> None:
    from jetlog.log.syncpolicy import syncfs_reports_errors

    base, ledger = str(tmp_path / "many"), str(tmp_path / "ledger")
    os.makedirs(base)
    env = {**os.environ, LEDGER_ENV: ledger}
    out = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-c", MANY, base, "40"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    calls, shared, *lasts = (int(x) for x in out.stdout.split())
    assert lasts == [40] * 6
    if syncfs_reports_errors():
        assert calls > 0 and shared >= 3 * calls  # the shared path ran: these commits are its
    drop_unsynced(ledger, str(tmp_path))  # whatever the ledger does not vouch for is gone
    for k in range(6):
        st = await FileStore.open(os.path.join(base, f"s{k}"), syncer="thread")
        try:
            assert st.last_seq == 40, k  # every acknowledged message survived
            assert st.load(40).data.startswith(b"m39-")  # type: ignore[union-attr]
        finally:
            await st.close()
