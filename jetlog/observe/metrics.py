"""Prometheus metrics, gathered at scrape time from the node's own counters.

Hot paths bump plain integer attributes; this collector turns them into metric families only
when ``/metrics`` is scraped, so publishing pays nothing for metrics.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from jetlog.log.syncer import current_syncer


class _Link(Protocol):
    @property
    def connected(self) -> bool: ...


class _Store(Protocol):
    @property
    def msgs(self) -> int: ...
    @property
    def bytes(self) -> int: ...
    @property
    def last_seq(self) -> int: ...


class _Stats(Protocol):
    @property
    def received(self) -> int: ...
    @property
    def stored(self) -> int: ...
    @property
    def duplicates(self) -> int: ...
    @property
    def rejected(self) -> int: ...
    @property
    def pubacks(self) -> int: ...


class _Held(Protocol):
    @property
    def held(self) -> int: ...
    @property
    def dropped(self) -> int: ...


class _Stream(Protocol):
    @property
    def store(self) -> _Store: ...
    @property
    def committed_seq(self) -> int: ...
    @property
    def stats(self) -> _Stats: ...
    @property
    def held(self) -> _Held: ...


class _Catalog(Protocol):
    @property
    def streams(self) -> Mapping[str, _Stream]: ...


class MetricsHost(Protocol):
    """What the collector reads of the node (``jetlog.node.Node`` satisfies it)."""

    @property
    def streams(self) -> _Catalog | None:
        """The stream catalog (None before the node has loaded it)."""
        ...

    @property
    def api(self) -> Any:
        """The API router: its counters are read with getattr (None before it starts)."""
        ...

    @property
    def client(self) -> _Link:
        """The client link."""
        ...

    @property
    def leaf(self) -> _Link:
        """The leaf link."""
        ...

    @property
    def cluster(self) -> Any:
        """The cluster service (``metrics_view()``), None on a single node."""
        ...


class NodeCollector(Collector):
    """Exports per-stream state and counters, API counters and link state."""

    def __init__(self, node: MetricsHost) -> None:
        self.node = node

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily | HistogramMetricFamily]:
        node = self.node
        msgs = GaugeMetricFamily("jetlog_stream_messages", "Messages stored", labels=["stream"])
        nbytes = GaugeMetricFamily("jetlog_stream_bytes", "Bytes stored", labels=["stream"])
        last = GaugeMetricFamily("jetlog_stream_last_seq", "Last assigned sequence", labels=["stream"])
        committed = GaugeMetricFamily(
            "jetlog_stream_committed_seq", "Highest durable sequence", labels=["stream"]
        )
        received = CounterMetricFamily(
            "jetlog_stream_received", "Messages received for the stream", labels=["stream"]
        )
        stored = CounterMetricFamily("jetlog_stream_stored", "Messages stored", labels=["stream"])
        dups = CounterMetricFamily("jetlog_stream_duplicates", "Duplicates acknowledged", labels=["stream"])
        rejected = CounterMetricFamily("jetlog_stream_rejected", "Publishes rejected", labels=["stream"])
        pubacks = CounterMetricFamily(
            "jetlog_stream_pubacks",
            "PubAcks issued (each sent once its message is committed)",
            labels=["stream"],
        )
        fence_held = CounterMetricFamily(
            "jetlog_stream_fence_held",
            "Publishes a fenced leader held (lost Raft contact) to handle once the fence lifted",
            labels=["stream"],
        )
        fence_dropped = CounterMetricFamily(
            "jetlog_stream_fence_dropped",
            "Publishes held while fenced and dropped unanswered (held too long, too many bytes, "
            "or the node was deposed meanwhile: the new leader answers them or clients retry)",
            labels=["stream"],
        )
        scrubbed = CounterMetricFamily(
            "jetlog_scrub_segments",
            "Segments a lazy open trusted, checked since by the background scrub (result: ok or "
            "damaged; damaged ones are quarantined at the next start)",
            labels=["stream", "result"],
        )
        streams = dict(node.streams.streams) if node.streams is not None else {}
        if streams:
            for name, s in streams.items():
                st = s.store
                scrub = getattr(st, "scrub", None)
                if scrub is not None:
                    scrubbed.add_metric([name, "ok"], scrub.checked - scrub.damaged)
                    scrubbed.add_metric([name, "damaged"], scrub.damaged)
                msgs.add_metric([name], st.msgs)
                nbytes.add_metric([name], st.bytes)
                last.add_metric([name], st.last_seq)
                committed.add_metric([name], s.committed_seq)
                received.add_metric([name], s.stats.received)
                stored.add_metric([name], s.stats.stored)
                dups.add_metric([name], s.stats.duplicates)
                rejected.add_metric([name], s.stats.rejected)
                pubacks.add_metric([name], s.stats.pubacks)
                fence_held.add_metric([name], s.held.held)
                fence_dropped.add_metric([name], s.held.dropped)
        yield from (msgs, nbytes, last, committed, received, stored, dups, rejected, pubacks, scrubbed)
        yield from (fence_held, fence_dropped)
        yield from _consumer_families(streams)
        yield from _fsync_family()
        yield from _fsync_where_family()
        if node.cluster is not None:
            yield from _cluster_families(node.cluster.metrics_view())
        api = node.api
        total = CounterMetricFamily("jetlog_api_requests", "JetStream API replies sent")
        errors = CounterMetricFamily("jetlog_api_errors", "JetStream API error replies sent")
        total.add_metric([], getattr(api, "total", 0))
        errors.add_metric([], getattr(api, "errors", 0))
        yield total
        yield errors
        by_code = CounterMetricFamily(
            "jetlog_api_errors_by_code", "JetStream API error replies by err_code", labels=["err_code"]
        )
        for code, n in sorted(dict(getattr(api, "errors_by_code", {}) or {}).items()):
            by_code.add_metric([str(code)], n)
        yield by_code
        reads = CounterMetricFamily(
            "jetlog_read_requests", "Direct Get and bulk FETCH requests served here", labels=["kind"]
        )
        reads.add_metric(["direct_get"], getattr(api, "direct_gets", 0))
        reads.add_metric(["fetch"], getattr(api, "fetches", 0))
        yield reads
        stale = CounterMetricFamily(
            "jetlog_stale_deliveries_dropped",
            "Consumer deliveries dropped because they waited out a process stall (cluster)",
        )
        stale.add_metric([], getattr(getattr(node.leaf, "stats", None), "stale_deliveries", 0))
        yield stale
        up = GaugeMetricFamily("jetlog_link_up", "Upstream link state (1 up)", labels=["link"])
        up.add_metric(["client"], 1 if node.client.connected else 0)
        up.add_metric(["leafnode"], 1 if node.leaf.connected else 0)
        yield up


def _consumer_families(streams: Mapping[str, Any]) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
    """Per consumer this node runs (its stream's leader runs them)."""
    labels = ["stream", "consumer"]
    delivered = CounterMetricFamily(
        "jetlog_consumer_delivered", "Deliveries, redeliveries included (consumer sequence)", labels=labels
    )
    acked = CounterMetricFamily(
        "jetlog_consumer_acks", "Acks and terms that settled a message", labels=labels
    )
    pending = GaugeMetricFamily("jetlog_consumer_num_pending", "Messages not yet delivered", labels=labels)
    ack_pending = GaugeMetricFamily(
        "jetlog_consumer_num_ack_pending", "Delivered messages awaiting an ack", labels=labels
    )
    redelivered = GaugeMetricFamily(
        "jetlog_consumer_num_redelivered", "Messages delivered more than once, not yet acked", labels=labels
    )
    waiting = GaugeMetricFamily("jetlog_consumer_num_waiting", "Pull requests waiting", labels=labels)
    floor = GaugeMetricFamily(
        "jetlog_consumer_ack_floor_seq", "Stream sequence of the ack floor", labels=labels
    )
    for sname, s in streams.items():
        cset = getattr(s, "consumers", None)
        if cset is None:
            continue
        for cname, c in cset.consumers.items():
            st = c.state
            lv = [sname, cname]
            delivered.add_metric(lv, st.dseq)
            acked.add_metric(lv, c.acks)
            pending.add_metric(lv, c.num_pending())
            ack_pending.add_metric(lv, st.num_ack_pending)
            redelivered.add_metric(lv, st.num_redelivered)
            waiting.add_metric(lv, len(c.waiting))
            floor.add_metric(lv, st.floor_sseq)
    yield from (delivered, acked, pending, ack_pending, redelivered, waiting, floor)


def _fsync_family() -> Iterator[HistogramMetricFamily]:
    """File-data sync latency of this process's fsync service (group commits and rolls)."""
    syncer = current_syncer()
    if syncer is None:
        return
    lat = syncer.latency
    buckets = []
    acc = 0
    for bound, n in zip(lat.BOUNDS, lat.counts, strict=False):
        acc += n
        buckets.append((repr(bound), acc))
    acc += lat.counts[-1]
    buckets.append(("+Inf", acc))
    h = HistogramMetricFamily("jetlog_fsync_seconds", "Latency of fdatasync (request to answer)")
    h.add_metric([], buckets, sum_value=lat.total)
    yield h


def _fsync_where_family() -> Iterator[CounterMetricFamily]:
    """Where this process's syncs ran: on the loop (a lone small commit, or a bulk job while the
    disk is fast), in the fsync helper (one file each, or many answered by one ``syncfs``), or
    in the fallback threads."""
    syncer = current_syncer()
    if syncer is None:
        return
    st = syncer.stats
    where = CounterMetricFamily(
        "jetlog_fsyncs", "Syncs (files and directories) by where they ran", labels=["where"]
    )
    where.add_metric(["loop"], st["inline"] - st["inline_bulk"])
    where.add_metric(["loop_bulk"], st["inline_bulk"])
    where.add_metric(["thread"], st["threaded"])
    where.add_metric(["helper_shared"], st["shared"])
    where.add_metric(["helper"], max(0, st["syncs"] - st["inline"] - st["threaded"] - st["shared"]))
    yield where


def _cluster_families(view: Mapping[str, Any]) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
    """Raft role and term; per replicated stream: leadership, ISR size, epoch, follower lag."""
    raft = GaugeMetricFamily("jetlog_raft_leader", "1 while this node leads the metadata Raft group")
    raft.add_metric([], 1 if view.get("raft_leader") else 0)
    term = GaugeMetricFamily("jetlog_raft_term", "Current metadata Raft term")
    term.add_metric([], view.get("raft_term", 0))
    leads = GaugeMetricFamily("jetlog_stream_leader", "1 where this node leads the stream", labels=["stream"])
    isr = GaugeMetricFamily("jetlog_stream_isr_size", "In-sync replicas (leader included)", labels=["stream"])
    reps = GaugeMetricFamily("jetlog_stream_replicas", "Replicas assigned", labels=["stream"])
    epoch = GaugeMetricFamily("jetlog_stream_leader_epoch", "Leader epoch", labels=["stream"])
    lag = GaugeMetricFamily(
        "jetlog_replica_lag_messages",
        "Messages a follower is behind the leader's log end (exported by the leader)",
        labels=["stream", "replica"],
    )
    unapplied = GaugeMetricFamily(
        "jetlog_stream_unapplied",
        "1 where this node could not start its role for the stream yet (tried again every second)",
        labels=["stream"],
    )
    fetches = CounterMetricFamily(
        "jetlog_replica_fetches",
        "Replication fetches this node made as a follower of the stream (since it began following)",
        labels=["stream"],
    )
    for name, st in view.get("streams", {}).items():
        if "fetches" in st:
            fetches.add_metric([name], st["fetches"])
        leads.add_metric([name], 1 if st["leader"] else 0)
        isr.add_metric([name], st["isr"])
        reps.add_metric([name], st["replicas"])
        epoch.add_metric([name], st["epoch"])
        unapplied.add_metric([name], 1 if st.get("unapplied") else 0)
        for replica, n in st["lag"].items():
            lag.add_metric([name, replica], n)
    yield from (raft, term, leads, isr, reps, epoch, unapplied, lag, fetches)
