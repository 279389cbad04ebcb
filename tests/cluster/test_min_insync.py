"""Below min_insync a publish gets an immediate JetStream error, not a timeout; when the
missing replica is back in the ISR, publishes are acknowledged again."""

from __future__ import annotations

import time

import nats
import nats.js.errors
import pytest

from jetlog.embedded import NatsServer

from .conftest import stream_info, wait_for

pytestmark = pytest.mark.slow


async def test_publish_refused_below_min_insync(upstream: NatsServer, tmp_path, make_cluster) -> None:  # type: ignore[no-untyped-def]
    conf = tmp_path / "jetlog.toml"
    conf.write_text("[cluster]\nmin_insync = 3\n")
    cluster = await make_cluster(
        nats_url=upstream.url,
        leaf_url=upstream.leaf_url,
        extra_args=["--config", str(conf)],
    )
    nc = await nats.connect(upstream.url)
    try:
        js = nc.jetstream(timeout=5)
        await js.add_stream(name="M", subjects=["m.>"], num_replicas=3)
        assert (await js.publish("m.x", b"1")).seq == 1
        leader = (await stream_info(nc, "M"))["cluster"]["leader"]
        follower = next(m for m in cluster.members if m != leader)
        await cluster.kill(follower)

        async def isr_shrunk() -> bool:
            reps = (await stream_info(nc, "M"))["cluster"]["replicas"]
            return any(r["name"] == follower and not r["current"] for r in reps)

        await wait_for(isr_shrunk, 10, "the dead follower out of the ISR")
        t0 = time.monotonic()
        with pytest.raises(nats.js.errors.ServiceUnavailableError) as e:
            await js.publish("m.x", b"2", timeout=3)
        assert time.monotonic() - t0 < 1.0, "refused at once, not after a timeout"
        assert e.value.err_code == 10008
        await cluster.start_node(follower)

        async def accepted() -> bool:
            try:
                await js.publish("m.x", b"3", timeout=1)
            except (TimeoutError, nats.errors.Error):
                return False
            return True

        await wait_for(accepted, 30, "publishes accepted again")
        info = await stream_info(nc, "M")
        assert all(r["current"] for r in info["cluster"]["replicas"])
    finally:
        await nc.close()
        await cluster.stop()
