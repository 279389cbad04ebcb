"""``jetlog stream …`` / ``jetlog consumer …`` as an operator runs them (real subprocesses), against
a jetlog node and against ``nats-server -js``: the same commands give the same answers."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import nats
import pytest

from jetlog.embedded import NatsServer

from .conftest import start_node


async def _cli(*args: str, url: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "jetlog",
        *args,
        "--nats-url",
        url,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"},
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def _ok_json(*args: str, url: str) -> Any:
    rc, out, err = await _cli(*args, "--json", url=url)
    assert rc == 0, (args, out, err)
    return json.loads(out)


async def _scenario(url: str) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    info = await _ok_json("stream", "add", "ORD", "--subjects", "ord.>", "--max-age", "1h", url=url)
    seen["add"] = (info["config"]["name"], info["config"]["subjects"], info["config"]["max_age"])
    nc = await nats.connect(url)
    try:
        js = nc.jetstream(timeout=5)
        for i in range(3):
            await js.publish(f"ord.{i}", f"m{i}".encode())
    finally:
        await nc.close()
    ls = await _ok_json("stream", "ls", url=url)
    seen["ls"] = [(s["config"]["name"], s["state"]["messages"]) for s in ls]
    rc, out, _ = await _cli("stream", "info", "ORD", url=url)
    assert rc == 0 and "Messages" in out and "3 (" in out and "1..3" in out, out
    m = await _ok_json("stream", "get", "ORD", "2", url=url)
    seen["get"] = (m["seq"], m["subject"], m["data"])
    m = await _ok_json("stream", "get", "ORD", "--last-for", "ord.0", url=url)
    seen["last_for"] = (m["seq"], m["data"])
    c = await _ok_json("consumer", "add", "ORD", "C1", "--filter", "ord.>", url=url)
    seen["consumer_add"] = (c["name"], c["config"]["filter_subject"], c["num_pending"])
    got = await _ok_json("consumer", "next", "ORD", "C1", "--count", "2", url=url)
    seen["next"] = [(g["stream_seq"], g["subject"], g["data"], g["deliveries"]) for g in got]
    ci = await _ok_json("consumer", "info", "ORD", "C1", url=url)
    seen["consumer_info"] = (ci["ack_floor"]["stream_seq"], ci["num_pending"], ci["num_ack_pending"])
    rc, out, _ = await _cli("consumer", "ls", "ORD", url=url)
    assert rc == 0 and "C1" in out and "pull" in out, out
    rc, _, err = await _cli("stream", "rm", "ORD", url=url)
    seen["rm_unforced"] = (rc, "without --force" in err)
    p = await _ok_json("stream", "purge", "ORD", "-f", url=url)
    seen["purge"] = p
    await _ok_json("consumer", "rm", "ORD", "C1", "-f", url=url)
    await _ok_json("stream", "rm", "ORD", "-f", url=url)
    rc, _, err = await _cli("stream", "info", "ORD", url=url)
    seen["missing"] = (rc, err.strip())
    return seen


async def test_cli_same_answers_from_jetlog_and_nats_server(tmp_path: Path) -> None:
    async with NatsServer(jetstream=True) as real:
        want = await _scenario(real.url)
    async with NatsServer(leafnode=True) as srv:
        node = await start_node(srv, str(tmp_path / "n"))
        try:
            got = await _scenario(srv.url)
        finally:
            await node.stop()
    assert want["add"] == ("ORD", ["ord.>"], 3600 * 10**9)
    assert want["next"] == [(1, "ord.0", "m0", 1), (2, "ord.1", "m1", 1)]
    assert want["consumer_info"] == (2, 1, 0)
    assert want["rm_unforced"] == (1, True)
    assert want["purge"] == {"purged": 3}
    assert want["missing"] == (1, "jetlog: stream not found (code 404, err_code 10059)")
    assert got == want


async def test_cli_unreachable_server_is_one_line() -> None:
    rc, out, err = await _cli("stream", "ls", url="nats://127.0.0.1:1")
    assert rc == 1 and out == ""
    assert err.startswith("jetlog: cannot connect to nats://127.0.0.1:1") and err.count("\n") == 1


@pytest.mark.parametrize(
    "bad", [["stream", "add", "X"], ["stream", "add", "X", "--subjects", "x", "--max-age", "soon"]]
)
async def test_cli_bad_arguments_exit_2(bad: list[str]) -> None:
    rc, _, err = await _cli(*bad, url="nats://127.0.0.1:1")
    assert rc == 2 and "usage:" in err
