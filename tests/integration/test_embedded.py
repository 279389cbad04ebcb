"""The embedded nats-server launcher used by `jetlog dev`, the tests and the benchmarks."""

import nats

from jetlog.embedded import NatsServer


async def test_upstream_has_client_and_leaf_ports(nats_server: NatsServer) -> None:
    assert nats_server.ports["client"] > 0
    assert nats_server.ports["leafnode"] > 0
    nc = await nats.connect(nats_server.url)
    try:
        sub = await nc.subscribe("x")
        await nc.publish("x", b"hi")
        msg = await sub.next_msg(timeout=2)
        assert msg.data == b"hi"
    finally:
        await nc.close()


async def test_reference_server_runs_jetstream(js_server: NatsServer) -> None:
    nc = await nats.connect(js_server.url)
    try:
        info = await nc.jetstream().account_info()
        assert info.api.level == 5
    finally:
        await nc.close()
