"""Differential test of consumer creation against a live nats-server 2.15.1 (JetStream on).

A table of tricky creates/updates (every subject form and action, bad JSON, unknown members,
nulls, every validation error, work-queue rules with several consumers, pedantic mode, update
immutables) is sent raw, in order, to a real server and, in the same order, to jetlog's
:func:`~jetlog.consumer.config.prepare_consumer_create` through the reference
:class:`~tests.unit.test_consumer_golden.ConsumerCatalog`. Replies must be identical bytes: the
same error object, or the same reply once the run-dependent members (``created``,
``delivered``, ``ts``...) are taken from the server's. Subjects nats-server does not serve must
get no reply from either. Then a seeded fuzz of random configs (side-effect free:
``action: "update"`` of a consumer that does not exist) and of byte mutations. Pull request
bodies are compared too (status line of the server's answer vs :func:`parse_pull_request`).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import tempfile
from typing import Any

import msgspec
import nats
import pytest

from jetlog.api.models import StreamConfig
from jetlog.api.models_consumer import ConsumerConfig, decode_create_request
from jetlog.consumer.config import ConsumerCreatePlan
from jetlog.consumer.wire import PullRequest, Rejection, parse_pull_request
from jetlog.embedded import NatsServer
from jetlog.errors import ApiError
from tests.unit.test_consumer_golden import ConsumerCatalog, render
from tests.unit.test_golden_captures import Catalog

BUSY = "dl.busy"  # a deliver subject the test keeps a subscription on (interest)


def j(obj: Any) -> bytes:
    return json.dumps(obj).encode()


def c(tail: str, cfg: Any = None, *, stream: str | None = None, **top: Any) -> tuple[str, str, bytes, dict]:
    """A create request on ``$JS.API.CONSUMER.<tail>``; ``stream`` defaults to the subject's."""
    toks = tail.split(".")
    sname = stream if stream is not None else (toks[2] if toks[0] == "DURABLE" else toks[1])
    body: dict[str, Any] = {"stream_name": sname, "config": {} if cfg is None else cfg}
    body.update(top)
    return ("C", tail, j(body), {})


def raw(tail: str, body: bytes, **opts: Any) -> tuple[str, str, bytes, dict]:
    return ("C", tail, body, opts)


def s(name: str, **cfg: Any) -> tuple[str, str, bytes, dict]:
    return ("S", name, j({"name": name, **cfg}), {})


def d(stream: str, name: str) -> tuple[str, str, bytes, dict]:
    return ("D", f"{stream}.{name}", b"", {})


LONG = "n" * 300
FUT = "2099-01-01T00:00:00Z"

CASES: list[tuple[str, str, bytes, dict]] = [
    s("S", subjects=["s.>"]),
    s("W", subjects=["w.>"], retention="workqueue"),
    s("I", subjects=["i.>"], retention="interest"),
    s("L", subjects=["l.>"], consumer_limits={"max_ack_pending": 50, "inactive_threshold": 10_000_000_000}),
    s("M", subjects=["m.>"], max_consumers=2),
    s("MEM", subjects=["mem.>"], storage="memory"),
    # --- subject forms ---
    c("CREATE.S", {"ack_policy": "explicit", "filter_subject": "s.0"}),
    c("CREATE.S", {"durable_name": "x"}),
    c("CREATE.S", {"name": "leg1", "ack_policy": "explicit"}),
    c("CREATE.S", {"name": "a/b"}),
    c("CREATE.S", {"name": "x.y"}),
    c("CREATE.S", {"name": "leg1", "ack_policy": "all"}),
    c("CREATE.S.c1", {"durable_name": "c2"}),
    c("CREATE.S.c1", {"name": "zz"}, stream="X"),
    raw("CREATE.S.c1", b""),
    raw("CREATE.S.c1", b"   "),
    raw("CREATE.S.c1", b"{}"),
    c("CREATE.S.a\\b", {}),
    c("CREATE.S.a/b", {}, stream="X"),
    c("CREATE.S.*", {}),
    c("CREATE.S.c1.s.x", {"filter_subject": "s.y"}),
    c("CREATE.S.c1.s.x", {"filter_subjects": ["s.x"]}),
    c("CREATE.S.c1.s.x", {"filter_subjects": [], "filter_subject": "s.x"}),
    c("CREATE.S.c2.s.>", {"filter_subject": "s.>", "durable_name": "c2"}),
    c("CREATE.S.c3.s.*.z", {"filter_subject": "s.*.z", "durable_name": "c3", "ack_policy": "explicit"}),
    c("DURABLE.CREATE.S.d1", {"ack_policy": "explicit"}),
    c("DURABLE.CREATE.S.d1", {"durable_name": "d2"}),
    c("DURABLE.CREATE.S.d1", {"durable_name": "d1", "name": "other", "deliver_subject": "dl.d1"}),
    c("DURABLE.CREATE.S.d1", {"durable_name": "d1", "ack_policy": "explicit", "deliver_subject": "dl.d1"}),
    c("DURABLE.CREATE.S.d1", {"durable_name": "d1", "ack_policy": "explicit", "deliver_subject": "dl.d1"}),
    c("DURABLE.CREATE.S.a\\b", {"durable_name": "a\\b"}),
    c("CREATE.NOPE.x", {}),
    c("CREATE.NOPE.x", {"num_replicas": 3}),
    c("CREATE.S.x", {"num_replicas": 2}, stream="S"),
    raw("CREATE.S.x", b'{"stream_name":"Q","config":{"max_deliver":"x"}}'),
    raw("CREATE.S.lv", j({"stream_name": "S", "config": {}}), level="6"),
    raw("CREATE.S.lv", j({"stream_name": "S", "config": {}}), level="abc"),
    raw("CREATE.S.lv", b"{bad", level="6"),
    raw("CREATE.S.lv", j({"stream_name": "S", "config": {"inactive_threshold": 60_000_000_000}}), level="5"),
    c(f"CREATE.S.{LONG}", {}),
    c(f"CREATE.S.{LONG}", {"durable_name": LONG}),
    c(f"CREATE.MEM.{LONG}", {}),
    c(f"CREATE.S.{'k' * 255}", {"inactive_threshold": 60_000_000_000}),
    c(f"CREATE.S.{LONG}", {"mem_storage": True}),
    c("CREATE.S.tz1", {"deliver_policy": "by_start_time", "opt_start_time": "2020-01-01T01:00:00+24:00"}),
    c("CREATE.S.tz2", {"deliver_policy": "by_start_time", "opt_start_time": "2020-01-01T01:00:00+23:60"}),
    c("CREATE.S.tz3", {"deliver_policy": "by_start_time", "opt_start_time": "2020-01-01T1:00:00,5-00:00"}),
    c("CREATE.S.tz4", {"pause_until": "2099-01-01T01:00:00+24:00", "mem_storage": True}),
    # --- JSON ---
    raw("CREATE.S.j", b"{not json"),
    raw("CREATE.S.j", b'{"stream_name":"S","config":{"name":"j",}}'),
    raw("CREATE.S.j", b'{"stream_name":"S","bogus":1}'),
    raw("CREATE.S.j", b'{"stream_name":"S","config":{"bogus":1}}'),
    raw("CREATE.S.j", b'{"stream_name":"S","config":{"ack_policy":"bogus"}}'),
    raw("CREATE.S.j", b'{"stream_name":"S","config":{"deliver_policy":null}}'),
    raw("CREATE.S.j", b'{"stream_name":"S","config":{"replay_policy":"Instant"}}'),
    raw("CREATE.S.j", b'{"stream_name":"S","config":{"priority_policy":"bogus"}}'),
    raw("CREATE.S.j", b'{"stream_name":"S","config":{"opt_start_seq":-1}}'),
    raw("CREATE.S.j", b'{"stream_name":"S","config":{"opt_start_time":"bogus"}}'),
    raw("CREATE.S.j", b'{"stream_name":"S","config":{"backoff":["1s"]}}'),
    raw("CREATE.S.j", b'{"stream_name":"S","config":{"metadata":{"a":1}}}'),
    raw("CREATE.S.j", b'{"stream_name":"S","config":{"ack_wait":1.5}}'),
    raw("CREATE.S.j", b'{"stream_name":"S","action":"upsert"}'),
    raw("CREATE.S.j", b'{"stream_name":"S","action":null}'),
    raw("CREATE.S.j", b'{"stream_name":"S","action":5}'),
    raw("CREATE.S.j", b'{"stream_name":"S","action":"Create"}'),
    raw("CREATE.S.j", b'{"stream_name":"S","pedantic":"yes"}'),
    raw("CREATE.S.j", b'{"stream_name":"S","config":null,"pedantic":null}'),
    raw("CREATE.S.j", b'{"Stream_Name":"S","CONFIG":{"Ack_Policy":"explicit","inactive_threshold":null}}'),
    raw("CREATE.S.j2", b'{"stream_name":"S"} {"config":{"ack_policy":"all"}} {"config":{"max_deliver":3}}'),
    raw(
        "CREATE.S.j3",
        b'{"stream_name":"S","config":{"description":"<a> & \\u2028","metadata":{"z":"1","a":"<"}}}',
    ),
    raw(
        "CREATE.S.j4", b'{"stream_name":"S","config":{"filter_subjects":null,"backoff":null,"metadata":null}}'
    ),
    raw("CREATE.S.j", b'{"stream_name":"S","config":[]}'),
    raw("CREATE.S.j", b'{"stream_name":"S","config":"x"}'),
    raw("CREATE.S.j", b'{"stream_name":5}'),
    raw("CREATE.S.j", b'{"stream_name":"S","config":{"backoff":[1,"x"]}}'),
    raw("CREATE.S.j", b'{"stream_name":"S","config":{"filter_subjects":"s.a"}}'),
    raw("CREATE.S.j", b'{"stream_name":"S","config":{"priority_groups":[1]}}'),
    raw("CREATE.S.j", b'{"stream_name":"S","config":{"opt_start_seq":18446744073709551616}}'),
    raw("CREATE.S.j", b'{"stream_name":"S","config":{"max_deliver":9223372036854775808}}'),
    raw("CREATE.S.j", b'{"stream_name":"S","config":{"pause_until":5}}'),
    raw("CREATE.S.j", b"[]"),
    raw("CREATE.S.j", b"null"),
    raw("CREATE.S.j", b"5"),
    raw(
        "CREATE.S.j5", b'{"stream_name":"S","config":{"metadata":{"a":null},"filter_subjects":[null,"s.z"]}}'
    ),
    raw(
        "CREATE.S.j6",
        b'{"stream_name":"S","config":{"opt_start_seq":18446744073709551615,"deliver_policy":"by_start_sequence"}}',
    ),
    # --- defaults and echo ---
    c(
        "CREATE.S.py",
        {
            "name": "py",
            "durable_name": "py",
            "deliver_policy": "all",
            "ack_policy": "explicit",
            "replay_policy": "instant",
            "ack_wait": 0,
            "idle_heartbeat": 0,
            "inactive_threshold": 0,
            "max_deliver": 0,
            "max_waiting": 0,
            "max_ack_pending": 0,
            "num_replicas": 0,
        },
    ),
    c("CREATE.S.e2", {"ack_policy": "all", "backoff": [1_000_000_000, 2_000_000_000], "max_deliver": 5}),
    c("CREATE.S.e3", {"ack_policy": "explicit", "backoff": [1_000_000_000, 2_000_000_000], "max_deliver": 1}),
    c("CREATE.S.e4", {"max_deliver": -5, "max_waiting": -3, "max_ack_pending": -7, "max_batch": -1}),
    c("CREATE.S.e5", {"max_expires": -1, "max_bytes": -1, "inactive_threshold": -1, "priority_timeout": -1}),
    c("CREATE.S.e6", {"idle_heartbeat": -1, "ack_wait": 5_000_000_000}),
    c("CREATE.S.e7", {"ack_wait": -1}),
    c("CREATE.S.e7", {"backoff": [-1], "ack_wait": -1}),
    c("CREATE.S.e7", {"max_expires": 500_000}),
    c("CREATE.S.e7", {"max_expires": 1_000_000, "max_batch": 10, "max_bytes": 100}),
    c("CREATE.S.e8", {"description": "d" * 4097}),
    c("CREATE.S.e8", {"metadata": {"k": "v" * (131072 - 16)}}),
    c("CREATE.S.e9", {"metadata": {"k": "v" * (131072 - 17)}, "inactive_threshold": 60_000_000_000}),
    c("CREATE.S.e10", {"metadata": {"_nats.ver": "1", "_nats.level": "9", "_nats.req.level": "7", "u": "x"}}),
    c("CREATE.S.e11", {"num_replicas": -1}),
    c("CREATE.S.e11", {"num_replicas": 1, "mem_storage": True, "headers_only": True}),
    c("CREATE.I.i1", {"num_replicas": 1, "ack_policy": "explicit"}),
    c("CREATE.I.i2", {"num_replicas": 0, "ack_policy": "none", "deliver_subject": "dl.i2"}),
    # --- pedantic ---
    c("CREATE.S.p1", {"max_deliver": -5}, pedantic=True),
    c("CREATE.S.p1", {"max_waiting": -1}, pedantic=True),
    c("CREATE.S.p1", {"max_ack_pending": -2}, pedantic=True),
    c("CREATE.S.p1", {"max_batch": -1}, pedantic=True),
    c("CREATE.S.p1", {"max_expires": -1}, pedantic=True),
    c("CREATE.S.p1", {"max_bytes": -1}, pedantic=True),
    c("CREATE.S.p1", {"idle_heartbeat": -1}, pedantic=True),
    c("CREATE.S.p1", {"inactive_threshold": -1}, pedantic=True),
    c("CREATE.S.p1", {"priority_timeout": -1}, pedantic=True),
    c("CREATE.S.p1", {"ack_policy": "explicit", "backoff": [1_000_000_000]}, pedantic=True),
    c(
        "CREATE.S.p1",
        {"ack_policy": "none", "backoff": [1_000_000_000], "ack_wait": 1_000_000_000},
        pedantic=True,
    ),
    c("CREATE.L.p2", {}, pedantic=True),
    c("CREATE.L.p2", {"max_ack_pending": 5}, pedantic=True),
    c("CREATE.L.p2", {"max_ack_pending": 5, "inactive_threshold": 1_000_000_000}, pedantic=True),
    c("CREATE.S.p3", {"max_deliver": -1, "max_ack_pending": -1}, pedantic=True),
    # --- stream consumer limits ---
    c("CREATE.L.l1", {}),
    c("CREATE.L.l2", {"ack_policy": "explicit", "max_ack_pending": 51}),
    c("CREATE.L.l2", {"ack_policy": "explicit", "inactive_threshold": 11_000_000_000}),
    c("CREATE.L.l3", {"deliver_subject": "dl.l3"}),
    c("CREATE.L.l4", {"deliver_subject": "dl.l4", "ack_policy": "explicit", "max_ack_pending": -1}),
    # --- deliver policies ---
    c("CREATE.S.dp", {"deliver_policy": "all", "opt_start_seq": 5}),
    c("CREATE.S.dp", {"deliver_policy": "all", "opt_start_time": FUT}),
    c("CREATE.S.dp", {"deliver_policy": "last", "opt_start_seq": 5}),
    c("CREATE.S.dp", {"deliver_policy": "last", "opt_start_time": FUT}),
    c("CREATE.S.dp", {"deliver_policy": "new", "opt_start_seq": 5}),
    c("CREATE.S.dp", {"deliver_policy": "new", "opt_start_time": FUT}),
    c("CREATE.S.dp", {"deliver_policy": "last_per_subject"}),
    c("CREATE.S.dp", {"deliver_policy": "last_per_subject", "opt_start_seq": 1, "filter_subject": "s.a"}),
    c("CREATE.S.dp", {"deliver_policy": "last_per_subject", "opt_start_time": FUT, "filter_subject": "s.a"}),
    c("CREATE.S.dp", {"deliver_policy": "by_start_sequence"}),
    c("CREATE.S.dp", {"deliver_policy": "by_start_sequence", "opt_start_seq": 1, "opt_start_time": FUT}),
    c("CREATE.S.dp", {"deliver_policy": "by_start_time"}),
    c("CREATE.S.dp", {"deliver_policy": "by_start_time", "opt_start_time": FUT, "opt_start_seq": 2}),
    c("CREATE.S.dp1", {"deliver_policy": "by_start_time", "opt_start_time": "2020-01-01T01:00:00.500+01:00"}),
    c("CREATE.S.dp2", {"deliver_policy": "by_start_time", "opt_start_time": "2020-01-01T01:00:00+00:00"}),
    c("CREATE.S.dp3", {"deliver_policy": "by_start_time", "opt_start_time": "0001-01-01T00:00:00Z"}),
    c("CREATE.S.dp4", {"deliver_policy": "by_start_sequence", "opt_start_seq": 100}),
    c("CREATE.S.dp5", {"deliver_policy": "undefined"}),
    c("CREATE.S.dp6", {"deliver_policy": "last_per_subject", "filter_subjects": ["s.a", "s.b"]}),
    # --- filters ---
    c("CREATE.S.f1", {"filter_subject": "s.a", "filter_subjects": ["s.b"]}),
    c("CREATE.S.f1", {"filter_subject": "s..a"}),
    c("CREATE.S.f1", {"filter_subjects": ["s.a", ""]}),
    c("CREATE.S.f1", {"filter_subjects": ["s.a", "s.>"]}),
    c("CREATE.S.f1", {"filter_subjects": ["s.a", "s.a"]}),
    c("CREATE.S.f1", {"filter_subjects": ["s.a", "s. b"]}),
    c("CREATE.S.f1", {"filter_subjects": ["s.*.x", "s.y.*"]}),
    c("CREATE.S.f2", {"filter_subject": "other.x"}),
    c("CREATE.S.f3", {"filter_subject": ">"}),
    # --- push / pull rules ---
    c("CREATE.S.u1", {"deliver_subject": "dl.*"}),
    c("CREATE.S.u1", {"deliver_subject": "dl..x"}),
    c("CREATE.S.u1", {"deliver_subject": "s.x"}),
    c("CREATE.S.u1", {"deliver_subject": "s.>"}),
    c("CREATE.S.u1", {"deliver_subject": "dl.u1", "max_waiting": 5}),
    c("CREATE.S.u1", {"deliver_subject": "dl.u1", "max_ack_pending": 5}),
    c("CREATE.S.u1", {"deliver_subject": "dl.u1", "idle_heartbeat": 50_000_000}),
    c("CREATE.S.u1", {"deliver_subject": "dl.u1", "flow_control": True}),
    c("CREATE.S.u1", {"rate_limit_bps": 100}),
    c("CREATE.S.u1", {"idle_heartbeat": 1_000_000_000}),
    c("CREATE.S.u1", {"flow_control": True}),
    c("CREATE.S.u2", {"deliver_subject": "dl.u2", "flow_control": True, "idle_heartbeat": 1_000_000_000}),
    c(
        "CREATE.S.u3",
        {"deliver_subject": "dl.u3", "rate_limit_bps": 1000, "deliver_group": "g", "sample_freq": "50%"},
    ),
    c("CREATE.S.u4", {"sample_freq": "-5"}),
    c("CREATE.S.u4", {"sample_freq": "abc"}),
    c("CREATE.S.u4", {"sample_freq": "%"}),
    c("CREATE.S.u4", {"sample_freq": "99999999999999999999"}),
    c("CREATE.S.u5", {"sample_freq": "+30"}),
    c("CREATE.S.u6", {"ack_policy": "flow_control"}),
    c("CREATE.S.u6", {"ack_policy": "flow_control", "deliver_subject": "dl.u6", "ack_wait": 5}),
    c("CREATE.S.u6", {"ack_policy": "flow_control", "deliver_subject": "dl.u6", "max_deliver": 3}),
    c("CREATE.S.u6", {"ack_policy": "flow_control", "deliver_subject": "dl.u6"}, pedantic=True),
    c(
        "CREATE.S.u6",
        {
            "ack_policy": "flow_control",
            "deliver_subject": "dl.u6",
            "flow_control": True,
            "idle_heartbeat": 2_000_000_000,
        },
        pedantic=True,
    ),
    c("CREATE.S.u7", {"ack_policy": "flow_control", "deliver_subject": "dl.u7"}),
    c("CREATE.S.u8", {"direct": True}),
    c("CREATE.S.u8", {"direct": True, "deliver_subject": "dl.u8", "durable_name": "u8"}),
    # --- priority groups ---
    c("CREATE.S.g1", {"priority_groups": ["a"]}),
    c("CREATE.S.g1", {"priority_timeout": 5}),
    c("CREATE.S.g1", {"priority_policy": "overflow"}),
    c("CREATE.S.g1", {"priority_policy": "overflow", "priority_groups": [""]}),
    c("CREATE.S.g1", {"priority_policy": "overflow", "priority_groups": ["a b"]}),
    c("CREATE.S.g1", {"priority_policy": "overflow", "priority_groups": ["x" * 17]}),
    c("CREATE.S.g1", {"priority_policy": "overflow", "priority_groups": ["a"], "deliver_subject": "dl.g1"}),
    c("CREATE.S.g2", {"priority_policy": "pinned_client", "priority_groups": ["A-z_0=9/x"]}),
    c(
        "CREATE.S.g3",
        {"priority_policy": "prioritized", "priority_groups": ["a", "b"], "priority_timeout": 5},
    ),
    c("CREATE.S.g4", {"priority_policy": "none", "inactive_threshold": 60_000_000_000}),
    # --- pause ---
    c("CREATE.S.pz1", {"pause_until": FUT, "inactive_threshold": 60_000_000_000}),
    c("CREATE.S.pz2", {"pause_until": "0001-01-01T00:00:00Z"}),
    c("CREATE.S.pz3", {"pause_until": "1970-01-01T00:00:00Z"}),
    c("CREATE.S.pz4", {"pause_until": "2099-01-01T05:30:00+05:30", "durable_name": "pz4"}),
    c("CREATE.S.pz4", {"pause_until": "2098-01-01T00:00:00Z", "durable_name": "pz4", "description": "x"}),
    c("CREATE.S.pz1", {"inactive_threshold": 60_000_000_000}, action="create"),
    # --- actions ---
    c("CREATE.S.a1", {"durable_name": "a1", "ack_policy": "explicit"}, action="create"),
    c("CREATE.S.a1", {"durable_name": "a1", "ack_policy": "explicit"}, action="create"),
    c(
        "CREATE.S.a1",
        {"durable_name": "a1", "ack_policy": "explicit", "ack_wait": 30_000_000_000},
        action="create",
    ),
    c("CREATE.S.a1", {"durable_name": "a1", "ack_policy": "explicit", "description": "x"}, action="create"),
    c(
        "CREATE.S.a1",
        {"durable_name": "a1", "ack_policy": "explicit", "filter_subjects": []},
        action="create",
    ),
    c(
        "CREATE.S.a1",
        {"durable_name": "a1", "ack_policy": "explicit", "metadata": {"_nats.ver": "x"}},
        action="create",
    ),
    c(
        "CREATE.S.a1",
        {"durable_name": "a1", "ack_policy": "explicit", "metadata": {"_nats.req.level": "3"}},
        action="create",
    ),
    c(
        "CREATE.S.a1",
        {"durable_name": "a1", "ack_policy": "explicit", "metadata": {"u": "1"}},
        action="create",
    ),
    c(
        "CREATE.S.a1",
        {"durable_name": "a1", "ack_policy": "explicit", "metadata": {"u": "1"}},
        action="update",
    ),
    c(
        "CREATE.S.a1",
        {"durable_name": "a1", "ack_policy": "explicit", "metadata": {"u": "1"}},
        action="create",
    ),
    c("CREATE.S.a2", {"filter_subjects": [], "backoff": [], "durable_name": "a2"}, action="create"),
    c("CREATE.S.a2", {"filter_subjects": [], "backoff": [], "durable_name": "a2"}, action="create"),
    c("CREATE.S.a2", {"backoff": [], "durable_name": "a2"}, action="create"),
    c("CREATE.S.a3", {}, action="update"),
    c("CREATE.S.a4", {"inactive_threshold": 30_000_000_000}, action="create"),
    c("CREATE.S.a4", {"inactive_threshold": 30_000_000_000}, action="create"),
    c("CREATE.S.a4", {}, action="create"),
    c("CREATE.S.a4", {}),
    c("CREATE.S.a4", {"inactive_threshold": 30_000_000_000}, action="create"),
    c(
        "CREATE.S.a5",
        {"deliver_policy": "by_start_time", "opt_start_time": "2020-01-01T01:00:00+01:00"},
        action="create",
    ),
    c(
        "CREATE.S.a5",
        {"deliver_policy": "by_start_time", "opt_start_time": "2020-01-01T00:00:00Z"},
        action="create",
    ),
    c("CREATE.S.a5", {"deliver_policy": "by_start_time", "opt_start_time": "2020-01-01T00:00:00Z"}),
    # --- updates: immutables ---
    c(
        "CREATE.S.up",
        {
            "durable_name": "up",
            "ack_policy": "explicit",
            "deliver_policy": "by_start_sequence",
            "opt_start_seq": 3,
        },
    ),
    c("CREATE.S.up", {"durable_name": "up", "ack_policy": "explicit", "deliver_policy": "all"}),
    c(
        "CREATE.S.up",
        {
            "durable_name": "up",
            "ack_policy": "explicit",
            "deliver_policy": "by_start_sequence",
            "opt_start_seq": 4,
        },
    ),
    c(
        "CREATE.S.up",
        {
            "durable_name": "up",
            "ack_policy": "all",
            "deliver_policy": "by_start_sequence",
            "opt_start_seq": 3,
        },
    ),
    c(
        "CREATE.S.up",
        {
            "durable_name": "up",
            "ack_policy": "explicit",
            "deliver_policy": "by_start_sequence",
            "opt_start_seq": 3,
            "mem_storage": True,
        },
    ),
    c(
        "CREATE.S.up",
        {
            "durable_name": "up",
            "ack_policy": "explicit",
            "deliver_policy": "by_start_sequence",
            "opt_start_seq": 3,
            "replay_policy": "original",
        },
    ),
    c(
        "CREATE.S.up",
        {
            "durable_name": "up",
            "ack_policy": "explicit",
            "deliver_policy": "by_start_sequence",
            "opt_start_seq": 3,
            "max_waiting": 7,
        },
    ),
    c(
        "CREATE.S.up",
        {
            "durable_name": "up",
            "ack_policy": "explicit",
            "deliver_policy": "by_start_sequence",
            "opt_start_seq": 3,
            "deliver_subject": "dl.up",
        },
    ),
    c(
        "CREATE.S.up",
        {
            "durable_name": "up",
            "ack_policy": "explicit",
            "deliver_policy": "by_start_sequence",
            "opt_start_seq": 3,
            "direct": True,
        },
    ),
    c(
        "CREATE.S.up",
        {
            "durable_name": "up",
            "ack_policy": "explicit",
            "deliver_policy": "by_start_sequence",
            "opt_start_seq": 3,
            "sourcing": True,
        },
    ),
    c(
        "CREATE.S.up",
        {
            "durable_name": "up",
            "ack_policy": "explicit",
            "deliver_policy": "by_start_sequence",
            "opt_start_seq": 3,
            "backoff": [1, 2],
            "max_deliver": 1,
        },
    ),
    c(
        "CREATE.S.up",
        {
            "durable_name": "up",
            "ack_policy": "explicit",
            "deliver_policy": "by_start_sequence",
            "opt_start_seq": 3,
            "description": "changed",
            "ack_wait": 5_000_000_000,
            "max_deliver": 9,
            "filter_subject": "s.q",
            "max_ack_pending": 7,
            "headers_only": True,
            "max_batch": 3,
            "max_expires": 9_000_000_000,
            "max_bytes": 99,
            "inactive_threshold": 99_000_000_000,
            "metadata": {"m": "1"},
            "sample_freq": "1",
        },
    ),
    c(
        "CREATE.S.ut",
        {
            "durable_name": "ut",
            "deliver_policy": "by_start_time",
            "opt_start_time": "2020-01-01T01:00:00+01:00",
        },
    ),
    c(
        "CREATE.S.ut",
        {"durable_name": "ut", "deliver_policy": "by_start_time", "opt_start_time": "2020-01-01T00:00:00Z"},
    ),
    c(
        "CREATE.S.ut",
        {"durable_name": "ut", "deliver_policy": "by_start_time", "opt_start_time": "2020-01-01T00:00:01Z"},
    ),
    c("CREATE.S.ut", {"durable_name": "ut", "deliver_policy": "by_start_sequence", "opt_start_seq": 1}),
    c("CREATE.S.uh", {"durable_name": "uh", "deliver_subject": "dl.uh", "idle_heartbeat": 1_000_000_000}),
    c("CREATE.S.uh", {"durable_name": "uh", "deliver_subject": "dl.uh", "idle_heartbeat": 2_000_000_000}),
    c(
        "CREATE.S.uh",
        {
            "durable_name": "uh",
            "deliver_subject": "dl.uh",
            "idle_heartbeat": 1_000_000_000,
            "flow_control": True,
        },
    ),
    c("CREATE.S.uh", {"durable_name": "uh", "idle_heartbeat": 1_000_000_000}),
    c("CREATE.S.uh", {"durable_name": "uh", "deliver_subject": "dl.uh2", "idle_heartbeat": 1_000_000_000}),
    c("CREATE.S.ub", {"durable_name": "ub", "deliver_subject": BUSY}),
    c("CREATE.S.ub", {"durable_name": "ub", "deliver_subject": "dl.ub"}),
    c("CREATE.S.ub", {"durable_name": "ub", "deliver_subject": BUSY, "max_ack_pending": 0}),
    d("S", "ub"),
    c("CREATE.S.ub", {"durable_name": "ub"}, action="update"),
    c("CREATE.S.dx", {"durable_name": "dx"}),
    c("CREATE.S.dx", {}),
    c("CREATE.S.dx", {"durable_name": "dx"}),
    c("CREATE.S.ex", {"inactive_threshold": 60_000_000_000}),
    c("CREATE.S.ex", {"durable_name": "ex"}),
    c("CREATE.S.ex", {"durable_name": "ex", "inactive_threshold": 70_000_000_000}),
    c("CREATE.S.ex", {"durable_name": "ex", "description": "x"}),
    # --- work queue ---
    c("CREATE.W.w0", {}),
    c("CREATE.W.w0", {"deliver_subject": "dl.w0"}),
    c("CREATE.W.w0", {"ack_policy": "all"}),
    c("CREATE.W.w0", {"ack_policy": "explicit", "deliver_policy": "new"}),
    c("CREATE.W.w0", {"ack_policy": "explicit", "num_replicas": 2}),
    c("CREATE.W.w0", {"ack_policy": "explicit", "num_replicas": 1, "durable_name": "w0"}),
    c("CREATE.W.w1", {"ack_policy": "explicit", "durable_name": "w1"}),
    c("CREATE.W.w1", {"ack_policy": "explicit", "durable_name": "w1", "filter_subject": "w.a"}),
    c("CREATE.W.w1", {"ack_policy": "explicit", "durable_name": "w1"}),
    d("W", "w0"),
    c("CREATE.W.w2", {"ack_policy": "explicit", "durable_name": "w2"}),
    c("CREATE.W.w2", {"ack_policy": "explicit", "durable_name": "w2", "filter_subject": "w.a"}),
    c("CREATE.W.w1", {"ack_policy": "explicit", "durable_name": "w1", "filter_subject": "w.a"}),
    c("CREATE.W.w2", {"ack_policy": "explicit", "durable_name": "w2", "filter_subject": "w.b"}),
    c("CREATE.W.w3", {"ack_policy": "explicit", "durable_name": "w3", "filter_subject": "w.>"}),
    c("CREATE.W.w3", {"ack_policy": "explicit", "durable_name": "w3", "filter_subject": "w.*"}),
    c("CREATE.W.w3", {"ack_policy": "explicit", "durable_name": "w3", "filter_subjects": ["w.c", "w.d"]}),
    c("CREATE.W.w2", {"ack_policy": "explicit", "durable_name": "w2", "filter_subject": "w.c"}),
    c(
        "CREATE.W.w2",
        {"ack_policy": "explicit", "durable_name": "w2", "filter_subject": "w.b", "deliver_policy": "new"},
    ),
    c("CREATE.W.w2", {"durable_name": "w2", "filter_subject": "w.b"}),
    c(
        "CREATE.W.w4",
        {"ack_policy": "explicit", "durable_name": "w4", "filter_subject": "w.e", "deliver_policy": "last"},
    ),
    c(
        "CREATE.W.w5",
        {
            "ack_policy": "explicit",
            "durable_name": "w5",
            "filter_subject": "w.f",
            "direct": True,
            "deliver_subject": "dl.w5",
        },
    ),
    # --- max consumers ---
    c("CREATE.M.m1", {"durable_name": "m1"}),
    c("CREATE.M.m2", {"durable_name": "m2"}),
    c("CREATE.M.m3", {"durable_name": "m3"}),
    c("CREATE.M.m3", {"durable_name": "m3"}, action="update"),
    c("CREATE.M.m1", {"durable_name": "m1", "description": "still updatable"}),
    d("M", "m2"),
    c("CREATE.M.m3", {"durable_name": "m3"}),
    # --- sourcing/direct consumers ---
    c("CREATE.I.src", {"name": "src", "direct": True, "sourcing": True, "deliver_subject": "dl.src"}),
    # --- subjects nats-server does not serve (no reply) ---
    raw("DURABLE.CREATE.S", j({"stream_name": "S", "config": {"durable_name": "q"}}), noreply=True),
    raw("DURABLE.CREATE.S.q.r", j({"stream_name": "S", "config": {"durable_name": "q"}}), noreply=True),
]


async def _run_live() -> list[bytes | None]:
    out: list[bytes | None] = []
    with tempfile.TemporaryDirectory() as tmp:
        async with NatsServer(jetstream=True, leafnode=False, store_dir=tmp + "/js") as srv:
            nc = await nats.connect(srv.url)
            sub = await nc.subscribe(BUSY)
            try:
                out.extend(await _send_all(nc, CASES))
                out.extend(await _send_all(nc, FUZZ_CASES))
                out.extend(await _pulls(nc))
            finally:
                await sub.unsubscribe()
                await nc.close()
    return out


async def _send_all(nc: Any, cases: list[tuple[str, str, bytes, dict]]) -> list[bytes | None]:
    out: list[bytes | None] = []
    for kind, tail, body, opts in cases:
        if kind == "S":
            subject = f"$JS.API.STREAM.CREATE.{tail}"
        elif kind == "D":
            subject = f"$JS.API.CONSUMER.DELETE.{tail}"
        else:
            subject = f"$JS.API.CONSUMER.{tail}"
        headers = {"Nats-Required-Api-Level": opts["level"]} if "level" in opts else None
        try:
            msg = await nc.request(subject, body, timeout=0.3 if opts.get("noreply") else 5, headers=headers)
            out.append(msg.data)
        except nats.errors.TimeoutError:
            out.append(None)
    return out


def _mine(
    cat: ConsumerCatalog, streams: Catalog, case: tuple[str, str, bytes, dict], theirs: bytes | None
) -> Any:
    kind, tail, body, opts = case
    if kind == "S":
        return streams.create(tail, body)
    if kind == "D":
        stream, name = tail.split(".", 1)
        cat.delete(stream, name)
        return theirs
    ref = json.loads(theirs) if theirs else {}
    result = cat.create(
        f"$JS.API.CONSUMER.{tail}",
        body,
        api_level=opts.get("level"),
        name=ref.get("name"),
        has_interest=lambda subj: subj == BUSY,
    )
    return render(result, None if not ref or "error" in ref else theirs)


@pytest.fixture(scope="module")
def results() -> tuple[list[bytes | None], list[Any]]:
    live = asyncio.run(_run_live())
    streams = Catalog()
    cat = ConsumerCatalog(streams.streams)
    mine = [_mine(cat, streams, case, live[i]) for i, case in enumerate(CASES + FUZZ_CASES)]
    return live, mine


def _same(theirs: bytes | None, ours: Any, kind: str) -> None:
    if kind == "S":
        assert theirs is not None and b'"error"' not in theirs and b'"error"' not in ours
        return
    assert ours == theirs


@pytest.mark.parametrize(
    "i", range(len(CASES)), ids=[f"{i}-{t[:40]}" for i, (_, t, _, _) in enumerate(CASES)]
)
def test_conformance(i: int, results: tuple[list[Any], list[Any]]) -> None:
    live, mine = results
    _same(live[i], mine[i], CASES[i][0])


# --------------------------------------------------------------------------------------------
# Fuzz: random configs and byte mutations, sent as ``action: "update"`` of a missing consumer
# (every reply is an error: decode, subject, config, or finally 10149), so nothing is created.

_POOL: dict[str, list[Any]] = {
    "durable_name": ["fz", "other", "a.b", "fz"],
    "name": ["fz", "x*", "fz"],
    "description": ["", "d" * 4097],
    "deliver_policy": [
        "all",
        "last",
        "new",
        "by_start_sequence",
        "by_start_time",
        "last_per_subject",
        "undefined",
        "bogus",
    ],
    "opt_start_seq": [0, 5, -1],
    "opt_start_time": ["2020-01-01T00:00:00Z", "2020-01-01T00:00:00+05:30", "bad", None],
    "ack_policy": ["none", "all", "explicit", "flow_control", "x"],
    "ack_wait": [0, -1, 5_000_000_000],
    "max_deliver": [0, -1, -5, 1, 3],
    "backoff": [[], [1_000_000_000], [1_000_000_000, 2_000_000_000], [-1], None],
    "filter_subject": ["", "f.a", "f.*", "f..x", ">"],
    "filter_subjects": [[], ["f.a"], ["f.a", "f.*"], [""], ["f.b", "f.c"], None],
    "replay_policy": ["instant", "original", "x"],
    "rate_limit_bps": [0, 100, -1],
    "sample_freq": ["", "10", "10%", "-1", "x"],
    "max_waiting": [0, -1, 10],
    "max_ack_pending": [0, -1, -5, 5, 20000],
    "flow_control": [True, False],
    "headers_only": [True, False, 1],
    "max_batch": [0, -1, 5],
    "max_expires": [0, -1, 500_000, 5_000_000_000],
    "max_bytes": [0, -1, 100],
    "deliver_subject": ["", "dl.x", "dl.*", "f.x", "a..b"],
    "deliver_group": ["", "g"],
    "idle_heartbeat": [0, -1, 50_000_000, 1_000_000_000],
    "inactive_threshold": [0, -1, 1_000_000_000, 20_000_000_000],
    "num_replicas": [0, 1, -1, 3],
    "mem_storage": [True, False],
    "direct": [True, False],
    "sourcing": [True, False],
    "metadata": [{}, {"a": "b"}, {"_nats.ver": "x"}, None],
    "pause_until": [None, FUT, "0001-01-01T00:00:00Z"],
    "priority_groups": [[], ["g1"], [""], ["bad group"], None],
    "priority_policy": ["none", "overflow", "pinned_client", "prioritized"],
    "priority_timeout": [0, -1, 5_000_000_000],
}
_SUBJECTS = ["CREATE.{s}.fz", "CREATE.{s}.fz", "CREATE.{s}", "DURABLE.CREATE.{s}.fz", "CREATE.{s}.fz.f.a"]


def _fuzz_cases(n: int, seed: int) -> list[tuple[str, str, bytes, dict]]:
    rnd = random.Random(seed)
    out: list[tuple[str, str, bytes, dict]] = []
    for _ in range(n):
        cfg = {k: rnd.choice(v) for k, v in _POOL.items() if rnd.random() < 0.22}
        stream = rnd.choice(["F", "F", "FW", "FL"])
        tail = rnd.choice(_SUBJECTS).format(s=stream)
        body: dict[str, Any] = {"stream_name": stream, "config": cfg, "action": "update"}
        if rnd.random() < 0.2:
            body["pedantic"] = True
        out.append(("C", tail, j(body), {}))
    seeds = [case[2] for case in out[:40]]
    for _ in range(n // 2):
        b = bytearray(rnd.choice(seeds))
        # Mutate inside the config object only: the action stays "update".
        lo, hi = b.index(b'"config"') + 9, b.rindex(b', "action"')
        if hi - lo < 3:
            continue
        for _ in range(rnd.randint(1, 3)):
            i = rnd.randrange(lo, hi)
            op = rnd.random()
            if op < 0.4:
                b[i] = rnd.choice(b'{}[]",:0123456789-.etrufalsn \\x')
            elif op < 0.7:
                b.insert(i, rnd.choice(b'{}[]",:0123456789-.ex'))
                hi += 1
            else:
                del b[i]
                hi -= 1
        out.append(("C", rnd.choice(_SUBJECTS[:2]).format(s="F"), bytes(b), {}))
    return out


def _decodes(key: str, value: Any) -> bool:
    try:
        decode_create_request(j({"config": {key: value}}))
    except ApiError:
        return False
    return True


_VALID_POOL = {k: [v for v in vals if _decodes(k, v)] for k, vals in _POOL.items()}
# Durables with a short inactive_threshold would be deleted by the server mid-run.
_VALID_POOL["inactive_threshold"] = [0, -1, 60_000_000_000]


def _create_fuzz(n: int, seed: int) -> list[tuple[str, str, bytes, dict]]:
    """Random configs that really create durables (unique names), so the success path's
    config echo and the work-queue rules between many consumers are compared too."""
    rnd = random.Random(seed)
    out: list[tuple[str, str, bytes, dict]] = []
    for i in range(n):
        cfg = {k: rnd.choice(v) for k, v in _VALID_POOL.items() if rnd.random() < 0.12}
        for k in ("durable_name", "name", "description", "num_replicas", "direct", "sourcing"):
            cfg.pop(k, None)
        if rnd.random() < 0.3:
            cfg.pop("deliver_subject", None)
        name = f"cz{i}"
        cfg["durable_name"] = name
        stream = rnd.choice(["F", "F", "F", "FW", "FL"])
        if stream == "FW" and rnd.random() < 0.7:
            cfg["ack_policy"] = "explicit"
        tail = rnd.choice([f"CREATE.{stream}.{name}", f"DURABLE.CREATE.{stream}.{name}"])
        body: dict[str, Any] = {"stream_name": stream, "config": cfg, "action": rnd.choice(["", "create"])}
        out.append(("C", tail, j(body), {}))
        if rnd.random() < 0.3:  # and an update of it
            cfg2 = dict(cfg)
            for k, v in _VALID_POOL.items():
                if k not in ("durable_name", "name", "direct", "sourcing") and rnd.random() < 0.1:
                    cfg2[k] = rnd.choice(v)
            out.append(
                (
                    "C",
                    tail,
                    j({"stream_name": stream, "config": cfg2, "action": rnd.choice(["", "update"])}),
                    {},
                )
            )
    return out


FUZZ_STREAMS = [
    s("F", subjects=["f.>"]),
    s("FW", subjects=["fw.>"], retention="workqueue"),
    s("FL", subjects=["fl.>"], consumer_limits={"max_ack_pending": 10, "inactive_threshold": 10_000_000_000}),
]
FUZZ_CASES = (
    FUZZ_STREAMS
    + _create_fuzz(
        int(os.environ.get("JETLOG_FUZZ_N", "400")) // 2, int(os.environ.get("JETLOG_FUZZ_SEED", "20261121"))
    )
    + _fuzz_cases(
        int(os.environ.get("JETLOG_FUZZ_N", "400")), int(os.environ.get("JETLOG_FUZZ_SEED", "20261121"))
    )
)


def test_fuzz(results: tuple[list[Any], list[Any]]) -> None:
    live, mine = results
    base = len(CASES)
    bad = []
    for k, case in enumerate(FUZZ_CASES):
        theirs, ours = live[base + k], mine[base + k]
        if case[0] == "S":
            continue
        assert theirs is not None, case
        if ours != theirs:
            bad.append((case[1], case[2], theirs, ours))
    assert not bad, bad[:5]


# --------------------------------------------------------------------------------------------
# Pull request bodies: the server's immediate status vs parse_pull_request

PULL_CONSUMER: dict[str, Any] = {
    "durable_name": "pl",
    "max_batch": 10,
    "max_expires": 5_000_000_000,
    "max_bytes": 2000,
}
PIN_CONSUMER: dict[str, Any] = {
    "durable_name": "pp",
    "priority_policy": "pinned_client",
    "priority_groups": ["g"],
}
OVF_CONSUMER: dict[str, Any] = {"durable_name": "po", "priority_policy": "overflow", "priority_groups": ["g"]}
PUSH_CONSUMER: dict[str, Any] = {"durable_name": "pu", "deliver_subject": "dl.pu"}

# (consumer, body). Every body either gets an immediate status or (no_wait on an empty stream)
# 404 No Messages / 408 after its short expiry: we compare rejections only.
PULLS: list[tuple[str, bytes]] = [
    ("pl", b'{"batch":"x"}'),
    ("pl", b'{"batch":1,}'),
    ("pl", b'{"batch":1} x'),
    ("pl", b'{"batch":1'),
    ("pl", b'{"batch":1.5}'),
    ("pl", b'{"batch":11}'),
    ("pl", b"11"),
    ("pl", b" +11 "),
    ("pl", b'{"batch":5,"expires":6000000000}'),
    ("pl", b'{"batch":5,"expires":100000000,"max_bytes":2001}'),
    ("pl", b'{"expires":"x"}'),
    ("pl", b'{"idle_heartbeat":1000,"expires":1000}'),
    ("pl", b'{"idle_heartbeat":1001,"expires":2000,"no_wait":true}'),
    ("pl", b'{"idle_heartbeat":4611686018427387904,"no_wait":true}'),
    ("pl", b'{"min_pending":5,"id":"x","priority":11}'),
    ("pl", b'{"id":"x","priority":11}'),
    ("pl", b'{"priority":-1}'),
    ("pl", b'{"group":5}'),
    ("pl", b'{"min_ack_pending":1.5}'),
    ("pl", b'{"no_wait":1}'),
    ("pl", b'{"BATCH":2,"No_Wait":true,"bogus":[1]}'),
    ("pl", b'\xc2\xa0{"batch":"x"}\xc2\xa0'),
    ("pl", b'{"batch":"x" "y"}'),
    ("pl", b'{"group":"zz","no_wait":true}'),
    ("po", b'{"no_wait":true}'),
    ("po", b'{"group":"h","no_wait":true}'),
    ("po", b'{"group":"g","no_wait":true,"id":"x"}'),
    ("po", b'{"group":"g","no_wait":true,"min_pending":3}'),
    ("pp", b'{"min_ack_pending":1,"group":"g","no_wait":true}'),
    ("pp", b'{"group":"g","no_wait":true,"id":"abc"}'),
    ("pp", b'{"group":"g","no_wait":true,"priority":10}'),
    ("pu", b'{"batch":1}'),
    ("pu", b"{bad"),
]


async def _pulls(nc: Any) -> list[bytes | None]:
    for cfg in (PULL_CONSUMER, PIN_CONSUMER, OVF_CONSUMER, PUSH_CONSUMER):
        body = j({"stream_name": "F", "config": cfg})
        await nc.request(f"$JS.API.CONSUMER.DURABLE.CREATE.F.{cfg['durable_name']}", body, timeout=5)
    out: list[bytes | None] = []
    for name, body in PULLS:
        try:
            msg = await nc.request(f"$JS.API.CONSUMER.MSG.NEXT.F.{name}", body, timeout=0.5)
        except nats.errors.TimeoutError:
            out.append(None)
            continue
        code = msg.headers.get("Status") if msg.headers else None
        desc = msg.headers.get("Description", "") if msg.headers else ""
        out.append(f"{code} {desc}".encode() if code else msg.data)
    return out


def test_pull_requests(results: tuple[list[Any], list[Any]]) -> None:
    live, _ = results
    theirs = live[len(CASES) + len(FUZZ_CASES) :]
    stream = msgspec.json.decode(
        b'{"name":"F","subjects":["f.>"],"retention":"limits","max_consumers":-1,"max_msgs":-1,'
        b'"max_bytes":-1,"max_age":0,"max_msgs_per_subject":-1,"discard":"old","storage":"file",'
        b'"num_replicas":1,"compression":"none","allow_direct":false,"mirror_direct":false,"sealed":false,'
        b'"deny_delete":false,"deny_purge":false,"allow_rollup_hdrs":false,"consumer_limits":{},'
        b'"allow_msg_ttl":false}',
        type=StreamConfig,
    )
    cat = ConsumerCatalog({"F": stream})
    configs: dict[str, ConsumerConfig] = {}
    for cfg in (PULL_CONSUMER, PIN_CONSUMER, OVF_CONSUMER, PUSH_CONSUMER):
        name = str(cfg["durable_name"])
        plan = cat.create(f"$JS.API.CONSUMER.DURABLE.CREATE.F.{name}", j({"stream_name": "F", "config": cfg}))
        assert isinstance(plan, ConsumerCreatePlan)
        configs[name] = plan.config
    for (name, body), got in zip(PULLS, theirs, strict=True):
        mine = parse_pull_request(body, configs[name])
        if isinstance(mine, Rejection):
            assert got == f"{mine.code} {mine.description}".encode(), (name, body)
        else:
            assert isinstance(mine, PullRequest)
            # Accepted: the server answered later (404/408 on the empty stream) or not at all.
            assert got is None or got[:3] in (b"404", b"408"), (name, body, got)
