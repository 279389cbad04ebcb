"""Seeded hostile JetStream API requests: the generator behind ``jetlog fuzz``.

:func:`requests` yields the same sequence for the same ``(seed, count, max_payload)``, so one
run can be replayed against jetlog and against ``nats-server -js`` and their answers compared
request by request. It is a generator (bodies reach ``max_payload``: a 10,000-request run is
never held in memory).

Every subject jetlog serves is covered — ``$JS.API.INFO``, ``STREAM.*``, ``DIRECT.GET``,
``CONSUMER.*`` (``MSG.NEXT`` included), ``$JETLOG.API.FETCH/OFFSETS`` — plus unknown and
system-only API subjects and publishes of edge-size messages to stream subjects. Each request
starts from a valid body for its endpoint and gets one :data:`MUTATIONS` entry: broken JSON,
wrong types, huge numbers, unknown fields, invalid names and subjects, deep nesting, bodies up
to ``max_payload``, odd whole bodies; about one in eight also carries a hostile header block
(``Nats-Required-Api-Level`` garbage, status lines, malformed or huge headers).

Nothing depends on time: message ids repeat only among neighbouring requests, TTLs and ack
waits are an hour, pauses are in 2001 or 2099 (but a mutation can still remove a consumer's
``inactive_threshold``, leaving nats-server's 5 s default). State the requests act on is
created by :data:`SETUP` first (streams ``FZ``, ``FZB``, ``FZW``,
``KV_FZK`` and consumers; ``fuzzreq.py`` holds it with :class:`FuzzRequest`). Destructive requests target the play names (``N1``…, ``c1``…) so
the base state survives a long run; ``barrier`` marks the requests that change state, which
the runner sends alone so the order of state changes is the same on every target.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from typing import Any

from jetlog.chaos.fuzzmut import (
    BAD_SUBJECTS,
    EDGE_SIZES,
    PUB_HEADERS,
    SUBJECT_TOKENS,
    UNKNOWN_SUBJECTS,
    hostile_header,
    mutate,
)
from jetlog.chaos.fuzzreq import (
    BASE_CONSUMERS,
    BASE_STREAMS,
    HOUR,
    KIND_DIRECT,
    KIND_JETLOG,
    KIND_JSON,
    KIND_NEXT,
    KIND_PUB,
    KIND_UNKNOWN,
    FuzzRequest,
)

__all__ = ["requests"]

PLAY_STREAMS = ("N1", "N2", "N3")
MISSING = "NOPE"
PLAY_CONSUMERS = ("c1", "c2", "d1")
FAR_FUTURE = "2099-01-01T00:00:00Z"
FAR_PAST = "2001-01-01T00:00:00Z"


# ---- endpoints -----------------------------------------------------------------------------------

Built = tuple[str, Any, str, bool]  # (subject, valid body, kind, barrier)
_API = "$JS.API."
_PLAY_SUBJECTS = {"N1": ["n1.>"], "N2": ["n2.*", "n2x.>"], "N3": ["n3.a"]}
_BASE_SUBJECTS = {"FZ": ["fz.>"], "FZB": ["big.>"], "FZW": ["fw.>"], "KV_FZK": ["$KV.FZK.>"]}


class _Gen:
    """Builds one request at a time from a seeded ``random.Random``."""

    def __init__(self, rnd: random.Random, max_payload: int, oversize_reads: bool = False) -> None:
        self.rnd = rnd
        self.max_payload = max_payload
        self.oversize_reads = oversize_reads
        self.index = 0
        # Messages of FZ stay small enough that a STREAM.MSG.GET reply (base64, +33 %) fits in
        # max_payload: oversize replies are a separate issue (FZB holds the max_payload ones).
        self.fz_max = int(max_payload * 0.7) - 1024
        r = rnd
        self.ops: list[tuple[Callable[[], Any], int, str]] = [
            (self.info, 3, "INFO"),
            (lambda: self.stream_cfg("CREATE"), 8, "STREAM.CREATE"),
            (lambda: self.stream_cfg("UPDATE"), 5, "STREAM.UPDATE"),
            (self.stream_info, 6, "STREAM.INFO"),
            (self.stream_delete, 3, "STREAM.DELETE"),
            (self.stream_purge, 3, "STREAM.PURGE"),
            (lambda: self.names("STREAM.NAMES"), 2, "STREAM.NAMES"),
            (lambda: self.names("STREAM.LIST"), 2, "STREAM.LIST"),
            (self.msg_get, 6, "STREAM.MSG.GET"),
            (self.msg_delete, 3, "STREAM.MSG.DELETE"),
            (self.stream_other, 2, "STREAM.other"),
            (self.direct, 7, "DIRECT.GET"),
            (self.consumer_create, 9, "CONSUMER.CREATE"),
            (lambda: self.consumer_simple("INFO"), 3, "CONSUMER.INFO"),
            (lambda: self.consumer_simple("DELETE"), 2, "CONSUMER.DELETE"),
            (lambda: self.consumer_names(r.choice(["NAMES", "LIST"])), 3, "CONSUMER.NAMES/LIST"),
            (self.pause, 2, "CONSUMER.PAUSE"),
            (
                lambda: self.consumer_simple(r.choice(["UNPIN", "RESET", "LEADER.STEPDOWN"])),
                2,
                "CONSUMER.other",
            ),
            (self.next, 8, "CONSUMER.MSG.NEXT"),
            (self.fetch, 3, "FETCH"),
            (self.offsets, 2, "OFFSETS"),
            (self.publish, 10, "PUBLISH"),
            (self.unknown, 2, "UNKNOWN"),
        ]
        self._weights = [w for _, w, _ in self.ops]

    # ---- names -----------------------------------------------------------------------------

    def stream(self, destructive: bool = False) -> str:
        r = self.rnd
        if r.random() < 0.07:
            return r.choice(SUBJECT_TOKENS)
        if destructive:
            return r.choice((*PLAY_STREAMS, *PLAY_STREAMS, MISSING))
        return r.choice((*BASE_STREAMS, *BASE_STREAMS, *PLAY_STREAMS, MISSING))

    def consumer(self, stream: str, destructive: bool = False) -> str:
        r = self.rnd
        if r.random() < 0.07:
            return r.choice(SUBJECT_TOKENS)
        base = BASE_CONSUMERS.get(stream, ())
        if destructive or not base:
            return r.choice((*PLAY_CONSUMERS, "nope"))
        return r.choice((*base, *base, *PLAY_CONSUMERS, "nope"))

    def subject_in(self, stream: str) -> str:
        r = self.rnd
        if r.random() < 0.08:
            return r.choice(BAD_SUBJECTS)
        prefix = {"FZ": "fz", "FZB": "big", "FZW": "fw", "KV_FZK": "$KV.FZK"}.get(stream, stream.lower())
        return prefix + "." + r.choice(["a", "b.c", "k1", "*", ">", "a.*", "zz"])

    def readable(self, name: str) -> str:
        """``name``, or FZ instead of FZB when reads of max_payload messages are left out (a
        MSG.GET or Direct Get reply of one exceeds max_payload: a separate issue)."""
        return "FZ" if name == "FZB" and not self.oversize_reads else name

    def seq(self) -> int:
        return self.rnd.choice([0, 1, 2, 3, 5, 10, 100, 1 << 20])

    # ---- account and streams -----------------------------------------------------------------

    def info(self) -> Built:
        return _API + "INFO", self.rnd.choice([b"", b"{}", b"garbage"]), KIND_JSON, False

    def stream_cfg(self, op: str) -> Built:
        r = self.rnd
        # Updates only touch the play streams: an update of FZ (a subject transform, sealed...)
        # would change what every later request sees and what the final health check reads.
        name = self.stream(destructive=op == "UPDATE" or r.random() < 0.8)
        cfg: dict[str, Any] = {"name": name}
        subjects = _PLAY_SUBJECTS.get(name) or _BASE_SUBJECTS.get(name) or [name.lower() + ".>"]
        cfg["subjects"] = list(subjects)
        options: dict[str, list[Any]] = {
            "storage": ["file", "memory"],
            "retention": ["limits", "interest", "workqueue"],
            "max_msgs": [-1, 0, 10],
            "max_bytes": [-1, 1 << 20],
            "max_age": [0, HOUR],
            "max_msg_size": [-1, 1024],
            "discard": ["old", "new"],
            "num_replicas": [0, 1],
            "duplicate_window": [0, 120_000_000_000],
            "allow_direct": [True, False],
            "allow_rollup_hdrs": [True, False],
            "deny_delete": [True, False],
            "deny_purge": [True, False],
            "description": ["d", "x" * 5000],
            "metadata": [{"a": "b"}, {}],
            "compression": ["none", "s2"],
            "first_seq": [1, 100],
            "max_msgs_per_subject": [-1, 3],
            "max_consumers": [-1, 2],
            "allow_msg_ttl": [True, False],
            "consumer_limits": [{"inactive_threshold": HOUR, "max_ack_pending": 10}],
            "subject_transform": [{"src": subjects[0], "dest": "tr." + name.lower() + ".>"}],
            "republish": [{"src": ">", "dest": "rp." + name.lower() + ".>"}],
            "sealed": [False, True],
            "mirror": [{"name": "FZ"}],
            "sources": [[{"name": "FZ"}]],
            "placement": [{"cluster": "c1"}],
        }
        for key, values in options.items():
            if r.random() < (0.03 if key in ("mirror", "sources", "placement", "sealed") else 0.2):
                cfg[key] = r.choice(values)
        if r.random() < 0.1:
            cfg["pedantic"] = True
        if any(k in cfg for k in ("mirror", "sources")):
            # jetlog refuses mirrors and sources (README) where nats-server creates the stream:
            # a name of their own keeps that difference from spreading to other requests.
            name = cfg["name"] = "NM"
            cfg["subjects"] = ["nm.>"]
        return f"{_API}STREAM.{op}.{name}", cfg, KIND_JSON, True

    def stream_info(self) -> Built:
        r = self.rnd
        body = r.choice(
            [
                b"",
                {},
                {"subjects_filter": ">"},
                {"subjects_filter": "fz.*", "offset": 1},
                {"deleted_details": True},
            ]
        )
        return f"{_API}STREAM.INFO.{self.stream()}", body, KIND_JSON, False

    def stream_delete(self) -> Built:
        body = self.rnd.choice([b"", {}])
        return f"{_API}STREAM.DELETE.{self.stream(destructive=True)}", body, KIND_JSON, True

    def stream_purge(self) -> Built:
        r = self.rnd
        name = self.stream()
        body = r.choice(
            [b"", {"filter": self.subject_in(name)}, {"seq": self.seq()}, {"keep": r.choice([0, 1, 5])}]
        )
        if isinstance(body, dict) and r.random() < 0.3:
            body["keep"] = 1
        if isinstance(body, dict) and "seq" in body and name in BASE_STREAMS:
            # A purge up to a huge sequence moves a stream to the end of the sequence space,
            # where nats-server wraps around to 0 and jetlog refuses: keep that on play streams.
            name = r.choice(PLAY_STREAMS)
        return f"{_API}STREAM.PURGE.{name}", body, KIND_JSON, True

    def names(self, op: str) -> Built:
        r = self.rnd
        body = r.choice(
            [b"", {}, {"offset": r.choice([0, 1, 100])}, {"subject": r.choice(["fz.a", "$KV.>"])}]
        )
        return _API + op, body, KIND_JSON, False

    def msg_get(self) -> Built:
        r = self.rnd
        name = self.readable(self.stream())
        body = r.choice(
            [
                {"seq": self.seq()},
                {"last_by_subj": self.subject_in(name)},
                {"next_by_subj": self.subject_in(name), "seq": self.seq()},
                {"start_time": FAR_PAST},
                {"seq": 1, "no_hdr": True},
            ]
        )
        return f"{_API}STREAM.MSG.GET.{name}", body, KIND_JSON, False

    def msg_delete(self) -> Built:
        r = self.rnd
        name = r.choice(["FZ", "KV_FZK", *PLAY_STREAMS, MISSING])
        body = {"seq": self.seq()}
        if r.random() < 0.5:
            body["no_erase"] = r.choice([True, False])
        return f"{_API}STREAM.MSG.DELETE.{name}", body, KIND_JSON, True

    def stream_other(self) -> Built:
        r = self.rnd
        op = r.choice(
            ["LEADER.STEPDOWN", "PEER.REMOVE", "PEER.EVACUATE", "SNAPSHOT", "RESTORE", "CANCEL_MOVE"]
        )
        name = "R1" if op in ("SNAPSHOT", "RESTORE") else self.stream()
        body = r.choice(
            [b"", {}, {"peer": "x"}, {"placement": {"cluster": "c"}}, {"deliver_subject": "fzsnap.x"}]
        )
        return f"{_API}STREAM.{op}.{name}", body, KIND_JSON, True

    def direct(self) -> Built:
        r = self.rnd
        name = (
            r.choice(["FZ", "FZ", "KV_FZK", "KV_FZK", "FZW", MISSING]) if r.random() > 0.07 else self.stream()
        )
        name = self.readable(name)
        if r.random() < 0.3:
            key = self.subject_in(name).replace(" ", "").replace("\t", "").replace("\r\n", "")
            body: Any = r.choice([b"", b"", {"seq": 1}])
            return (
                f"{_API}DIRECT.GET.{name}.{key}" if key else f"{_API}DIRECT.GET.{name}",
                body,
                KIND_DIRECT,
                False,
            )
        body = r.choice(
            [
                {"seq": self.seq()},
                {"last_by_subj": self.subject_in(name)},
                {"next_by_subj": self.subject_in(name), "batch": r.choice([1, 3, 1000])},
                {"multi_last": [self.subject_in(name), self.subject_in(name)], "batch": 2},
                {"multi_last": ["fz.>"], "up_to_seq": self.seq()},
                {"multi_last": ["$KV.FZK.>"], "up_to_time": FAR_FUTURE},
                {"start_time": FAR_PAST, "batch": 2},
                {"seq": 1, "max_bytes": r.choice([1, 100])},
            ]
        )
        return f"{_API}DIRECT.GET.{name}", body, KIND_DIRECT, False

    # ---- consumers -------------------------------------------------------------------------

    def consumer_create(self) -> Built:
        r = self.rnd
        stream = (
            r.choice(("FZ", "FZ", "FZW", "KV_FZK", *PLAY_STREAMS, MISSING))
            if r.random() > 0.07
            else self.stream()
        )
        name = self.consumer(stream, destructive=r.random() < 0.85)
        form = r.choice(["new", "new", "filter", "durable", "legacy"])
        cfg: dict[str, Any] = {"inactive_threshold": HOUR}
        if form == "durable" or r.random() < 0.5:
            cfg["durable_name"] = name
        elif form != "legacy" or r.random() < 0.5:
            cfg["name"] = name
        options: dict[str, list[Any]] = {
            "ack_policy": ["none", "explicit", "all"],
            "deliver_policy": ["all", "last", "new", "last_per_subject"],
            "filter_subject": [self.subject_in(stream)],
            "filter_subjects": [[self.subject_in(stream), self.subject_in(stream)]],
            "max_deliver": [-1, 1, 5],
            "ack_wait": [HOUR],
            "backoff": [[HOUR, HOUR]],
            "max_waiting": [1, 512],
            "max_ack_pending": [-1, 1, 1000],
            "max_batch": [0, 2],
            "max_expires": [0, 1_000_000_000],
            "max_bytes": [0, 100],
            "deliver_subject": ["fzdl." + name.lower()],
            "deliver_group": ["g"],
            "idle_heartbeat": [5_000_000_000],
            "flow_control": [True],
            "headers_only": [True, False],
            "mem_storage": [True, False],
            "metadata": [{"k": "v"}],
            "replay_policy": ["instant", "original"],
            "rate_limit_bps": [0, 1 << 20],
            "sample_freq": ["", "50%"],
            "num_replicas": [0, 1],
            "pause_until": [FAR_FUTURE, FAR_PAST],
            "description": ["d"],
        }
        for key, values in options.items():
            if r.random() < 0.15:
                cfg[key] = r.choice(values)
        if r.random() < 0.04:
            cfg["priority_policy"] = r.choice(["overflow", "pinned_client", "prioritized"])
            cfg["priority_groups"] = ["g"]
        if cfg.get("deliver_policy") == "last_per_subject" and "filter_subject" not in cfg:
            cfg["filter_subject"] = self.subject_in(stream)
        body: dict[str, Any] = {"stream_name": stream, "config": cfg}
        if r.random() < 0.3:
            body["action"] = r.choice(["", "create", "update"])
        if r.random() < 0.1:
            body["pedantic"] = True
        if form == "legacy":
            subject = f"{_API}CONSUMER.CREATE.{stream}"
        elif form == "durable":
            subject = f"{_API}CONSUMER.DURABLE.CREATE.{stream}.{name}"
        elif form == "filter":
            filt = self.subject_in(stream).replace(" ", "").replace("\t", "").replace("\r\n", "") or "x"
            subject = f"{_API}CONSUMER.CREATE.{stream}.{name}.{filt}"
        else:
            subject = f"{_API}CONSUMER.CREATE.{stream}.{name}"
        return subject, body, KIND_JSON, True

    def consumer_simple(self, op: str) -> Built:
        r = self.rnd
        stream = r.choice(("FZ", "FZW", *PLAY_STREAMS, MISSING)) if r.random() > 0.07 else self.stream()
        name = self.consumer(stream, destructive=op == "DELETE")
        body: Any = {
            "INFO": r.choice([b"", {}]),
            "DELETE": r.choice([b"", {}]),
            "UNPIN": {"group": "g"},
            "RESET": r.choice([{}, {"seq": self.seq()}]),
            "LEADER.STEPDOWN": b"",
        }[op]
        return f"{_API}CONSUMER.{op}.{stream}.{name}", body, KIND_JSON, op != "INFO"

    def consumer_names(self, op: str) -> Built:
        body = self.rnd.choice([b"", {}, {"offset": self.rnd.choice([0, 1, 50])}])
        return f"{_API}CONSUMER.{op}.{self.stream()}", body, KIND_JSON, False

    def pause(self) -> Built:
        r = self.rnd
        stream = r.choice(("FZ", "FZW", *PLAY_STREAMS))
        body = r.choice([{"pause_until": FAR_FUTURE}, {"pause_until": FAR_PAST}, {}, b""])
        return f"{_API}CONSUMER.PAUSE.{stream}.{self.consumer(stream)}", body, KIND_JSON, True

    def next(self) -> Built:
        r = self.rnd
        stream = r.choice(("FZ", "FZ", "FZ", "FZW", *PLAY_STREAMS)) if r.random() > 0.07 else self.stream()
        name = self.consumer(stream)
        batch = r.choice([1, 2, 10])
        body = r.choice(
            [
                {"batch": batch, "no_wait": True},
                {"batch": batch, "expires": 50_000_000},
                {"batch": batch, "expires": 80_000_000, "idle_heartbeat": 20_000_000},
                {"batch": batch, "max_bytes": r.choice([1, 1000, 1 << 20]), "no_wait": True},
                {"batch": 1, "no_wait": True, "group": "g"},
            ]
        )
        return f"{_API}CONSUMER.MSG.NEXT.{stream}.{name}", body, KIND_NEXT, True

    # ---- jetlog's bulk reads ------------------------------------------------------------------

    def fetch(self) -> Built:
        r = self.rnd
        body: dict[str, Any] = {"start": self.seq() or 1}
        options: dict[str, list[Any]] = {
            "end": [0, 5, 1 << 20],
            "max_bytes": [0, 1, 1000],
            "max_msgs": [0, 1, 3],
            "headers": [True, False],
            "format": ["jlc1", "jlr1"],
            "start_ts": [0, 1],
        }
        for key, values in options.items():
            if r.random() < 0.4:
                body[key] = r.choice(values)
        name = r.choice(("FZ", "KV_FZK", "FZB", MISSING)) if r.random() > 0.07 else self.stream()
        return f"$JETLOG.API.FETCH.{name}", body, KIND_JETLOG, False

    def offsets(self) -> Built:
        body = {"streams": [self.stream() for _ in range(self.rnd.randint(0, 3))]}
        return "$JETLOG.API.OFFSETS", body, KIND_JETLOG, False

    # ---- publishes and the rest ---------------------------------------------------------------

    def publish_headers(self) -> bytes:
        r = self.rnd
        if r.random() < 0.5:
            return b""
        pairs = []
        for _ in range(r.randint(1, 3)):
            key, values = r.choice(PUB_HEADERS)
            # Message ids repeat only among neighbouring requests: a duplicate must fall inside
            # the 2-minute window on every target, however fast each one runs.
            pairs.append((key, r.choice(values).replace("{id}", f"m{self.index // 3}")))
        return ("NATS/1.0\r\n" + "".join(f"{k}: {v}\r\n" for k, v in pairs) + "\r\n").encode()

    def publish(self) -> tuple[str, bytes, bytes, str]:
        """A publish: (subject, payload, header block, mutation)."""
        r = self.rnd
        where = r.choices(["fz", "kv", "fw", "big", "none", "play"], [50, 12, 8, 8, 6, 8])[0]
        subject = {
            # Subjects need not be UTF-8: "\udcff" is sent as the byte 0xff.
            "fz": "fz."
            + r.choice(
                [
                    "a",
                    "b.c",
                    f"k{r.randrange(20)}",
                    "x" * r.choice([1, 50, 250]),
                    "\udcff",
                    "\udce2\udc82",
                    "é",
                ]
            ),
            "kv": f"$KV.FZK.k{r.randrange(5)}",
            "fw": "fw.x",
            "big": "big.x",
            "none": "nowhere.x",
            "play": r.choice(["n1.x", "n2.a", "n3.a"]),
        }[where]
        hdr = self.publish_headers()
        if where == "big":
            size = self.max_payload - len(hdr) - r.choice([0, 0, 1, 100])
        else:
            size = r.choice([*EDGE_SIZES, self.fz_max - 1, self.fz_max])
            if r.random() < 0.6:
                size = r.choice(EDGE_SIZES[:8])
        data = r.randbytes(size)
        return subject, data, hdr, "max-payload" if where == "big" else ("headers" if hdr else "edge-size")

    def unknown(self) -> Built:
        r = self.rnd
        subject = r.choice(
            [
                *UNKNOWN_SUBJECTS,
                "$JS.API." + ".".join(r.choice(SUBJECT_TOKENS) for _ in range(r.randint(1, 4))),
            ]
        )
        return subject, r.choice([b"", {}, b"x"]), KIND_UNKNOWN, False

    # ---- one request ---------------------------------------------------------------------------

    def one(self, index: int) -> FuzzRequest:
        r = self.rnd
        self.index = index
        fn, _, op = r.choices(self.ops, self._weights)[0]
        if fn == self.publish:
            subject, data, hdr, how = self.publish()
            return FuzzRequest(index, op, how, subject, data, hdr, KIND_PUB, True, True)
        subject, body, kind, barrier = fn()
        mutation, payload = mutate(r, body, self.max_payload - 9000)
        hdr = hostile_header(r) if r.random() < 0.12 else b""
        if len(payload) + len(hdr) > self.max_payload:
            payload = payload[: self.max_payload - len(hdr)]
        reply = barrier or r.random() > 0.03
        return FuzzRequest(index, op, mutation, subject, payload, hdr, kind, reply, barrier)


def requests(seed: int, count: int, max_payload: int, oversize_reads: bool = False) -> Iterator[FuzzRequest]:
    """The request sequence of one run (deterministic for its arguments). ``oversize_reads``
    also reads back the max_payload messages of FZB with STREAM.MSG.GET and Direct Get."""
    gen = _Gen(random.Random(seed), max_payload, oversize_reads)
    for i in range(count):
        yield gen.one(i)
