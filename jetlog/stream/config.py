"""Stream configuration: defaults, validation and update rules exactly as nats-server applies them.

A port of ``checkStreamCfg`` / ``configUpdateCheck`` / ``setStaticStreamMetadata`` (nats-server
2.15). nats-server *interleaves* normalisation and validation, and which error a client sees
depends on that order, so :func:`normalize_stream_config` both normalises and raises.

Create (``STREAM.CREATE.<name>``), in nats-server's order::

    req = decode_request(StreamConfigRequest, body)          # 10025
    check_create_request(name_from_subject, req)              # 10056, 10128, sealed, mirror_direct
    # (account limits: max streams 10027 ...)
    cfg = normalize_stream_config(req)                        # 10052 / 10133 / 10157 / 10113 / 10122
    cfg = validate_stream_config(cfg, clustered=False)        # + 10074 replicas on a single server
    if name exists: same_config_for_create(stored, cfg) ? success (did_create) : 10058
    # (account reservation limits)
    if subjects_overlap(cfg.subjects, <subjects of the other streams>): 10065

Update (``STREAM.UPDATE.<name>``)::

    req = decode_request(StreamConfigRequest, body)          # 10025
    cfg = normalize_stream_config(req, api_level_metadata=False)  # empty body fails here on the name
    cfg.name != name_from_subject: 10056;  not found: 10059
    cfg = check_stream_update(stored, cfg, clustered=False)   # immutables, 10074, sealing
    check_consumer_limits(stored, cfg, consumers)             # 10069
    if subjects_overlap(cfg.subjects, <subjects of the *other* streams>): 10065

:func:`prepare_stream_create` / :func:`prepare_stream_update` bundle the catalog-free steps of
each flow. Pass the *upstream* server's version to
:func:`jetlog.api.models.with_dynamic_metadata` when building CREATE/UPDATE/INFO responses.

jetlog does not implement mirrors and sources yet: a config with ``mirror`` or non-empty
``sources`` is rejected with ``10052`` at the point where nats-server starts checking them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgspec

from jetlog.api.models import (
    Placement,
    RePublish,
    StreamConfig,
    StreamConfigRequest,
    SubjectTransformConfig,
)
from jetlog.api.models_gojson import go_quote
from jetlog.errors import E
from jetlog.stream.config_transform import subject_transform_error, validate_mapping
from jetlog.wire.subjects import collide, is_subset, is_valid_subject

__all__ = [
    "MIRRORS_UNSUPPORTED",
    "SOURCES_UNSUPPORTED",
    "check_consumer_limits",
    "check_create_request",
    "check_stream_update",
    "normalize_stream_config",
    "prepare_stream_create",
    "prepare_stream_update",
    "required_api_level",
    "same_config_for_create",
    "subject_transform_error",
    "subjects_overlap",
    "validate_stream_config",
]

MAX_NAME_LEN = 255
MAX_DESCRIPTION_LEN = 4096
MAX_METADATA_LEN = 128 * 1024
MAX_REPLICAS = 5
DEFAULT_DUPLICATE_WINDOW = 120_000_000_000
_MS100 = 100_000_000
_SECOND = 1_000_000_000

MIRRORS_UNSUPPORTED = "stream mirrors are not supported by jetlog yet"
SOURCES_UNSUPPORTED = "stream sources are not supported by jetlog yet"

_BAD_NAME_CHARS = frozenset(" \t\r\n\f.*>\\/")
_NAME_REQUIRED = "stream name is required and can not contain '.', '*', '>', '\\', '/'"
_LEVEL_KEY, _VER_KEY, _SRV_LEVEL_KEY = "_nats.req.level", "_nats.ver", "_nats.level"


def _cfg_error(msg: str) -> Exception:
    return E.STREAM_INVALID_CONFIG(err=msg)


def _pedantic(msg: str) -> Exception:
    return E.PEDANTIC(err=msg)


def _blen(s: str) -> int:
    return len(s.encode("utf-8", "surrogatepass"))


def is_valid_asset_name(name: str) -> bool:
    """nats-server ``isValidAssetName``: non-empty, no whitespace, ``.``, ``*``, ``>``, ``\\``, ``/``."""
    return bool(name) and _BAD_NAME_CHARS.isdisjoint(name)


def required_api_level(cfg: Any) -> int:
    """The ``_nats.req.level`` a config needs (ADR-44): TTLs 1; counters, atomic batches,
    schedules, async persistence 2; fast batches 4."""
    level = 0
    if cfg.allow_msg_ttl or cfg.subject_delete_marker_ttl > 0:
        level = 1
    if cfg.allow_msg_counter or cfg.allow_atomic or cfg.allow_msg_schedules or cfg.persist_mode == "async":
        level = 2
    if cfg.allow_batched:
        level = 4
    return level


def _static_metadata(cfg: Any) -> dict[str, str]:
    """``setStaticStreamMetadata``: drop ``_nats.ver``/``_nats.level``, set ``_nats.req.level``."""
    md = {k: v for k, v in (cfg.metadata or {}).items() if k not in (_VER_KEY, _SRV_LEVEL_KEY)}
    md[_LEVEL_KEY] = str(required_api_level(cfg))
    return md


# ---------------------------------------------------------------------------------------------
# checkStreamCfg


def normalize_stream_config(
    req: StreamConfigRequest | StreamConfig,
    *,
    api_level_metadata: bool = True,
    clustered: bool = False,
    pedantic: bool | None = None,
    max_bytes_required: bool = False,
    max_stream_bytes: int = 0,
) -> StreamConfig:
    """Apply nats-server's defaults and checks (``checkStreamCfg``) and return the effective config.

    Raises the server's ``ApiError`` in the server's order (10052 texts of spec §3.1, 10133,
    10157 in pedantic mode, 10113/10122 for the account's ``max_bytes_required`` /
    ``max_stream_bytes``). ``api_level_metadata`` strips ``_nats.ver``/``_nats.level`` and sets
    ``_nats.req.level`` *before* checking, as on create (update passes ``False`` and lets
    :func:`check_stream_update` do it later, like the server). ``pedantic`` defaults to
    ``req.pedantic``. ``clustered`` is accepted for symmetry: the checks here do not depend on it
    (the replicas rule is in :func:`validate_stream_config` / :func:`check_stream_update`).
    """
    del clustered
    if pedantic is None:
        pedantic = bool(getattr(req, "pedantic", False))
    metadata = _static_metadata(req) if api_level_metadata else dict(req.metadata or {})

    name = req.name
    if not is_valid_asset_name(name):
        raise _cfg_error(_NAME_REQUIRED)
    if _blen(name) > MAX_NAME_LEN:
        raise _cfg_error(f"stream name is too long, maximum allowed is {MAX_NAME_LEN}")
    if _blen(req.description) > MAX_DESCRIPTION_LEN:
        raise _cfg_error(f"stream description is too long, maximum allowed is {MAX_DESCRIPTION_LEN}")
    if sum(_blen(k) + _blen(v) for k, v in metadata.items()) > MAX_METADATA_LEN:
        raise _cfg_error(f"stream metadata exceeds maximum size of {MAX_METADATA_LEN} bytes")

    replicas = req.num_replicas or 1
    if replicas > MAX_REPLICAS:
        raise _cfg_error(f"maximum replicas is {MAX_REPLICAS}")
    if replicas < 0:
        raise E.REPLICAS_COUNT_CANNOT_BE_NEGATIVE()

    def unlimited(value: int, key: str) -> int:
        if value == 0 or value < -1:
            if pedantic and value < -1:
                raise _pedantic(f"{key} must be set to -1")
            return -1
        return value

    max_msgs = unlimited(req.max_msgs, "max_msgs")
    max_per = unlimited(req.max_msgs_per_subject, "max_msgs_per_subject")
    max_bytes = unlimited(req.max_bytes, "max_bytes")
    max_msg_size = unlimited(req.max_msg_size, "max_msg_size")
    max_consumers = unlimited(req.max_consumers, "max_consumers")

    max_age = req.max_age
    if max_age < 0:
        raise _cfg_error("max age can not be negative")
    if 0 < max_age < _MS100:
        raise _cfg_error("max age needs to be >= 100ms")

    sources = list(req.sources or [])
    dup = req.duplicate_window
    if dup == 0 and req.mirror is None and not sources:
        if max_age != 0 and max_age < DEFAULT_DUPLICATE_WINDOW:
            if pedantic:
                raise _pedantic("duplicate window cannot be bigger than max age")
            dup = max_age
        else:
            dup = DEFAULT_DUPLICATE_WINDOW
    if dup < 0:
        raise _cfg_error("duplicates window can not be negative")
    if max_age != 0 and dup > max_age:
        raise _cfg_error("duplicates window can not be larger then max age")
    if 0 < dup < _MS100:
        raise _cfg_error("duplicates window needs to be >= 100ms")

    deny_purge, allow_rollup, allow_ttl = req.deny_purge, req.allow_rollup_hdrs, req.allow_msg_ttl
    if deny_purge and allow_rollup:
        raise _cfg_error("roll-ups require the purge permission")

    if req.allow_msg_counter:
        if req.discard == "new":
            raise _cfg_error("counter stream cannot use discard new")
        if allow_ttl:
            raise _cfg_error("counter stream cannot use message TTLs")
        if req.allow_msg_schedules:
            raise _cfg_error("counter stream cannot use message schedules")
        if req.retention != "limits":
            raise _cfg_error("counter stream can only use limits retention")

    if req.discard_new_per_subject:
        if req.discard != "new":
            raise _cfg_error("discard new per subject requires discard new policy to be set")
        if max_per <= 0:
            raise _cfg_error("discard new per subject requires max msgs per subject > 0")

    sdm = req.subject_delete_marker_ttl
    if sdm > 0:
        if sdm < _SECOND:
            raise _cfg_error("subject delete marker TTL must be at least 1 second")
        if not allow_ttl:
            if pedantic:
                raise _cfg_error("subject delete marker cannot be set if message TTLs are disabled")
            allow_ttl = True
        if not allow_rollup:
            if pedantic:
                raise _cfg_error("subject delete marker cannot be set if roll-ups are disabled")
            allow_rollup, deny_purge = True, False
    elif sdm < 0:
        raise _cfg_error("subject delete marker TTL must not be negative")

    if req.allow_msg_schedules:
        if req.discard == "new":
            raise _cfg_error("message scheduling cannot use discard new")
        if not allow_rollup:
            if pedantic:
                raise _cfg_error("message scheduling cannot be set if roll-ups are disabled")
            allow_rollup, deny_purge = True, False

    if req.persist_mode == "async":
        if req.storage != "file":
            raise _cfg_error("async persist mode is only supported on file storage")
        if replicas > 1:
            raise _cfg_error("async persist mode is not supported on replicated streams")
        if req.allow_atomic:
            raise _cfg_error("async persist mode is not supported with atomic batch publish")

    # nats-server validates mirror and source definitions here; jetlog has neither yet, and
    # refuses them after nats-server's first mirror checks (so those errors stay the same).
    if req.mirror is not None:
        if req.first_seq > 0:
            raise E.MIRROR_WITH_FIRST_SEQ()
        if req.subjects:
            raise E.MIRROR_WITH_SUBJECTS()
        if sources:
            raise E.MIRROR_WITH_SOURCES()
        if req.allow_msg_counter:
            raise E.MIRROR_WITH_COUNTERS()
        if req.allow_atomic:
            raise E.MIRROR_WITH_ATOMIC_PUBLISH()
        if req.allow_batched:
            raise E.MIRROR_WITH_BATCH_PUBLISH()
        if req.allow_msg_schedules:
            raise E.MIRROR_WITH_MSG_SCHEDULES()
        raise _cfg_error(MIRRORS_UNSUPPORTED)
    if sources:
        raise _cfg_error(SOURCES_UNSUPPORTED)

    subjects = list(req.subjects or [])
    if not subjects:
        subjects = [name]
    else:
        seen: set[str] = set()
        for i, subj in enumerate(subjects):
            if not is_valid_subject(subj):
                raise _cfg_error("invalid subject")
            if subj in seen:
                raise _cfg_error("duplicate subjects detected")
            if subj == ">":
                if not req.no_ack:
                    raise _cfg_error("capturing all subjects requires no-ack to be true")
                if replicas != 1:
                    raise _cfg_error("capturing all subjects requires replicas of 1")
            if not req.no_ack:
                for ns in ("$JS.>", "$JSC.>", "$NRG.>"):
                    if collide(subj, ns) and not is_subset(subj, "$JS.EVENT.>"):
                        raise _cfg_error("subjects that overlap with jetstream api require no-ack to be true")
                if collide(subj, "$SYS.>") and not is_subset(subj, "$SYS.ACCOUNT.>"):
                    raise _cfg_error("subjects that overlap with system api require no-ack to be true")
            for other in subjects[i + 1 :]:
                if collide(other, subj):
                    raise _cfg_error(f"subject {go_quote(subj)} overlaps with {go_quote(other)}")
            seen.add(subj)

    if max_bytes_required and max_bytes <= 0:
        raise E.STREAM_MAX_BYTES_REQUIRED()
    if max_stream_bytes > 0 and max_bytes > max_stream_bytes:
        raise E.STREAM_MAX_STREAM_BYTES_EXCEEDED()

    transform = req.subject_transform
    if transform is not None:
        if transform.src and not is_valid_subject(transform.src):
            raise E.STREAM_TRANSFORM_INVALID_SOURCE(err=f"invalid subject {transform.src}")
        err = validate_mapping(transform.src, transform.dest)
        if err is not None:
            raise E.STREAM_TRANSFORM_INVALID_DESTINATION(err=err)
        transform = SubjectTransformConfig(src=transform.src, dest=transform.dest)

    republish = None
    if req.republish is not None:
        src, dest = req.republish.src, req.republish.dest
        if not src:
            if pedantic:
                raise _pedantic("republish source can not be empty")
            src = ">"
        if (
            dest == ">"
            and src == ">"
            and transform is not None
            and len(subjects) == 1
            and transform.src == subjects[0]
        ):
            if pedantic:
                raise _pedantic("implicit republish based on subject transform")
            src = dest = transform.dest
        if any(collide(dest, s) for s in subjects):
            raise _cfg_error("stream configuration for republish destination forms a cycle")
        if subject_transform_error(src, dest) is not None:
            raise _cfg_error(
                f"stream configuration for republish with transform from '{src}' to '{dest}' not valid"
            )
        republish = RePublish(src=src, dest=dest, headers_only=req.republish.headers_only)

    placement = req.placement
    if placement is not None:
        if not placement.cluster and placement.tags is None and not placement.preferred:
            placement = None
        elif placement.preferred:
            raise _cfg_error("preferred server not permitted in placement")
        else:
            # An explicit empty ``tags`` list keeps the placement (Go's DeepEqual sees []{} != nil).
            placement = Placement(cluster=placement.cluster, tags=placement.tags)

    return StreamConfig(
        name=name,
        description=req.description,
        subjects=subjects,
        retention=req.retention,
        max_consumers=max_consumers,
        max_msgs=max_msgs,
        max_bytes=max_bytes,
        max_age=max_age,
        max_msgs_per_subject=max_per,
        max_msg_size=max_msg_size,
        discard=req.discard,
        storage=req.storage,
        num_replicas=replicas,
        no_ack=req.no_ack,
        duplicate_window=dup,
        placement=placement,
        compression=req.compression,
        first_seq=req.first_seq,
        subject_transform=transform,
        republish=republish,
        sources=[] if req.sources is not None else None,
        allow_direct=req.allow_direct,
        mirror_direct=req.mirror_direct,
        discard_new_per_subject=req.discard_new_per_subject,
        sealed=req.sealed,
        deny_delete=req.deny_delete,
        deny_purge=deny_purge,
        allow_rollup_hdrs=allow_rollup,
        consumer_limits=msgspec.structs.replace(req.consumer_limits),
        allow_msg_ttl=allow_ttl,
        subject_delete_marker_ttl=sdm,
        allow_msg_counter=req.allow_msg_counter,
        allow_atomic=req.allow_atomic,
        allow_msg_schedules=req.allow_msg_schedules,
        persist_mode=req.persist_mode,
        allow_batched=req.allow_batched,
        metadata=metadata,
    )


def validate_stream_config(
    cfg: StreamConfig, *, clustered: bool = False, pedantic: bool = False
) -> StreamConfig:
    """Re-run the server's checks on an effective config and the single-server replicas rule
    (``num_replicas > 1`` ⇒ ``10074`` unless ``clustered``). Returns the (unchanged, for a
    normalised input) config."""
    out = normalize_stream_config(cfg, api_level_metadata=False, pedantic=pedantic)
    if not clustered and out.num_replicas > 1:
        raise E.STREAM_REPLICAS_NOT_SUPPORTED()
    return out


def check_create_request(stream_name: str, req: StreamConfigRequest) -> None:
    """The create-only checks before the config check: name in subject vs body (``10056``),
    path separators (``10128``), ``sealed`` and ``mirror_direct`` without a mirror (``10052``)."""
    if stream_name != req.name:
        raise E.STREAM_MISMATCH()
    if "/" in stream_name or "\\" in stream_name:
        raise E.STREAM_NAME_CONTAINS_PATH_SEPARATORS()
    if req.sealed:
        raise _cfg_error("stream configuration for create can not be sealed")
    if req.mirror_direct and req.mirror is None:
        raise _cfg_error("stream has no mirror but does have mirror direct")


def prepare_stream_create(
    req: StreamConfigRequest, stream_name: str, *, version: str | None = None, clustered: bool = False
) -> StreamConfig:
    """Everything of a create that does not need the catalog, in the server's order:
    :func:`check_create_request`, :func:`normalize_stream_config`, :func:`validate_stream_config`.
    The caller then compares with an existing stream (:func:`same_config_for_create`, 10058) and
    checks :func:`subjects_overlap` (10065). ``version`` is unused (``_nats.ver`` only appears in
    responses: :func:`jetlog.api.models.with_dynamic_metadata`)."""
    del version
    check_create_request(stream_name, req)
    return validate_stream_config(normalize_stream_config(req), clustered=clustered)


def prepare_stream_update(
    req: StreamConfigRequest, stream_name: str, *, version: str | None = None
) -> StreamConfig:
    """The first part of an update: the config check (an empty body fails on the name), then the
    name in the subject (``10056``). The caller then looks the stream up (``10059``) and calls
    :func:`check_stream_update` and :func:`subjects_overlap`. ``version`` is unused."""
    del version
    cfg = normalize_stream_config(req, api_level_metadata=False)
    if cfg.name != stream_name:
        raise E.STREAM_MISMATCH()
    return cfg


def check_stream_update(
    old: StreamConfig, new: StreamConfig, *, clustered: bool = False, pedantic: bool = False
) -> StreamConfig:
    """``configUpdateCheck``: the config to store when updating ``old`` to ``new``.

    Sets the stored metadata (``_nats.req.level``), re-checks the config, then the update rules
    in the server's order: name, replicas on a single server (``10074``), storage, retention
    to/from workqueue, unseal, deny delete/purge cancel, mirror change (``10055``), discard new
    per subject, TTL disable, counter change, schedules disable, persist mode; sealing forces
    ``max_age 0``, ``discard new``, deny delete/purge and no rollups.
    """
    cfg = normalize_stream_config(
        msgspec.structs.replace(new, metadata=_static_metadata(new)),
        api_level_metadata=False,
        pedantic=pedantic,
    )
    if cfg.name != old.name:
        raise _cfg_error("stream configuration name must match original")
    if not clustered and cfg.num_replicas > 1:
        raise E.STREAM_REPLICAS_NOT_SUPPORTED()
    if cfg.storage != old.storage:
        raise _cfg_error("stream configuration update can not change storage type")
    if cfg.retention != old.retention and "workqueue" in (cfg.retention, old.retention):
        raise _cfg_error("stream configuration update can not change retention policy to/from workqueue")
    if old.sealed and not cfg.sealed:
        raise _cfg_error("stream configuration update can not unseal a sealed stream")
    if old.deny_delete and not cfg.deny_delete:
        raise _cfg_error("stream configuration update can not cancel deny message deletes")
    if old.deny_purge and not cfg.deny_purge:
        raise _cfg_error("stream configuration update can not cancel deny purge")
    if cfg.mirror is not None and cfg.mirror != old.mirror:
        raise E.STREAM_MIRROR_NOT_UPDATABLE()
    if cfg.discard_new_per_subject:
        if cfg.discard != "new":
            raise _cfg_error("discard new per subject requires discard new policy to be set")
        if cfg.max_msgs_per_subject <= 0:
            raise _cfg_error("discard new per subject requires max msgs per subject > 0")
    if old.allow_msg_ttl and not cfg.allow_msg_ttl:
        raise _cfg_error("message TTL status can not be disabled")
    if cfg.allow_msg_counter != old.allow_msg_counter:
        raise _cfg_error("stream configuration update can not change message counter setting")
    if old.allow_msg_schedules and not cfg.allow_msg_schedules:
        raise _cfg_error("message schedules can not be disabled")
    if old.persist_mode != cfg.persist_mode:
        raise _cfg_error("stream configuration update can not change persist mode")
    if cfg.sealed:
        cfg = msgspec.structs.replace(
            cfg, max_age=0, discard="new", deny_delete=True, deny_purge=True, allow_rollup_hdrs=False
        )
    return cfg


def check_consumer_limits(
    old: StreamConfig, new: StreamConfig, consumers: Iterable[tuple[str, int, int]]
) -> None:
    """Raise ``10069 change to limits violates consumers: a, b`` if a changed
    ``consumer_limits`` is below an existing consumer's ``(name, inactive_threshold,
    max_ack_pending)``."""
    oi, ni = old.consumer_limits.inactive_threshold, new.consumer_limits.inactive_threshold
    om, nm = old.consumer_limits.max_ack_pending, new.consumer_limits.max_ack_pending
    if not ((ni > 0 and oi != ni) or (nm > 0 and om != nm)):
        return
    bad = [name for name, it, map_ in consumers if (ni > 0 and it > ni) or (nm > 0 and map_ > nm)]
    if bad:
        raise E.STREAM_UPDATE(err="change to limits violates consumers: " + ", ".join(bad))


def same_config_for_create(existing: StreamConfig, new: StreamConfig) -> bool:
    """Idempotent create: does ``new`` equal the stored ``existing`` config, ignoring
    ``_nats.ver``/``_nats.level`` and taking ``_nats.req.level`` from ``existing``?

    (nats-server's ``reflect.DeepEqual`` also tells ``[]`` from absent for ``sources`` and
    ``placement.tags``; jetlog's stored configs do not keep that difference.)
    """
    md = {k: v for k, v in new.metadata.items() if k not in (_VER_KEY, _SRV_LEVEL_KEY, _LEVEL_KEY)}
    if _LEVEL_KEY in existing.metadata:
        md[_LEVEL_KEY] = existing.metadata[_LEVEL_KEY]
    return msgspec.structs.replace(new, metadata=md) == existing


def subjects_overlap(cfg_subjects: Iterable[str], other_streams_subjects: Iterable[str]) -> bool:
    """True if any subject of a stream collides with any subject of the *other* streams
    (``10065``; the caller leaves the stream itself out on update)."""
    mine = list(cfg_subjects)
    return any(collide(s, o) for o in other_streams_subjects for s in mine)
