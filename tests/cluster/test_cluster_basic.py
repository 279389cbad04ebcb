"""Three real node processes beside one nats-server: streams of every replica count work from
any node; STREAM.INFO shows the cluster block; replicas hold the same messages."""

from __future__ import annotations

import json

import nats
import pytest
from nats.js.api import StreamConfig

from jetlog.devcluster import LocalCluster

from .conftest import node_metrics, stream_info, wait_for

pytestmark = pytest.mark.slow


async def test_r3_stream_publish_read_consume(cluster: LocalCluster, upstream) -> None:  # type: ignore[no-untyped-def]
    nc = await nats.connect(upstream.url)
    try:
        js = nc.jetstream(timeout=5)
        si = await js.add_stream(name="ORDERS", subjects=["orders.>"], num_replicas=3)
        assert si.config.num_replicas == 3
        acks = [await js.publish(f"orders.{i % 3}", f"m{i}".encode()) for i in range(50)]
        assert [a.seq for a in acks] == list(range(1, 51))
        info = await stream_info(nc, "ORDERS")
        assert info["state"]["messages"] == 50
        cl = info["cluster"]
        assert cl["name"] == "jetlog"
        assert cl["leader"] in cluster.members
        assert sorted(r["name"] for r in cl["replicas"]) == sorted(set(cluster.members) - {cl["leader"]})

        async def all_current() -> bool:
            reps = (await stream_info(nc, "ORDERS"))["cluster"]["replicas"]
            return all(r["current"] and r.get("lag", 0) == 0 for r in reps)

        await wait_for(all_current, 10, "both followers current")
        # Reads land on any node (the API is a queue group): every one sees the same data.
        for seq in (1, 25, 50):
            m = await js.get_msg("ORDERS", seq)
            assert m.data == f"m{seq - 1}".encode()
        sub = await js.pull_subscribe("orders.>", durable="D1", stream="ORDERS")
        got = []
        while len(got) < 50:
            for m in await sub.fetch(50, timeout=5):
                got.append(m.data)
                await m.ack_sync()
        assert got == [f"m{i}".encode() for i in range(50)]
        ci = await js.consumer_info("ORDERS", "D1")
        assert ci.ack_floor.stream_seq == 50
    finally:
        await nc.close()


async def test_r1_streams_placed_anywhere(cluster: LocalCluster, upstream) -> None:  # type: ignore[no-untyped-def]
    nc = await nats.connect(upstream.url)
    try:
        js = nc.jetstream(timeout=5)
        leaders = set()
        for i in range(6):
            await js.add_stream(name=f"S{i}", subjects=[f"s{i}.>"])
            for j in range(5):
                ack = await js.publish(f"s{i}.x", str(j).encode())
                assert ack.seq == j + 1
            info = await stream_info(nc, f"S{i}")
            assert info["state"]["messages"] == 5
            leaders.add(info["cluster"]["leader"])
        # Placement spreads leaders over the nodes.
        assert len(leaders) == 3
        names = await js.streams_info()
        assert sorted(s.config.name for s in names) == [f"S{i}" for i in range(6)]
        assert all(s.state.messages == 5 for s in names)
        ai = await js.account_info()
        assert ai.streams == 6
        await js.delete_stream("S0")
        ai = await js.account_info()
        assert ai.streams == 5
        # Overlap checks follow the metadata: creates, updates and deletes.
        with pytest.raises(nats.js.errors.BadRequestError) as e:
            await js.add_stream(name="X", subjects=["s3.x"])
        assert e.value.err_code == 10065
        await js.update_stream(StreamConfig(name="S1", subjects=["t1.>"]))
        await js.add_stream(name="X", subjects=["s1.y", "s0.a"])  # S1's old subjects, S0's
        for subject in ("t1.q", "s0.*"):
            with pytest.raises(nats.js.errors.BadRequestError) as e:
                await js.add_stream(name="Y", subjects=[subject])
            assert e.value.err_code == 10065
    finally:
        await nc.close()


async def test_too_many_replicas_refused(cluster: LocalCluster, upstream) -> None:  # type: ignore[no-untyped-def]
    nc = await nats.connect(upstream.url)
    try:
        js = nc.jetstream(timeout=5)
        with pytest.raises(nats.js.errors.BadRequestError) as e:
            await js.add_stream(name="BIG", subjects=["big"], num_replicas=5)
        assert e.value.err_code == 10005
    finally:
        await nc.close()


async def test_status_shows_members_raft_leader_and_stream_roles(cluster: LocalCluster, upstream) -> None:  # type: ignore[no-untyped-def]
    import asyncio
    import sys

    nc = await nats.connect(upstream.url)
    try:
        js = nc.jetstream(timeout=5)
        await js.add_stream(name="ST", subjects=["st.>"], num_replicas=3)
        await js.publish("st.a", b"x")
        leader = (await stream_info(nc, "ST"))["cluster"]["leader"]
    finally:
        await nc.close()

    async def status(*extra: str) -> str:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "jetlog",
            "status",
            "--nats-url",
            upstream.url,
            *extra,
            stdout=asyncio.subprocess.PIPE,
        )
        out, _ = await asyncio.wait_for(proc.communicate(), 30)
        assert proc.returncode == 0
        return out.decode()

    doc = json.loads(await status("--json"))
    cl = doc["cluster"]
    assert sorted(cl["members"]) == ["n1", "n2", "n3"] and all(m["alive"] for m in cl["members"].values())
    assert cl["raft_leader"] in cl["members"]
    st = cl["streams"]["ST"]
    assert (st["leader"], st["epoch"], sorted(st["isr"])) == (leader, 1, ["n1", "n2", "n3"])
    assert st["lag"] == {r: 0 for r in ("n1", "n2", "n3") if r != leader}
    assert [s["config"]["name"] for s in doc["streams"]] == ["ST"] and doc["account"]["streams"] == 1
    text = await status()
    assert "Cluster jetlog (Raft term" in text and "Raft leader" in text and "DOWN" not in text
    row = next(ln for ln in text.splitlines() if "│ ST " in ln)
    assert f"{leader} (epoch 1)" in row and row.count(" 0") >= 2


async def test_jsz_on_every_node_shows_the_meta_group(cluster: LocalCluster, upstream) -> None:  # type: ignore[no-untyped-def]
    import json
    import urllib.request

    nc = await nats.connect(upstream.url)
    try:
        js = nc.jetstream(timeout=5)
        await js.add_stream(name="JZ", subjects=["jz.>"], num_replicas=3)
        await js.publish("jz.a", b"x")
        leader = (await stream_info(nc, "JZ"))["cluster"]["leader"]
    finally:
        await nc.close()

    def jsz(http: str, q: str = "") -> dict:  # type: ignore[type-arg]
        with urllib.request.urlopen(f"http://{http}/jsz{q}", timeout=5) as r:
            return json.loads(r.read())  # type: ignore[no-any-return]

    def status(http: str) -> dict:  # type: ignore[type-arg]
        with urllib.request.urlopen(f"http://{http}/status.json", timeout=5) as r:
            return json.loads(r.read())  # type: ignore[no-any-return]

    docs = {m.name: jsz(m.http, "?streams=true&leader-only=true") for m in cluster.members.values()}
    # The status page's data on each node: every member, one Raft leader, the stream's ISR.
    for m in cluster.members.values():
        st = status(m.http)
        assert sorted(x["name"] for x in st["members"]) == sorted(cluster.members)
        assert sum(x["role"].startswith("Raft leader") for x in st["members"]) == 1
        assert [s["name"] for s in st["streams"]] == ["JZ"] and st["streams"][0]["leader"] == leader
    metas = {n: d["meta_cluster"] for n, d in docs.items()}
    assert all(m["cluster_size"] == 3 and m["name"] == "jetlog" for m in metas.values()), metas
    assert len({m.get("leader") for m in metas.values()}) == 1, metas
    for name, d in docs.items():
        assert metas[name]["peer"] == name
        assert d["streams"] == 1 and d["ha_assets"] == 1  # every node holds a replica
        led = [s["name"] for s in d["account_details"][0].get("stream_detail", [])]
        assert led == (["JZ"] if name == leader else []), (name, leader, led)


async def test_metrics_show_raft_role_isr_and_replica_lag(cluster: LocalCluster, upstream) -> None:  # type: ignore[no-untyped-def]
    nc = await nats.connect(upstream.url)
    try:
        js = nc.jetstream(timeout=5)
        await js.add_stream(name="MX", subjects=["mx.>"], num_replicas=3)
        for i in range(20):
            await js.publish("mx.a", f"m{i}".encode())
        leader = (await stream_info(nc, "MX"))["cluster"]["leader"]
    finally:
        await nc.close()

    async def settled() -> bool:
        got = {m.name: node_metrics(m.http) for m in cluster.members.values()}
        lead = got[leader]
        lags = [v for k, v in lead.items() if k.startswith("jetlog_replica_lag_messages{replica=")]
        return (
            sum(g["jetlog_raft_leader"] for g in got.values()) == 1
            and all(g['jetlog_stream_isr_size{stream="MX"}'] == 3 for g in got.values())
            and [g['jetlog_stream_leader{stream="MX"}'] for n, g in sorted(got.items())]
            == [1.0 if n == leader else 0.0 for n in sorted(got)]
            and len(lags) == 2
            and all(v == 0 for v in lags)
            and len({g["jetlog_raft_term"] for g in got.values()}) == 1
        )

    await wait_for(settled, 15, "Raft role, ISR and zero lag in every node's /metrics")
