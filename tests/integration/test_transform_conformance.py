"""Differential test of :class:`jetlog.wire.transform.SubjectTransform` against nats-server -js.

For every case a stream is created on a real nats-server 2.15.1 with the transform, a message is
published, and the subject the server produced is compared with ``SubjectTransform.apply``:

* ``subject_transform``: the stored subject, read back with ``STREAM.MSG.GET``;
* ``republish``: the subject of the republished copy, caught by a ``>`` subscriber, against
  ``SubjectTransform.apply_publishable`` (the server drops copies whose subject is invalid).

``STREAM.MSG.GET`` answers in JSON, where Go turns each invalid UTF-8 byte into U+FFFD; our result
(which keeps such bytes as surrogate escapes) is compared after the same substitution.
"""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass
from typing import Any

import nats
import pytest

from jetlog.embedded import NatsServer
from jetlog.transport.barrier import flush_barrier
from jetlog.wire.subjects import is_valid_literal_subject
from jetlog.wire.transform import SubjectTransform

pytestmark = pytest.mark.timeout(60)


@dataclass(frozen=True)
class Case:
    src: str
    dest: str
    subject: str
    subjects: tuple[str, ...] = ()  # stream subjects; default: the source
    random_max: int = 0  # dest token 1 is {{random(n)}}: check its range, compare the rest


def c(src: str, dest: str, subject: str, *subjects: str, random_max: int = 0) -> Case:
    return Case(src, dest, subject, subjects, random_max)


TRANSFORM_CASES: list[Case] = [
    # literals, $N, wildcard(), index quirks
    c("lit", "out", "lit"),
    c("lit.a", "out.b.c", "lit.a"),
    c("w.*.*", "out.$2.$1", "w.a.b"),
    c("w.*.*", "out.{{wildcard(2)}}.{{wildcard(1)}}", "w.a.b"),
    c("w.*.*", "out.$1.$1.x.$2", "w.a.b"),
    c("w.*.*", "out.$0.$2", "w.a.b"),
    c("w.*.*", "out.{{wildcard(0)}}.{{wildcard(-1)}}", "w.a.b"),
    c("w.*.*", "out.$+1", "w.a.b"),
    c("w.*.*", "out.$x.$.{{}}", "w.a.b"),
    c("w.*.x.*", "out.$2.$1", "w.a.x.b"),
    c("w.*.*", "{{ Wildcard ( 1 ) }}.{{\twildcard(2)}}", "w.a.b"),
    c("w.*", "{{split(1,.)}}", "w.a"),  # "{{split(1," and ")}}" are literal tokens
    # ">" sources and destinations
    c("f.>", "g.>", "f.a.b.c"),
    c("f.>", ">", "f.a.b"),
    c("f.*.>", "g.$1.>", "f.a.b.c"),
    c("f.*.*.>", "g.$2.x.$1.>", "f.a.b.c.d"),
    c("", "all.>", "any.a.b", "any.>"),
    c(">", "all.>", "any.a", "any.>"),
    # not matching the source: stored unchanged
    c("n.a.*", "m.$1", "n.b.c", "n.>"),
    c("n.*", "m.$1", "n.b.c", "n.>"),
    c("q.*x", "r.lit", "q.abc", "q.>"),  # a source token starting with "*" matches any token
    c("q.*x.*", "r.$1", "q.abc.d", "q.>"),
    # partition
    c("p.*.*", "out.{{partition(10,1,2)}}", "p.a.b"),
    c("p.*.*", "out.{{partition(100,2,1)}}.{{partition(100,1,2)}}", "p.ab.cd"),
    c("p.*.*", "out.{{partition(100,1)}}.{{partition(100,2)}}", "p.ab.cd"),
    c("p.*.*", "out.{{partition(1000003)}}", "p.ab.cd"),
    c("p.*.*", "out.{{Partition(7, 1,\t2)}}", "p.x.y"),
    c("p.*", "out.{{partition(2147483647,1)}}", "p.hello"),
    c("p.*", "out.{{partition(0,1)}}", "p.abc"),
    c("p.*", "out.{{partition(1,1)}}", "p.abc"),
    c("p.*", "out.{{partition(-1,1)}}", "p.abc"),
    c("p.*", "out.{{partition(-3000000000,1)}}", "p.abc"),
    c("p.*", "out.{{partition(16,0)}}", "p.abc"),
    c("plit", "out.{{partition(5,1)}}", "plit"),
    c("p.>", "out.{{partition(5)}}.>", "p.a.b"),
    c("p.*", "out.{{partition(9,1)}}", "p.h\u00e9llo\u20ac"),
    # splitFromLeft / splitFromRight
    c("s.*", "out.{{splitFromLeft(1,2)}}", "s.abcdef"),
    c("s.*", "out.{{SplitFromLeft(1, 5)}}", "s.abcdef"),
    c("s.*", "out.{{splitfromleft(1,6)}}", "s.abcdef"),
    c("s.*", "out.{{splitFromLeft(1,0)}}", "s.abcdef"),
    c("s.*", "out.{{splitFromLeft(1,-1)}}", "s.abcdef"),
    c("s.*", "out.{{splitFromRight(1,2)}}", "s.abcdef"),
    c("s.*", "out.{{splitFromRight(1,60)}}", "s.abcdef"),
    c("s.*", "out.{{splitFromLeft(1,1)}}", "s.\u00e9\u00e9"),
    # sliceFromLeft / sliceFromRight
    c("s.*", "out.{{sliceFromLeft(1,2)}}", "s.abcdef"),
    c("s.*", "out.{{sliceFromLeft(1,4)}}", "s.abcdef"),
    c("s.*", "out.{{SliceFromLeft(1,1)}}", "s.abc"),
    c("s.*", "out.{{sliceFromLeft(1,3)}}", "s.abc"),
    c("s.*", "out.{{slicefromleft(1,0)}}", "s.abc"),
    c("s.*", "out.{{sliceFromRight(1,2)}}", "s.abcde"),
    c("s.*", "out.{{sliceFromRight(1,4)}}", "s.abcdef"),
    c("s.*", "out.{{sliceFromRight(1,9)}}", "s.abcde"),
    c("s.*", "out.{{sliceFromRight(1,-2)}}", "s.abcde"),
    c("s.*", "out.{{sliceFromLeft(1,2)}}", "s.\u00e9\u00e9\u00e9"),
    c("s.*", "out.{{sliceFromRight(1,2)}}", "s.\u20ac\u20ac"),
    # left / right
    c("s.*", "out.{{left(1,2)}}.{{right(1,2)}}", "s.abcdef"),
    c("s.*", "out.{{Left(1,99)}}.{{Right(1,99)}}", "s.abcdef"),
    c("s.*", "out.{{left(1,0)}}.{{right(1,-1)}}", "s.abcdef"),
    c("s.*", "out.{{left(1,2)}}", "s.\u00e9\u00e9"),
    c("s.*", "out.{{left(1,1)}}", "s.\u20acx"),
    c("s.*", "out.{{right(1,2)}}", "s.x\u20ac"),
    # split
    c("s.*", "out.{{split(1,-)}}", "s.a-b-c"),
    c("s.*", "out.{{split(1,-)}}", "s.abc"),
    c("s.*", "out.{{split(1,-)}}", "s.a--b-"),
    c("s.*", "out.{{split(1,-)}}", "s.-a-b"),
    c("s.*", "out.{{split(1,-)}}", "s.--a-b--"),
    c("s.*", "out.{{split(1,-)}}", "s.---a"),
    c("s.*", "out.{{split(1,-)}}", "s.-"),
    c("s.*", "{{split(1,-)}}.end", "s.--"),
    c("s.*", "out.{{split(1,--)}}", "s.a----b--c"),
    c("s.*", "out.{{split(1,--)}}", "s.a---b"),
    c("s.*", "out.{{Split(1,\t_)}}", "s.a_b"),
    c("s.*", "out.{{split(1,)}}", "s.a\u20acb"),
    c("s.*", "out.{{split(1,\u00e9)}}", "s.a\u00e9b\u00e9c"),
    # several functions and wildcards at once
    c("m.*.*.>", "{{left(2,1)}}.{{right(1,1)}}.$2.>", "m.xyz.uvw.t.u"),
    c("m.*.*", "{{split(2,_)}}.{{sliceFromLeft(1,1)}}.{{partition(3,2,1)}}", "m.ab.c_d"),
    c("m.*", "{{splitFromLeft(0,1)}}.{{left(-3,2)}}", "m.z"),
    # random: range only
    c("r.*", "r.{{random(7)}}.$1", "r.x", random_max=7),
    c("r.*", "r.{{Random(-5)}}.$1", "r.x", random_max=5),
    c("rlit", "r.{{random(3)}}", "rlit", random_max=3),
    c("r.*", "r.{{random(0)}}", "r.x", random_max=1),
]

# (stream subjects, republish src, republish dest, published subject, optional subject_transform).
REPUBLISH_CASES: list[tuple[tuple[str, ...], str, str, str, tuple[str, str] | None]] = [
    (("rin.>",), "rin.>", "rout.>", "rin.a.b", None),
    (("rin.>",), "", "rout.>", "rin.a", None),
    (("rin.*.*",), "rin.*.*", "rout.$2.$1", "rin.a.b", None),
    (("rin.*",), "rin.*", "rout.{{partition(10,1)}}.{{left(1,2)}}", "rin.abcdef", None),
    (("rin.*",), "rin.*", "rout.{{sliceFromRight(1,2)}}.{{splitFromLeft(1,1)}}", "rin.abcde", None),
    (("rin.*",), "rin.*", "rout.{{split(1,-)}}", "rin.a-b--c", None),
    (("rin.*",), "rin.*", "rout.{{random(4)}}", "rin.x", None),
    (("rin.>",), "rin.a.*", "rout.$1", "rin.b.c", None),  # does not match: no republish
    # The server suppresses republishing to an invalid subject.
    (("rin.*",), "rin.*", "rout.{{split(1,-)}}", "rin.--a", None),
    (("rin.*",), "rin.*", "rout.{{split(1,-)}}", "rin.-", None),
    # Republish sees the stored (transformed) subject.
    (("rin.*.*",), "t.*.*", "rout.$2.$1", "rin.a.b", ("rin.*.*", "t.$2.{{left(1,1)}}")),
    # Implicit republish: ">" -> ">" becomes (transform dest -> transform dest).
    (("rin.*",), ">", ">", "rin.abc", ("rin.*", "rout.x")),
]


def go_json(subject: str) -> str:
    """What Go's JSON encoder shows for ``subject``: each invalid UTF-8 byte becomes U+FFFD."""
    return re.sub("[\udc80-\udcff]", "\ufffd", subject)


async def request(nc: nats.NATS, subject: str, body: Any) -> dict[str, Any]:
    msg = await nc.request(subject, json.dumps(body).encode(), timeout=5)
    reply: dict[str, Any] = json.loads(msg.data)
    return reply


async def create(nc: nats.NATS, cfg: dict[str, Any]) -> dict[str, Any]:
    reply = await request(nc, f"$JS.API.STREAM.CREATE.{cfg['name']}", cfg)
    assert "error" not in reply, (cfg, reply)
    return reply


async def delete(nc: nats.NATS, name: str) -> None:
    reply = await request(nc, f"$JS.API.STREAM.DELETE.{name}", {})
    assert reply.get("success"), reply


def check_random(case: Case, got: str, ours: str | None) -> list[str]:
    assert ours is not None
    g, o = got.split("."), ours.split(".")
    errs = []
    if not (
        g[1].isdigit() and o[1].isdigit() and int(g[1]) < case.random_max and int(o[1]) < case.random_max
    ):
        errs.append(f"random out of range: server {got!r}, jetlog {ours!r}")
    if g[:1] + g[2:] != o[:1] + o[2:]:
        errs.append(f"server {got!r} != jetlog {ours!r}")
    return errs


async def test_subject_transform_matches_server(tmp_path: Any) -> None:
    mismatches: list[str] = []
    async with NatsServer(jetstream=True, leafnode=False, store_dir=str(tmp_path / "js")) as srv:
        nc = await nats.connect(srv.url)
        try:
            for i, case in enumerate(TRANSFORM_CASES):
                name = f"T{i}"
                await create(
                    nc,
                    {
                        "name": name,
                        "subjects": list(case.subjects or (case.src,)),
                        "storage": "memory",
                        "subject_transform": {"src": case.src, "dest": case.dest},
                    },
                )
                ack = json.loads((await nc.request(case.subject, b"x", timeout=5)).data)
                assert ack.get("stream") == name, (case, ack)
                got = (await request(nc, f"$JS.API.STREAM.MSG.GET.{name}", {"seq": ack["seq"]}))["message"][
                    "subject"
                ]
                await delete(nc, name)

                ours = SubjectTransform(case.src, case.dest).apply_or_same(case.subject)
                if case.random_max:
                    errs = check_random(case, got, ours)
                else:
                    errs = [] if go_json(ours) == got else [f"server {got!r} != jetlog {ours!r}"]
                mismatches.extend(f"{case}: {e}" for e in errs)
        finally:
            await nc.close()
    assert not mismatches, "\n".join(mismatches)


async def test_republish_matches_server(tmp_path: Any) -> None:
    mismatches: list[str] = []
    async with NatsServer(jetstream=True, leafnode=False, store_dir=str(tmp_path / "js")) as srv:
        nc = await nats.connect(srv.url)
        listener = await nats.connect(srv.url)
        caught: list[tuple[str, str]] = []

        async def on_msg(msg: Any) -> None:
            stream = (msg.headers or {}).get("Nats-Stream")
            if stream:
                caught.append((stream, msg.subject))

        await listener.subscribe(">", cb=on_msg)
        await flush_barrier(listener)
        try:
            for i, (subjects, rsrc, rdest, subject, st) in enumerate(REPUBLISH_CASES):
                name = f"R{i}"
                cfg: dict[str, Any] = {
                    "name": name,
                    "subjects": list(subjects),
                    "storage": "memory",
                    "republish": {"src": rsrc, "dest": rdest},
                }
                if st is not None:
                    cfg["subject_transform"] = {"src": st[0], "dest": st[1]}
                reply = await create(nc, cfg)
                caught.clear()
                ack = json.loads((await nc.request(subject, b"x", timeout=5)).data)
                assert ack.get("stream") == name, ack
                await flush_barrier(listener)  # everything the server queued to us before the PONG
                await asyncio.sleep(0)
                got = [s for stream, s in caught if stream == name]
                await delete(nc, name)

                # Ours, from the effective config the server reports (implicit republish resolved).
                stored = subject
                if st is not None:
                    stored = SubjectTransform(st[0], st[1]).apply_or_same(subject)
                rp = reply["config"]["republish"]
                tr = SubjectTransform(rp["src"], rp["dest"])
                ours = tr.apply_publishable(stored)
                expected = [] if ours is None else [ours]
                # apply_publishable is apply minus the republishes the server suppresses.
                plain = tr.apply(stored)
                assert (ours is None) == (plain is None or not is_valid_literal_subject(plain))
                if rdest.startswith("rout.{{random("):
                    ok = len(got) == 1 and re.fullmatch(r"rout\.[0-3]", got[0]) is not None
                    ok = ok and len(expected) == 1 and re.fullmatch(r"rout\.[0-3]", expected[0]) is not None
                else:
                    ok = got == expected
                if not ok:
                    mismatches.append(f"{cfg} <- {subject!r}: server {got!r} != jetlog {expected!r}")
        finally:
            await listener.close()
            await nc.close()
    assert not mismatches, "\n".join(mismatches)
