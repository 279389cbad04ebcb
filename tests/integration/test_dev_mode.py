"""`jetlog dev` (what `make run` starts): one stdout line `ready nats://…`, a working JetStream
API behind it, and a clean stop on SIGTERM / SIGINT that leaves no process behind."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys

import nats
import pytest


async def _start_dev(data_dir: str) -> tuple[asyncio.subprocess.Process, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "jetlog",
        "dev",
        "--port",
        "0",
        "--data-dir",
        data_dir,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert proc.stdout is not None
    line = (await asyncio.wait_for(proc.stdout.readline(), 60)).decode()
    m = re.fullmatch(r"ready (nats://127\.0\.0\.1:\d+)\n", line)
    assert m, f"unexpected first line {line!r}"
    return proc, m.group(1)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
async def test_dev_serves_and_stops_cleanly(tmp_path, sig: signal.Signals) -> None:  # type: ignore[no-untyped-def]
    proc, url = await _start_dev(str(tmp_path / "dev"))
    try:
        nc = await nats.connect(url)
        js = nc.jetstream()
        await js.add_stream(name="DEV", subjects=["dev.>"])
        ack = await js.publish("dev.x", b"hello")
        assert ack.seq == 1
        assert (await js.get_msg("DEV", 1)).data == b"hello"
        await nc.close()
    finally:
        proc.send_signal(sig)
        rc = await asyncio.wait_for(proc.wait(), 30)
    assert rc == 0
    assert proc.stdout is not None
    assert await proc.stdout.read() == b""  # nothing else on stdout
    # Data survives: a second run sees the stream and the message.
    proc, url = await _start_dev(str(tmp_path / "dev"))
    try:
        nc = await nats.connect(url)
        js = nc.jetstream()
        assert (await js.get_msg("DEV", 1)).data == b"hello"
        await nc.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 30) == 0


def _children(pid: int) -> set[int]:
    """Direct children of ``pid`` (from /proc: every thread's children list)."""
    out: set[int] = set()
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as f:
            out.update(int(x) for x in f.read().split())
    return out


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"  # a zombie is gone for our purpose
    except FileNotFoundError:
        return False


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
async def test_signal_to_the_process_group_stops_everything_quietly(tmp_path, sig: signal.Signals) -> None:  # type: ignore[no-untyped-def]
    """What Ctrl-C in `make run` does: the signal reaches jetlog, its nats-server and the fsync
    helper at once. Exit status 0, nothing left running, no warning or traceback on stderr."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "jetlog",
        "dev",
        "--port",
        "0",
        "--data-dir",
        str(tmp_path / "dev"),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        start_new_session=True,  # its own process group, as a shell job has
    )
    assert proc.stdout is not None and proc.stderr is not None
    line = (await asyncio.wait_for(proc.stdout.readline(), 60)).decode()
    url = line.split()[1]
    nc = await nats.connect(url)
    js = nc.jetstream()
    await js.add_stream(name="PG", subjects=["pg.>"])
    assert (await js.publish("pg.x", b"1")).seq == 1  # the fsync helper is running now
    await nc.close()
    children = _children(proc.pid)
    cmdlines = []
    for c in children:
        with open(f"/proc/{c}/cmdline", "rb") as f:
            cmdlines.append(f.read())
    assert any(b"nats-server" in c for c in cmdlines), cmdlines
    assert any(b"syncworker" in c for c in cmdlines), cmdlines
    os.killpg(proc.pid, sig)
    rc = await asyncio.wait_for(proc.wait(), 30)
    err = (await proc.stderr.read()).decode()
    assert rc == 0, err
    deadline = asyncio.get_running_loop().time() + 10
    while any(_alive(c) for c in children) and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.05)
    assert not [c for c in children if _alive(c)]
    assert "Traceback" not in err, err
    assert " WARNING " not in err and " ERROR " not in err, err
    assert "stopped" in err  # the node did stop through its normal path
    # The HTTP address (status page, metrics) is printed with the embedded default.
    assert re.search(r"http://127\.0\.0\.1:\d+ \(status page; /metrics /jsz", err), err


async def test_dev_three_nodes(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """`jetlog dev --nodes 3`: one nats-server and three node processes, `ready` once all serve;
    R3 streams work; Ctrl-C to the process group stops everything with status 0."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "jetlog",
        "dev",
        "--nodes",
        "3",
        "--port",
        "0",
        "--data-dir",
        str(tmp_path / "dev3"),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        start_new_session=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    line = (await asyncio.wait_for(proc.stdout.readline(), 90)).decode()
    m = re.fullmatch(r"ready (nats://127\.0\.0\.1:\d+)\n", line)
    assert m, f"unexpected first line {line!r}"
    children = _children(proc.pid)
    nodes = []
    for c in children:
        with open(f"/proc/{c}/cmdline", "rb") as f:
            cmd = f.read().split(b"\0")
        if b"serve" in cmd:
            nodes.append(cmd)
    assert len(nodes) == 3
    names = sorted(cmd[cmd.index(b"--name") + 1].decode() for cmd in nodes)
    assert names == ["n1", "n2", "n3"]
    assert all(b"--data-dir" in cmd and b"--cluster-peers" in cmd for cmd in nodes)
    assert not any(b"SECRET" in part.upper() for cmd in nodes for part in cmd)  # never on a command line
    nc = await nats.connect(m.group(1))
    js = nc.jetstream(timeout=10)
    await js.add_stream(name="D3", subjects=["d3.>"], num_replicas=3)
    assert (await js.publish("d3.x", b"1")).seq == 1
    assert (await js.get_msg("D3", 1)).data == b"1"
    await nc.close()
    os.killpg(proc.pid, signal.SIGINT)
    rc = await asyncio.wait_for(proc.wait(), 60)
    err = (await proc.stderr.read()).decode()
    assert rc == 0, err[-3000:]
    deadline = asyncio.get_running_loop().time() + 15
    while any(_alive(c) for c in children) and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.05)
    assert not [c for c in children if _alive(c)]
    assert "Traceback" not in err, err[-3000:]
