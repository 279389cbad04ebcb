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
