"""Hostile values and body mutations for the fuzzer (:mod:`jetlog.chaos.fuzzgen`).

:func:`mutate` turns a valid request body into one of :data:`MUTATIONS`; :func:`hostile_header`
makes a header block for an API request. Everything draws from the caller's ``random.Random``,
so a seed reproduces the same bytes.
"""

from __future__ import annotations

import json
import random
from typing import Any


class Raw:
    """A JSON token written verbatim (numbers JSON cannot carry in Python, deep nesting)."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


def dumps(obj: Any) -> bytes:
    """Compact JSON of ``obj``; :class:`Raw` values are written as they are."""
    parts: list[str] = []

    def walk(v: Any) -> None:
        if isinstance(v, Raw):
            parts.append(v.text)
        elif isinstance(v, dict):
            parts.append("{")
            for i, (k, x) in enumerate(v.items()):
                if i:
                    parts.append(",")
                parts.append(json.dumps(k))
                parts.append(":")
                walk(x)
            parts.append("}")
        elif isinstance(v, list):
            parts.append("[")
            for i, x in enumerate(v):
                if i:
                    parts.append(",")
                walk(x)
            parts.append("]")
        else:
            parts.append(json.dumps(v, ensure_ascii=False))

    walk(obj)
    return "".join(parts).encode("utf-8", "surrogatepass")


# ---- hostile values --------------------------------------------------------------------------

HUGE = [
    "9223372036854775807",
    "9223372036854775808",
    "18446744073709551615",
    "18446744073709551616",
    "-9223372036854775808",
    "-9223372036854775809",
    "100000000000000000000000000000",
    "-1",
    "0",
    "-0",
    "1e308",
    "1e309",
    "-1e400",
    "1.5",
    "1E3",
    "0.0000001",
    "4611686018427387904",
    "2147483648",
    "-2147483649",
    "1" + "0" * 400,
]
WRONG = [
    "x",
    "",
    [],
    {},
    [1, 2],
    {"a": 1},
    True,
    False,
    None,
    1.5,
    -1,
    "12",
    ["x"],
    [None],
    [{}],
    "\u0000",
    "\udcff",
]
BAD_NAMES = [
    "",
    " ",
    ".",
    "a.b",
    "*",
    ">",
    "a*",
    "a>b",
    "a b",
    "\t",
    "x" * 256,
    "x" * 1000,
    "ü",
    "名前",
    "a/b",
    "a\\b",
    "$JS",
    "..",
    "a\u0000b",
    "-",
    "_",
    "\u202e",
    "\r\n",
    "FZ ",
    "fz",
]
BAD_SUBJECTS = [
    "",
    ".",
    "a..b",
    ".a",
    "a.",
    "*.>",
    ">.a",
    "a.>.b",
    "a b",
    "fz.\u0000",
    "fz." + "x" * 2000,
    "fz.*.*.>",
    "$JS.API.>",
    ">",
    "*",
    "fz.>",
    "fz.a",
    "\t",
    "fz.\r\n",
    "fz.ü",
]
# Tokens put into request *subjects* (no whitespace or control bytes: those would break the
# client protocol line, not test the server).
SUBJECT_TOKENS = ["*", ">", "x" * 300, "ü", "a/b", "a\\b", "$JS", "-", "名前", "%", 'a"b', "{", "\u202e"]
KEYS = ["bogus", "NAME", "Name", "nAmE", "_nats", "", "é", "config", "subjects", "Seq", "BATCH", "x" * 300]
SPECIAL_BODIES = [
    b"",
    b" ",
    b"null",
    b"[]",
    b"{}",
    b"0",
    b"-1",
    b"true",
    b'""',
    b"[{}]",
    b"{}{}",
    b"{} {}",
    b"\x00",
    b"\xff\xfe",
    b'{"a":1}garbage',
    b"  {}  \n",
    b"Infinity",
    b"NaN",
    b"1e999",
    b"\xef\xbb\xbf{}",
    b"\xc2\xa0{}",
    b"{",
    b"}",
    b"[",
    b'{"',
    b'{"name":',
    b"/* */{}",
    b"5",
    b"hello",
]
API_LEVELS = [
    "6",
    "5",
    "0",
    "-1",
    "garbage",
    "",
    "  6",
    "6 ",
    "99999999999999999999",
    "5.0",
    "+5",
    "²",
    "\u0661",
    "0x5",
    "\u00a0",
    "1e1",
]


# Sizes around the boundaries a store or a codec may get wrong (block, page, 64 KiB).
EDGE_SIZES = [0, 1, 2, 127, 128, 1023, 1024, 1025, 4095, 4096, 4097, 65535, 65536, 65537, 262144]
PUB_HEADERS = [
    ("Nats-Msg-Id", ["{id}", "{id}", "", "x" * 3000, "ü"]),
    ("Nats-Expected-Stream", ["FZ", "NOPE", "", "fz"]),
    ("Nats-Expected-Last-Sequence", ["0", "1", "abc", "-1", "99999999999999999999999", "", "²", " 1"]),
    ("Nats-Expected-Last-Subject-Sequence", ["0", "2", "x", "-5", "18446744073709551616"]),
    ("Nats-Expected-Last-Subject-Sequence-Subject", ["fz.a", "fz.*", "", "a..b"]),
    ("Nats-Expected-Last-Msg-Id", ["{id}", "", "nope"]),
    ("Nats-Rollup", ["sub", "all", "bogus", ""]),
    ("Nats-TTL", ["1h", "never", "bogus", "-1", "99999999999h", "0"]),
    ("KV-Operation", ["DEL", "PURGE", "bogus"]),
    ("Nats-Batch-Id", ["b1", ""]),
    ("Nats-Batch-Sequence", ["1", "x"]),
    ("Nats-Incr", ["1", "x", "-99999999999999999999999"]),
    ("Nats-Schedule", ["@every 1s", "bogus"]),
    ("Nats-Marker-Reason", ["MaxAge", "x"]),
    ("Nats-Required-Api-Level", ["6", "garbage"]),
]

#: API subjects nats-server does not serve (or serves only to the system account).
UNKNOWN_SUBJECTS = [
    "$JS.API.BOGUS",
    "$JS.API.STREAM.BOGUS.FZ",
    "$JS.API.STREAM.INFO",
    "$JS.API.STREAM.INFO.FZ.extra",
    "$JS.API.CONSUMER.INFO.FZ",
    "$JS.API.CONSUMER.INFO.FZ.P1.x",
    "$JS.API.META.LEADER.STEPDOWN",
    "$JS.API.SERVER.REMOVE",
    "$JS.API.ACCOUNT.PURGE.x",
    "$JS.API.STREAM.TEMPLATE.CREATE.x",
    "$JS.API",
    "$JS.FZD.API.INFO",
    "$JS.API.INFO.x",
    "$JS.API.DIRECT.GET",
    "$JS.API.DIRECT",
    "$JS.API.CONSUMER.MSG.NEXT.FZ",
    "$JS.API.STREAM.MSG.GET.FZ.x",
    "$JS.API.STREAM.NAMES.x",
    "$JS.API.CONSUMER.NAMES",
    "$JETLOG.API.BOGUS",
    "$JETLOG.API.FETCH",
]


def _hdr(pairs: list[tuple[str, str]], status: str = "") -> bytes:
    first = "NATS/1.0" + (" " + status if status else "")
    return (first + "\r\n" + "".join(f"{k}: {v}\r\n" for k, v in pairs) + "\r\n").encode()


def hostile_header(rnd: random.Random) -> bytes:
    """A header block for an API request."""
    r = rnd.random()
    if r < 0.55:
        return _hdr([("Nats-Required-Api-Level", rnd.choice(API_LEVELS))])
    if r < 0.65:
        return _hdr([("Nats-Required-Api-Level", "1"), ("Nats-Required-Api-Level", "9")])
    return rnd.choice(
        [
            b"NATS/1.0 503\r\n\r\n",
            b"NATS/1.0 100 Idle Heartbeat\r\n\r\n",
            b"NATS/1.0\r\nNo-Colon\r\n\r\n",
            b"NATS/1.0\r\n:\r\n\r\n",
            b"NATS/1.0\r\n\r\n",
            b"NATS/1.0\r\nNats-Required-Api-Level:\r\n\r\n",
            b"NATS/1.0\r\nnats-required-api-level: 9\r\n\r\n",
            _hdr([("X-Big", "v" * 8000)]),
            _hdr([("Nats-Required-Api-Level", "\u00e9" * 50)]),
            _hdr([(f"K{i}", str(i)) for i in range(200)]),
        ]
    )


# ---- body mutations ---------------------------------------------------------------------------


def _paths(obj: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.append((*prefix, k))
            out.extend(_paths(v, (*prefix, k)))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out.append((*prefix, i))
            out.extend(_paths(v, (*prefix, i)))
    return out


def _containers(obj: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix] if isinstance(obj, dict) else []
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.extend(_containers(v, (*prefix, k)))
    return out


def _get(obj: Any, path: tuple[Any, ...]) -> Any:
    for p in path:
        obj = obj[p]
    return obj


def _set(obj: Any, path: tuple[Any, ...], value: Any) -> None:
    _get(obj, path[:-1])[path[-1]] = value


NAME_KEYS = {
    "name",
    "durable_name",
    "stream_name",
    "deliver_subject",
    "deliver_group",
    "filter_subject",
    "filter",
    "subject",
    "last_by_subj",
    "next_by_subj",
    "subjects_filter",
    "group",
    "src",
    "dest",
    "description",
}


def _pick_path(rnd: random.Random, obj: Any, prefer: set[str] | None = None) -> tuple[Any, ...] | None:
    paths = _paths(obj)
    if prefer:
        named = [p for p in paths if isinstance(p[-1], str) and p[-1] in prefer]
        named += [p for p in paths if isinstance(p[-1], int) and p[-2:-1] == ("subjects",)]
        if named:
            return rnd.choice(named)
    return rnd.choice(paths) if paths else None


def _deep(rnd: random.Random) -> Raw:
    depth = rnd.choice([64, 512, 1000, 5000, 10001, 20000])
    if rnd.random() < 0.5:
        return Raw("[" * depth + "]" * depth)
    return Raw('{"a":' * depth + "1" + "}" * depth)


def _byte_mutate(rnd: random.Random, b: bytes) -> bytes:
    out = bytearray(b)
    for _ in range(rnd.randint(1, 4)):
        op = rnd.random()
        i = rnd.randrange(len(out) + 1)
        if op < 0.2 and out:
            del out[i:]  # truncate
        elif op < 0.45:
            out[i:i] = bytes([rnd.choice(b'{}[]",:0123456789-.eEtrufalsn \\x\x00\xff\xc3')])
        elif op < 0.65 and out:
            del out[min(i, len(out) - 1)]
        elif op < 0.85 and out:
            out[min(i, len(out) - 1)] = rnd.randrange(256)
        else:
            out += rnd.choice([b"x", b"}", b"]", b"\x00", b" {}", b"\xff", b",", b'"'])
    return bytes(out)


def _oversize(rnd: random.Random, obj: Any, max_payload: int) -> bytes:
    target = rnd.choice([64 << 10, max_payload // 2, max_payload - 4096, max_payload - 1024])
    base = dumps(obj) if obj is not None else b"{}"
    room = max(0, target - len(base) - 64)
    style = rnd.random()
    if not isinstance(obj, dict) or style < 0.25:
        return base + b" " * room  # trailing whitespace: valid JSON, huge body
    obj = dict(obj)
    if style < 0.55:
        obj["x" * 8] = "y" * room
    elif style < 0.8:
        n = room // 6
        obj[rnd.choice(["subjects", "filter_subjects", "multi_last", "streams", "backoff"])] = Raw(
            "[" + ",".join(['"a.b"'] * n) + "]"
        )
    else:
        n = room // 10
        obj["metadata"] = Raw("{" + ",".join(f'"k{i}":"v"' for i in range(n)) + "}")
    return dumps(obj)


def mutate(rnd: random.Random, body: Any, max_payload: int) -> tuple[str, bytes]:
    """Apply one mutation to a valid ``body`` (a JSON-able object or raw bytes)."""
    m = rnd.choices(MUTATIONS, WEIGHTS)[0]
    if isinstance(body, bytes):
        if m in ("bytes", "special", "oversize"):
            pass
        else:
            m = "valid"
    obj: Any = json.loads(json.dumps(body)) if not isinstance(body, bytes) else None
    if m == "valid":
        return m, body if isinstance(body, bytes) else dumps(obj)
    if m == "special":
        return m, rnd.choice(SPECIAL_BODIES)
    if m == "bytes":
        raw = body if isinstance(body, bytes) else dumps(obj)
        return m, _byte_mutate(rnd, raw or b"{}")
    if m == "oversize":
        return m, _oversize(rnd, obj, max_payload)
    if not isinstance(obj, dict):
        obj = {}
    if m == "unknown_field":
        where = rnd.choice(_containers(obj))
        _get(obj, where)[rnd.choice(KEYS)] = rnd.choice([1, "x", None, True, [], {}])
        return m, dumps(obj)
    if m == "deep":
        path = _pick_path(rnd, obj)
        if path is None:
            return m, dumps(_deep(rnd))
        _set(obj, path, _deep(rnd))
        return m, dumps(obj)
    path = _pick_path(rnd, obj, NAME_KEYS if m == "bad_name" else None)
    if path is None:
        return "special", rnd.choice(SPECIAL_BODIES)
    if m == "wrong_type":
        _set(obj, path, rnd.choice(WRONG))
    elif m == "huge_number":
        _set(obj, path, Raw(rnd.choice(HUGE)))
    else:  # bad_name
        _set(obj, path, rnd.choice(BAD_NAMES + BAD_SUBJECTS))
    return m, dumps(obj)


MUTATIONS = [
    "valid",
    "unknown_field",
    "wrong_type",
    "huge_number",
    "bad_name",
    "bytes",
    "deep",
    "oversize",
    "special",
]
WEIGHTS = [22, 8, 14, 12, 12, 14, 4, 3, 11]
