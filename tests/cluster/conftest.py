"""Cluster fixtures: one real nats-server and three real ``jetlog serve`` processes
(``jetlog.devcluster.LocalCluster``), so tests can kill -9, freeze and restart nodes."""

from __future__ import annotations

import asyncio
import time
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import msgspec
import nats
import pytest

from jetlog.chaos.runner import failover_time
from jetlog.devcluster import LocalCluster
from jetlog.embedded import NatsServer


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    # Keep each phase's report on the item so fixtures can tell a failed test at teardown.
    rep = yield
    setattr(item, f"rep_{rep.when}", rep)
    return rep


def _print_logs_if_failed(request: pytest.FixtureRequest, clusters: list[LocalCluster]) -> None:
    """A failed cluster test prints every node's last log lines (shown with the failure)."""
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed:
        for c in clusters:
            print(f"--- node logs ({c.root}) ---\n{c.log_tail(60)}")


@pytest.fixture
async def upstream() -> AsyncIterator[NatsServer]:
    async with NatsServer(leafnode=True) as srv:
        yield srv


@pytest.fixture
async def make_cluster(
    tmp_path: Any, request: pytest.FixtureRequest
) -> AsyncIterator[Callable[..., Awaitable[LocalCluster]]]:
    """``await make_cluster(nats_url=..., leaf_url=..., **kw)``: a started 3-node cluster that
    is stopped at teardown whatever the test did (no process outlives its test)."""
    made: list[LocalCluster] = []

    async def make(**kw: Any) -> LocalCluster:
        c = LocalCluster(str(tmp_path / f"c{len(made)}"), kw.pop("nodes", 3), **kw)
        made.append(c)
        await c.start(timeout=90)
        return c

    try:
        yield make
    finally:
        _print_logs_if_failed(request, made)
        for c in made:
            await c.stop()


@pytest.fixture
async def cluster(
    upstream: NatsServer, tmp_path: Any, request: pytest.FixtureRequest
) -> AsyncIterator[LocalCluster]:
    c = LocalCluster(
        str(tmp_path / "cluster"), 3, nats_url=upstream.url, leaf_url=upstream.leaf_url, log_level="info"
    )
    try:
        await c.start(timeout=90)
        yield c
    finally:
        _print_logs_if_failed(request, [c])
        await c.stop()


async def wait_for(
    pred: Callable[[], Awaitable[bool]], timeout: float = 10.0, what: str = "condition"
) -> float:
    """Poll ``pred`` until true; returns the seconds it took (AssertionError on timeout)."""
    t0 = time.monotonic()
    while True:
        if await pred():
            return time.monotonic() - t0
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.05)


async def stream_info(nc: nats.NATS, name: str, timeout: float = 2.0) -> dict[str, Any]:
    """Raw STREAM.INFO reply (as JSON)."""
    msg = await nc.request(f"$JS.API.STREAM.INFO.{name}", b"", timeout=timeout)
    return msgspec.json.decode(msg.data)


def node_metrics(http: str) -> dict[str, float]:
    """One node's ``/metrics`` samples: ``name{labels}`` -> value."""
    with urllib.request.urlopen(f"http://{http}/metrics", timeout=5) as r:
        text = r.read().decode()
    return {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line and not line.startswith("#")
    }


async def failover_gap(pubs: Any, t_fault: float, timeout: float = 15.0) -> float:
    """Seconds from ``t_fault`` to the first PubAck after the longest silence since (the chaos
    checker's measure, ``failover_time``), once 20 acks have followed it. Call it once the new
    leader is known: the first ack after the fault would count acks already in flight, or a
    cut-off leader's acks until it fences itself (a "0.05 s" failover)."""
    got: list[float] = []

    async def flowing() -> bool:
        acks = sorted(t for p in pubs for t in p.ack_times)
        gap = failover_time(t_fault, time.monotonic(), acks)
        if gap is None or sum(1 for t in acks if t >= t_fault + gap) < 20:
            return False
        got[:] = [gap]
        return True

    await wait_for(flowing, timeout, "acks flowing again after the fault")
    return got[0]
