"""A local cluster whose node's monitoring port was taken after the layout was made (the
kernel hands free ports to other sockets as ephemeral ports) starts anyway, on a new port."""

from __future__ import annotations

import json
import os
import socket
from typing import Any

from jetlog.devcluster import LocalCluster
from jetlog.embedded import NatsServer


async def test_a_taken_monitoring_port_is_replaced(upstream: NatsServer, tmp_path: Any) -> None:
    # Info logs: a node that once stayed silent here for 90 s (not reproduced since) says how
    # far it got when the start times out (the error quotes its last stderr lines).
    c = LocalCluster(
        str(tmp_path / "c"), 3, nats_url=upstream.url, leaf_url=upstream.leaf_url, log_level="info"
    )
    taken = c.members["n1"].http_port
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", taken))
        squatter.listen()
        try:
            await c.start(timeout=90)
            assert all(m.running for m in c.members.values())
            moved = c.members["n1"].http_port
            assert moved != taken
            with open(os.path.join(c.root, "cluster.json")) as f:
                assert json.load(f)["nodes"]["n1"]["http_port"] == moved
        finally:
            await c.stop()
