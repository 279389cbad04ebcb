"""Integration fixtures: an in-process jetlog node beside a real nats-server, and a
``target`` fixture that runs the same test against jetlog and against nats-server -js, so every
expected value in a conformance test is checked against the reference implementation too."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import nats
import pytest

from jetlog.config import load_config
from jetlog.embedded import NatsServer

if TYPE_CHECKING:
    from jetlog.node import Node


async def start_node(srv: NatsServer, data_dir: str, **overrides: Any) -> Node:
    """Start a jetlog node beside ``srv`` (JetStream off, leafnode on)."""
    from jetlog.node import Node

    ov = {"upstream.url": srv.url, "upstream.leafnode_url": srv.leaf_url, "data_dir": data_dir}
    ov.update(overrides)
    node = Node(load_config(None, ov))
    await node.start()
    return node


@pytest.fixture
async def jetlog_node(nats_server: NatsServer, tmp_path: Any) -> AsyncIterator[Node]:
    node = await start_node(nats_server, str(tmp_path / "data"))
    try:
        yield node
    finally:
        await node.stop()


@dataclass
class Target:
    """Where a conformance test runs: ``kind`` is "jetlog" or "nats"."""

    kind: str
    url: str
    node: Node | None = None

    @property
    def is_jetlog(self) -> bool:
        return self.kind == "jetlog"


@pytest.fixture(params=["jetlog", "nats"])
async def target(request: pytest.FixtureRequest, tmp_path: Any) -> AsyncIterator[Target]:
    if request.param == "nats":
        async with NatsServer(jetstream=True, leafnode=False, store_dir=str(tmp_path / "js")) as srv:
            yield Target("nats", srv.url)
    else:
        async with NatsServer(leafnode=True) as srv:
            node = await start_node(srv, str(tmp_path / "data"))
            try:
                yield Target("jetlog", srv.url, node)
            finally:
                await node.stop()


@pytest.fixture
async def nc(target: Target) -> AsyncIterator[nats.NATS]:
    conn = await nats.connect(target.url)
    try:
        yield conn
    finally:
        await conn.close()
