"""The data directory's format marker: ``<data_dir>/FORMAT`` says which on-disk layout the
directory holds and which jetlog wrote it last.

Every file inside carries its own magic and version (record batches ``JLB``, index ``JLX``,
epoch checkpoints ``JLE``, metadata commands ``SCHEMA_VERSION``), but a file of an unknown
version looks like corruption to the recovery scan, which would quarantine it. The marker is
checked first, before anything is opened: a directory written by a newer format is refused with
a message saying so, and nothing in it is touched. A directory without a marker (a new one, or
one written before the marker existed) holds format 1 and gets the marker.

Upgrades that change a format bump ``FORMAT_VERSION`` and migrate at this point, then rewrite
the marker; until then the older jetlog keeps refusing the directory instead of damaging it.
"""

from __future__ import annotations

import os

import msgspec

from jetlog import __version__
from jetlog.errors import StorageError
from jetlog.fsutil import write_atomic

FORMAT_VERSION = 1
"""The on-disk layout this jetlog reads and writes."""

MARKER = "FORMAT"


class Marker(msgspec.Struct, kw_only=True):
    """The marker file's content."""

    format: int
    jetlog: str = ""


# Built at import (see ``api.models._STORED_CONFIG``: a first decode in two threads at once can
# crash msgspec 0.22).
_MARKER = msgspec.json.Decoder(Marker)


def check_and_mark(data_dir: str) -> Marker:
    """Refuse a directory of a newer format; otherwise (re)write the marker with this version.
    Blocking (small file I/O and fsyncs): call it before the loop serves anything, or in a
    thread. Raises ``StorageError`` with an operator's explanation."""
    os.makedirs(data_dir, exist_ok=True)
    path = os.path.join(data_dir, MARKER)
    found: Marker | None = None
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        raw = b""
    except OSError as e:
        raise StorageError(f"cannot read {path}: {e}") from None
    if raw:
        try:
            found = _MARKER.decode(raw)
        except msgspec.DecodeError as e:
            raise StorageError(
                f"{path} is not a jetlog format marker ({e}); refusing to use {data_dir} "
                "(remove the file only if this directory really holds jetlog data)"
            ) from None
        if found.format > FORMAT_VERSION:
            raise StorageError(
                f"{data_dir} holds on-disk format {found.format} (last written by jetlog "
                f"{found.jetlog or 'unknown'}); this jetlog {__version__} reads format "
                f"{FORMAT_VERSION} at most. Run the newer jetlog on it, or give this one another "
                "data_dir; nothing was changed"
            )
        if found.format < 1:
            raise StorageError(f"{path}: impossible format {found.format}")
    mine = Marker(format=FORMAT_VERSION, jetlog=__version__)
    if found != mine:
        _write_atomic(path, msgspec.json.encode(mine) + b"\n")
    return mine


def _write_atomic(path: str, data: bytes) -> None:
    try:
        write_atomic(path, data)
    except OSError as e:
        raise StorageError(f"cannot write {path}: {e}") from None
