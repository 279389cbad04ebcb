"""jetlog.log: per-stream message stores.

``FileStore`` (segmented, checksummed log with group commit, recovery, quarantine, retention and
compaction) and ``MemStore`` (same semantics in memory) implement the ``MsgStore`` contract of
``jetlog.log.store``, and its ``ReplicaLog`` contract (the storage side of leader/follower
replication; ``MemStore(replicated=True)``). ``Syncer`` runs the file stores' fsyncs in a helper
process.
"""

from jetlog.log.filestore import DEFAULT_SEGMENT_BYTES, FileStore
from jetlog.log.memstore import MemStore
from jetlog.log.segment import OsIO, SegmentIO
from jetlog.log.store import (
    NO_FLOOR,
    BatchInputError,
    CommitListener,
    EpochError,
    MsgStore,
    OutOfRangeError,
    Pos,
    PositionError,
    RecoveryReport,
    ReplicaError,
    ReplicaLog,
    ReplicaRead,
    StoredMsg,
    StoreState,
    SubjectState,
)
from jetlog.log.syncer import Syncer, SyncService

__all__ = [
    "DEFAULT_SEGMENT_BYTES",
    "NO_FLOOR",
    "BatchInputError",
    "CommitListener",
    "EpochError",
    "FileStore",
    "MemStore",
    "MsgStore",
    "OsIO",
    "OutOfRangeError",
    "Pos",
    "PositionError",
    "RecoveryReport",
    "ReplicaError",
    "ReplicaLog",
    "ReplicaRead",
    "SegmentIO",
    "StoreState",
    "StoredMsg",
    "SubjectState",
    "SyncService",
    "Syncer",
]
