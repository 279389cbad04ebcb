"""A read-only mapping of a whole file that holds no file descriptor.

``mmap.mmap`` keeps a duplicate of the descriptor it maps for as long as the mapping lives
(before Python 3.13, which adds ``trackfd=False``). Index files stay mapped while their
entries are in memory (``idxfile.map_idx``): one descriptor per sealed segment would count
against the open-files limit for the life of the process. Here the file is mapped with
``mmap(2)`` through ctypes, its descriptor closed at once, and the mapping is undone when the
last view of it is released (a finalizer on the object the views export from).

The views are read-only ``memoryview``s: a write raises instead of touching the file (the
pages are mapped without write permission as well). A mapping sees the file it was made of
even after a rename over it or an unlink; the file must not be truncated in place meanwhile
(a read past its new end would be a SIGBUS), which no jetlog code does to an index file.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import weakref

try:
    _libc: ctypes.CDLL | None = ctypes.CDLL(None, use_errno=True)
except OSError:  # no C library to load symbols from: callers read the file instead
    _libc = None

if _libc is not None:
    _mmap = _libc.mmap
    _mmap.restype = ctypes.c_void_p
    _mmap.argtypes = [
        ctypes.c_void_p,
        ctypes.c_size_t,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_long,
    ]
    _munmap = _libc.munmap
    _munmap.restype = ctypes.c_int
    _munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]

_MAP_FAILED = ctypes.c_void_p(-1).value

AVAILABLE = _libc is not None
"""False where mappings cannot be made this way (then :func:`map_file` is not to be called)."""


def map_file(path: str) -> memoryview | None:
    """A read-only byte view of the whole file at ``path`` (None if it does not exist).

    Raises ``OSError`` if the file cannot be opened or mapped."""
    assert _libc is not None
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return None
    try:
        size = os.fstat(fd).st_size
        if size == 0:
            return memoryview(b"")
        addr = _mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if addr is None or addr == _MAP_FAILED:
            err = ctypes.get_errno()
            raise OSError(err, f"mmap {path}: {os.strerror(err)}")
    finally:
        os.close(fd)
    buf = (ctypes.c_char * size).from_address(addr)
    # Views keep ``buf`` alive; when the last is gone, the pages are unmapped.
    weakref.finalize(buf, _munmap, addr, size)
    return memoryview(buf).cast("B").toreadonly()
