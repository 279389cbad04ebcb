"""The fsync helper's worker threads (``jetlog.log.syncworker``), run in this process: a worker
answers every request it takes, whatever its sync raised, and the first ``syncfs`` of several
workers at once loads libc once."""

from __future__ import annotations

import errno
import os
import socket
import sys
import threading
from array import array
from pathlib import Path

import pytest

from jetlog.log import syncworker as sw


def _recv_reply(sock: socket.socket) -> tuple[int, int]:
    buf = b""
    while len(buf) < sw.REP.size:
        chunk = sock.recv(sw.REP.size - len(buf))
        assert chunk, "the helper closed the socket"
        buf += chunk
    rid, err = sw.REP.unpack(buf)
    return rid, err


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="syncfs is Linux only")
def test_first_syncfs_of_many_workers_at_once_loads_libc_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sw, "_libc", None)
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT)
    n = 8
    start = threading.Barrier(n)
    errors: list[BaseException] = []

    def one() -> None:
        start.wait()
        try:
            sw._syncfs(fd)
        except BaseException as e:  # collected for the assertion below
            errors.append(e)

    try:
        threads = [threading.Thread(target=one) for _ in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        assert errors == [] and sw._libc is not None and len(sw._libc) == 2
    finally:
        os.close(fd)


def test_a_worker_answers_eio_when_its_sync_raises_anything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker thread that died on an unexpected exception left its file busy and its
    requests unanswered: the stores waiting on them hung instead of failing closed."""

    def broken(fd: int) -> None:
        raise ValueError("not an OSError")

    monkeypatch.setattr(sw, "_syncfs", broken)
    ours, theirs = socket.socketpair()
    w = sw.Worker(theirs)
    for _ in range(2):
        w.start_thread()
    threading.Thread(target=w.serve, daemon=True).start()
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT)
    try:
        anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array("i", [fd]).tobytes())]
        ours.sendmsg([sw.REQ.pack(sw.OP_REGISTER, 7, 0)], anc)
        ours.settimeout(10)
        ours.sendall(sw.REQ.pack(sw.OP_SYNCFS, 7, 41))
        assert _recv_reply(ours) == (41, errno.EIO)
        # The worker lived on and the file is not stuck busy: the next sync is answered.
        os.write(fd, b"x")
        ours.sendall(sw.REQ.pack(sw.OP_FDATASYNC, 7, 42))
        assert _recv_reply(ours) == (42, 0)
    finally:
        ours.close()  # EOF: serve() returns
        os.close(fd)
