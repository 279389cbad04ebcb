"""MetaRaft members as real processes: SIGKILL (crash) and SIGSTOP (hang, no FIN) of the leader.

Asserts a new leader within ~2 s, and that every command acknowledged to a client is present on
every member after the whole cluster was killed and restarted from disk.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import AsyncIterator

import pytest

from tests.integration.metaprocs import NAMES, ProcCluster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


@pytest.fixture
async def procs(tmp_path) -> AsyncIterator[ProcCluster]:  # type: ignore[no-untyped-def]
    c = ProcCluster(str(tmp_path))
    try:
        yield c
    finally:
        await c.close()


async def write_until(c: ProcCluster, via: str, prefix: str, acked: list[str], stop: asyncio.Event) -> None:
    """Sequential creates through ``via``; records the acknowledged ones."""
    i = 0
    while not stop.is_set():
        name = f"{prefix}{i:04d}"
        i += 1
        r = await c.nodes[via].request({"op": "create", "name": name, "timeout": 3.0}, 10)
        if r.get("ok"):
            acked.append(name)


async def wait_count(acked: list[str], n: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while len(acked) < n:
        assert time.monotonic() < deadline, f"only {len(acked)} writes acknowledged"
        await asyncio.sleep(0.01)


async def test_sigkill_leader_then_crash_restart_of_everything(procs: ProcCluster) -> None:
    await procs.start()
    leader = await procs.agreed_leader(NAMES)
    via = next(n for n in NAMES if n != leader)
    acked: list[str] = []
    stop = asyncio.Event()
    writer = asyncio.create_task(write_until(procs, via, "w", acked, stop))
    try:
        await wait_count(acked, 20, 10)
        t0 = time.monotonic()
        await procs.nodes[leader].kill()  # SIGKILL
        survivors = procs.live()
        new = await procs.agreed_leader(survivors, exclude=leader, timeout=5)
        failover = time.monotonic() - t0
        before = len(acked)
        await wait_count(acked, before + 20, 10)  # writes go on through the new leader
    finally:
        stop.set()
        await asyncio.wait_for(writer, 15)
    assert new != leader and failover < 2.0, f"new leader after {failover:.2f}s"
    await procs.nodes[leader].start()
    assert (await procs.nodes[leader].request({"op": "ready", "timeout": 10}, 15)).get("ok")
    # Crash everything (no clean shutdown anywhere), restart from disk.
    await asyncio.gather(*(procs.nodes[n].kill() for n in NAMES))
    await procs.start()
    for n in NAMES:
        assert (await procs.nodes[n].request({"op": "ready", "timeout": 15}, 20)).get("ok"), n
    st = await procs.statuses(NAMES)
    for n in NAMES:
        missing = set(acked) - set(st[n]["names"])
        assert not missing, f"{n} lost acknowledged writes {sorted(missing)[:5]}"
    await asyncio.gather(*(procs.nodes[n].request({"op": "ready", "timeout": 5}) for n in NAMES))
    deadline = time.monotonic() + 5
    while len({s["hash"] for s in (await procs.statuses(NAMES)).values()}) != 1:
        assert time.monotonic() < deadline, "states differ after restart"
        await asyncio.sleep(0.05)


async def test_sigstop_leader_then_sigcont(procs: ProcCluster) -> None:
    await procs.start()
    leader = await procs.agreed_leader(NAMES)
    others = [n for n in NAMES if n != leader]
    assert (await procs.nodes[others[0]].request({"op": "create", "name": "before"}))["ok"]
    t0 = time.monotonic()
    procs.nodes[leader].signal(signal.SIGSTOP)
    try:
        new = await procs.agreed_leader(others, exclude=leader, timeout=5)
        failover = time.monotonic() - t0
        r = await procs.nodes[others[1]].request({"op": "create", "name": "during"})
        assert r.get("ok"), r
    finally:
        procs.nodes[leader].signal(signal.SIGCONT)
    assert failover < 2.0, f"new leader after {failover:.2f}s"
    # The frozen leader wakes up in an old term: it must follow the new leader and catch up.
    assert await procs.agreed_leader(NAMES, timeout=10) == new
    assert (await procs.nodes[leader].request({"op": "ready", "timeout": 10}, 15)).get("ok")
    st = await procs.statuses(NAMES)
    assert {"before", "during"} <= set(st[leader]["names"])
    deadline = time.monotonic() + 5
    while len({s["hash"] for s in (await procs.statuses(NAMES)).values()}) != 1:
        assert time.monotonic() < deadline, "states differ"
        await asyncio.sleep(0.05)
