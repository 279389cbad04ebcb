"""The metadata Raft's files: checksummed journal (torn tails, truncation, compaction), term/vote
meta, snapshot files and the node identity guard."""

from __future__ import annotations

import os

import pytest

from jetlog.cluster.journal import MAGIC, RaftJournal
from jetlog.cluster.raftfiles import (
    MetaIdentityError,
    MetaRaftError,
    check_identity,
    raft_paths,
    read_dump,
    write_dump,
    write_identity,
)


def fill(j: RaftJournal, first: int, last: int, term: int = 1) -> None:
    for i in range(first, last + 1):
        j.add(f"cmd-{i}".encode(), i, term)


def test_entries_survive_reopen_as_tuples(tmp_path) -> None:  # type: ignore[no-untyped-def]
    p = str(tmp_path / "journal")
    j = RaftJournal(p)
    fill(j, 1, 5)
    j._destroy()
    j2 = RaftJournal(p)
    assert len(j2) == 5
    assert j2[0] == (b"cmd-1", 1, 1) and type(j2[0]) is tuple
    assert j2[-1] == (b"cmd-5", 5, 1)
    assert j2[1:3] == [(b"cmd-2", 2, 1), (b"cmd-3", 3, 1)]


@pytest.mark.parametrize("damage", ["cut_header", "cut_body", "flip_crc", "zero_tail"])
def test_a_torn_tail_is_dropped_at_open(tmp_path, damage: str) -> None:  # type: ignore[no-untyped-def]
    p = str(tmp_path / "journal")
    j = RaftJournal(p)
    fill(j, 1, 4)
    good_end = j._offsets[3]  # start of the last record
    j._destroy()
    size = os.path.getsize(p)
    with open(p, "r+b") as f:
        if damage == "cut_header":
            f.truncate(good_end + 5)
        elif damage == "cut_body":
            f.truncate(size - 2)
        elif damage == "flip_crc":
            f.seek(good_end + 4)
            b = f.read(1)
            f.seek(good_end + 4)
            f.write(bytes([b[0] ^ 0xFF]))
        else:
            f.seek(size - 3)
            f.write(b"\0\0\0")
    j2 = RaftJournal(p)
    assert [e[1] for e in j2[:]] == [1, 2, 3]
    assert os.path.getsize(p) == good_end  # the damaged bytes are gone from the file too
    j2.add(b"again", 4, 2)
    j2._destroy()
    assert RaftJournal(p)[-1] == (b"again", 4, 2)


def test_an_index_gap_ends_the_valid_log(tmp_path) -> None:  # type: ignore[no-untyped-def]
    p = str(tmp_path / "journal")
    j = RaftJournal(p)
    fill(j, 1, 3)
    j.add(b"gap", 9, 1)  # never done by pysyncobj; a stale block must not be taken as log
    j._destroy()
    assert [e[1] for e in RaftJournal(p)[:]] == [1, 2, 3]


def test_delete_from_and_to(tmp_path) -> None:  # type: ignore[no-untyped-def]
    p = str(tmp_path / "journal")
    j = RaftJournal(p)
    fill(j, 1, 10)
    j.deleteEntriesFrom(7)  # keep list positions 0..6 = indexes 1..7
    fill(j, 8, 9, term=2)
    j.deleteEntriesTo(3)  # drop indexes 1..3
    assert [(e[1], e[2]) for e in j[:]] == [(4, 1), (5, 1), (6, 1), (7, 1), (8, 2), (9, 2)]
    j.add(b"x", 10, 2)
    j._destroy()
    j2 = RaftJournal(p)
    assert [(e[1], e[2]) for e in j2[:]] == [(4, 1), (5, 1), (6, 1), (7, 1), (8, 2), (9, 2), (10, 2)]
    j2.clear()
    assert len(j2) == 0
    j2._destroy()
    assert len(RaftJournal(p)) == 0
    assert not os.path.exists(p + ".tmp")


def test_term_vote_and_commit_index_persist(tmp_path) -> None:  # type: ignore[no-untyped-def]
    p = str(tmp_path / "journal")
    j = RaftJournal(p)
    fill(j, 1, 6)
    j.setCurrentTerm(4, "127.0.0.1:9")
    j.setRaftCommitIndex(5)
    j.onOneSecondTimer()
    j._destroy()
    j2 = RaftJournal(p)
    assert (j2.getCurrentTerm(), j2.getVotedForNodeId(), j2.getRaftCommitIndex()) == (4, "127.0.0.1:9", 5)
    j2.deleteEntriesFrom(2)  # log now ends at index 2: a stored commit index beyond it is clamped
    assert j2.getRaftCommitIndex() == 2


def test_open_finishes_an_interrupted_compaction(tmp_path) -> None:  # type: ignore[no-untyped-def]
    p = str(tmp_path / "journal")
    j = RaftJournal(p)
    fill(j, 1, 8)
    j._destroy()
    # The snapshot covers up to index 5 (prev = entry 4): the log must then start at 4, tail kept.
    j2 = RaftJournal(p, compact_to=(b"cmd-4", 4, 1))
    assert [e[1] for e in j2[:]] == [4, 5, 6, 7, 8]
    # A prev of another term is not ours to cut at: left alone (pysyncobj then resets the log).
    j3 = RaftJournal(str(tmp_path / "j3"))
    fill(j3, 1, 3)
    j3._destroy()
    assert len(RaftJournal(str(tmp_path / "j3"), compact_to=(b"cmd-2", 2, 7))) == 3


def test_a_foreign_file_is_refused(tmp_path) -> None:  # type: ignore[no-untyped-def]
    p = tmp_path / "journal"
    p.write_bytes(b"PYSYNCOBJ" + b"\0" * 40)
    with pytest.raises(OSError, match="bad magic"):
        RaftJournal(str(p))
    assert MAGIC != b"PYSYNCOBJ"


# ------------------------------------------------------------------ snapshot files
def test_dump_round_trip_gives_tuples(tmp_path) -> None:  # type: ignore[no-untyped-def]
    p = str(tmp_path / "dump")
    write_dump(p, b"state", (b"last", 9, 2), (b"prev", 8, 2), ["b:2", "a:1"])
    state, last, prev, members = read_dump(p, sync=True)
    assert (state, last, prev, members) == (b"state", (b"last", 9, 2), (b"prev", 8, 2), ["a:1", "b:2"])
    # pysyncobj compares these with its (tuple) log entries by `!=`; a list would never match.
    assert type(last) is tuple and type(prev) is tuple


def test_damaged_dump_is_refused(tmp_path) -> None:  # type: ignore[no-untyped-def]
    p = tmp_path / "dump"
    write_dump(str(p), b"state", (b"l", 2, 1), (b"p", 1, 1), [])
    data = bytearray(p.read_bytes())
    data[-1] ^= 1
    p.write_bytes(bytes(data))
    with pytest.raises(MetaRaftError, match="checksum"):
        read_dump(str(p))
    p.write_bytes(b"junk")
    with pytest.raises(MetaRaftError, match="not a jetlog"):
        read_dump(str(p))


# ------------------------------------------------------------------- identity guard
def test_identity_guard(tmp_path) -> None:  # type: ignore[no-untyped-def]
    d = str(tmp_path / "node")
    assert check_identity(d, "c1", "n1", rejoin=False) is True  # first start
    ident, raft_dir, journal, _ = raft_paths(d)
    assert not os.path.exists(ident)  # written by the caller once the Raft log exists
    write_identity(d, "c1", "n1")
    assert os.path.exists(ident)
    with pytest.raises(MetaIdentityError, match="missing"):
        check_identity(d, "c1", "n1", rejoin=False)  # IDENTITY but no Raft files: lost state
    assert check_identity(d, "c1", "n1", rejoin=True) is False  # the operator says so
    os.makedirs(raft_dir)
    RaftJournal(journal)._destroy()
    check_identity(d, "c1", "n1", rejoin=False)
    with pytest.raises(MetaIdentityError, match="belongs to node 'n1'"):
        check_identity(d, "c1", "n2", rejoin=True)
    with pytest.raises(MetaIdentityError, match="cluster 'c1'"):
        check_identity(d, "other", "n1", rejoin=False)
    os.remove(ident)
    with pytest.raises(MetaIdentityError, match="IDENTITY is missing"):
        check_identity(d, "c1", "n1", rejoin=False)
