"""Index columns recovered from index files are views of a read-only mapping (``map_idx``):
they are served, never written, hold no file descriptor, survive the file being replaced, and
the block that appends go to owns its columns."""

from __future__ import annotations

import builtins
import gc
import os
from pathlib import Path

import pytest

from jetlog.log import idxfile as idxfile_mod
from jetlog.log import index as index_mod
from jetlog.log import segblocks as segblocks_mod
from jetlog.log.columns import extend_col, owned
from jetlog.log.filestore import FileStore
from jetlog.log.idxfile import decode_idx, map_idx
from jetlog.log.mapfile import map_file
from tests.unit.test_store_file import _logs, _open, _read
from tests.unit.test_store_model import Model, check_store


@pytest.fixture(autouse=True)
def _small_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    # Several blocks per segment, so that sealed, middle and last blocks all exist.
    monkeypatch.setattr(index_mod, "BLOCK_MAX", 16)


def _fds() -> int:  # open descriptors of this process
    return len(os.listdir("/proc/self/fd"))


def _mapped(path: str) -> bool:
    with open("/proc/self/maps") as f:
        return any(line.rstrip().endswith(path) for line in f)


async def _filled(
    path: Path, n: int, model: Model, subjects: tuple[str, ...] = ("a.b",), ts0: int = 1000
) -> None:
    st = await _open(path)
    try:
        for i in range(n):
            subj = subjects[i % len(subjects)]
            data = f"{model.last_seq + 1}".encode() * 5
            assert st.append(subj, b"", data, ts0 + i) == model.append(subj, b"", data, ts0 + i)
    finally:
        await st.close()


async def test_reopened_columns_are_views_and_the_appending_block_owns_its_own(tmp_path: Path) -> None:
    model = Model()
    await _filled(tmp_path, 400, model, ("a.b", "a.c", "x.y"))
    assert len(_logs(tmp_path)) >= 3
    st = await _open(tmp_path, lazy_verify=True)
    try:
        blocks = st._ix.blocks
        views = [b for b in blocks if isinstance(b.seqs, memoryview)]
        assert len(views) >= len(blocks) - 1 >= 3
        for b in views:
            assert all(
                isinstance(c, memoryview) and c.readonly for c in (b.seqs, b.ts, b.sid, b.size, b.pos, b.aux)
            )
        last = blocks[-1]
        assert last.seg is st._seg and all(
            not isinstance(c, memoryview)
            for c in (last.seqs, last.ts, last.sid, last.size, last.pos, last.aux)
        )
        check_store(st, model)
        # Appends fill the last block and roll on into new blocks and segments.
        for i in range(300):
            data = b"n%d" % i
            assert st.append("a.b", b"", data, 5000 + i) == model.append("a.b", b"", data, 5000 + i)
        check_store(st, model)
        # Removals and a purge of a subject reach entries in views (liveness is not a view).
        for seq in (2, 17, 33, 250):
            assert st.remove(seq) == model.remove(seq)
        assert st.purge("x.y") == model.purge("x.y")
        check_store(st, model)
        await st.compact()
        check_store(st, model)
    finally:
        await st.close()
    st = await _open(tmp_path)
    try:
        check_store(st, model)
    finally:
        await st.close()


async def test_views_are_read_only_and_hold_no_descriptor(tmp_path: Path) -> None:
    model = Model()
    await _filled(tmp_path, 300, model)
    idx = _logs(tmp_path)[0][:-4] + ".idx"
    fds = _fds()
    view = map_file(idx)
    assert view is not None and _fds() == fds, "a mapping kept a file descriptor"
    assert bytes(view) == _read(idx)
    with pytest.raises(TypeError):
        view[0] = 0
    d = map_idx(idx, int(Path(idx).name[:-4]))
    assert d is not None and isinstance(d.seqs, memoryview)
    with pytest.raises(TypeError):
        d.seqs[0] = 7
    # The same content as a parse of the file's bytes.
    full = decode_idx(_read(idx), d.base)
    assert full is not None
    for col in ("seqs", "ts", "pos", "aux", "size", "lsid"):
        assert list(getattr(d, col)) == list(getattr(full, col)), col
    # Released with its last view.
    del view, d
    gc.collect()
    assert not _mapped(idx)


async def test_a_mapping_keeps_the_file_it_was_made_of(tmp_path: Path) -> None:
    model = Model()
    await _filled(tmp_path, 300, model)
    st = await _open(tmp_path, lazy_verify=True)
    try:
        first = _logs(tmp_path)[0]
        idx = first[:-4] + ".idx"
        before = _read(idx)
        # Replaced by a rename (what every writer of index files does) and then unlinked: the
        # store keeps serving from what it mapped.
        tmp = idx + ".tmp"
        with open(tmp, "wb") as f:
            f.write(b"\xff" * len(before))
        os.replace(tmp, idx)
        check_store(st, model)
        os.unlink(idx)
        check_store(st, model)
    finally:
        await st.close()


def test_column_helpers_copy_views_once() -> None:
    from array import array

    src = array("Q", range(10))
    view = memoryview(src.tobytes()).cast("Q")
    a = owned(view, "Q")  # type: ignore[arg-type]
    assert isinstance(a, array) and list(a) == list(range(10))
    assert owned(src, "Q") is src
    dst = array("Q", [99])
    extend_col(dst, view)  # type: ignore[arg-type]
    extend_col(dst, src)
    assert list(dst) == [99, *range(10), *range(10)]


async def test_store_with_many_segments_opens_without_descriptors_per_index(tmp_path: Path) -> None:
    model = Model()
    await _filled(tmp_path, 1500, model)
    n = len(_logs(tmp_path))
    assert n >= 10
    st: FileStore = await _open(tmp_path, lazy_verify=True)
    try:
        check_store(st, model)
        mapped = [p for p in _logs(tmp_path) if _mapped(p[:-4] + ".idx")]
        assert len(mapped) >= n - 1
        # Every index file is mapped, and no descriptor refers to one.
        targets = []
        for fd in os.listdir("/proc/self/fd"):
            try:
                targets.append(os.readlink(f"/proc/self/fd/{fd}"))
            except OSError:
                continue  # closed meanwhile (the listing's own descriptor)
        assert not [t for t in targets if t.endswith(".idx")]
    finally:
        await st.close()


async def test_blocks_take_their_byte_counts_from_the_index_files_sums(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Index files written here carry one size sum per block (16 records, as the blocks).
    monkeypatch.setattr(idxfile_mod, "SUM_CHUNK", 16)
    model = Model()
    await _filled(tmp_path, 400, model)  # one subject: its table has one name
    summed: list[int] = []

    def counting(col: object, *a: int) -> int:
        summed.append(1)
        return builtins.sum(col, *a)  # type: ignore[call-overload, no-any-return]

    monkeypatch.setattr(segblocks_mod, "sum", counting, raising=False)
    st = await _open(tmp_path, lazy_verify=True)
    try:
        assert not summed  # every block's bytes came from a file
        assert len(st._ix.blocks) >= 20
        for b in st._ix.blocks:
            assert b.live_bytes == builtins.sum(b.size)
        check_store(st, model)
        for seq in (3, 40, 41, 399):
            assert st.remove(seq) == model.remove(seq)
        check_store(st, model)
    finally:
        await st.close()
    # With removals recorded in the log, blocks are summed again (the sums count dead entries).
    st = await _open(tmp_path, lazy_verify=True)
    try:
        assert summed
        for b in st._ix.blocks:
            assert b.live_bytes == builtins.sum(s for s, alive in zip(b.size, b.live, strict=True) if alive)
        check_store(st, model)
    finally:
        await st.close()
    # Sums of another chunk length than the blocks' are not used.
    monkeypatch.setattr(index_mod, "BLOCK_MAX", 32)
    summed.clear()
    st = await _open(tmp_path, lazy_verify=True)
    try:
        assert summed
        check_store(st, model)
    finally:
        await st.close()


def _lazy_subjects(st: FileStore) -> dict[int, int]:
    """Subject id -> how many mapped views its sequences still wait in."""
    return {sid: len(v) for sid, v in st._ix.subjects._lazy.items()}


@pytest.mark.parametrize(
    "first_op",
    [
        "read",
        "append",
        "remove_front",
        "remove_middle",
        "purge_subject",
        "purge_below",
        "purge_all",
        "remove_last",
    ],
)
async def test_subject_sequences_stay_mapped_until_first_used(tmp_path: Path, first_op: str) -> None:
    model = Model()
    # Segments of one subject each (the others' segments mix two): the one-subject runs are
    # kept as views of the index files until the subject is first read or changed.
    await _filled(tmp_path, 300, model, ("a.b",))
    await _filled(tmp_path, 60, model, ("x.y", "x.z"), ts0=2000)
    await _filled(tmp_path, 200, model, ("a.b",), ts0=3000)
    st = await _open(tmp_path, lazy_verify=True)
    try:
        subj = st._ix.subjects
        sid = subj.ids["a.b"]
        lazy = _lazy_subjects(st)
        assert lazy.get(sid, 0) >= 10 and subj.live == 3
        assert not subj.seqs[sid] or sid in lazy  # nothing copied but what appends go to
        assert st.state().num_subjects == 3 and subj.has_live(sid) and sid in _lazy_subjects(st)
        if first_op == "read":
            assert st.subjects_state("a.b") == model.subjects_state("a.b")
        elif first_op == "append":
            for i in range(40):
                assert st.append("a.b", b"", b"n%d" % i, 9000 + i) == model.append(
                    "a.b", b"", b"n%d" % i, 9000 + i
                )
            assert sid in _lazy_subjects(st)  # appends do not copy the views in
        elif first_op == "remove_front":
            assert st.remove(1) == model.remove(1)
        elif first_op == "remove_middle":
            assert st.remove(150) == model.remove(150)
        elif first_op == "remove_last":
            assert st.remove(model.last_seq) == model.remove(model.last_seq)
        elif first_op == "purge_subject":
            assert st.purge("a.b", keep=5) == model.purge("a.b", keep=5)
        elif first_op == "purge_below":
            assert st.purge(seq=200) == model.purge(seq=200)
        else:
            assert st.purge() == model.purge()
            assert not _lazy_subjects(st) and subj.live == 0
        if first_op != "append":
            assert sid not in _lazy_subjects(st)
        check_store(st, model)
        for i in range(20):
            assert st.append("a.b", b"", b"m%d" % i, 9500 + i) == model.append(
                "a.b", b"", b"m%d" % i, 9500 + i
            )
        check_store(st, model)
    finally:
        await st.close()
    st = await _open(tmp_path, lazy_verify=True)
    try:
        check_store(st, model)
    finally:
        await st.close()
