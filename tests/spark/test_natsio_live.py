"""The connector's synchronous NATS client against real nats-server processes: authentication
(user/password, token, nkey), TLS with a private CA, server failover, no-responders status."""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path

import nkeys
import pytest

from jetlog.embedded import NatsServer
from jetlog.spark.natsio import Connection, ConnectOptions, NatsAuthError, NatsConnectionError
from jetlog.transport.barrier import flush_barrier

pytestmark = [pytest.mark.spark]


def _probe(opts: ConnectOptions) -> int:
    """Connect and send a request nobody answers: the 503 status proves a working session."""
    with Connection.connect(opts) as conn:
        return conn.request("nobody.listens", b"", 5).status


async def _with_server(conf: str, *checks: tuple[ConnectOptions, object]) -> None:
    async with NatsServer(leafnode=False, extra_conf=conf) as srv:
        for opts, expect in checks:
            o = ConnectOptions(**{**opts.__dict__, "servers": (srv.url,)})
            if isinstance(expect, type) and issubclass(expect, BaseException):
                with pytest.raises(expect):
                    await asyncio.to_thread(_probe, o)
            else:
                assert await asyncio.to_thread(_probe, o) == expect


async def test_user_password() -> None:
    await _with_server(
        "authorization { user: alice, password: s3cret }",
        (ConnectOptions(user="alice", password="s3cret"), 503),
        (ConnectOptions(user="alice", password="wrong"), NatsAuthError),
        (ConnectOptions(), NatsAuthError),
    )


async def test_token() -> None:
    await _with_server(
        "authorization { token: tok123 }",
        (ConnectOptions(token="tok123"), 503),
        (ConnectOptions(token="nope"), NatsAuthError),
    )


async def test_nkey(tmp_path: Path) -> None:
    seed = nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER)
    public = nkeys.from_seed(bytearray(seed)).public_key.decode()
    seed_file = tmp_path / "user.nk"
    seed_file.write_bytes(seed + b"\n")
    other = nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER).decode()
    await _with_server(
        f"authorization {{ users = [ {{ nkey: {public} }} ] }}",
        (ConnectOptions(nkey_seed=seed.decode()), 503),
        (ConnectOptions(nkey_seed=str(seed_file)), 503),
        (ConnectOptions(nkey_seed=other), NatsAuthError),
    )


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


async def test_tls_with_private_ca(tmp_path: Path) -> None:
    d = tmp_path
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=test-ca",
             "-keyout", str(d / "ca.key"), "-out", str(d / "ca.pem"))  # fmt: skip
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1",
             "-keyout", str(d / "srv.key"), "-out", str(d / "srv.csr"))  # fmt: skip
    (d / "ext.cnf").write_text("subjectAltName=IP:127.0.0.1\n")
    _openssl("x509", "-req", "-in", str(d / "srv.csr"), "-CA", str(d / "ca.pem"), "-CAkey", str(d / "ca.key"),
             "-CAcreateserial", "-days", "1", "-extfile", str(d / "ext.cnf"), "-out", str(d / "srv.pem"))  # fmt: skip
    await _with_server(
        f'tls {{ cert_file: "{d / "srv.pem"}", key_file: "{d / "srv.key"}" }}',
        (ConnectOptions(tls=True, tls_ca_file=str(d / "ca.pem")), 503),
        (ConnectOptions(tls=True), NatsConnectionError),  # the system CAs do not know test-ca
    )


async def test_failover_to_the_next_server() -> None:
    async with NatsServer(leafnode=False) as srv:
        dead = "nats://127.0.0.1:1"
        assert (
            await asyncio.to_thread(_probe, ConnectOptions(servers=(dead, srv.url), connect_timeout=2)) == 503
        )
        with pytest.raises(NatsConnectionError, match="cannot connect"):
            await asyncio.to_thread(_probe, ConnectOptions(servers=(dead,), connect_timeout=2))


async def test_publisher_window_acks_and_dedup(tmp_path: Path) -> None:
    import nats
    from nats.js.api import StreamConfig

    from jetlog.spark.natsio import encode_headers
    from jetlog.spark.sink import Publisher, PublishError

    async with NatsServer(jetstream=True, leafnode=False, store_dir=str(tmp_path / "js")) as srv:
        nc = await nats.connect(srv.url)
        js = nc.jetstream()
        await js.add_stream(StreamConfig(name="PUB", subjects=["pub.>"]))

        def publish_all() -> tuple[int, int]:
            with Connection.connect(ConnectOptions(servers=(srv.url,))) as conn:
                pub = Publisher(conn, window=64, timeout=10)
                for i in range(1000):
                    pub.add(f"pub.{i % 7}", encode_headers([("Nats-Msg-Id", f"id-{i}")]), b"x" * i)
                pub.finish()
                return pub.published, pub.duplicates

        assert await asyncio.to_thread(publish_all) == (1000, 0)
        assert await asyncio.to_thread(publish_all) == (0, 1000)
        assert (await js.stream_info("PUB")).state.messages == 1000

        def unroutable() -> None:
            with Connection.connect(ConnectOptions(servers=(srv.url,))) as conn:
                pub = Publisher(conn, window=8, timeout=5)
                pub.add("elsewhere", b"", b"x")
                pub.finish()

        with pytest.raises(PublishError, match="no stream captures subject 'elsewhere'"):
            await asyncio.to_thread(unroutable)
        await nc.close()


async def test_offsets_retried_through_silence_and_unavailable() -> None:
    """The source's OFFSETS request, against a responder that first stays silent (the node that
    took it died), then answers 503/10008 (no replica reachable yet), then answers: the planner
    gets the positions instead of failing the query."""
    import msgspec
    import nats

    from jetlog.spark.meta import OFFSETS_SUBJECT, Meta
    from jetlog.spark.natsio import NatsTimeout
    from jetlog.spark.options import parse_source_options

    async with NatsServer(leafnode=False) as srv:
        nc = await nats.connect(srv.url)
        seen: list[float] = []

        async def on(msg) -> None:  # type: ignore[no-untyped-def]
            seen.append(asyncio.get_running_loop().time())
            if len(seen) == 1:
                return  # silence
            if len(seen) == 2:
                err = {
                    "code": 503,
                    "err_code": 10008,
                    "description": "JetStream system temporarily unavailable",
                }
                await msg.respond(msgspec.json.encode({"error": err}))
                return
            body = {"streams": {"S": {"first_seq": 3, "hwm": 9, "first_ts": 1, "last_ts": 2}, "X": None}}
            await msg.respond(msgspec.json.encode(body))

        await nc.subscribe(OFFSETS_SUBJECT, cb=on)
        await flush_barrier(nc)
        try:
            opts = parse_source_options(
                {"servers": srv.url, "streams": "S,X", "requestTimeoutMs": "12000"}, False
            )

            def plan() -> dict:  # type: ignore[type-arg]
                with Connection.connect(opts.conn) as conn:
                    return Meta(conn, opts).positions(["S", "X"])  # type: ignore[return-value]

            got = await asyncio.to_thread(plan)
            assert len(seen) == 3
            assert got["X"] is None
            assert (got["S"].first_seq, got["S"].hwm) == (3, 9)
            # A responder that never answers still fails, at the request timeout.
            await nc.close()
            opts = parse_source_options(
                {"servers": srv.url, "streams": "S", "requestTimeoutMs": "1500"}, False
            )
            nc2 = await nats.connect(srv.url)

            async def silent(msg) -> None:  # type: ignore[no-untyped-def]
                return None

            await nc2.subscribe(OFFSETS_SUBJECT, cb=silent)
            await flush_barrier(nc2)
            try:
                t0 = asyncio.get_running_loop().time()
                with pytest.raises(NatsTimeout):
                    await asyncio.to_thread(plan)
                assert 1.4 < asyncio.get_running_loop().time() - t0 < 5
            finally:
                await nc2.close()
        finally:
            if not nc.is_closed:
                await nc.close()
