"""jetlog.cluster: the cluster layer (docs/cluster.md).

Everything here imports eagerly except ``MetaRaft`` (``raft``, the only module that imports
pysyncobj), which loads on first use: code that only reads metadata does not pull pysyncobj in.
"""

from typing import Any

from jetlog.cluster.meta import (
    AlterIsr,
    Barrier,
    Command,
    CreateStream,
    DeleteStream,
    ElectLeader,
    MetaState,
    Result,
    StreamAssignment,
    UpdateStream,
)
from jetlog.cluster.raftfiles import MetaIdentityError, MetaRaftError
from jetlog.cluster.raftloop import (
    Applied,
    LeaderChanged,
    MetaEvent,
    MetaNotLeaderError,
    MetaUnavailableError,
)

__all__ = [
    "AlterIsr",
    "Applied",
    "Barrier",
    "Command",
    "CreateStream",
    "DeleteStream",
    "ElectLeader",
    "LeaderChanged",
    "MetaEvent",
    "MetaIdentityError",
    "MetaNotLeaderError",
    "MetaRaft",
    "MetaRaftError",
    "MetaState",
    "MetaUnavailableError",
    "Result",
    "StreamAssignment",
    "UpdateStream",
]


def __getattr__(name: str) -> Any:
    if name == "MetaRaft":
        from jetlog.cluster.raft import MetaRaft

        return MetaRaft
    raise AttributeError(f"module 'jetlog.cluster' has no attribute {name!r}")
