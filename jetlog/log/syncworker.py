"""The fsync helper process of ``jetlog.log.syncer`` (stdlib only; run as a script, never imported
by the server: ``python -I -S syncworker.py FD``).

Why a process: an fsync done by a thread of the server must get the server's GIL back to report
completion, and a busy event loop can keep it away for hundreds of milliseconds. This process
has its own GIL; the server only does non-blocking socket I/O to talk to it.

Protocol on the inherited ``AF_UNIX`` stream socket ``FD`` (little-endian, fixed 16-byte frames,
so a reader only ever needs to buffer partial frames):

    request  ``REQ``: op u8 | 3 pad | handle u32 | arg u64
    reply    ``REP``: request id u64 | errno i32 | 4 pad   (errno 0 = success)

    REGISTER(handle)          the frame's bytes arrive with exactly one fd (SCM_RIGHTS, sent in
                              the same ``sendmsg``); the fd is bound to ``handle``. No reply.
    FORGET(handle)            close this process's copy of the fd (after any running sync of it).
    FDATASYNC(handle, id)     fdatasync, then reply ``(id, errno)``.
    FSYNC(handle, id)         fsync (directories), then reply ``(id, errno)``.
    SYNCFS(handle, id)        syncfs of the filesystem holding the file (every dirty page of
                              it: the server sends one for many files' syncs asked for at
                              once), then reply ``(id, errno)``. Linux only (libc ``syncfs``,
                              through ctypes, imported at the first one).
    INJECT(arg = count << 32 | errno)   fault injection for tests: the next ``count`` sync
                              rounds fail with ``errno`` without touching the disk. No reply.

On start the helper sends one reply frame with id 0 whose errno field is its pid (the hello).

Concurrency: the main thread reads requests; worker threads (started on demand, up to
``MAX_WORKERS``) run syncs, so different files sync at the same time. Requests for the same
handle are coalesced: a worker takes *every* request queued for a handle at the moment it
starts, runs one sync and answers them all. That is correct because each of those requests was
received (so the data it covers was written) before that sync started; a request that arrives
while a sync of its handle runs waits for the next round (the running sync may have started
before that data was written).

The helper exits when the socket reports EOF (the server closed it or died), and on any protocol
violation (the server then restarts it and re-registers its files).

Imports are the C modules only (``_socket``, ``_thread``, ``_signal``): ``socket``, ``threading``
and ``signal`` pull in ``enum`` and friends and double the start-up time (~29 ms → ~17 ms here),
which is time a restarted helper's callers wait.
"""

from __future__ import annotations

import _signal
import _socket
import _thread
import errno
import os
import struct
import sys

REQ = struct.Struct("<BxxxIQ")
REP = struct.Struct("<Qi4x")
OP_REGISTER = 1
OP_FORGET = 2
OP_FDATASYNC = 3
OP_FSYNC = 4
OP_INJECT = 5
OP_SYNCFS = 6
WORKERS = 2  # threads at start; more start while every thread is busy, up to MAX_WORKERS
MAX_WORKERS = 32
_MAX_FDS_PER_RECV = 16
_INT = struct.calcsize("i")


class _File:
    """One registered fd and the sync requests waiting for it (guarded by ``Worker.lock``)."""

    __slots__ = ("busy", "fd", "forgotten", "pending", "queued")

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.pending: list[tuple[int, int]] = []  # (request id, op)
        self.queued = False  # in the ready queue
        self.busy = False  # a worker is syncing it
        self.forgotten = False


class Worker:
    """The helper's state: registered files, the ready queue, idle workers, the socket."""

    def __init__(self, sock: _socket.socket) -> None:
        self.sock = sock
        self.files: dict[int, _File] = {}
        self.lock = _thread.allocate_lock()
        self.ready: list[_File] = []
        # Idle workers park on their own (held) lock; ``_push`` releases one to wake it.
        self.idle: list[_thread.LockType] = []
        self.send_lock = _thread.allocate_lock()
        self.nthreads = 0
        self.inject_errno = 0
        self.inject_count = 0

    def reply(self, frames: list[bytes]) -> None:
        try:
            with self.send_lock:
                self.sock.sendall(b"".join(frames))
        except OSError:
            os._exit(0)  # the server is gone: nobody can use the answer

    def _push(self, f: _File) -> None:
        """Queue ``f`` for a worker (``self.lock`` held)."""
        f.queued = True
        self.ready.append(f)
        if self.idle:
            self.idle.pop().release()
        elif self.nthreads < MAX_WORKERS:  # every thread sits in a sync: another file must
            self.start_thread()  # not wait behind them (one thread per file, at most)

    def start_thread(self) -> None:
        self.nthreads += 1
        _thread.start_new_thread(self.work, ())

    # ---- main thread: requests -----------------------------------------------------------
    def serve(self) -> None:
        fdq: list[int] = []  # received fds, in arrival order
        buf = bytearray()
        space = _socket.CMSG_SPACE(_MAX_FDS_PER_RECV * _INT)
        while True:
            data, anc, flags, _ = self.sock.recvmsg(65536, space)
            for level, kind, cdata in anc:
                if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS:
                    n = len(cdata) // _INT
                    fdq.extend(struct.unpack(f"{n}i", cdata[: n * _INT]))
            if flags & _socket.MSG_CTRUNC:
                raise SystemExit("fds were truncated")  # the server restarts us and re-registers
            if not data:
                return
            buf += data
            n = len(buf) - len(buf) % REQ.size
            for off in range(0, n, REQ.size):
                op, handle, arg = REQ.unpack_from(buf, off)
                self.handle(op, handle, arg, fdq)
            del buf[:n]

    def handle(self, op: int, handle: int, arg: int, fdq: list[int]) -> None:
        if op == OP_REGISTER:
            # SCM_RIGHTS fds arrive with the first byte of their ``sendmsg``, so by the time a
            # whole REGISTER frame is here its fd is too, and fds keep the frames' order.
            if not fdq:
                raise SystemExit("REGISTER without an fd")
            fd = fdq.pop(0)
            with self.lock:
                if handle in self.files:
                    raise SystemExit(f"handle {handle} registered twice")
                self.files[handle] = _File(fd)
        elif op == OP_FORGET:
            with self.lock:
                f = self.files.pop(handle, None)
                if f is None:
                    return
                f.forgotten = True
                if f.busy or f.queued:
                    return  # the worker closes it after the sync (never close an fd in use)
            os.close(f.fd)
        elif op in (OP_FDATASYNC, OP_FSYNC, OP_SYNCFS):
            with self.lock:
                f = self.files.get(handle)
                if f is not None:
                    f.pending.append((arg, op))
                    if not (f.queued or f.busy):
                        self._push(f)
                    return
            self.reply([REP.pack(arg, errno.EBADF)])
        elif op == OP_INJECT:
            with self.lock:
                self.inject_errno = arg & 0xFFFFFFFF
                self.inject_count = arg >> 32
        else:
            raise SystemExit(f"unknown op {op}")

    # ---- worker threads: syncs -----------------------------------------------------------
    def work(self) -> None:
        wake = _thread.allocate_lock()
        wake.acquire()
        while True:
            with self.lock:
                if not self.ready:
                    self.idle.append(wake)
                    f = None
                else:
                    f = self.ready.pop(0)
                    f.queued = False
                    f.busy = True
                    batch = f.pending  # every request received before this sync starts
                    f.pending = []
                    err = 0
                    if self.inject_count:
                        self.inject_count -= 1
                        err = self.inject_errno
            if f is None:
                wake.acquire()  # until ``_push`` releases it (possibly already has)
                continue
            if not err:
                try:
                    ops = {op for _, op in batch}
                    if OP_SYNCFS in ops:
                        _syncfs(f.fd)  # covers this file's data too
                    if OP_FSYNC in ops:
                        os.fsync(f.fd)
                    elif OP_SYNCFS not in ops:
                        os.fdatasync(f.fd)
                except OSError as exc:
                    err = exc.errno or errno.EIO
                except Exception as exc:  # a worker must answer, whatever failed
                    # A thread that died here would leave its file busy and every request for
                    # it unanswered: the stores waiting on them would hang instead of failing.
                    print(f"jetlog sync helper {os.getpid()}: sync failed: {exc!r}", file=sys.stderr)
                    err = errno.EIO
            self.reply([REP.pack(rid, err) for rid, _ in batch])
            close = False
            with self.lock:
                f.busy = False
                if f.pending:  # arrived during the sync: they need a sync of their own
                    self._push(f)
                elif f.forgotten:
                    close = True
            if close:
                os.close(f.fd)


_libc: tuple[object, object] | None = None  # (ctypes, libc) once the first SYNCFS came
_libc_lock = _thread.allocate_lock()


def _syncfs(fd: int) -> None:
    """``syncfs(fd)``; raises ``OSError`` with its errno."""
    global _libc
    if _libc is None:
        # Several workers may meet their first SYNCFS at once: one loads, the others wait.
        with _libc_lock:
            if _libc is None:
                import ctypes  # only here: most helpers never need it, and it doubles the start-up

                _libc = (ctypes, ctypes.CDLL(None, use_errno=True))
    ctypes_mod, libc = _libc
    if libc.syncfs(fd) != 0:  # type: ignore[attr-defined]
        code = ctypes_mod.get_errno() or errno.EIO  # type: ignore[attr-defined]
        raise OSError(code, os.strerror(code))


def main(argv: list[str]) -> None:
    # Ctrl-C in a terminal, or a SIGTERM to the whole process group (kill -- -PGID, make run):
    # the server decides when we stop. We exit on EOF of the socket, i.e. when the server closes
    # it or dies, so ignoring these cannot leave us behind.
    _signal.signal(_signal.SIGINT, _signal.SIG_IGN)
    _signal.signal(_signal.SIGTERM, _signal.SIG_IGN)
    sock = _socket.socket(fileno=int(argv[1]))
    sock.setblocking(True)
    w = Worker(sock)
    for _ in range(WORKERS):
        w.start_thread()
    w.reply([REP.pack(0, os.getpid())])
    try:
        w.serve()
    except (OSError, SystemExit) as exc:
        print(f"jetlog sync helper {os.getpid()}: {exc}", file=sys.stderr)
        os._exit(2)
    # EOF: nobody waits for answers any more. Leave without waiting for threads that may sit
    # in a sync (their result has no reader).
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv)
