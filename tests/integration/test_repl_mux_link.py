"""Batched replication requests and replies (``cluster/mux.py``) between two client links
through a real nats-server: one message per loop pass and node pair, split under the server's
``max_payload``, with a plain request's failure modes (timeout, no responders) per request, and
a fallback to plain requests for a peer that does not read batches."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable

import pytest

from jetlog.cluster.mux import MuxReplier, MuxRequester
from jetlog.embedded import NatsServer
from jetlog.errors import TransportError
from jetlog.transport.client import ClientLink
from jetlog.wire import repl_mux as M

SUBJECT = "$JETLOG.t.R.n1"
INBOX = "$JETLOG.t.R.n2.MUX"


@pytest.fixture
async def links(nats_server: NatsServer) -> AsyncIterator[tuple[ClientLink, ClientLink]]:
    a = ClientLink([nats_server.url], name="n2")
    b = ClientLink([nats_server.url], name="n1")
    await a.connect()
    await b.connect()
    try:
        yield a, b
    finally:
        await a.close()
        await b.close()


class Leader:
    """The answering side: records each batch it gets and answers through a ``MuxReplier``;
    ``delay(rid)`` seconds later (None: never)."""

    def __init__(self, link: ClientLink, delay: Callable[[int], float | None] = lambda rid: 0.0) -> None:
        self.link = link
        self.out = MuxReplier(link)
        self.batches: list[list[int]] = []
        self.delay = delay

    def on_message(self, subject: str, reply: str | None, hdr: bytes, data: bytes) -> None:
        ret, items = M.decode_request(data)
        self.batches.append([rid for rid, _ in items])
        loop = asyncio.get_running_loop()
        for rid, payload in items:
            d = self.delay(rid)
            if d is None:
                continue
            answer = b"re:" + payload[:16] + b"|%d" % len(payload)
            if d == 0:
                self.out.reply(ret, rid, answer)
            else:
                loop.call_later(d, self.out.reply, ret, rid, answer)


async def test_one_loop_pass_of_requests_travels_as_one_message(links: tuple[ClientLink, ClientLink]) -> None:
    a, b = links
    leader = Leader(b, delay=lambda rid: 0.0 if rid % 2 else 0.05)
    await b.subscribe_raw(SUBJECT, leader.on_message)
    await b.flush()
    mux = MuxRequester(a, INBOX)
    await mux.start()
    await a.flush()
    payloads = [b"req-%03d" % i for i in range(60)]
    got = await asyncio.gather(*(mux.request(SUBJECT, p, 5.0) for p in payloads))
    assert got == [b"re:" + p + b"|7" for p in payloads]
    # Sixty requests made in one loop pass: the first leaves at once (a lone stream's fetch
    # never waits for the end of a pass), the other 59 together.
    assert mux.messages_sent == 2 and mux.requests_sent == 60
    assert [len(b) for b in leader.batches] == [1, 59]
    # Replies likewise, per pass: the odd ids as the requests arrive (one or two socket reads),
    # the even ones 50 ms later (one timer pass): two messages per pass, not sixty.
    assert 4 <= leader.out.messages_sent <= 6
    assert not mux._waiting


async def test_batches_stay_under_the_servers_max_payload(links: tuple[ClientLink, ClientLink]) -> None:
    a, b = links
    leader = Leader(b)
    await b.subscribe_raw(SUBJECT, leader.on_message)
    await b.flush()
    mux = MuxRequester(a, INBOX)
    await mux.start()
    limit = a.max_payload
    big = 150_000
    payloads = [bytes([i]) * big for i in range(20)]  # ~3 MB in one pass
    got = await asyncio.gather(*(mux.request(SUBJECT, p, 10.0) for p in payloads))
    assert got == [b"re:" + p[:16] + b"|%d" % big for p in payloads]
    per = (limit - 4 - 2 - len(INBOX) - 2) // (big + M.FRAME_OVERHEAD)
    assert mux.messages_sent == 1 + -(-19 // per) >= 3  # the first alone, then full batches
    assert sorted(rid for batch in leader.batches for rid in batch) == list(range(1, 21))


async def test_a_missing_leader_node_fails_the_batch_at_once(links: tuple[ClientLink, ClientLink]) -> None:
    a, _ = links
    mux = MuxRequester(a, INBOX)
    await mux.start()
    t0 = time.monotonic()
    results = await asyncio.gather(
        *(mux.request("$JETLOG.t.R.nobody", b"x", 5.0) for _ in range(5)), return_exceptions=True
    )
    assert all(isinstance(r, TransportError) and "no responders" in str(r) for r in results), results
    assert time.monotonic() - t0 < 2.0  # the server's status, not the 5 s timeout
    assert not mux._waiting


async def test_each_request_keeps_its_own_timeout(links: tuple[ClientLink, ClientLink]) -> None:
    a, b = links
    leader = Leader(b, delay=lambda rid: None if rid == 2 else 0.0)
    await b.subscribe_raw(SUBJECT, leader.on_message)
    await b.flush()
    mux = MuxRequester(a, INBOX)
    await mux.start()
    t0 = time.monotonic()
    results = await asyncio.gather(
        mux.request(SUBJECT, b"one", 5.0),
        mux.request(SUBJECT, b"two", 0.3),
        mux.request(SUBJECT, b"three", 5.0),
        return_exceptions=True,
    )
    assert results[0] == b"re:one|3" and results[2] == b"re:three|5"
    assert isinstance(results[1], TimeoutError)
    assert 0.25 <= time.monotonic() - t0 < 3.0
    # A reply arriving after its request gave up is dropped.
    leader.out.reply(INBOX + ".r", 2, b"late")
    await b.flush()
    await a.flush()
    assert not mux._waiting


async def test_a_peer_without_batches_gets_plain_requests(links: tuple[ClientLink, ClientLink]) -> None:
    a, b = links
    plain: list[bytes] = []

    def old_node(subject: str, reply: str | None, hdr: bytes, data: bytes) -> None:
        # What a node without the mux does with anything on its replication subject: answer
        # the message's reply subject with one plain reply.
        plain.append(data)
        assert reply
        b.send(reply, b"plain:" + data[:8])

    await b.subscribe_raw(SUBJECT, old_node)
    await b.flush()
    mux = MuxRequester(a, INBOX)
    await mux.start()
    with pytest.raises(TransportError, match="batching not supported"):
        await mux.request(SUBJECT, b"first", 5.0)
    assert M.is_request(plain[0])
    # From then on this subject gets plain requests, answered as before.
    assert await mux.request(SUBJECT, b"second", 5.0) == b"plain:second"
    assert plain[1] == b"second"
    assert mux.messages_sent == 1


async def test_a_reply_to_a_previous_incarnation_answers_nothing_here(
    links: tuple[ClientLink, ClientLink],
) -> None:
    # A restarted node's request ids start again at 1; its inbox has a new last token, so a
    # leader's late reply to the old inbox cannot answer the new node's request 1 (which could
    # be another stream's fetch).
    a, b = links
    leader = Leader(b, delay=lambda rid: None)  # answers nothing by itself
    await b.subscribe_raw(SUBJECT, leader.on_message)
    await b.flush()
    old = MuxRequester(a, INBOX + ".old")
    new = MuxRequester(a, INBOX + ".new")
    await old.start()
    await new.start()
    await a.flush()
    pending = asyncio.ensure_future(new.request(SUBJECT, b"fetch", 0.5))
    await until_batches(leader, 1)
    leader.out.reply(INBOX + ".old.r", 1, b"stale reply for the old node")
    with pytest.raises(TimeoutError):
        await pending
    assert leader.batches == [[1]]


async def until_batches(leader: Leader, n: int) -> None:
    deadline = time.monotonic() + 5
    while len(leader.batches) < n:
        assert time.monotonic() < deadline, "the request never reached the leader"
        await asyncio.sleep(0.01)
