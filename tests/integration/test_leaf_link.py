"""LeafConnection against a real nats-server (JetStream off, leafnode listener on).

Each test waits on a condition with a deadline (``until``), never on a bare sleep.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import ssl
import subprocess
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import nats
import nkeys
import pytest

from jetlog.embedded import NatsServer
from jetlog.errors import TransportError
from jetlog.transport.barrier import flush_barrier
from jetlog.transport.leaf import LeafConnection, LinkState
from jetlog.wire import headers
from jetlog.wire.leaf import LeafFrameError, PayloadTooLargeError
from tests.support.natsauth import operator_setup

Msg = tuple[str, "str | None", bytes, bytes]


async def until(cond: Callable[[], bool], timeout: float = 5.0, what: str = "condition") -> None:
    """Poll ``cond`` until true; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


def collector() -> tuple[list[Msg], Callable[[str, str | None, bytes, bytes], None]]:
    got: list[Msg] = []

    def cb(subject: str, reply: str | None, hdr: bytes, payload: bytes) -> None:
        got.append((subject, reply, hdr, payload))

    return got, cb


@pytest.fixture
async def link(nats_server: NatsServer) -> AsyncIterator[LeafConnection]:
    lk = LeafConnection(nats_server.leaf_url, name="jetlog-test", ping_interval=1.0)
    await lk.connect(5)
    try:
        yield lk
    finally:
        await lk.close()


async def test_capture_plain_headers_and_reply(nats_server: NatsServer, link: LeafConnection) -> None:
    got, cb = collector()
    link.subscribe("orders.>", cb)
    await link.flush()
    nc = await nats.connect(nats_server.url)
    try:
        await nc.publish("orders.new", b"plain")
        await nc.publish("orders.new", b"with-hdr", headers={"Nats-Msg-Id": "m1", "X": "y"})
        await nc.publish("orders.eu.new", b"", reply="_INBOX.r1")
        await nc.publish("other.subject", b"not for us")
        await flush_barrier(nc)
        await until(lambda: len(got) >= 3, what="3 captured messages")
    finally:
        await nc.close()
    assert got[0] == ("orders.new", None, b"", b"plain")
    subj, reply, hdr, payload = got[1]
    assert (subj, reply, payload) == ("orders.new", None, b"with-hdr")
    assert hdr.startswith(b"NATS/1.0\r\n") and hdr.endswith(b"\r\n\r\n")
    assert headers.get(hdr, "Nats-Msg-Id") == "m1" and headers.get(hdr, "X") == "y"
    assert got[2] == ("orders.eu.new", "_INBOX.r1", b"", b"")
    assert len(got) == 3
    assert link.stats.msgs_in == 3


async def test_delivered_subject_rewrite_and_status(nats_server: NatsServer, link: LeafConnection) -> None:
    nc = await nats.connect(nats_server.url)
    try:
        sub = await nc.subscribe("_INBOX.test")
        await flush_barrier(nc)
        await until(lambda: link.has_interest("_INBOX.test"), what="interest in _INBOX.test")
        ack = "$JS.ACK.S.c.1.5.5.1700000000000000000.0"
        link.publish("_INBOX.test", b"x", reply=ack + "@orders.new")
        hdr = headers.encode([("Nats-Msg-Id", "abc")])
        link.publish("_INBOX.test", b"y", reply=ack + "@orders.eu.new", hdr=hdr)
        link.publish("_INBOX.test", b"", hdr=headers.status(404, "No Messages"))
        m1 = await sub.next_msg(timeout=3)
        m2 = await sub.next_msg(timeout=3)
        m3 = await sub.next_msg(timeout=3)
    finally:
        await nc.close()
    # The hub strips "@<subject>" off the reply and delivers with that subject.
    assert (m1.subject, m1.reply, m1.data) == ("orders.new", ack, b"x")
    assert m1.metadata.sequence.stream == 5
    assert (m2.subject, m2.reply, m2.data) == ("orders.eu.new", ack, b"y")
    assert m2.headers == {"Nats-Msg-Id": "abc"}
    # Status frames arrive on the inbox, in order after the data; nats-py exposes the status line
    # as headers "Status" / "Description".
    assert m3.subject == "_INBOX.test" and m3.data == b""
    assert m3.headers is not None
    assert m3.headers["Status"] == "404" and m3.headers["Description"] == "No Messages"


async def test_queue_group_delivery(nats_server: NatsServer, link: LeafConnection) -> None:
    nc = await nats.connect(nats_server.url)
    try:
        counts = {"a": 0, "b": 0, "plain": 0}

        def make(k: str) -> Any:
            async def h(msg: Any) -> None:
                counts[k] += 1

            return h

        await nc.subscribe("work.q", queue="g", cb=make("a"))
        await nc.subscribe("work.q", queue="g", cb=make("b"))
        await flush_barrier(nc)
        await until(lambda: link.queue_weight("work.q", "g") == 2, what="queue weight 2")
        assert link.queue_groups("work.q") == {"g"}
        # Without the group name in the frame, hub queue subscribers get nothing.
        for _ in range(20):
            link.publish("work.q", b"no-queue")
        await link.flush()
        await flush_barrier(nc)
        assert counts == {"a": 0, "b": 0, "plain": 0}
        # Named group: each message goes to exactly one member.
        for _ in range(100):
            link.publish("work.q", b"q", reply="_INBOX.rq", queues=("g",))
        await link.flush()
        await until(lambda: counts["a"] + counts["b"] == 100, what="100 queue deliveries")
        # A plain subscriber gets queue-framed messages too (the group only adds queue targets).
        await nc.subscribe("work.q", cb=make("plain"))
        await flush_barrier(nc)
        await until(
            lambda: link.has_interest("work.q") and ("work.q", None) in link.interest(), what="plain sub"
        )
        link.publish("work.q", b"q2", queues=("g",))
        await until(lambda: counts["plain"] == 1 and counts["a"] + counts["b"] == 101, what="mixed delivery")
        await flush_barrier(nc)
        assert counts["a"] + counts["b"] == 101
    finally:
        await nc.close()


async def test_interest_tracking(nats_server: NatsServer, link: LeafConnection) -> None:
    events: list[tuple[str, str, str | None]] = []
    remove = link.add_interest_listener(lambda e, s, q: events.append((e, s, q)))
    nc = await nats.connect(nats_server.url)
    try:
        assert not link.has_interest("foo.bar")
        sub = await nc.subscribe("foo.*")
        await flush_barrier(nc)
        await until(lambda: link.has_interest("foo.bar"), what="foo.* interest")
        assert not link.has_interest("foo.bar.baz")
        assert not link.has_interest("foo")
        assert ("+", "foo.*", None) in events
        inbox = await nc.subscribe("_INBOX.abc.*")
        await flush_barrier(nc)
        await until(lambda: link.has_interest("_INBOX.abc.xyz"), what="_INBOX.abc.* interest")
        await sub.unsubscribe()
        await flush_barrier(nc)
        await until(lambda: not link.has_interest("foo.bar"), what="foo.* gone")
        assert ("-", "foo.*", None) in events
        # Queue weights follow membership; LS- when the last member leaves.
        q1 = await nc.subscribe("jobs", queue="w")
        q2 = await nc.subscribe("jobs", queue="w")
        await flush_barrier(nc)
        await until(lambda: link.queue_weight("jobs", "w") == 2, what="weight 2")
        assert events.count(("+", "jobs", "w")) == 1  # weight updates do not fire events
        await q1.unsubscribe()
        await flush_barrier(nc)
        await until(lambda: link.queue_weight("jobs", "w") == 1, what="weight 1")
        await q2.unsubscribe()
        await flush_barrier(nc)
        await until(lambda: not link.has_interest("jobs"), what="jobs gone")
        assert ("-", "jobs", "w") in events
        await inbox.unsubscribe()
    finally:
        await nc.close()
    # Loop-detection and system subscriptions are not application interest.
    assert not any(s.startswith(("$LDS.", "$SYS.")) for s, _ in link.interest())
    assert not any(s.startswith(("$LDS.", "$SYS.")) for _, s, _ in events)
    remove()


async def test_reconnect_resubscribes_and_rebuilds_interest(tmp_path: Path) -> None:
    srv = await NatsServer(leafnode=True).start()
    cport, lport = srv.ports["client"], srv.ports["leafnode"]
    states: list[LinkState] = []
    link = LeafConnection(
        srv.leaf_url,
        name="jetlog-rc",
        reconnect_delay=0.05,
        reconnect_max_delay=0.3,
        on_state_change=states.append,
    )
    events: list[tuple[str, str, str | None]] = []
    link.add_interest_listener(lambda e, s, q: events.append((e, s, q)))
    got, cb = collector()
    try:
        await link.connect(5)
        link.subscribe("cap.>", cb)
        nc = await nats.connect(srv.url)
        await nc.subscribe("keep.me")
        await flush_barrier(nc)
        await until(lambda: link.has_interest("keep.me"), what="keep.me interest")
        await nc.close()
        await until(lambda: not link.has_interest("keep.me"), what="keep.me gone after client close")
        await srv.stop()
        await until(lambda: not link.connected, what="link notices the server is gone")
        # Publishes while disconnected are buffered, then sent after the reconnect.
        link.publish("late.delivery", b"buffered")
        srv = await NatsServer(leafnode=True, client_port=cport, leaf_port=lport).start()
        nc = await nats.connect(srv.url)
        late = await nc.subscribe("late.delivery")
        await nc.subscribe("after.restart")
        await flush_barrier(nc)
        await link.wait_connected(10)
        await until(lambda: link.has_interest("after.restart"), what="interest rebuilt")
        assert link.stats.reconnects >= 1
        await link.flush()
        await nc.publish("cap.x", b"again")
        await flush_barrier(nc)
        await until(lambda: any(m[3] == b"again" for m in got), what="capture after reconnect")
        # The buffered publish was written before the new client subscribed: it is gone (no
        # interest at that time), which is NATS at-most-once; a new one goes through.
        link.publish("late.delivery", b"now")
        msg = await late.next_msg(timeout=3)
        assert msg.data in (b"buffered", b"now")
        await nc.close()
        assert LinkState.RECONNECTING in states and states[-1] is LinkState.CONNECTED
        assert ("+", "after.restart", None) in events
    finally:
        await link.close()
        await srv.stop()
    assert link.state is LinkState.CLOSED
    await link.close()  # idempotent
    assert not link._tasks


async def test_dead_link_detected_by_ping(nats_server: NatsServer) -> None:
    link = LeafConnection(
        nats_server.leaf_url,
        name="jetlog-ping",
        ping_interval=0.2,
        max_outstanding_pings=2,
        reconnect_delay=0.05,
        reconnect_max_delay=0.2,
    )
    await link.connect(5)
    try:
        nats_server.pause()  # SIGSTOP: the socket stays open but nothing answers
        try:
            await until(lambda: not link.connected, timeout=5, what="dead link detection")
        finally:
            nats_server.resume()
        await link.wait_connected(10)
        assert link.stats.reconnects >= 1
    finally:
        await link.close()


async def test_pending_bound_and_close(nats_server: NatsServer) -> None:
    link = LeafConnection(nats_server.leaf_url, name="jetlog-pend", max_pending_bytes=1000)
    # Not connected yet: publishes are buffered up to the bound, then refused loudly.
    link.publish("a", b"x" * 400)
    link.publish("a", b"x" * 400)
    with pytest.raises(TransportError):
        link.publish("a", b"x" * 400)
    await link.connect(5)
    assert link.pending_bytes == 0
    assert link.max_payload == 1048576
    with pytest.raises(PayloadTooLargeError):
        link.publish("a", b"x" * 1048577)
    with pytest.raises(PayloadTooLargeError):  # header + payload counts
        link.publish("a", b"x" * 1048570, hdr=b"NATS/1.0\r\nA: b\r\n\r\n")
    await link.flush()
    assert link.connected  # the oversize frames never left
    await link.close()
    with pytest.raises(TransportError):
        link.publish("a", b"x")


async def test_backpressure_drain(nats_server: NatsServer) -> None:
    link = LeafConnection(nats_server.leaf_url, name="jetlog-drain", write_high_water=64 * 1024)
    await link.connect(5)
    nc = await nats.connect(nats_server.url)
    count = 0

    async def h(msg: Any) -> None:
        nonlocal count
        count += 1

    try:
        await nc.subscribe("bp.x", cb=h, pending_msgs_limit=100_000)
        await flush_barrier(nc)
        await until(lambda: link.has_interest("bp.x"), what="bp.x interest")
        payload = b"z" * 1000
        for i in range(5000):
            link.publish("bp.x", payload)
            if i % 100 == 0:
                await link.drain()
        await link.flush(10)
        await until(lambda: count == 5000, timeout=10, what="5000 delivered")
        assert link.stats.msgs_out == 5000
    finally:
        await nc.close()
        await link.close()


async def test_denied_namespaces(nats_server: NatsServer, link: LeafConnection) -> None:
    # A literal LS+ in a JS-denied namespace makes the hub close the link: refused locally.
    with pytest.raises(LeafFrameError):
        link.subscribe("$KV.cfg.a", lambda *a: None)
    with pytest.raises(LeafFrameError):
        link.subscribe("$JS.API.STREAM.INFO.X", lambda *a: None)
    got, cb = collector()
    link.subscribe("$KV.>", cb)
    link.subscribe("$OBJ.>", cb)
    link.subscribe("$JS.API.>", cb)
    ok, okcb = collector()
    link.subscribe("plain.>", okcb)
    await link.flush()
    nc = await nats.connect(nats_server.url)
    try:
        await nc.publish("$KV.cfg.a", b"kv")
        await nc.publish("$OBJ.b.c", b"obj")
        await nc.publish("$JS.API.STREAM.INFO.X", b"{}")
        await nc.publish("plain.x", b"ok")
        await flush_barrier(nc)
        await until(lambda: len(ok) == 1, what="plain message")
        await link.flush()
    finally:
        await nc.close()
    assert got == []
    assert link.connected


async def test_unsubscribe_stops_delivery(nats_server: NatsServer, link: LeafConnection) -> None:
    got1, cb1 = collector()
    got2, cb2 = collector()
    s1 = link.subscribe("u.x", cb1)
    s2 = link.subscribe("u.*", cb2)
    await link.flush()
    nc = await nats.connect(nats_server.url)
    try:
        await nc.publish("u.x", b"1")
        await flush_barrier(nc)
        await until(lambda: len(got1) == 1 and len(got2) == 1, what="both subs")
        s1.unsubscribe()
        await link.flush()
        await nc.publish("u.x", b"2")
        await flush_barrier(nc)
        await until(lambda: len(got2) == 2, what="second message")
        assert len(got1) == 1
        link.unsubscribe(s2)
        link.unsubscribe(s2)  # idempotent
    finally:
        await nc.close()


def _recorders(
    seen: list[tuple[str, int]], runs: list[int]
) -> tuple[Callable[[list[Any]], None], Callable[[str], Callable[[str, str | None, bytes, bytes], None]]]:
    """A ``run_cb`` and a maker of one-by-one callbacks that note (who, message number) in
    ``seen`` in the order they are handed over; ``runs`` gets each run's length."""

    def run_cb(events: list[Any]) -> None:
        runs.append(len(events))
        seen.extend(("run", int(ev[4])) for ev in events)

    def one_by_one(who: str) -> Callable[[str, str | None, bytes, bytes], None]:
        def cb(subject: str, reply: str | None, hdr: bytes, payload: bytes) -> None:
            seen.append((who, int(payload)))

        return cb

    return run_cb, one_by_one


async def _publish_plan(
    url: str, plan: list[tuple[str, list[str]]], seen: list[tuple[str, int]]
) -> list[tuple[str, int]]:
    """Publish message ``i`` (payload ``i``) to ``plan[i]``'s subject, then wait until ``seen``
    holds as many entries as expected; returns the expected (who, i) entries in order."""
    want = [(who, i) for i, (_, whos) in enumerate(plan) for who in whos]
    nc = await nats.connect(url)
    try:
        for i, (subject, _) in enumerate(plan):
            await nc.publish(subject, b"%d" % i)
        await flush_barrier(nc)
        await until(lambda: len(seen) >= len(want), what="every message")
    finally:
        await nc.close()
    return want


async def test_runs_reach_run_callbacks_in_arrival_order(
    nats_server: NatsServer, link: LeafConnection
) -> None:
    """Consecutive messages only one ``run_cb`` subscription matches come in one call; others
    one by one; across all subscriptions in the order the hub sent them."""
    seen: list[tuple[str, int]] = []  # (who, message number) in the order handed over
    runs: list[int] = []
    run_cb, one_by_one = _recorders(seen, runs)
    link.subscribe("r.>", one_by_one("r-single"), run_cb=run_cb)
    link.subscribe("p.>", one_by_one("p"))
    link.subscribe("r.both", one_by_one("both"))  # r.both: two subscriptions match
    await link.flush()
    plan: list[tuple[str, list[str]]] = []  # (subject, who gets it), message i is plan[i]
    for i in range(3000):
        if i % 100 == 50:
            plan.append(("p.x", ["p"]))
        elif i % 250 == 7:
            plan.append(("r.both", ["r-single", "both"]))
        else:
            plan.append((f"r.{i % 3}", ["run"]))
    want = await _publish_plan(nats_server.url, plan, seen)
    # The two subscriptions of r.both are called in the sublist's order: compare as sets there.
    assert sorted(seen) == sorted(want)
    assert [n for _, n in seen] == [n for _, n in want]
    assert [x for x in seen if x[0] == "run"] == [x for x in want if x[0] == "run"]
    assert sum(runs) == sum(1 for x in want if x[0] == "run")
    assert max(runs) > 1  # messages of one socket read came in one call
    assert link.stats.msgs_in == 3000


async def test_owned_prefix_routing_sees_a_subscription_made_mid_read(
    nats_server: NatsServer, link: LeafConnection
) -> None:
    """Subjects under a run subscription's own prefix (``a.>``, nothing else under ``a``) skip
    the match: acks are a new subject each. A callback that subscribes ``a.7`` in the middle
    of a socket read changes where the next ``a.7`` goes, in the same read too."""
    seen: list[tuple[str, int]] = []
    runs: list[int] = []
    added: list[Any] = []
    run_cb, single = _recorders(seen, runs)

    def on_c(subject: str, reply: str | None, hdr: bytes, payload: bytes) -> None:
        seen.append(("c", int(payload)))
        if not added:
            added.append(link.subscribe("a.7", single("a7")))

    link.subscribe("a.>", single("a-single"), run_cb=run_cb)
    link.subscribe("c.x", on_c)
    await link.flush()
    plan: list[tuple[str, list[str]]] = []
    for i in range(3000):
        if i == 1500:
            plan.append(("c.x", ["c"]))
        elif i > 1500 and i % 50 == 7:
            plan.append(("a.7", ["a-single", "a7"]))
        else:
            plan.append((f"a.{i % 50}", ["run"]))
    want = await _publish_plan(nats_server.url, plan, seen)
    assert sorted(seen) == sorted(want)
    assert [n for _, n in seen] == [n for _, n in want]
    assert max(runs) > 1  # distinct subjects of one read still came in one call
    assert link.stats.msgs_in == 3000


# --------------------------------------------------------------------------------- auth


@contextlib.asynccontextmanager
async def leaf_server(leaf_extra: str = "", extra: str = "") -> AsyncIterator[NatsServer]:
    """A server whose leafnodes block carries ``leaf_extra`` (auth, TLS).

    NatsServer writes its own ``leafnodes { listen }``; a second block from extra_conf would
    replace it, so the whole block is written here and the port read back from the log.
    """
    conf = f"leafnodes {{\n listen: 127.0.0.1:-1\n {leaf_extra}\n}}\n{extra}"
    srv = await NatsServer(leafnode=False, extra_conf=conf).start()
    try:
        await until(lambda: "leafnode" in srv.ports, what="leafnode listener")
        yield srv
    finally:
        await srv.stop()


async def test_auth_user_password() -> None:
    async with leaf_server("authorization { user: a, password: b }") as srv:
        # Credentials in the URL.
        host_port = srv.leaf_url.split("://")[1]
        ok = LeafConnection(f"nats-leaf://a:b@{host_port}", name="jetlog-up1")
        await ok.connect(5)
        await ok.close()
        ok2 = LeafConnection(srv.leaf_url, name="jetlog-up2", user="a", password="b")
        await ok2.connect(5)
        await ok2.close()
        bad = LeafConnection(srv.leaf_url, name="jetlog-up3", user="a", password="wrong")
        with pytest.raises(TransportError, match="Authorization Violation"):
            await bad.connect(5)
        await bad.close()
        none = LeafConnection(srv.leaf_url, name="jetlog-up4")
        with pytest.raises(TransportError, match="Authorization Violation"):
            await none.connect(5)
        await none.close()


async def test_auth_token() -> None:
    # leafnodes{authorization{}} has no token field; a leaf without leaf-specific auth is
    # checked like a client, so the top-level token applies.
    conf = "authorization { token: s3cr3t }"
    async with NatsServer(leafnode=True, extra_conf=conf) as srv:
        host_port = srv.leaf_url.split("://")[1]
        ok = LeafConnection(f"nats-leaf://s3cr3t@{host_port}", name="jetlog-tk1")
        await ok.connect(5)
        await ok.close()
        ok2 = LeafConnection(srv.leaf_url, name="jetlog-tk2", token="s3cr3t")
        await ok2.connect(5)
        await ok2.close()
        bad = LeafConnection(srv.leaf_url, name="jetlog-tk3", token="nope")
        with pytest.raises(TransportError, match="Authorization Violation"):
            await bad.connect(5)
        await bad.close()


async def test_auth_nkey() -> None:
    seed = nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER)
    pub = nkeys.from_seed(bytearray(seed)).public_key.decode()
    async with leaf_server(f"authorization {{ nkey: {pub} }}") as srv:
        ok = LeafConnection(srv.leaf_url, name="jetlog-nk1", nkey_seed=seed.decode())
        await ok.connect(5)
        await ok.close()
        other = nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER)
        bad = LeafConnection(srv.leaf_url, name="jetlog-nk2", nkey_seed=other)
        with pytest.raises(TransportError, match="Authorization Violation"):
            await bad.connect(5)
        await bad.close()


async def test_auth_creds_file_operator_mode(tmp_path: Path) -> None:
    conf, creds = operator_setup(tmp_path)
    async with NatsServer(leafnode=True, extra_conf=conf) as srv:
        ok = LeafConnection(srv.leaf_url, name="jetlog-creds", creds_file=str(creds))
        await ok.connect(5)
        got, cb = collector()
        ok.subscribe("acct.x", cb)
        await ok.flush()
        ok.publish("acct.x", b"loop")  # leaf frames are not echoed back to the same leaf
        await ok.flush()
        assert got == []
        await ok.close()


# ---------------------------------------------------------------------------------- TLS


def _make_cert(tmp: Path) -> tuple[Path, Path]:
    key, crt = tmp / "key.pem", tmp / "cert.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=IP:127.0.0.1,DNS:localhost",
            "-keyout",
            str(key),
            "-out",
            str(crt),
        ],
        check=True,
        capture_output=True,
    )
    return key, crt


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl CLI needed to make a test certificate")
@pytest.mark.parametrize("first", [False, True], ids=["tls-after-info", "handshake-first"])
async def test_tls(tmp_path: Path, first: bool) -> None:
    key, crt = _make_cert(tmp_path)
    hf = "\n handshake_first: true" if first else ""
    async with leaf_server(f'tls {{\n cert_file: "{crt}"\n key_file: "{key}"{hf}\n }}') as srv:
        ctx = ssl.create_default_context(cafile=str(crt))
        host_port = srv.leaf_url.split("://")[1]
        link = LeafConnection(f"tls://{host_port}", name="jetlog-tls", tls=ctx, tls_handshake_first=first)
        await link.connect(5)
        got, cb = collector()
        link.subscribe("tls.x", cb)
        await link.flush()
        nc = await nats.connect(srv.url)
        await nc.publish("tls.x", b"secure")
        await flush_barrier(nc)
        await until(lambda: len(got) == 1, what="message over TLS")
        await nc.close()
        await link.close()
        # Plain TCP against a TLS-only leaf port fails cleanly.
        if not first:
            plain = LeafConnection(srv.leaf_url, name="jetlog-notls")
            # INFO says tls_required, so the link upgrades with the system default context,
            # which does not trust the self-signed certificate: a clean TransportError.
            with pytest.raises(TransportError, match="CERTIFICATE_VERIFY_FAILED"):
                await plain.connect(5)
            await plain.close()


async def test_connect_refused_raises() -> None:
    link = LeafConnection("nats-leaf://127.0.0.1:1", name="jetlog-refused")
    with pytest.raises(TransportError):
        await link.connect(2)
    await link.close()


async def test_local_queue_subscribers(nats_server: NatsServer, link: LeafConnection) -> None:
    # The link joins hub queue group "g" with weight = local members; the hub names the group in
    # the LMSG it sends and the link hands each such message to one local member.
    a, cba = collector()
    b, cbb = collector()
    plain, cbp = collector()
    link.subscribe("lq.x", cba, queue="g")
    link.subscribe("lq.x", cbb, queue="g")
    link.subscribe("lq.*", cbp)
    await link.flush()
    nc = await nats.connect(nats_server.url)
    try:
        for i in range(50):
            await nc.publish("lq.x", str(i).encode())
        await flush_barrier(nc)
        await until(lambda: len(a) + len(b) == 50 and len(plain) == 50, what="queue + plain deliveries")
    finally:
        await nc.close()
    assert a and b  # round-robin over local members
    assert sorted(m[3] for m in a + b) == sorted(str(i).encode() for i in range(50))


def test_runs_on_uvloop(tmp_path: Path) -> None:
    """The node may run on uvloop: its transports are not asyncio.Transport subclasses."""
    uvloop = pytest.importorskip("uvloop")

    async def main() -> None:
        async with NatsServer(leafnode=True) as srv:
            link = LeafConnection(srv.leaf_url, name="jetlog-uv")
            await link.connect(5)
            got, cb = collector()
            link.subscribe("uv.x", cb)
            await link.flush()
            nc = await nats.connect(srv.url)
            sub = await nc.subscribe("uv.back")
            await flush_barrier(nc)
            await until(lambda: link.has_interest("uv.back"), what="uv.back interest")
            await nc.publish("uv.x", b"in")
            link.publish("uv.back", b"out", reply="$JS.ACK.S.c.1.1.1.1.0@orders.uv")
            msg = await sub.next_msg(timeout=3)
            assert (msg.subject, msg.data) == ("orders.uv", b"out")
            await until(lambda: len(got) == 1, what="capture on uvloop")
            await nc.close()
            await link.close()

    uvloop.run(main())


async def test_answers_hub_pings() -> None:
    async with NatsServer(leafnode=True, extra_conf='ping_interval: "100ms"\nping_max: 2') as srv:
        link = LeafConnection(srv.leaf_url, name="jetlog-hubping", ping_interval=3600)
        pings = 0
        orig = link._on_control

        def spy(proto: Any, ev: Any) -> None:
            nonlocal pings
            if ev[0] == 2:  # wire.PING
                pings += 1
            orig(proto, ev)

        link._on_control = spy  # type: ignore[method-assign]
        await link.connect(5)
        try:
            await until(lambda: pings >= 5, what="5 hub PINGs")
            assert link.connected and link.stats.reconnects == 0
            await link.flush()
        finally:
            await link.close()


async def test_gives_up_after_max_reconnect_attempts() -> None:
    srv = await NatsServer(leafnode=True).start()
    states: list[LinkState] = []
    link = LeafConnection(
        srv.leaf_url,
        name="jetlog-giveup",
        reconnect_delay=0.01,
        reconnect_max_delay=0.02,
        max_reconnect_attempts=3,
        on_state_change=states.append,
    )
    try:
        await link.connect(5)
        await srv.stop()
        await until(lambda: link.closed, what="link gives up")
        assert states[-1] is LinkState.CLOSED
        with pytest.raises(TransportError):
            link.publish("x", b"y")
        with pytest.raises(TransportError):
            await link.flush(1)
        await until(lambda: not link._tasks, what="background tasks finished")
    finally:
        await link.close()
        await srv.stop()


async def test_deliveries_that_waited_out_a_stall_are_dropped(
    nats_server: NatsServer, link: LeafConnection
) -> None:
    """A consumer delivery (reply ``$JS.ACK...``) still in the write buffer after the process
    stalled longer than ``stale_after`` is not sent (a cluster may have another leader by then);
    other messages in the same buffer are, and without a stall deliveries go out as usual."""
    nc = await nats.connect(nats_server.url)
    try:
        got: list[tuple[bytes, str]] = []

        async def cb(m: Any) -> None:
            got.append((m.data, m.reply))

        await nc.subscribe("deliver.>", cb=cb)
        await flush_barrier(nc)
        await until(lambda: link.has_interest("deliver.x"), what="interest in deliver.x")
        link.stale_after = 0.2
        link.publish("deliver.x", b"stale", reply="$JS.ACK.S.C.1.7.7.1700000000000000000.0")
        link.publish(
            "deliver.x",
            b"stale-hdr",
            reply="$JS.ACK.S.C.1.8.8.1700000000000000000.0",
            hdr=b"NATS/1.0\r\nA: b\r\n\r\n",
        )
        link.publish("deliver.x", b"reply", reply="_INBOX.abc")
        link.publish("deliver.x", b"plain")
        time.sleep(0.3)  # noqa: ASYNC251 - the stall itself: the loop blocked between pass and flush
        await link.flush()
        await until(lambda: len(got) >= 2, what="the two other messages")
        assert link.stats.stale_deliveries == 2
        link.publish("deliver.x", b"fresh", reply="$JS.ACK.S.C.1.9.9.1700000000000000000.0")
        await link.flush()
        await until(lambda: len(got) >= 3, what="a delivery without a stall")
        assert got == [
            (b"reply", "_INBOX.abc"),
            (b"plain", ""),
            (b"fresh", "$JS.ACK.S.C.1.9.9.1700000000000000000.0"),
        ]
        assert link.stats.stale_deliveries == 2
    finally:
        await nc.close()
