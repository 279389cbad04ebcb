"""The embedded nats-server launcher used by `jetlog dev`, the tests and the benchmarks."""

import asyncio
import os
import shutil
import signal
import sys
import time

import nats
import pytest

from jetlog.embedded import NatsServer


async def test_upstream_has_client_and_leaf_ports(nats_server: NatsServer) -> None:
    assert nats_server.ports["client"] > 0
    assert nats_server.ports["leafnode"] > 0
    nc = await nats.connect(nats_server.url)
    try:
        sub = await nc.subscribe("x")
        await nc.publish("x", b"hi")
        msg = await sub.next_msg(timeout=2)
        assert msg.data == b"hi"
    finally:
        await nc.close()


async def test_reference_server_runs_jetstream(js_server: NatsServer) -> None:
    nc = await nats.connect(js_server.url)
    try:
        info = await nc.jetstream().account_info()
        assert info.api.level == 5
    finally:
        await nc.close()


_STARTER = """
import asyncio, sys
from jetlog.embedded import NatsServer

async def main():
    srv = NatsServer(leafnode=True, own_process_group=sys.argv[1] == "group")
    await srv.start()
    print(srv.proc.pid, flush=True)
    await asyncio.sleep(3600)

asyncio.run(main())
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="parent-death signal is Linux-only")
@pytest.mark.parametrize("group", ["group", "shared"])
async def test_a_server_does_not_outlive_a_killed_starter(group: str) -> None:
    if group == "shared" and shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) is missing: only a server in its own group gets the signal")
    """A test run, benchmark or ``jetlog dev`` killed with ``kill -9`` takes its servers with
    it, whether they run in its process group or in their own."""
    starter = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _STARTER, group, stdout=asyncio.subprocess.PIPE
    )
    assert starter.stdout is not None
    server_pid = 0
    try:
        line = await asyncio.wait_for(starter.stdout.readline(), 20)
        server_pid = int(line)
        assert _alive(server_pid)
        starter.kill()
        await starter.wait()
        deadline = time.monotonic() + 10
        while _alive(server_pid) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert not _alive(server_pid), f"nats-server {server_pid} outlived its killed starter"
    finally:
        if starter.returncode is None:
            starter.kill()
            await starter.wait()
        if server_pid and _alive(server_pid):
            os.kill(server_pid, signal.SIGKILL)
