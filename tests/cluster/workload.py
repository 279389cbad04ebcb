"""The publish workload of the fault tests lives in the product (``jetlog.chaos.workload``,
shared with ``jetlog chaos``); this module re-exports it and keeps the tests' assertion helper,
which judges a replica with the chaos checker."""

from __future__ import annotations

from jetlog.chaos.checker import check, summarize
from jetlog.chaos.history import History, Stored
from jetlog.chaos.workload import Publisher, payload, read_replica, run_publishers, stop_publishers

__all__ = ["Publisher", "check_acked", "payload", "read_replica", "run_publishers", "stop_publishers"]


def check_acked(pubs: list[Publisher], msgs: dict[int, Stored]) -> None:
    """Every acknowledged message is stored once, at its acked sequence, byte for byte, and each
    publisher's messages are in publish order (AssertionError listing what is not)."""
    h = History(consumer=False)
    for p in pubs:
        h.acks += p.records
    h.replicas = {"replica": msgs}
    h.hw = max(msgs) if msgs else 0
    found = check(h)
    assert not found, "\n".join(summarize(found))
