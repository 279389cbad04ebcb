"""Fixtures for the Spark connector tests.

* ``spark``: one local[2] SparkSession for the whole run (JVM start-up is paid once).
* ``jetlog``: a real nats-server (JetStream off) with an in-process jetlog node beside it.
* ``natsjs``: a real ``nats-server -js`` (the reference; Direct Get fallback path).

Servers run on a background event loop thread, so tests are plain synchronous functions that
call Spark's blocking API. Each test uses its own stream names.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

import nats
import pytest
from nats.js.api import StreamConfig

from jetlog.embedded import NatsServer
from tests.spark import sparkutil

T = TypeVar("T")
_names = itertools.count(1)


class BgLoop:
    """An asyncio loop on a daemon thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="test-bg-loop", daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 120.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@dataclass
class Backend:
    """A NATS deployment with JetStream streams (jetlog or nats-server -js) and a nats-py client."""

    kind: str
    url: str
    bg: BgLoop
    nc: Any = None
    closers: list[Callable[[], Coroutine[Any, Any, None]]] = field(default_factory=list)

    @property
    def js(self) -> Any:
        return self.nc.jetstream()

    def name(self, prefix: str) -> str:
        """A stream name unique in this test session."""
        return f"{prefix}{next(_names)}"

    def add_stream(self, name: str, subjects: list[str], **cfg: Any) -> None:
        cfg.setdefault("allow_direct", True)
        self.bg.run(self.js.add_stream(StreamConfig(name=name, subjects=subjects, **cfg)))

    def publish(
        self,
        subject: str,
        payloads: list[bytes],
        headers: list[dict[str, str] | None] | None = None,
        chunk: int = 500,
    ) -> list[int]:
        """Publish with PubAcks (``chunk`` in flight); returns the sequences."""

        async def go() -> list[int]:
            seqs: list[int] = []
            for i in range(0, len(payloads), chunk):
                part = payloads[i : i + chunk]
                hs = headers[i : i + chunk] if headers else [None] * len(part)
                acks = await asyncio.gather(
                    *(self.js.publish(subject, p, headers=h) for p, h in zip(part, hs, strict=True))
                )
                seqs.extend(a.seq for a in acks)
            return seqs

        return self.bg.run(go())

    def fill(self, subject: str, n: int, size: int = 32) -> list[int]:
        """Publish ``n`` messages whose payload names their index."""
        return self.publish(subject, [f"m{i:08d}".encode().ljust(size, b".") for i in range(n)])

    def purge(self, stream: str, keep_from_seq: int) -> None:
        """Remove every message below ``keep_from_seq``."""
        self.bg.run(self.js.purge_stream(stream, seq=keep_from_seq))

    def state(self, stream: str) -> Any:
        return self.bg.run(self.js.stream_info(stream)).state

    def wait_for(self, what: str, cond: Callable[[], bool], timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while not cond():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}")
            time.sleep(0.02)


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """The session's SparkSession (the ``jetlog`` format is auto-registered via pyspark_jetlog)."""
    t0 = time.monotonic()
    s = sparkutil.make_spark("jetlog-tests")
    print(f"\n[spark] session started in {time.monotonic() - t0:.1f}s")
    yield s
    s.stop()


@pytest.fixture(scope="session")
def bg() -> Iterator[BgLoop]:
    loop = BgLoop()
    yield loop
    loop.close()


async def _connect(url: str) -> Any:
    return await nats.connect(url, max_reconnect_attempts=2)


@pytest.fixture(scope="session")
def jetlog(bg: BgLoop, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Backend]:
    """nats-server + an in-process jetlog node (serves the JetStream API and $JETLOG.API.*)."""
    from tests.integration.conftest import start_node

    srv = NatsServer(leafnode=True)
    bg.run(srv.start())
    node = bg.run(start_node(srv, str(tmp_path_factory.mktemp("jetlog-data"))))
    be = Backend("jetlog", srv.url, bg)
    be.nc = bg.run(_connect(srv.url))
    yield be
    with contextlib.suppress(Exception):
        bg.run(be.nc.close())
    bg.run(node.stop())
    bg.run(srv.stop())


@pytest.fixture(scope="session")
def natsjs(bg: BgLoop, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Backend]:
    """A real nats-server with JetStream (no jetlog: FETCH has no responder)."""
    srv = NatsServer(jetstream=True, leafnode=False, store_dir=str(tmp_path_factory.mktemp("js")))
    bg.run(srv.start())
    be = Backend("nats", srv.url, bg)
    be.nc = bg.run(_connect(srv.url))
    yield be
    with contextlib.suppress(Exception):
        bg.run(be.nc.close())
    bg.run(srv.stop())


def read_stream(spark: Any, url: str, streams: str, **options: Any) -> Any:
    """``spark.readStream.format("jetlog")`` with string options."""
    r = spark.readStream.format("jetlog").option("servers", url).option("streams", streams)
    for k, v in options.items():
        r = r.option(k, str(v).lower() if isinstance(v, bool) else str(v))
    return r.load()


def read_batch(spark: Any, url: str, streams: str, **options: Any) -> Any:
    """``spark.read.format("jetlog")`` with string options."""
    r = spark.read.format("jetlog").option("servers", url).option("streams", streams)
    for k, v in options.items():
        r = r.option(k, str(v).lower() if isinstance(v, bool) else str(v))
    return r.load()


def run_available_now(
    df: Any, out: str, checkpoint: str, fmt: str = "parquet", timeout: float = 120, **opts: Any
) -> Any:
    """Run a Trigger.AvailableNow query to completion; returns the (terminated) query."""
    w = df.writeStream.format(fmt).option("checkpointLocation", checkpoint)
    if fmt == "parquet":
        w = w.option("path", out)
    for k, v in opts.items():
        w = w.option(k, str(v))
    q = w.trigger(availableNow=True).start()
    if not q.awaitTermination(timeout):
        q.stop()
        raise AssertionError(f"query did not finish within {timeout}s")
    return q


def batch_sizes(q: Any) -> list[int]:
    """numInputRows of each micro-batch that read something."""
    return [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]
