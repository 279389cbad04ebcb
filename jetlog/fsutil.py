"""Durable small-file writes: a file replaced atomically (tmp + fsync + rename + directory
fsync), and a directory fsync (what makes a rename or a creation in it durable)."""

from __future__ import annotations

import os


def fsync_dir(path: str) -> None:
    """fsync the directory ``path`` ("" is the current directory)."""
    fd = os.open(path or ".", os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: str, data: bytes, *, durable: bool = True) -> None:
    """Replace ``path`` with ``data``: readers see the old content or the new, never a part;
    with ``durable`` the new content survives a crash once this returns."""
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        if durable:
            os.fsync(f.fileno())
    os.replace(tmp, path)
    if durable:
        fsync_dir(os.path.dirname(path))
