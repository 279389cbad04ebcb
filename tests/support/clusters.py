"""Shared 3-node clusters for the client acceptance suites.

The same client scenarios run against a single jetlog node, a real ``nats-server -js`` and two
clusters of three real ``jetlog serve`` processes beside one nats-server: ``cluster`` (streams
as the clients create them: R1, placed on any node, requests answered wherever they land) and
``cluster-r3`` (``--default-replicas 3``: every stream that does not say is replicated 3 ways).

Starting three processes per test would triple the suite's time, so each cluster is started once
per test session, in a background thread with its own event loop (the processes do not care
which loop started them), and every test starts from an empty account (all streams deleted).
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import nats
import pytest

from jetlog.devcluster import LocalCluster
from jetlog.embedded import NatsServer

KINDS = {"cluster": 1, "cluster-r3": 3}


class BackgroundCluster:
    """nats-server + 3 nodes, owned by a private event loop thread."""

    def __init__(self, default_replicas: int) -> None:
        self.default_replicas = default_replicas
        self._tmp = tempfile.TemporaryDirectory(prefix="jetlog-cluster-")
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True, name="bg-cluster")
        self._thread.start()
        self.srv: NatsServer | None = None
        self.cluster: LocalCluster | None = None
        self._run(self._start(), 120)

    def _run(self, coro: Any, timeout: float) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def kill(self, name: str) -> None:
        """``kill -9`` one node (from synchronous test code)."""
        assert self.cluster is not None
        self._run(self.cluster.kill(name), 30)

    async def _start(self) -> None:
        self.srv = NatsServer(leafnode=True)
        await self.srv.start()
        self.cluster = LocalCluster(
            self._tmp.name,
            3,
            nats_url=self.srv.url,
            leaf_url=self.srv.leaf_url,
            extra_args=["--default-replicas", str(self.default_replicas)],
            log_level="warning",
        )
        await self.cluster.start(timeout=90)

    @property
    def url(self) -> str:
        assert self.srv is not None
        return self.srv.url

    def logs(self) -> str:
        """The nodes' recent stderr (for failure messages)."""
        assert self.cluster is not None
        return self.cluster.log_tail(30)

    async def _stop(self) -> None:
        if self.cluster is not None:
            await self.cluster.stop()
        if self.srv is not None:
            await self.srv.stop()

    def close(self) -> None:
        with contextlib.suppress(TimeoutError):
            self._run(self._stop(), 60)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()
        self._tmp.cleanup()


class ClusterPool:
    """Clusters started on first use, stopped at the end of the session."""

    def __init__(self) -> None:
        self._clusters: dict[str, BackgroundCluster] = {}

    def get(self, kind: str) -> BackgroundCluster:
        c = self._clusters.get(kind)
        if c is None:
            c = self._clusters[kind] = BackgroundCluster(KINDS[kind])
        return c

    def close(self) -> None:
        for c in self._clusters.values():
            c.close()
        self._clusters.clear()


SHARED = ClusterPool()
"""The session's pool. ``tests/conftest.py`` runs every test that uses it first and closes it
after the last of them, so its six idle nodes do not load the machine for the rest of the
session (the cluster fault tests are timing-sensitive on two cores)."""


@pytest.fixture(scope="session")
def cluster_pool() -> Iterator[ClusterPool]:
    try:
        yield SHARED
    finally:
        SHARED.close()


async def reset_account(url: str) -> None:
    """Delete every stream (and so every consumer) so a test starts from an empty account."""
    nc = await nats.connect(url)
    try:
        js = nc.jetstream(timeout=10)
        for name in [s.config.name for s in await js.streams_info()]:
            await js.delete_stream(name)
        left = [s.config.name for s in await js.streams_info()]
        assert not left, f"streams left after reset: {left}"
    finally:
        await nc.close()


@pytest.fixture(params=["jetlog", "nats", *KINDS], name="target")
async def client_target(
    request: pytest.FixtureRequest, tmp_path: Any, cluster_pool: ClusterPool
) -> AsyncIterator[Any]:
    """The integration ``target`` plus the two shared clusters."""
    from tests.integration.conftest import Target, start_node

    kind = request.param
    if kind == "nats":
        async with NatsServer(jetstream=True, leafnode=False, store_dir=str(tmp_path / "js")) as srv:
            yield Target("nats", srv.url)
    elif kind == "jetlog":
        async with NatsServer(leafnode=True) as srv:
            node = await start_node(srv, str(tmp_path / "data"))
            try:
                yield Target("jetlog", srv.url, node)
            finally:
                await node.stop()
    else:
        c = cluster_pool.get(kind)
        await reset_account(c.url)
        yield Target(kind, c.url)
