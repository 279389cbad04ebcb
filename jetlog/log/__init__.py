"""jetlog.log: per-stream message stores.

``FileStore`` (segmented, checksummed log with group commit, recovery, quarantine, retention and
compaction) and ``MemStore`` (same semantics in memory) implement the ``MsgStore`` contract of
``jetlog.log.store``. ``Syncer`` runs the file stores' fsyncs in a helper process.
"""

from jetlog.log.filestore import DEFAULT_SEGMENT_BYTES, FileStore
from jetlog.log.memstore import MemStore
from jetlog.log.segment import OsIO, SegmentIO
from jetlog.log.store import (
    CommitListener,
    MsgStore,
    RecoveryReport,
    StoredMsg,
    StoreState,
    SubjectState,
)
from jetlog.log.syncer import Syncer, SyncService

__all__ = [
    "DEFAULT_SEGMENT_BYTES",
    "CommitListener",
    "FileStore",
    "MemStore",
    "MsgStore",
    "OsIO",
    "RecoveryReport",
    "SegmentIO",
    "StoreState",
    "StoredMsg",
    "SubjectState",
    "SyncService",
    "Syncer",
]
