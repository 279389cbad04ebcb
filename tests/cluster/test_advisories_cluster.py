"""Clustered stream advisories: ``STREAM.LEADER_ELECTED`` from each new leader (creation and
failover) and ``STREAM.QUORUM_LOST`` when the stream stalls, in nats-server's shapes; stream
actions are sent once per cluster, not once per replica."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import nats
import pytest

from jetlog.devcluster import LocalCluster
from jetlog.transport.barrier import flush_barrier

from .conftest import stream_info, wait_for

pytestmark = pytest.mark.slow


async def test_leader_elected_and_quorum_lost(cluster: LocalCluster, upstream) -> None:  # type: ignore[no-untyped-def]
    nc = await nats.connect(upstream.url)
    got: list[tuple[str, dict[str, Any]]] = []

    async def cb(m: Any) -> None:
        got.append((m.subject, json.loads(m.data)))

    def events(kind: str) -> list[dict[str, Any]]:
        return [b for s, b in got if s == f"$JS.EVENT.ADVISORY.STREAM.{kind}.AV"]

    try:
        await nc.subscribe("$JS.EVENT.ADVISORY.STREAM.>", cb=cb)
        await flush_barrier(nc)
        js = nc.jetstream(timeout=5)
        await js.add_stream(name="AV", subjects=["av.>"], num_replicas=3)
        first = (await stream_info(nc, "AV"))["cluster"]["leader"]

        async def elected(n: int) -> bool:
            return len(events("LEADER_ELECTED")) >= n

        await wait_for(lambda: elected(1), 10, "the first LEADER_ELECTED")
        ev = events("LEADER_ELECTED")[0]
        assert ev["type"] == "io.nats.jetstream.advisory.v1.stream_leader_elected"
        assert (ev["account"], ev["stream"], ev["leader"]) == ("$G", "AV", first)
        assert sorted(r["name"] for r in ev["replicas"]) == sorted(set(cluster.members) - {first})
        assert set(ev) == {"type", "id", "timestamp", "account", "stream", "leader", "replicas"}
        await asyncio.sleep(0.3)  # a second CREATED would have arrived by now
        assert len(events("CREATED")) == 1

        await cluster.kill(first)
        await wait_for(lambda: elected(2), 15, "LEADER_ELECTED after the leader's kill")
        second = events("LEADER_ELECTED")[1]["leader"]
        assert second != first

        # Leave the new leader alone: no in-sync follower fetches, the stream stalls.
        other = next(n for n in cluster.members if n not in (first, second))
        await cluster.kill(other)

        async def lost() -> bool:
            return bool(events("QUORUM_LOST"))

        await wait_for(lost, 15, "QUORUM_LOST from the remaining leader")
        q = events("QUORUM_LOST")[0]
        assert q["type"] == "io.nats.jetstream.advisory.v1.stream_quorum_lost"
        assert q["stream"] == "AV" and {r["name"] for r in q["replicas"]} == {first, other}
    finally:
        await nc.close()
