"""A whole node (client link and leafnode link) against a nats-server secured each way a real
deployment is: user/password, token, nkey, ``.creds`` (operator mode), TLS with a private CA and
client certificates. The node serves a stock client (stream, publish, consume: deliveries cross
the leaf link); wrong credentials stop it with an error naming the link and the cause.
Credentials also come from the environment (``JETLOG_UPSTREAM_*``), never the command line."""

from __future__ import annotations

import os
import shutil
import ssl
from pathlib import Path
from typing import Any

import nats
import nkeys
import pytest

from jetlog.config import load_config
from jetlog.embedded import NatsServer
from jetlog.errors import JetlogError
from tests.support.natsauth import operator_setup, private_ca


async def _server(auth: str, leaf_auth: str, extra: str = "", leaf_extra: str = "") -> NatsServer:
    # NatsServer writes its own leafnodes block unless leafnode=False: write the whole block.
    conf = f"{auth}\nleafnodes {{\n listen: 127.0.0.1:-1\n {leaf_auth}\n {leaf_extra}\n}}\n{extra}"
    srv = await NatsServer(leafnode=False, extra_conf=conf).start()
    for _ in range(200):
        if "leafnode" in srv.ports:
            return srv
        import asyncio

        await asyncio.sleep(0.025)
    await srv.stop()
    raise AssertionError("leafnode listener did not come up")


async def _serve_and_check(srv: NatsServer, data_dir: Path, client: dict[str, Any], **ov: Any) -> None:
    from jetlog.node import Node

    scheme = ov.pop("scheme", "nats")
    leaf_scheme = ov.pop("leaf_scheme", "nats-leaf")
    url = f"{scheme}://" + srv.url.split("://")[1]
    leaf = f"{leaf_scheme}://" + srv.leaf_url.split("://")[1]
    node = Node(
        load_config(
            None, {"upstream.url": url, "upstream.leafnode_url": leaf, "data_dir": str(data_dir), **ov}
        )
    )
    await node.start()
    try:
        # Raw subscriptions (the API) are read from the socket itself, TLS included.
        assert node.client.fast_path
        nc = await nats.connect(url, **client)
        try:
            js = nc.jetstream(timeout=5)
            await js.add_stream(name="AUTH", subjects=["auth.>"])
            ack = await js.publish("auth.x", b"secret")
            assert ack.seq == 1
            sub = await js.pull_subscribe("auth.>", durable="A", stream="AUTH")
            (m,) = await sub.fetch(1, timeout=5)  # delivered over the leaf link
            assert m.data == b"secret"
            await m.ack_sync()
        finally:
            await nc.close()
    finally:
        await node.stop()


async def _refused(srv: NatsServer, data_dir: Path, link: str, **ov: Any) -> str:
    from jetlog.node import Node

    node = Node(
        load_config(
            None,
            {
                "upstream.url": srv.url,
                "upstream.leafnode_url": srv.leaf_url,
                "data_dir": str(data_dir),
                "upstream.connect_timeout": 3.0,
                "upstream.max_reconnect_attempts": 0,
                **ov,
            },
        )
    )
    with pytest.raises(JetlogError) as ei:
        await node.start()
    await node.stop()
    text = str(ei.value)
    assert link in text and "authorization violation" in text.lower(), text
    return text


async def test_user_password_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    srv = await _server(
        "authorization { user: jl, password: s3cret }", "authorization { user: jl, password: s3cret }"
    )
    try:
        monkeypatch.setenv("JETLOG_UPSTREAM_USER", "jl")
        monkeypatch.setenv("JETLOG_UPSTREAM_PASSWORD", "s3cret")
        await _serve_and_check(srv, tmp_path / "ok", {"user": "jl", "password": "s3cret"})
        monkeypatch.setenv("JETLOG_UPSTREAM_PASSWORD", "wrong")
        await _refused(srv, tmp_path / "bad", "client link")
    finally:
        await srv.stop()


async def test_leaf_credentials_wrong_names_the_leaf_link(tmp_path: Path) -> None:
    srv = await _server(
        "authorization { user: jl, password: s3cret }", "authorization { user: lf, password: other }"
    )
    try:
        await _refused(
            srv, tmp_path / "bad", "leaf link", **{"upstream.user": "jl", "upstream.password": "s3cret"}
        )
    finally:
        await srv.stop()


async def test_token(tmp_path: Path) -> None:
    # nats-server's leafnode port has no token authorization: the leaf link connects without.
    srv = await _server("authorization { token: tok-123 }", "")
    try:
        await _serve_and_check(srv, tmp_path / "ok", {"token": "tok-123"}, **{"upstream.token": "tok-123"})
        await _refused(srv, tmp_path / "bad", "client link", **{"upstream.token": "nope"})
    finally:
        await srv.stop()


async def test_nkey(tmp_path: Path) -> None:
    seed = nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER)
    pub = nkeys.from_seed(bytearray(seed)).public_key.decode()
    seed_file = tmp_path / "user.nk"
    seed_file.write_bytes(seed + b"\n")
    auth = f"authorization {{ users = [ {{ nkey: {pub} }} ] }}"
    srv = await _server(auth, f"authorization {{ nkey: {pub} }}")
    try:
        await _serve_and_check(
            srv, tmp_path / "ok", {"nkeys_seed": str(seed_file)}, **{"upstream.nkey_seed": seed.decode()}
        )
        other = nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER).decode()
        await _refused(srv, tmp_path / "bad", "client link", **{"upstream.nkey_seed": other})
    finally:
        await srv.stop()


async def test_creds_file_operator_mode(tmp_path: Path) -> None:
    conf, creds = operator_setup(tmp_path)
    srv = await _server(conf, "")
    try:
        await _serve_and_check(
            srv, tmp_path / "ok", {"user_credentials": str(creds)}, **{"upstream.creds_file": str(creds)}
        )
    finally:
        await srv.stop()


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl CLI needed to make certificates")
async def test_tls_with_private_ca_and_client_certificates(tmp_path: Path) -> None:
    pki = private_ca(tmp_path)
    tls = (
        f'tls {{ cert_file: "{pki["server_cert"]}"\n key_file: "{pki["server_key"]}"\n'
        f' ca_file: "{pki["ca"]}"\n verify: true }}'
    )
    srv = await _server(tls, "", leaf_extra=tls)
    try:
        ctx = ssl.create_default_context(cafile=str(pki["ca"]))
        ctx.load_cert_chain(str(pki["client_cert"]), str(pki["client_key"]))
        await _serve_and_check(
            srv,
            tmp_path / "ok",
            {"tls": ctx},
            scheme="tls",
            leaf_scheme="tls",
            **{
                "upstream.tls_ca": str(pki["ca"]),
                "upstream.tls_cert": str(pki["client_cert"]),
                "upstream.tls_key": str(pki["client_key"]),
            },
        )
    finally:
        await srv.stop()
