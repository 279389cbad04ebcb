"""Files of the metadata Raft besides its log: node identity and snapshots (no pysyncobj here).

Layout under the node's data directory::

    IDENTITY          {"cluster": ..., "node": ...}  written once, at the node's first start
    raft/journal      the Raft log (jetlog.cluster.journal)
    raft/journal.meta term, vote, commit index
    raft/dump         the last snapshot (below)

**Identity guard** (``shared/notes/pysyncobj.md`` §3.4, §5.6). Raft cannot tell a member that
lost its log from a new one: two members restarted with empty directories form a majority of
an *empty* cluster, acknowledge writes, and lose them (or the real history) later. So a node
whose IDENTITY says it has been a member before, but whose Raft files are gone, refuses to start
unless the operator says ``rejoin`` (only safe when the other members hold the history and are
healthy, and for one node at a time). A directory of another cluster or node name is refused
too.

**Snapshot file**: ``MAGIC + sha256(payload) + payload``; the payload is msgpack of the state
machine's own snapshot bytes plus pysyncobj's two last log entries (as *tuples* - see
``RaftJournal``) and the member list. The checksum makes a damaged snapshot an error at
start-up rather than a silently different state.
"""

from __future__ import annotations

import hashlib
import os

import msgspec

from jetlog.cluster.journal import Entry
from jetlog.errors import ClusterError
from jetlog.fsutil import fsync_dir, write_atomic

DUMP_MAGIC = b"JLRAFTS1"


class MetaRaftError(ClusterError):
    """The metadata Raft refused to start or to act (bad settings, damaged files, stopped)."""


class MetaIdentityError(MetaRaftError):
    """The data directory does not belong to this node, or its Raft state was lost."""


class _Identity(msgspec.Struct, forbid_unknown_fields=True):
    cluster: str
    node: str


class _Dump(msgspec.Struct, forbid_unknown_fields=True):
    v: int
    state: bytes
    last: tuple[bytes, int, int]
    prev: tuple[bytes, int, int]
    cluster: list[str]


def raft_paths(data_dir: str) -> tuple[str, str, str, str]:
    """(IDENTITY path, raft dir, journal path, dump path) under ``data_dir``."""
    raft_dir = os.path.join(data_dir, "raft")
    return (
        os.path.join(data_dir, "IDENTITY"),
        raft_dir,
        os.path.join(raft_dir, "journal"),
        os.path.join(raft_dir, "dump"),
    )


def check_identity(data_dir: str, cluster: str, node: str, *, rejoin: bool) -> bool:
    """Apply the identity guard (module docstring). True on a first start: the caller writes
    IDENTITY (``write_identity``) once the Raft log exists, so a first start that fails earlier
    (port taken) is not mistaken later for a member that lost its state."""
    ident, raft_dir, journal, dump = raft_paths(data_dir)
    has_raft = os.path.exists(journal) or os.path.exists(dump)
    if os.path.exists(ident):
        with open(ident, "rb") as f:
            try:
                who = msgspec.json.decode(f.read(), type=_Identity)
            except msgspec.DecodeError as e:
                raise MetaIdentityError(
                    f"{ident} is unreadable ({e}); refusing to guess who this node is"
                ) from e
        if (who.cluster, who.node) != (cluster, node):
            raise MetaIdentityError(
                f"{data_dir} belongs to node {who.node!r} of cluster {who.cluster!r}, "
                f"not node {node!r} of cluster {cluster!r}"
            )
        if not has_raft and not rejoin:
            raise MetaIdentityError(
                f"node {node!r} has been a member of cluster {cluster!r} but its Raft state "
                f"({raft_dir}) is missing. Starting it empty could let empty members outvote the "
                "real history. If the other members are healthy, restart this one node with the "
                "rejoin option: it then copies the metadata from the leader."
            )
        return False
    if has_raft:
        raise MetaIdentityError(
            f"{raft_dir} holds Raft state but {ident} is missing; refusing to guess which node this is"
        )
    return True


def write_identity(data_dir: str, cluster: str, node: str) -> None:
    """Write ``data_dir``/IDENTITY durably."""
    ident = raft_paths(data_dir)[0]
    os.makedirs(data_dir, exist_ok=True)
    write_atomic(ident, msgspec.json.encode(_Identity(cluster=cluster, node=node)))


def write_dump(path: str, state: bytes, last: Entry, prev: Entry, cluster: list[str]) -> None:
    """Write a snapshot file (fsynced; pysyncobj renames it into place)."""
    payload = msgspec.msgpack.encode(
        _Dump(v=1, state=state, last=_entry(last), prev=_entry(prev), cluster=sorted(cluster))
    )
    with open(path, "wb") as f:
        f.write(DUMP_MAGIC + hashlib.sha256(payload).digest() + payload)
        f.flush()
        os.fsync(f.fileno())


def read_dump(path: str, *, sync: bool = False) -> tuple[bytes, Entry, Entry, list[str]]:
    """(state bytes, last entry, prev entry, members) of a snapshot file; ``MetaRaftError`` if it
    is damaged. ``sync`` fsyncs it first (a snapshot received from the leader is renamed into
    place without fsync)."""
    with open(path, "rb") as f:
        data = f.read()
        if sync:
            os.fsync(f.fileno())
    if sync:
        fsync_dir(os.path.dirname(os.path.abspath(path)))
    head = len(DUMP_MAGIC)
    if data[:head] != DUMP_MAGIC:
        raise MetaRaftError(f"{path}: not a jetlog metadata snapshot")
    digest, payload = data[head : head + 32], data[head + 32 :]
    if hashlib.sha256(payload).digest() != digest:
        raise MetaRaftError(f"{path}: snapshot checksum mismatch (damaged file)")
    try:
        d = msgspec.msgpack.decode(payload, type=_Dump)
    except msgspec.DecodeError as e:
        raise MetaRaftError(f"{path}: undecodable snapshot: {e}") from e
    # tuple(...) on purpose: pysyncobj compares these with its log entries (tuples) by `!=`.
    return d.state, tuple(d.last), tuple(d.prev), list(d.cluster)  # type: ignore[return-value]


def _entry(e: Entry) -> tuple[bytes, int, int]:
    cmd, idx, term = e
    return (bytes(cmd), int(idx), int(term))
