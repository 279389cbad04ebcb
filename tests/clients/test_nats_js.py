"""@nats-io/jetstream 3.4.0 / @nats-io/kv 3.4.0 (node) against jetlog and nats-server -js.

Each test runs one scenario of ``js/scenarios.mjs`` in a node subprocess and asserts what the
client observed. The expected values are the real server's. See spec jetstream-consumers.md §6
(pull semantics, statuses), §12 (ordered consumers), §13 (client status handling).
"""

from __future__ import annotations

from typing import Any

import pytest

from .conftest import Target
from .envs import ScenarioError, node_cmd, run_scenario

pytestmark = pytest.mark.timeout(60)


async def scenario(target: Target, name: str, timeout: float = 30.0) -> dict[str, Any]:
    cmd = node_cmd()
    try:
        return await run_scenario(cmd, target.url, name, timeout)
    except ScenarioError as e:
        pytest.fail(f"[{target.kind}] {e}", pytrace=False)


def pick(msgs: list[dict[str, Any]], *keys: str) -> list[tuple[Any, ...]]:
    return [tuple(m[k] for k in keys) for m in msgs]


async def test_fetch(target: Target) -> None:
    r = await scenario(target, "fetch")
    # A full batch: delivered at once, metadata from the v1 ack subject.
    assert pick(r["first"], "subject", "data", "seq", "dseq", "delivered", "pending", "redelivered") == [
        ("s.a", "m0", 1, 1, 1, 4, False),
        ("s.a", "m1", 2, 2, 1, 3, False),
        ("s.a", "m2", 3, 3, 1, 2, False),
    ]
    assert {(m["stream"], m["consumer"]) for m in r["first"]} == {("S", "dur")}
    assert r["first_ms"] < 1000
    # Fewer than asked for: the fetch ends when the request expires (408 with pending headers).
    assert pick(r["second"], "seq", "dseq", "pending") == [(4, 4, 1), (5, 5, 0)]
    assert 900 <= r["second_ms"] < 2500
    assert r["ackack"] is True
    # #1-#3 and #5 acked, #4 not: the floor stops below #4.
    assert r["after_ackack"] == {
        "delivered": [5, 5],
        "ack_floor": [3, 3],
        "ack_pending": 1,
        "redelivered": 0,
        "pending": 0,
        "waiting": 0,
    }
    assert r["empty_count"] == 0
    assert 900 <= r["empty_ms"] < 2500


async def test_next(target: Target) -> None:
    r = await scenario(target, "next")
    assert pick(r["got"], "subject", "data", "seq", "pending") == [("n.a", "m0", 1, 1), ("n.a", "m1", 2, 0)]
    assert r["none"] is True and 900 <= r["none_ms"] < 2500
    assert pick([r["late"]], "subject", "data", "seq", "dseq") == [("n.late", "late", 3, 3)]
    assert 250 <= r["late_ms"] < 1500  # delivered as soon as it was published
    # -NAK: redelivered at once with the next delivery sequence and a delivery count of 2.
    assert pick(r["nak"], "data", "seq", "dseq", "delivered", "redelivered") == [
        ("again", 4, 4, 1, False),
        ("again", 4, 5, 2, True),
    ]
    assert r["nak"][0]["ts_ms"] == r["nak"][1]["ts_ms"]  # the stored timestamp, not delivery time
    # +TERM of the redelivery acks it: nothing pending, nothing redelivered.
    assert r["info"] == {
        "delivered": [5, 4],
        "ack_floor": [5, 4],
        "ack_pending": 0,
        "redelivered": 0,
        "pending": 0,
        "waiting": 0,
    }


async def test_consume_across_idle_period(target: Target) -> None:
    r = await scenario(target, "consume")
    assert pick(r["before"], "seq", "dseq", "pending") == [(i, i, 5 - i) for i in range(1, 6)]
    counts = r["idle_counts"]
    # 4.5 s idle with expires 2 s (idle_heartbeat 1 s): the pulls expired and were re-issued, and
    # server heartbeats arrived carrying the last delivered sequences.
    assert counts.get("heartbeat", 0) >= 2, counts
    assert counts.get("next", 0) >= 3, counts
    assert r["idle_last_hb"] == [5, 5]
    discards = [e for e in r["events"] if e["type"] == "discard"]
    assert discards, "no 408 with Nats-Pending-Messages/Bytes seen"
    assert discards[0]["messagesLeft"] > 0 and discards[0]["bytesLeft"] == 0
    # Messages published after the idle period arrive promptly on the same consume().
    assert pick(r["after"], "subject", "data", "seq", "dseq") == [
        ("c.b", "late0", 6, 6),
        ("c.b", "late1", 7, 7),
        ("c.b", "late2", 8, 8),
    ]
    assert r["after_ms"] < 1000
    assert r["ackack"] is True
    info = r["info"]
    assert (info["delivered"], info["ack_floor"], info["ack_pending"], info["pending"]) == (
        [8, 8],
        [8, 8],
        0,
        0,
    )


async def test_consume_consumer_deleted(target: Target) -> None:
    r = await scenario(target, "consume_deleted")
    assert pick(r["got"], "seq", "dseq") == [(1, 1), (2, 2)]
    assert r["rest"] == []
    # The waiting pull gets "409 Consumer Deleted": reported, and the consume ends with it.
    assert {"type": "consumer_deleted", "code": 409, "description": "consumer deleted"} in r["events"]
    assert r["thrown"] == "JetStreamStatusError: consumer deleted"
    assert r["closed_error"] == "JetStreamStatusError: consumer deleted"
    assert r["end_ms"] < 3000


async def test_ordered_consumer(target: Target) -> None:
    r = await scenario(target, "ordered", timeout=40)
    assert pick(r["fetched"], "data", "seq", "dseq", "pending") == [
        (f"m{i}", i + 1, i + 1, 9 - i) for i in range(4)
    ]
    assert r["fetched"][0]["consumer"].endswith("_1")
    assert r["config"] == {
        "ack_policy": "none",
        "deliver_policy": "by_start_sequence",
        "opt_start_seq": 1,
        "max_deliver": 1,
        "mem_storage": True,
        "num_replicas": 1,
        "inactive_threshold": 300_000_000_000,
        "durable": None,
    }
    # A second ordered consumer from opt_start_seq 5: delivery sequences start at 1.
    assert pick(r["consumed"], "data", "seq", "dseq", "pending") == [
        (f"m{i}", i + 1, i - 3, 9 - i) for i in range(4, 10)
    ]
    before = r["name_before"]
    assert before.endswith("_1") and {m["consumer"] for m in r["consumed"]} == {before}
    # Its server-side consumer is deleted: the client recreates it (serial _2) from the next
    # stream sequence, delivery sequences starting over.
    assert pick(r["after_delete"], "subject", "data", "seq", "dseq") == [
        ("o.b", f"n{i}", 11 + i, 1 + i) for i in range(5)
    ]
    after = r["name_after"]
    assert after == before[: -len("_1")] + "_2"
    assert {m["consumer"] for m in r["after_delete"]} == {after}
    assert after in r["server_consumers"] and before not in r["server_consumers"]
    types = [e["type"] for e in r["events"]]
    assert "reset" in types and "ordered_consumer_recreated" in types, types
    assert r["recover_ms"] < 8000


async def test_kv_put_get_watch(target: Target) -> None:
    r = await scenario(target, "kv")
    assert r["revs"] == [1, 2, 3]
    assert r["get"] == {"key": "a", "value": "3", "revision": 3, "operation": "PUT"}
    # Initial values: last per key in stream order; the watcher counts them down from the
    # consumer's num_pending (2) to mark where live updates begin.
    assert r["init"] == [
        {"key": "b", "value": "2", "revision": 2, "operation": "PUT", "delta": 1, "isUpdate": False},
        {"key": "a", "value": "3", "revision": 3, "operation": "PUT", "delta": 0, "isUpdate": True},
    ]
    assert r["live"] == [
        {"key": "c", "value": "4", "revision": 4, "operation": "PUT", "delta": 0, "isUpdate": True},
        {"key": "b", "value": "", "revision": 5, "operation": "DEL", "delta": 0, "isUpdate": True},
    ]
    assert r["keys"] == ["a", "c"]
    assert r["history_a"] == [
        {"key": "a", "value": "1", "revision": 1, "operation": "PUT", "delta": 1, "isUpdate": False},
        {"key": "a", "value": "3", "revision": 3, "operation": "PUT", "delta": 0, "isUpdate": False},
    ]
    assert r["get_deleted"] == {"operation": "DEL", "revision": 5}
