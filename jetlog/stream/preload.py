"""Every stream directory's disk work for a node start, done in one thread before the loop
builds the streams (``StreamManager.load``).

A start used to open each stream with five thread hops (its ``stream.json`` twice, the store
directory's lock, the store's recovery, the consumer-state log), three streams at a time. On
two cores the hops and the GIL hand-offs between those threads cost more than the work
itself: 100 streams at rest took 225-240 ms of CPU with ~25 context switches per stream, and
the same work done inline ~140 ms with none. Here ``preload`` does all of one stream's disk
work in one call, and one thread calls it for every stream in turn; the loop then takes the
results over without a hop.

Nothing here decides anything a normal open would not: a stream whose metadata or store
cannot be read is marked offline with the same reason, and an unexpected error is kept for
the loop to raise once the other streams are registered.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any, Protocol

import msgspec

from jetlog.errors import StorageError
from jetlog.log.fileopen import RecoveredDir, recover_dir

log = logging.getLogger("jetlog.streams")


class StreamMeta(msgspec.Struct):
    """``stream.json``: the normalised config (JSON kept raw) and the creation time."""

    config: msgspec.Raw
    created: int


# Built at import, in the importing thread: msgspec 0.22 builds a Struct type's decoding info on
# its first decode, and two load threads doing that at once crashed a start (SIGSEGV).
_META = msgspec.json.Decoder(StreamMeta)


class Discardable(Protocol):
    """Something read ahead that holds an fd until it is taken over or discarded."""

    def discard(self) -> None: ...


class Preloaded:
    """One stream directory read ahead: its config, its recovered store (file streams) and its
    consumer-state log, or why it is offline, or the unexpected error its reading raised.
    Whoever holds it passes the parts on or calls ``discard``."""

    __slots__ = ("config", "consumers", "created", "failure", "name", "offline", "store")

    def __init__(self, name: str) -> None:
        self.name = name
        self.config: Any = None
        self.created = 0
        self.store: RecoveredDir | None = None
        self.consumers: Discardable | None = None
        self.offline: Exception | None = None  # why it cannot be opened
        self.failure: Exception | None = None

    def discard(self) -> None:
        """Release what was not taken over (directory locks, open files). Idempotent."""
        store, self.store = self.store, None
        consumers, self.consumers = self.consumers, None
        try:
            if store is not None:
                store.discard()
        finally:
            if consumers is not None:
                consumers.discard()


def preload(
    root: str,
    names: list[str],
    out: list[Preloaded],
    *,
    decode_config: Callable[[bytes], Any],
    recover_args: Callable[[Any], dict[str, Any] | None],
    read_consumers: Callable[[str], Discardable] | None,
) -> None:
    """Read the stream directories ``names`` under ``root`` in turn, appending one
    ``Preloaded`` per directory that has a ``stream.json`` to ``out`` (blocking: a thread).
    ``out`` is the caller's so that it can release what was read if this stops half way.
    ``recover_args(config)``: the ``recover_dir`` arguments of a file stream, None for one
    without a store on disk; ``read_consumers(directory)``: reads a consumer-state log."""
    for name in names:
        sdir = os.path.join(root, name)
        meta_path = os.path.join(sdir, "stream.json")
        if not os.path.isfile(meta_path):
            continue
        p = Preloaded(name)
        out.append(p)
        try:
            with open(meta_path, "rb") as f:
                meta = _META.decode(f.read())
            p.config = decode_config(bytes(meta.config))
            p.created = meta.created
            args = recover_args(p.config)
            if args is None:
                continue
            p.store = recover_dir(os.path.join(sdir, "log"), **args)
            if read_consumers is not None:
                p.consumers = read_consumers(os.path.join(sdir, "consumers"))
        except (OSError, msgspec.DecodeError, msgspec.ValidationError, StorageError) as e:
            p.offline = e
            p.discard()
        except Exception as e:  # kept for the loop to raise once the others are registered
            p.failure = e
            p.discard()
