"""nats-jetstream 0.3.0 (ADR-37 API, Python 3.13) against jetlog and nats-server -js.

Each test runs one scenario of ``py313/scenarios.py`` under ``.venv313/bin/python`` and asserts
what the client observed; the expected values are the real server's. Without a Python 3.13
environment these tests fail with the reason (``make clients-env`` builds it).
"""

from __future__ import annotations

from typing import Any

import pytest

from .conftest import Target
from .envs import ScenarioError, py313_cmd, run_scenario

pytestmark = pytest.mark.timeout(60)


async def scenario(target: Target, name: str, timeout: float = 30.0) -> dict[str, Any]:
    cmd = py313_cmd()
    try:
        return await run_scenario(cmd, target.url, name, timeout)
    except ScenarioError as e:
        pytest.fail(f"[{target.kind}] {e}", pytrace=False)


def pick(msgs: list[dict[str, Any]], *keys: str) -> list[tuple[Any, ...]]:
    return [tuple(m[k] for k in keys) for m in msgs]


async def test_fetch(target: Target) -> None:
    r = await scenario(target, "fetch")
    assert pick(r["first"], "subject", "data", "sseq", "dseq", "delivered", "pending") == [
        ("s.a", "m0", 1, 1, 1, 4),
        ("s.a", "m1", 2, 2, 1, 3),
        ("s.a", "m2", 3, 3, 1, 2),
    ]
    assert {(m["stream"], m["consumer"]) for m in r["first"]} == {("S", "dur")}
    assert r["first_ms"] < 1000 and r["first_error"] is None
    # Fewer available than asked: ends at expiry (408), quietly.
    assert pick(r["second"], "sseq", "dseq", "pending") == [(4, 4, 1), (5, 5, 0)]
    assert 900 <= r["second_ms"] < 2500 and r["second_error"] is None
    # #1-#3 acked, #5 double-acked, #4 not: the floor stops below #4.
    assert r["info"] == {
        "delivered": [5, 5],
        "ack_floor": [3, 3],
        "ack_pending": 1,
        "redelivered": 0,
        "pending": 0,
    }
    # no_wait on an empty consumer: 404 at once.
    assert r["nowait"] == [] and r["nowait_ms"] < 500
    # A request with idle_heartbeat (2 x 0.5 s <= 1.5 s expires) is accepted and ends at expiry.
    assert r["hb_fetch"] == [] and r["hb_fetch_error"] is None
    assert 1400 <= r["hb_fetch_ms"] < 3000


async def test_next(target: Target) -> None:
    r = await scenario(target, "next")
    assert pick(r["got"], "subject", "data", "sseq", "dseq", "pending") == [
        ("n.a", "m0", 1, 1, 1),
        ("n.a", "m1", 2, 2, 0),
    ]
    assert r["empty"] == "TimeoutError" and 900 <= r["empty_ms"] < 2500
    assert pick([r["late"]], "subject", "data", "sseq", "dseq") == [("n.late", "late", 3, 3)]
    assert 250 <= r["late_ms"] < 1500
    assert r["info"] == {
        "delivered": [3, 3],
        "ack_floor": [3, 3],
        "ack_pending": 0,
        "redelivered": 0,
        "pending": 0,
    }


async def test_messages_idle_and_consumer_deleted(target: Target) -> None:
    r = await scenario(target, "messages")
    assert pick(r["before"], "data", "sseq", "dseq", "pending") == [
        (f"m{i}", i + 1, i + 1, 4 - i) for i in range(5)
    ]
    # 4.5 s idle, pulls expiring every 2 s with 0.5 s heartbeats: the client never went 1 s
    # without hearing from the server, and the messages published afterwards arrive at once.
    assert r["idle_hb_warnings"] == 0
    assert pick(r["after"], "subject", "data", "sseq", "dseq") == [
        ("m.b", "late0", 6, 6),
        ("m.b", "late1", 7, 7),
        ("m.b", "late2", 8, 8),
    ]
    assert r["after_ms"] < 1000
    assert r["info"] == {
        "delivered": [8, 8],
        "ack_floor": [8, 8],
        "ack_pending": 0,
        "redelivered": 0,
        "pending": 0,
    }
    # Deleting the consumer ends the iteration (409 Consumer Deleted is terminal for messages()).
    assert r["after_delete"] == "stopped"
    assert r["stop_ms"] < 3000 and r["active"] is False


async def test_ordered_consumer(target: Target) -> None:
    r = await scenario(target, "ordered", timeout=40)
    # fetch(): each call recreates the server-side consumer (<uuid>_<serial>) from the next
    # stream sequence, so delivery sequences restart at 1.
    first, second = r["fetch_names"]
    prefix = first[: -len("_1")]
    assert first.endswith("_1") and second == prefix + "_2" and len(prefix) == 32
    assert pick(r["fetch1"], "data", "sseq", "dseq", "pending", "consumer") == [
        (f"m{i}", i + 1, i + 1, 9 - i, first) for i in range(3)
    ]
    assert pick(r["fetch2"], "data", "sseq", "dseq", "pending", "consumer") == [
        (f"m{i}", i + 1, i - 2, 9 - i, second) for i in range(3, 6)
    ]
    assert r["config"] == {
        "ack_policy": "none",
        "deliver_policy": "by_start_sequence",
        "opt_start_seq": 4,
        "mem_storage": True,
        "num_replicas": 1,
        "inactive_threshold": 300.0,
        "durable_name": None,
    }
    # messages(): continuous; its consumer deleted underneath, recreated from sequence 11.
    assert pick(r["consumed"], "sseq", "dseq", "pending") == [(i, i, 10 - i) for i in range(1, 11)]
    n1, n2 = r["names"]
    assert n1.endswith("_1") and n2 == n1[: -len("_1")] + "_2"
    assert pick(r["after_delete"], "subject", "data", "sseq", "dseq", "pending", "consumer") == [
        ("o.b", f"n{i}", 11 + i, 1 + i, 4 - i, n2) for i in range(5)
    ]
    assert r["recover_ms"] < 5000
    assert r["server_consumers"] == [n2]  # the fetch consumers were deleted by close()


async def test_acks(target: Target) -> None:
    r = await scenario(target, "acks")
    assert r["dup_double_ack"] == "ok"  # a second double_ack of the same message is answered
    # -NAK: back at once, next delivery sequence, delivery count 2.
    assert pick([r["nak"]], "data", "sseq", "dseq", "delivered") == [("m1", 2, 5, 2)]
    # +TERM of #3 counts as acked; #4 (NAK with delay) still pending.
    assert r["after_term"] == {
        "delivered": [5, 4],
        "ack_floor": [3, 3],
        "ack_pending": 1,
        "redelivered": 0,
        "pending": 0,
    }
    assert pick([r["nak_delay"]], "data", "sseq", "dseq", "delivered") == [("m3", 4, 6, 2)]
    assert 700 <= r["nak_delay_ms"] < 2000
    assert r["wpi"] == "no redelivery"  # +WPI restarted the 1 s ack timer
    assert r["final"] == {
        "delivered": [6, 4],
        "ack_floor": [6, 4],
        "ack_pending": 0,
        "redelivered": 0,
        "pending": 0,
    }


async def test_consumer_info_walkthrough(target: Target) -> None:
    """Spec §3.3, step by step."""
    r = await scenario(target, "info")
    table = [
        # delivered, ack_floor, ack_pending, redelivered, pending
        ([0, 0], [0, 0], 0, 0, 3),  # created
        ([1, 1], [0, 0], 1, 0, 2),  # fetch 1
        ([3, 3], [0, 0], 3, 0, 0),  # fetch 2
        ([3, 3], [2, 2], 1, 0, 0),  # ack #1, ack #2, nak #3
        ([4, 3], [2, 2], 1, 1, 0),  # #3 redelivered
        ([4, 3], [4, 3], 0, 0, 0),  # double_ack #3
    ]
    assert [
        (s["delivered"], s["ack_floor"], s["ack_pending"], s["redelivered"], s["pending"]) for s in r["steps"]
    ] == table
    assert pick([r["redelivery"]], "data", "sseq", "dseq", "delivered", "pending") == [("msg2", 3, 4, 2, 0)]
    assert r["reply"].startswith("$JS.ACK.ORDERS.dur1.2.3.4.") and r["reply"].endswith(".0")
    assert len(r["reply"].split(".")) == 9
    assert r["config"] == {"ack_wait": 30.0, "max_deliver": -1, "max_ack_pending": 1000, "max_waiting": 512}
