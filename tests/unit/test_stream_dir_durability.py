"""A new stream's directory and a new consumer-state log are durable where they are created:
every new directory entry is followed by an fsync of the directory that holds it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import jetlog.consumer.store as cstore
import jetlog.fsutil as fsutil
import jetlog.stream.manager as manager
from jetlog.consumer.store import LOG_NAME, ConsumerLog
from jetlog.stream.manager import make_stream_dir


@pytest.fixture
def synced(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, set[str]]]:
    """(directory, its entries at the time) of every directory fsync from now on."""
    out: list[tuple[str, set[str]]] = []
    real = fsutil.fsync_dir

    def recording(path: str) -> None:
        out.append((os.path.abspath(path), set(os.listdir(path or "."))))
        real(path)

    for mod in (fsutil, manager, cstore):
        monkeypatch.setattr(mod, "fsync_dir", recording)
    return out


def test_a_new_stream_directory_is_synced_after_every_entry(
    tmp_path: Path, synced: list[tuple[str, set[str]]]
) -> None:
    root = tmp_path / "streams"
    root.mkdir()
    assert make_stream_dir(str(root), "S", b'{"x":1}', fresh=True, files=True) is False
    sdir = root / "S"
    assert (sdir / "stream.json").read_bytes() == b'{"x":1}'
    assert (sdir / "log").is_dir() and (sdir / "consumers").is_dir()
    # The stream directory after all three entries were made, then its parent for its own.
    assert synced == [(str(sdir), {"log", "consumers", "stream.json"}), (str(root), {"S"})]
    synced.clear()
    # An existing stream (a replica opened again): the metadata is replaced, the parent is
    # not synced again, and the answer says the stream was there.
    assert make_stream_dir(str(root), "S", b'{"x":2}', fresh=False) is True
    assert (sdir / "stream.json").read_bytes() == b'{"x":2}'
    assert synced == [(str(sdir), {"log", "consumers", "stream.json"})]
    synced.clear()
    # A fresh create over leftovers starts from an empty directory (a memory stream's: no
    # log or consumer files).
    (sdir / "log" / "00000000000000000001.log").write_bytes(b"old")
    assert make_stream_dir(str(root), "S", b'{"x":3}', fresh=True) is False
    assert os.listdir(sdir) == ["stream.json"]
    assert synced == [(str(sdir), {"stream.json"}), (str(root), {"S"})]


async def test_a_new_consumer_log_is_synced_into_its_directory(
    tmp_path: Path, synced: list[tuple[str, set[str]]]
) -> None:
    cdir = tmp_path / "S" / "consumers"
    (tmp_path / "S").mkdir()
    lg = await ConsumerLog.open(str(cdir))
    await lg.close()
    assert synced == [(str(tmp_path / "S"), {"consumers"}), (str(cdir), {LOG_NAME})]
    synced.clear()
    lg = await ConsumerLog.open(str(cdir))  # nothing new: nothing to sync
    await lg.close()
    assert synced == []
