"""One ``MetaRaft`` member as a child process, driven by JSON lines on stdin/stdout.

Used by the multi-process tests (SIGKILL/SIGSTOP of a real process) and the measurements.
``python -m tests.integration.metaraft_child NAME MEMBERS_JSON DATA_DIR [CONF_JSON] [--volatile]``;
the secret comes from ``$JETLOG_CLUSTER_SECRET``. Requests (one JSON object per line):

- ``{"op": "status"}`` -> ``MetaRaft.status()`` plus ``hash`` and ``names`` of the state
- ``{"op": "create", "name": N, "timeout": T}`` -> ``{"ok", "code", "index"}`` or ``{"error"}``
- ``{"op": "bench", "n": N}`` -> commit latencies (s) of N sequential barriers
- ``{"op": "ready", "timeout": T}`` -> ``{"ok": true}`` once ``wait_ready`` succeeded
- ``{"op": "compact"}``, ``{"op": "exit"}``
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import time
from typing import Any

from jetlog.cluster.meta import CreateStream, MetaState
from jetlog.cluster.raft import MetaRaft, MetaRaftError


async def handle(raft: MetaRaft, req: dict[str, Any]) -> dict[str, Any]:
    op = req["op"]
    if op == "status":
        st = raft.status()
        st["hash"] = raft.state.state_hash()
        st["names"] = sorted(raft.state.streams)
        st["pid"] = os.getpid()
        return st
    if op == "create":
        cmd = CreateStream(
            name=req["name"], config=b"{}", created=time.time_ns(), replicas=["n1", "n2", "n3"], leader="n1"
        )
        try:
            res = await raft.propose(cmd, req.get("timeout", 3.0))
        except MetaRaftError as e:
            return {"error": str(e)}
        return {"ok": res.ok, "code": res.code, "index": res.index}
    if op == "bench":
        lats = []
        for _ in range(req["n"]):
            t0 = time.perf_counter()
            await raft.barrier()
            lats.append(time.perf_counter() - t0)
        return {"lats": lats}
    if op == "ready":
        try:
            await raft.wait_ready(req.get("timeout", 10.0))
        except MetaRaftError as e:
            return {"error": str(e)}
        return {"ok": True}
    if op == "compact":
        raft.force_compaction()
        return {"ok": True}
    return {"error": f"unknown op {op!r}"}


async def main() -> None:
    name, members, data = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
    conf = json.loads(sys.argv[4]) if len(sys.argv) > 4 and sys.argv[4] != "-" else None
    volatile = "--volatile" in sys.argv
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s")
    raft = MetaRaft(
        name,
        members,
        members[name],
        os.environ.get("JETLOG_CLUSTER_SECRET", ""),
        data,
        MetaState(),
        conf=conf,
        durable_journal=not volatile,
    )
    await raft.start()
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    print(json.dumps({"started": time.time()}), flush=True)
    try:
        while line := await reader.readline():
            req = json.loads(line)
            if req["op"] == "exit":
                break
            resp = await handle(raft, req)
            print(json.dumps(resp, default=str), flush=True)
    finally:
        await raft.stop()


if __name__ == "__main__":
    asyncio.run(main())
