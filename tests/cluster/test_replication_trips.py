"""Replication round trips: on a stream with no consumers a caught-up follower long-polls (it
used to ask again at once, round after round, because it never adopted the leader's empty
consumer state); a consumer deleted while a follower was down stays deleted when that follower
leads; a read served by a follower right after a write sees the write without waiting for the
leader's HW linger."""

from __future__ import annotations

import asyncio
import statistics
import time

import msgspec
import nats
import pytest

from jetlog.cluster.follower import WAIT_MS
from jetlog.cluster.leaderfetch import HW_LINGER
from jetlog.devcluster import LocalCluster

from .conftest import node_metrics, stream_info, wait_for

pytestmark = pytest.mark.slow


async def _in_sync(nc: nats.NATS, stream: str, n: int = 3) -> bool:
    try:
        c = (await stream_info(nc, stream, timeout=1))["cluster"]
    except (TimeoutError, nats.errors.Error):
        return False
    reps = c.get("replicas", [])
    return len(reps) == n - 1 and all(r.get("current") and not r.get("lag") for r in reps)


async def test_idle_followers_long_poll(cluster: LocalCluster, upstream) -> None:  # type: ignore[no-untyped-def]
    nc = await nats.connect(upstream.url)
    try:
        js = nc.jetstream(timeout=5)
        await js.add_stream(name="IDF", subjects=["idf.>"], num_replicas=3)
        await js.add_stream(name="IDM", subjects=["idm.>"], num_replicas=3, storage="memory")
        for i in range(5):
            await js.publish("idf.a", f"f{i}".encode())
            await js.publish("idm.a", f"m{i}".encode())
        for s in ("IDF", "IDM"):
            await wait_for(lambda s=s: _in_sync(nc, s), 20, f"{s} in sync on every replica")
        leaders = {s: (await stream_info(nc, s))["cluster"]["leader"] for s in ("IDF", "IDM")}
    finally:
        await nc.close()

    def counts() -> dict[tuple[str, str], float]:
        out = {}
        for m in cluster.members.values():
            got = node_metrics(m.http)
            for s, lead in leaders.items():
                if m.name != lead:
                    out[(m.name, s)] = got[f'jetlog_replica_fetches_total{{stream="{s}"}}']
        return out

    before, t0 = counts(), time.monotonic()
    await asyncio.sleep(2.0)  # the measured window itself
    after, window = counts(), time.monotonic() - t0
    assert len(before) == 4, before  # two followers of each stream
    most = window / (WAIT_MS / 1000) + 3
    for k, v in after.items():
        made = v - before[k]
        # At least one long poll ran out in the window, and not many more than one per WAIT_MS.
        assert 1 <= made <= most, f"{k}: {made:.0f} fetches in {window:.1f}s (at most {most:.0f} expected)"


async def test_deleted_consumer_stays_deleted_on_a_follower_that_missed_it(
    cluster: LocalCluster, upstream
) -> None:  # type: ignore[no-untyped-def]
    nc = await nats.connect(upstream.url)
    try:
        js = nc.jetstream(timeout=5)
        await js.add_stream(name="DC", subjects=["dc.>"], num_replicas=3)
        for i in range(10):
            await js.publish("dc.a", f"m{i}".encode())
        await js.add_consumer("DC", nats.js.api.ConsumerConfig(durable_name="GONE", ack_policy="explicit"))
        await wait_for(lambda: _in_sync(nc, "DC"), 20, "DC in sync on every replica")
        leader = (await stream_info(nc, "DC"))["cluster"]["leader"]
        missed = sorted(n for n in cluster.members if n != leader)[0]
        await cluster.kill(missed)

        async def isr(n: int) -> bool:
            got = node_metrics(cluster.members[leader].http)
            return got.get('jetlog_stream_isr_size{stream="DC"}') == n

        await wait_for(lambda: isr(2), 20, f"{missed} out of the ISR")
        await js.delete_consumer("DC", "GONE")
        await cluster.start_node(missed)
        await wait_for(lambda: isr(3), 30, f"{missed} back in the ISR")
        # The follower got the leader's consumer state (none) when it came back: leading now,
        # it must not bring the deleted consumer back from its own old consumer log.
        req = msgspec.json.encode({"placement": {"preferred": missed}})
        msg = await nc.request("$JS.API.STREAM.LEADER.STEPDOWN.DC", req, timeout=5)
        assert msgspec.json.decode(msg.data).get("success") is True, msg.data

        async def moved() -> bool:
            try:
                return (await stream_info(nc, "DC", timeout=1))["cluster"]["leader"] == missed
            except (TimeoutError, nats.errors.Error):
                return False

        await wait_for(moved, 15, f"{missed} leading DC")
        names = [n async for n in _consumer_names(nc, "DC")]
        assert names == [], f"a deleted consumer came back on {missed}: {names}"
        assert (await js.stream_info("DC")).state.messages == 10
    finally:
        await nc.close()


async def _consumer_names(nc: nats.NATS, stream: str):  # type: ignore[no-untyped-def]
    msg = await nc.request(f"$JS.API.CONSUMER.NAMES.{stream}", b"{}", timeout=5)
    body = msgspec.json.decode(msg.data)
    assert "error" not in body, body
    for n in body.get("consumers") or []:
        yield n


async def test_read_after_write_through_any_replica(cluster: LocalCluster, upstream) -> None:  # type: ignore[no-untyped-def]
    nc = await nats.connect(upstream.url)
    try:
        js = nc.jetstream(timeout=5)
        await js.add_stream(name="RAW", subjects=["raw.>"], num_replicas=3, allow_direct=True)
        await js.publish("raw.a", b"first")
        await wait_for(lambda: _in_sync(nc, "RAW"), 20, "RAW in sync on every replica")
        took = []
        for i in range(40):
            ack = await js.publish("raw.a", f"v{i}".encode())
            t0 = time.monotonic()
            # Direct Get is answered by any replica (a queue group): most by a follower.
            m = await js.get_msg("RAW", seq=ack.seq, direct=True)
            took.append(time.monotonic() - t0)
            assert m.data == f"v{i}".encode() and m.seq == ack.seq
        # Without asking the leader, a follower's read waited for the HW linger (~20 ms each);
        # the bound is loose for a loaded machine, and well under the linger.
        assert statistics.median(took) < HW_LINGER / 2, sorted(took)
    finally:
        await nc.close()
