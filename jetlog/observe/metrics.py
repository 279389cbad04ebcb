"""Prometheus metrics, gathered at scrape time from the node's own counters.

Hot paths bump plain integer attributes; this collector turns them into metric families only
when ``/metrics`` is scraped, so publishing pays nothing for metrics.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from jetlog.node import Node


class NodeCollector(Collector):
    """Exports per-stream state and counters, API counters and link state."""

    def __init__(self, node: Node) -> None:
        self.node = node

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
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
        if node.streams is not None:
            for name, s in node.streams.streams.items():
                st = s.store
                msgs.add_metric([name], st.msgs)
                nbytes.add_metric([name], st.bytes)
                last.add_metric([name], st.last_seq)
                committed.add_metric([name], st.committed_seq)
                received.add_metric([name], s.stats.received)
                stored.add_metric([name], s.stats.stored)
                dups.add_metric([name], s.stats.duplicates)
                rejected.add_metric([name], s.stats.rejected)
        yield from (msgs, nbytes, last, committed, received, stored, dups, rejected)
        api = node.api
        total = CounterMetricFamily("jetlog_api_requests", "JetStream API replies sent")
        errors = CounterMetricFamily("jetlog_api_errors", "JetStream API error replies sent")
        total.add_metric([], getattr(api, "total", 0))
        errors.add_metric([], getattr(api, "errors", 0))
        yield total
        yield errors
        up = GaugeMetricFamily("jetlog_link_up", "Upstream link state (1 up)", labels=["link"])
        up.add_metric(["client"], 1 if node.client.connected else 0)
        up.add_metric(["leafnode"], 1 if node.leaf.connected else 0)
        yield up
