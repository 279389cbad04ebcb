"""Index files of version 3 carry a CRC32C of their segment's content: a clean reopen checks one
crc per segment (over a mapping of the file) instead of every batch, damage is still found (and
handled as before), an index written over already-damaged bytes never vouches for them, and
version-2 index files left by an older jetlog are still used."""

from __future__ import annotations

import glob
import struct
from pathlib import Path

import pytest
from crc32c import crc32c

from jetlog.log import FileStore
from jetlog.log import segment as segmod
from jetlog.log.idxfile import IDX, IDX_CONTENT, IDX_HAS_CONTENT_CRC, IDX_SUMS, SUM_CHUNK, decode_idx
from jetlog.wire import records as rc
from tests.unit.test_store_file import _fill, _logs, _open, _read, _write
from tests.unit.test_store_model import Model, check_store


def _idx_of(log: str) -> segmod.SegmentData | None:
    base = int(Path(log).name[:-4])
    return decode_idx(_read(log[:-4] + ".idx"), base)


def _flip_a_byte(log: str) -> None:
    raw = bytearray(_read(log))
    raw[len(raw) // 2] ^= 0x04
    _write(log, bytes(raw))


def check_quarantined(store: FileStore, model: Model) -> None:
    """The open reported a loss and quarantined a segment; the store is the model without the
    lost messages."""
    lost = store.recovery.lost_seqs
    assert lost and store.recovery.quarantined
    for s in lost:
        model.remove(s)
    check_store(store, model)


async def _filled(tmp_path: Path, n: int = 120) -> Model:
    store = await _open(tmp_path)
    model = Model()
    for _ in range(n // 10):
        await _fill(store, model, 10)
        await store.flush()  # many batches per segment
    await store.close()
    return model


async def test_clean_reopen_checks_one_crc_per_segment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = await _filled(tmp_path)
    logs = _logs(tmp_path)
    assert len(logs) >= 3
    batches = 0
    for log in logs:
        d = _idx_of(log)
        assert d is not None and d.content_crc == crc32c(_read(log)[: d.covered])
        batches += len(d.batches)
    assert batches > len(logs)
    checked: list[int] = []
    real = rc.check_body

    def counting(buf: bytes, off: int, h: rc.BatchHeader) -> memoryview:
        checked.append(off)
        return real(buf, off, h)

    monkeypatch.setattr(rc, "check_body", counting)
    from jetlog.log import recovery

    whole: list[str] = []
    real_read = recovery.read_file

    def reading(io: object, path: str) -> bytes:
        whole.append(path)
        return real_read(io, path)  # type: ignore[arg-type]

    monkeypatch.setattr(recovery, "read_file", reading)
    store = await _open(tmp_path)
    try:
        assert store.recovery.rebuilt_indexes == 0 and store.recovery.lost_seqs == ()
        assert checked == []  # no batch was decoded and checked one by one
        assert whole == []  # the crc is taken over a mapping: no segment read into memory
        check_store(store, model)
    finally:
        await store.close()


async def test_a_flipped_byte_is_still_found(tmp_path: Path) -> None:
    model = await _filled(tmp_path)
    _flip_a_byte(_logs(tmp_path)[0])
    store = await _open(tmp_path)
    try:
        check_quarantined(store, model)
    finally:
        await store.close()


def _as_version(blob: bytes, version: int) -> bytes:
    """The same index as an older jetlog wrote it: version 3 had no size sums, version 2 no
    content crc field either."""
    head = list(IDX.unpack_from(blob, 0))
    assert head[2] == 4
    _chunk, n_sums = IDX_SUMS.unpack_from(blob, IDX.size + IDX_CONTENT.size)
    head[2] = version
    crc_field = blob[IDX.size : IDX.size + IDX_CONTENT.size]
    if version == 2:
        head[3] &= ~IDX_HAS_CONTENT_CRC
        crc_field = b""
    rest = blob[IDX.size + IDX_CONTENT.size + IDX_SUMS.size : len(blob) - 8 * n_sums]
    tail = IDX.pack(*head)[8:] + crc_field
    return head[0] + struct.pack("<I", crc32c(rest, crc32c(tail))) + tail + rest


def _as_version_2(blob: bytes) -> bytes:
    # A sealed segment's index is not rewritten by an open and close: it may be one already.
    return blob if IDX.unpack_from(blob, 0)[2] == 2 else _as_version(blob, 2)


@pytest.mark.parametrize("version", [2, 3])
async def test_older_index_files_are_still_used(tmp_path: Path, version: int) -> None:
    model = await _filled(tmp_path)
    for p in glob.glob(str(tmp_path / "*.idx")):
        v4 = decode_idx(_read(p), int(Path(p).name[:-4]))
        assert v4 is not None and v4.size_sums is not None and v4.sum_chunk == SUM_CHUNK
        assert list(v4.size_sums) == [
            sum(v4.size[c : c + SUM_CHUNK]) for c in range(0, len(v4.seqs), SUM_CHUNK)
        ]
        _write(p, _as_version(_read(p), version))
        d = decode_idx(_read(p), int(Path(p).name[:-4]))
        # Version 3 had no size sums (the index sums its columns), version 2 no content crc.
        assert d is not None and d.size_sums is None
        assert d.content_crc == (v4.content_crc if version == 3 else None)
    store = await _open(tmp_path)
    try:
        assert store.recovery.rebuilt_indexes == 0
        check_store(store, model)
    finally:
        await store.close()
    if version == 3:
        return
    # A version-2 index whose segment was damaged is found batch by batch, as before.
    first = _logs(tmp_path)[0]
    _write(first[:-4] + ".idx", _as_version_2(_read(first[:-4] + ".idx")))
    _flip_a_byte(first)
    store = await _open(tmp_path)
    try:
        assert store.recovery.lost_seqs and store.recovery.quarantined
    finally:
        await store.close()


async def _check_index_and_reopen(tmp_path: Path, log: str, model: Model) -> None:
    """``log``'s index file carries the CRC of the file's content, and the next open uses every
    index file (nothing rebuilt, nothing lost) and holds the model."""
    d = _idx_of(log)
    assert d is not None and d.content_crc == crc32c(_read(log)[: d.covered])
    store = await _open(tmp_path)
    try:
        assert store.recovery.rebuilt_indexes == 0 and store.recovery.lost_seqs == ()
        check_store(store, model)
    finally:
        await store.close()


def _count_read_backs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Names of the segments read back for an index file's content CRC from now on."""
    from jetlog.log import maintenance

    read_back: list[str] = []
    real = maintenance.checked_content_crc

    def counting(io: object, path: str, *a: object) -> int | None:
        read_back.append(Path(path).name)
        return real(io, path, *a)  # type: ignore[arg-type]

    monkeypatch.setattr(maintenance, "checked_content_crc", counting)
    return read_back


async def test_segments_written_here_are_not_read_back_for_their_crc(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A segment this process created and wrote from its first byte gets the CRC of the bytes
    as written: its index is correct without reading the file back. So does the first segment,
    which the store's first open created empty."""
    read_back = _count_read_backs(monkeypatch)
    model = await _filled(tmp_path)
    logs = _logs(tmp_path)
    assert len(logs) >= 3
    for log in logs[:-1]:  # sealed: each has its index file, with the right content crc
        d = _idx_of(log)
        assert d is not None and d.content_crc == crc32c(_read(log)[: d.covered])
    assert read_back == []
    # Damage after the write is still found: the written crc does not match the file.
    _flip_a_byte(logs[1])
    store = await _open(tmp_path)
    try:
        assert store.recovery.lost_seqs and store.recovery.quarantined
        for s in store.recovery.lost_seqs:
            model.remove(s)
        check_store(store, model)
    finally:
        await store.close()


async def test_a_writer_found_intact_is_not_read_back_and_an_unchanged_index_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer segment found on disk with an index vouching for all of it keeps that CRC as
    its running CRC: appends extend it and the index written at close needs no read-back.
    Closing a store that did not change leaves its index file as it was (no rewrite)."""
    model = await _filled(tmp_path)
    read_back = _count_read_backs(monkeypatch)
    writer = _logs(tmp_path)[-1]
    idx_path = writer[:-4] + ".idx"
    store = await _open(tmp_path)
    await store.close()  # no change
    assert read_back == []
    before = Path(idx_path).stat()
    store = await _open(tmp_path)
    await store.close()
    after = Path(idx_path).stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns), "rewritten"
    store = await _open(tmp_path)
    try:
        await _fill(store, model, 3)
        await store.flush()
    finally:
        await store.close()
    assert read_back == []
    assert Path(idx_path).stat().st_ino != before.st_ino
    await _check_index_and_reopen(tmp_path, writer, model)


async def test_a_close_encodes_the_writers_index_only_when_it_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store closed with its writer segment as the index file found at open described it
    does not even build the index (no column copies, no thread): only a change, an index of
    an older format, or a new epoch make it encode one."""
    from jetlog.log import fileclose

    model = await _filled(tmp_path)
    built: list[int] = []
    real = fileclose.idx_snapshot

    def counting(store: object, seg: object) -> object:
        built.append(1)
        return real(store, seg)  # type: ignore[arg-type]

    monkeypatch.setattr(fileclose, "idx_snapshot", counting)
    writer = _logs(tmp_path)[-1]
    idx_path = writer[:-4] + ".idx"
    for _ in range(2):
        store = await _open(tmp_path)
        await store.close()
    assert built == []
    # A change: the index is built and describes the new bytes.
    store = await _open(tmp_path)
    try:
        await _fill(store, model, 2)
        await store.flush()
    finally:
        await store.close()
    assert len(built) == 1
    d = _idx_of(writer)
    assert d is not None and d.covered == len(_read(writer)) and d.size_sums is not None
    # An index of the previous format is upgraded by the next close.
    _write(idx_path, _as_version(_read(idx_path), 3))
    store = await _open(tmp_path)
    await store.close()
    assert len(built) == 2 and IDX.unpack_from(_read(idx_path), 0)[2] == 4
    # A new epoch (a cluster leader's) is recorded even without new messages.
    store = await _open(tmp_path)
    await store.begin_epoch(store.epoch + 1)
    epoch = store.epoch
    await store.close()
    assert len(built) == 3
    d = _idx_of(writer)
    assert d is not None and d.epoch == epoch
    store = await _open(tmp_path)
    try:
        assert store.recovery.rebuilt_indexes == 0 and store.epoch == epoch
        check_store(store, model)
    finally:
        await store.close()


@pytest.mark.parametrize("tail", ["none", "torn"])
async def test_a_writer_recovered_by_a_scan_rolls_without_a_read_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tail: str
) -> None:
    """After a crash the writer segment has no index file and is scanned at open, every
    batch's CRC checked (a torn tail cut): the running CRC starts from those checked bytes, so
    when the segment rolls its index is written without reading the file back, with the CRC
    of the file's content."""
    model = await _filled(tmp_path, 40)
    writer = _logs(tmp_path)[-1]
    Path(writer[:-4] + ".idx").unlink()  # as a kill -9 leaves the writer
    if tail == "torn":
        with open(writer, "ab") as f:  # half a batch header: an unsynced write cut short
            f.write(rc.encode_batch([], base_seq=model.last_seq, last_seq=model.last_seq, last_ts=1)[:20])
    read_back = _count_read_backs(monkeypatch)
    store = await _open(tmp_path)
    try:
        assert store.recovery.rebuilt_indexes == 1 and store.recovery.lost_seqs == ()
        assert store.recovery.truncated_bytes == (20 if tail == "torn" else 0)
        for _ in range(12):  # past the segment size: the scanned writer rolls
            await _fill(store, model, 10)
            await store.flush()
        check_store(store, model)
    finally:
        await store.close()
    assert read_back == []
    assert writer in _logs(tmp_path)[:-1]
    await _check_index_and_reopen(tmp_path, writer, model)
