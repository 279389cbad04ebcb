"""API endpoints jetlog does not implement, answered with a JetStream error instead of silence.

nats-server 2.15 serves these subjects; a request nobody answers only fails at the client's
timeout. Each handler runs nats-server's early checks in its order (API level, body, names,
stream or consumer lookup), so a malformed request gets the error nats-server sends, and then
refuses with the endpoint's own error code:

* ``STREAM.SNAPSHOT.<s>``: ``10064 snapshot failed: stream snapshots are not supported by jetlog``
* ``STREAM.RESTORE.<s>``: ``10062 restore failed: stream restores are not supported by jetlog``
  (the restore's stream configuration is not validated)
* ``STREAM.CANCEL_MOVE.<s>``: ``10010`` clustering required, as a single nats-server answers
* ``CONSUMER.RESET.<s>.<c>``: ``10204 invalid reset: consumer reset is not supported by jetlog``;
  no reply when the consumer does not exist (nats-server answers from the consumer's own
  subscription only)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from jetlog.api import models as M
from jetlog.api.models_godecode import GoType, decode_go, struct_type
from jetlog.api.models_gojson import GoJSONError
from jetlog.errors import ApiError, E
from jetlog.wire.subjects import is_valid_literal_subject

__all__ = ["STREAM_OPS", "consumer_reset", "stream_op"]

STREAM_OPS = ("SNAPSHOT", "RESTORE", "CANCEL_MOVE")
_T = "io.nats.jetstream.api.v1."

_STR, _BOOL = GoType("string", "string"), GoType("bool", "bool")
_INT, _U64 = GoType("int", "int", 64), GoType("uint", "uint64", 64)
_TIME = GoType("time", "time.Time")
_SNAPSHOT = struct_type(
    "server.JSApiStreamSnapshotRequest",
    {"deliver_subject": _STR, "no_consumers": _BOOL, "chunk_size": _INT, "window_size": _INT, "jsck": _BOOL},
)
_STATE = struct_type(
    "server.StreamState",
    {
        "messages": _U64,
        "bytes": _U64,
        "first_seq": _U64,
        "first_ts": _TIME,
        "last_seq": _U64,
        "last_ts": _TIME,
        "num_subjects": _INT,
        "subjects": GoType("map", "map[string]uint64", elem=_U64),
        "num_deleted": _INT,
        "deleted": GoType("slice", "[]uint64", elem=_U64),
        "lost": GoType(
            "ptr",
            "*server.LostStreamData",
            elem=struct_type(
                "server.LostStreamData", {"msgs": GoType("slice", "[]uint64", elem=_U64), "bytes": _U64}
            ),
        ),
        "consumer_count": _INT,
    },
)
_RESTORE = struct_type(
    "server.JSApiStreamRestoreRequest", {"config": M.go_type_of(M.StreamConfigRequest), "state": _STATE}
)
_RESET = struct_type("server.JSApiConsumerResetRequest", {"seq": _U64})

Reply = Callable[[bytes], None]


def _error(rtype: str, err: ApiError) -> bytes:
    return M.encode_json_ordered({"type": _T + rtype, "error": err.to_dict()})


def _decode(body: bytes, t: GoType, *, strict: bool) -> dict[str, Any]:
    try:
        return decode_go(body, t, strict=strict, stream=strict)
    except GoJSONError as e:
        raise E.INVALID_JSON(err=str(e)) from None


def stream_op(op: str, name: str, body: bytes, too_new: bool, stream_exists: bool) -> bytes:
    """The JSON reply to ``STREAM.<op>.<name>`` for ``op`` in :data:`STREAM_OPS`."""
    rtype = {"SNAPSHOT": "stream_snapshot_response", "RESTORE": "stream_restore_response"}.get(
        op, "stream_cancel_move_response"
    )
    try:
        if op == "CANCEL_MOVE":
            raise E.CLUSTER_REQUIRED()
        if too_new:
            raise E.REQUIRED_API_LEVEL()
        if M.is_empty_request(body):
            raise E.BAD_REQUEST()
        if op == "SNAPSHOT":
            if not stream_exists:
                raise E.STREAM_NOT_FOUND()
            req = _decode(body, _SNAPSHOT, strict=True)
            if not is_valid_literal_subject(str(req.get("deliver_subject", ""))):
                raise E.SNAPSHOT_DELIVER_SUBJECT_INVALID()
            raise E.STREAM_SNAPSHOT(err="stream snapshots are not supported by jetlog")
        req = _decode(body, _RESTORE, strict=True)
        config_name = str((req.get("config") or {}).get("name") or name)
        if config_name != name:
            raise E.STREAM_MISMATCH()
        if "/" in name or "\\" in name:
            raise E.STREAM_NAME_CONTAINS_PATH_SEPARATORS()
        raise E.STREAM_RESTORE(err="stream restores are not supported by jetlog")
    except ApiError as e:
        return _error(rtype, e)


def consumer_reset(body: bytes, too_new: bool) -> bytes:
    """The JSON reply to ``CONSUMER.RESET.<s>.<c>`` of an existing consumer."""
    try:
        if too_new:
            raise E.REQUIRED_API_LEVEL()
        if body:
            _decode(body, _RESET, strict=False)
        raise E.CONSUMER_INVALID_RESET(err="consumer reset is not supported by jetlog")
    except ApiError as e:
        return M.encode_json_ordered(
            {"type": _T + "consumer_reset_response", "error": e.to_dict(), "reset_seq": 0}
        )
