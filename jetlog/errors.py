"""The one error root of jetlog and the JetStream error-code table.

Every error jetlog raises derives from :class:`JetlogError`. Errors that reach a JetStream client
are :class:`ApiError` instances built from an :class:`ErrorSpec` of the table :class:`E`, which is
the complete list of nats-server's ``errors.json`` (10002-10227): the HTTP-like ``code``, the
``err_code`` and the description template (``{err}``, ``{seq}``... placeholders).

Non-API failures (storage, configuration, transport) subclass the root too, and still map to a
JetStream error when they surface through the API (``to_api()``), so nothing escapes as a bare
exception.
"""

from __future__ import annotations

from typing import Any, NamedTuple


class ErrorSpec(NamedTuple):
    """One JetStream API error: HTTP-like code, JetStream err_code and description template."""

    code: int
    err_code: int
    template: str

    def __call__(self, **params: Any) -> ApiError:
        """Build the :class:`ApiError` for this spec, filling the template's placeholders."""
        return ApiError(self, **params)


class JetlogError(Exception):
    """Root of every jetlog error.

    ``retriable`` tells callers whether repeating the operation may succeed (a transient
    resource or leadership condition) as opposed to a permanent rejection.
    """

    retriable: bool = False

    def to_api(self) -> ApiError:
        """The JetStream error a client should see for this failure."""
        return ApiError(E.STREAM_GENERAL_ERROR, err=str(self))


class ApiError(JetlogError):
    """An error that a JetStream client receives as ``{"code","err_code","description"}``."""

    def __init__(self, spec: ErrorSpec, /, **params: Any) -> None:
        self.spec = spec
        self.code = spec.code
        self.err_code = spec.err_code
        self.description = spec.template.format(**params) if params else spec.template
        super().__init__(self.description)

    def to_api(self) -> ApiError:
        return self

    def to_dict(self) -> dict[str, Any]:
        """The ``error`` object exactly as nats-server emits it (three keys, in this order)."""
        return {"code": self.code, "err_code": self.err_code, "description": self.description}

    def __repr__(self) -> str:
        return f"ApiError({self.code}, {self.err_code}, {self.description!r})"


class ConfigError(JetlogError):
    """Invalid node configuration. ``key`` names the offending setting."""

    def __init__(self, key: str, reason: str) -> None:
        self.key = key
        self.reason = reason
        super().__init__(f"invalid configuration {key!r}: {reason}")


class StorageError(JetlogError):
    """A storage-layer failure (I/O error, failed fsync, unusable directory)."""

    def to_api(self) -> ApiError:
        return ApiError(E.STREAM_STORE_FAILED, err=str(self))


class CorruptSegmentError(StorageError):
    """A segment failed validation (bad CRC, impossible header) beyond a torn tail."""

    def __init__(self, path: str, offset: int, reason: str) -> None:
        self.path = path
        self.offset = offset
        self.reason = reason
        super().__init__(f"corrupt segment {path} at offset {offset}: {reason}")


class StreamUnavailableError(StorageError):
    """The stream is fenced (failed fsync, quarantined storage) and refuses reads and writes."""

    retriable = True

    def to_api(self) -> ApiError:
        return ApiError(E.STREAM_OFFLINE_REASON, err=str(self))


class TransportError(JetlogError):
    """A failure on an upstream NATS connection (client or leafnode link)."""

    retriable = True

    def to_api(self) -> ApiError:
        return ApiError(E.CLUSTER_NOT_AVAIL)


class ProtocolError(TransportError):
    """The peer sent something the protocol does not allow (a malformed frame, -ERR)."""


class ClusterError(JetlogError):
    """A cluster-layer failure (metadata Raft unavailable or refused, node identity mismatch)."""

    def to_api(self) -> ApiError:
        return ApiError(E.CLUSTER_NOT_AVAIL)


class E:
    """Every nats-server JetStream error (server/errors.json), keyed by role."""

    ACCOUNT_RESOURCES_EXCEEDED = ErrorSpec(400, 10002, "resource limits exceeded for account")
    BAD_REQUEST = ErrorSpec(400, 10003, "bad request")
    CLUSTER_INCOMPLETE = ErrorSpec(503, 10004, "incomplete results")
    CLUSTER_NO_PEERS = ErrorSpec(400, 10005, "{err}")
    CLUSTER_NOT_ACTIVE = ErrorSpec(500, 10006, "JetStream not in clustered mode")
    CLUSTER_NOT_ASSIGNED = ErrorSpec(500, 10007, "JetStream cluster not assigned to this server")
    CLUSTER_NOT_AVAIL = ErrorSpec(503, 10008, "JetStream system temporarily unavailable")
    CLUSTER_NOT_LEADER = ErrorSpec(500, 10009, "JetStream cluster can not handle request")
    CLUSTER_REQUIRED = ErrorSpec(503, 10010, "JetStream clustering support required")
    CLUSTER_TAGS = ErrorSpec(400, 10011, "tags placement not supported for operation")
    CONSUMER_CREATE = ErrorSpec(500, 10012, "{err}")
    CONSUMER_NAME_EXIST = ErrorSpec(400, 10013, "consumer name already in use")
    CONSUMER_NOT_FOUND = ErrorSpec(404, 10014, "consumer not found")
    SNAPSHOT_DELIVER_SUBJECT_INVALID = ErrorSpec(400, 10015, "deliver subject not valid")
    CONSUMER_DURABLE_NAME_NOT_IN_SUBJECT = ErrorSpec(
        400, 10016, "consumer expected to be durable but no durable name set in subject"
    )
    CONSUMER_DURABLE_NAME_NOT_MATCH_SUBJECT = ErrorSpec(
        400, 10017, "consumer name in subject does not match durable name in request"
    )
    CONSUMER_DURABLE_NAME_NOT_SET = ErrorSpec(
        400, 10018, "consumer expected to be durable but a durable name was not set"
    )
    CONSUMER_EPHEMERAL_WITH_DURABLE_IN_SUBJECT = ErrorSpec(
        400, 10019, "consumer expected to be ephemeral but detected a durable name set in subject"
    )
    CONSUMER_EPHEMERAL_WITH_DURABLE_NAME = ErrorSpec(
        400, 10020, "consumer expected to be ephemeral but a durable name was set in request"
    )
    STREAM_EXTERNAL_API_OVERLAP = ErrorSpec(
        400, 10021, "stream external api prefix {prefix} must not overlap with {subject}"
    )
    STREAM_EXTERNAL_DEL_PREFIX_OVERLAPS = ErrorSpec(
        400, 10022, "stream external delivery prefix {prefix} overlaps with stream subject {subject}"
    )
    INSUFFICIENT_RESOURCES = ErrorSpec(503, 10023, "insufficient resources")
    STREAM_INVALID_EXTERNAL_DELIVERY_SUBJ = ErrorSpec(
        400, 10024, "stream external delivery prefix {prefix} must not contain wildcards"
    )
    INVALID_JSON = ErrorSpec(400, 10025, "invalid JSON: {err}")
    MAXIMUM_CONSUMERS_LIMIT = ErrorSpec(400, 10026, "maximum consumers limit reached")
    MAXIMUM_STREAMS_LIMIT = ErrorSpec(400, 10027, "maximum number of streams reached")
    MEMORY_RESOURCES_EXCEEDED = ErrorSpec(500, 10028, "insufficient memory resources available")
    MIRROR_CONSUMER_SETUP_FAILED = ErrorSpec(500, 10029, "{err}")
    MIRROR_MAX_MESSAGE_SIZE_TOO_BIG = ErrorSpec(
        400, 10030, "stream mirror must have max message size >= source"
    )
    MIRROR_WITH_SOURCES = ErrorSpec(400, 10031, "stream mirrors can not also contain other sources")
    MIRROR_WITH_START_SEQ_AND_TIME = ErrorSpec(
        400, 10032, "stream mirrors can not have both start seq and start time configured"
    )
    MIRROR_WITH_SUBJECT_FILTERS = ErrorSpec(400, 10033, "stream mirrors can not contain filtered subjects")
    MIRROR_WITH_SUBJECTS = ErrorSpec(400, 10034, "stream mirrors can not contain subjects")
    NO_ACCOUNT = ErrorSpec(503, 10035, "account not found")
    CLUSTER_UN_SUPPORT_FEATURE = ErrorSpec(503, 10036, "not currently supported in clustered mode")
    NO_MESSAGE_FOUND = ErrorSpec(404, 10037, "no message found")
    NOT_EMPTY_REQUEST = ErrorSpec(400, 10038, "expected an empty request payload")
    NOT_ENABLED_FOR_ACCOUNT = ErrorSpec(503, 10039, "JetStream not enabled for account")
    CLUSTER_PEER_NOT_MEMBER = ErrorSpec(400, 10040, "peer not a member")
    RAFT_GENERAL = ErrorSpec(500, 10041, "{err}")
    RESTORE_SUBSCRIBE_FAILED = ErrorSpec(
        500, 10042, "JetStream unable to subscribe to restore snapshot {subject}: {err}"
    )
    SEQUENCE_NOT_FOUND = ErrorSpec(400, 10043, "sequence {seq} not found")
    CLUSTER_SERVER_NOT_MEMBER = ErrorSpec(400, 10044, "server is not a member of the cluster")
    SOURCE_CONSUMER_SETUP_FAILED = ErrorSpec(500, 10045, "{err}")
    SOURCE_MAX_MESSAGE_SIZE_TOO_BIG = ErrorSpec(
        400, 10046, "stream source must have max message size >= target"
    )
    STORAGE_RESOURCES_EXCEEDED = ErrorSpec(500, 10047, "insufficient storage resources available")
    STREAM_ASSIGNMENT = ErrorSpec(500, 10048, "{err}")
    STREAM_CREATE = ErrorSpec(500, 10049, "{err}")
    STREAM_DELETE = ErrorSpec(500, 10050, "{err}")
    STREAM_GENERAL_ERROR = ErrorSpec(500, 10051, "{err}")
    STREAM_INVALID_CONFIG = ErrorSpec(500, 10052, "{err}")
    STREAM_LIMITS = ErrorSpec(500, 10053, "{err}")
    STREAM_MESSAGE_EXCEEDS_MAXIMUM = ErrorSpec(400, 10054, "message size exceeds maximum allowed")
    STREAM_MIRROR_NOT_UPDATABLE = ErrorSpec(400, 10055, "stream mirror configuration can not be updated")
    STREAM_MISMATCH = ErrorSpec(400, 10056, "stream name in subject does not match request")
    STREAM_MSG_DELETE_FAILED = ErrorSpec(500, 10057, "{err}")
    STREAM_NAME_EXIST = ErrorSpec(400, 10058, "stream name already in use with a different configuration")
    STREAM_NOT_FOUND = ErrorSpec(404, 10059, "stream not found")
    STREAM_NOT_MATCH = ErrorSpec(400, 10060, "expected stream does not match")
    STREAM_REPLICAS_NOT_UPDATABLE = ErrorSpec(400, 10061, "Replicas configuration can not be updated")
    STREAM_RESTORE = ErrorSpec(500, 10062, "restore failed: {err}")
    STREAM_SEQUENCE_NOT_MATCH = ErrorSpec(503, 10063, "expected stream sequence does not match")
    STREAM_SNAPSHOT = ErrorSpec(500, 10064, "snapshot failed: {err}")
    STREAM_SUBJECT_OVERLAP = ErrorSpec(400, 10065, "subjects overlap with an existing stream")
    STREAM_TEMPLATE_CREATE = ErrorSpec(500, 10066, "{err}")
    STREAM_TEMPLATE_DELETE = ErrorSpec(500, 10067, "{err}")
    STREAM_TEMPLATE_NOT_FOUND = ErrorSpec(404, 10068, "template not found")
    STREAM_UPDATE = ErrorSpec(500, 10069, "{err}")
    STREAM_WRONG_LAST_MSG_ID = ErrorSpec(400, 10070, "wrong last msg ID: {id}")
    STREAM_WRONG_LAST_SEQUENCE = ErrorSpec(400, 10071, "wrong last sequence: {seq}")
    TEMP_STORAGE_FAILED = ErrorSpec(500, 10072, "JetStream unable to open temp storage for restore")
    TEMPLATE_NAME_NOT_MATCH_SUBJECT = ErrorSpec(400, 10073, "template name in subject does not match request")
    STREAM_REPLICAS_NOT_SUPPORTED = ErrorSpec(500, 10074, "replicas > 1 not supported in non-clustered mode")
    PEER_REMAP = ErrorSpec(503, 10075, "peer remap failed")
    NOT_ENABLED = ErrorSpec(503, 10076, "JetStream not enabled")
    STREAM_STORE_FAILED = ErrorSpec(503, 10077, "{err}")
    CONSUMER_CONFIG_REQUIRED = ErrorSpec(400, 10078, "consumer config required")
    CONSUMER_DELIVER_TO_WILDCARDS = ErrorSpec(400, 10079, "consumer deliver subject has wildcards")
    CONSUMER_PUSH_MAX_WAITING = ErrorSpec(400, 10080, "consumer in push mode can not set max waiting")
    CONSUMER_DELIVER_CYCLE = ErrorSpec(400, 10081, "consumer deliver subject forms a cycle")
    CONSUMER_MAX_PENDING_ACK_POLICY_REQUIRED = ErrorSpec(
        400, 10082, "consumer requires ack policy for max ack pending"
    )
    CONSUMER_SMALL_HEARTBEAT = ErrorSpec(400, 10083, "consumer idle heartbeat needs to be >= 100ms")
    CONSUMER_PULL_REQUIRES_ACK = ErrorSpec(
        400, 10084, "consumer in pull mode requires explicit ack policy on workqueue stream"
    )
    CONSUMER_PULL_NOT_DURABLE = ErrorSpec(400, 10085, "consumer in pull mode requires a durable name")
    CONSUMER_PULL_WITH_RATE_LIMIT = ErrorSpec(400, 10086, "consumer in pull mode can not have rate limit set")
    CONSUMER_MAX_WAITING_NEGATIVE = ErrorSpec(400, 10087, "consumer max waiting needs to be positive")
    CONSUMER_HB_REQUIRES_PUSH = ErrorSpec(
        400, 10088, "consumer idle heartbeat requires a push based consumer"
    )
    CONSUMER_FC_REQUIRES_PUSH = ErrorSpec(400, 10089, "consumer flow control requires a push based consumer")
    CONSUMER_DIRECT_REQUIRES_PUSH = ErrorSpec(400, 10090, "consumer direct requires a push based consumer")
    CONSUMER_DIRECT_REQUIRES_EPHEMERAL = ErrorSpec(
        400, 10091, "consumer direct requires an ephemeral consumer"
    )
    CONSUMER_ON_MAPPED = ErrorSpec(400, 10092, "consumer direct on a mapped consumer")
    CONSUMER_FILTER_NOT_SUBSET = ErrorSpec(
        400, 10093, "consumer filter subject is not a valid subset of the interest subjects"
    )
    CONSUMER_INVALID_POLICY = ErrorSpec(400, 10094, "{err}")
    CONSUMER_INVALID_SAMPLING = ErrorSpec(
        400, 10095, "failed to parse consumer sampling configuration: {err}"
    )
    STREAM_INVALID = ErrorSpec(500, 10096, "stream not valid")
    STREAM_HEADER_EXCEEDS_MAXIMUM = ErrorSpec(400, 10097, "header size exceeds maximum allowed of 64k")
    CONSUMER_WQ_REQUIRES_EXPLICIT_ACK = ErrorSpec(400, 10098, "workqueue stream requires explicit ack")
    CONSUMER_WQ_MULTIPLE_UNFILTERED = ErrorSpec(
        400, 10099, "multiple non-filtered consumers not allowed on workqueue stream"
    )
    CONSUMER_WQ_CONSUMER_NOT_UNIQUE = ErrorSpec(
        400, 10100, "filtered consumer not unique on workqueue stream"
    )
    CONSUMER_WQ_CONSUMER_NOT_DELIVER_ALL = ErrorSpec(
        400, 10101, "consumer must be deliver all on workqueue stream"
    )
    CONSUMER_NAME_TOO_LONG = ErrorSpec(400, 10102, "consumer name is too long, maximum allowed is {max}")
    CONSUMER_BAD_DURABLE_NAME = ErrorSpec(400, 10103, "durable name can not contain '.', '*', '>'")
    CONSUMER_STORE_FAILED = ErrorSpec(500, 10104, "error creating store for consumer: {err}")
    CONSUMER_EXISTING_ACTIVE = ErrorSpec(400, 10105, "consumer already exists and is still active")
    CONSUMER_REPLACEMENT_WITH_DIFFERENT_NAME = ErrorSpec(
        400, 10106, "consumer replacement durable config not the same"
    )
    CONSUMER_DESCRIPTION_TOO_LONG = ErrorSpec(
        400, 10107, "consumer description is too long, maximum allowed is {max}"
    )
    CONSUMER_WITH_FLOW_CONTROL_NEEDS_HEARTBEATS = ErrorSpec(
        400, 10108, "consumer with flow control also needs heartbeats"
    )
    STREAM_SEALED = ErrorSpec(400, 10109, "invalid operation on sealed stream")
    STREAM_PURGE_FAILED = ErrorSpec(500, 10110, "{err}")
    STREAM_ROLLUP_FAILED = ErrorSpec(500, 10111, "{err}")
    CONSUMER_INVALID_DELIVER_SUBJECT = ErrorSpec(400, 10112, "invalid push consumer deliver subject")
    STREAM_MAX_BYTES_REQUIRED = ErrorSpec(
        400, 10113, "account requires a stream config to have max bytes set"
    )
    CONSUMER_MAX_REQUEST_BATCH_NEGATIVE = ErrorSpec(400, 10114, "consumer max request batch needs to be > 0")
    CONSUMER_MAX_REQUEST_EXPIRES_TOO_SMALL = ErrorSpec(
        400, 10115, "consumer max request expires needs to be >= 1ms"
    )
    CONSUMER_MAX_DELIVER_BACKOFF = ErrorSpec(
        400, 10116, "max deliver is required to be > length of backoff values"
    )
    STREAM_INFO_MAX_SUBJECTS = ErrorSpec(500, 10117, "subject details would exceed maximum allowed")
    STREAM_OFFLINE = ErrorSpec(500, 10118, "stream is offline")
    CONSUMER_OFFLINE = ErrorSpec(500, 10119, "consumer is offline")
    NO_LIMITS = ErrorSpec(400, 10120, "no JetStream default or applicable tiered limit present")
    CONSUMER_MAX_PENDING_ACK_EXCESS = ErrorSpec(
        400, 10121, "consumer max ack pending exceeds system limit of {limit}"
    )
    STREAM_MAX_STREAM_BYTES_EXCEEDED = ErrorSpec(
        400, 10122, "stream max bytes exceeds account limit max stream bytes"
    )
    STREAM_MOVE_AND_SCALE = ErrorSpec(400, 10123, "can not move and scale a stream in a single update")
    STREAM_MOVE_IN_PROGRESS = ErrorSpec(400, 10124, "stream move already in progress")
    CONSUMER_MAX_REQUEST_BATCH_EXCEEDED = ErrorSpec(
        400, 10125, "consumer max request batch exceeds server limit of {limit}"
    )
    CONSUMER_REPLICAS_EXCEEDS_STREAM = ErrorSpec(
        400, 10126, "consumer config replica count exceeds parent stream"
    )
    CONSUMER_NAME_CONTAINS_PATH_SEPARATORS = ErrorSpec(
        400, 10127, "Consumer name can not contain path separators"
    )
    STREAM_NAME_CONTAINS_PATH_SEPARATORS = ErrorSpec(
        400, 10128, "Stream name can not contain path separators"
    )
    STREAM_RECONFIGURE_NOT_IN_PROGRESS = ErrorSpec(400, 10129, "stream reconfiguration not in progress")
    STREAM_NAME_EXIST_RESTORE_FAILED = ErrorSpec(400, 10130, "stream name already in use, cannot restore")
    CONSUMER_CREATE_FILTER_SUBJECT_MISMATCH = ErrorSpec(
        400, 10131, "Consumer create request did not match filtered subject from create subject"
    )
    CONSUMER_CREATE_DURABLE_AND_NAME_MISMATCH = ErrorSpec(
        400, 10132, "Consumer Durable and Name have to be equal if both are provided"
    )
    REPLICAS_COUNT_CANNOT_BE_NEGATIVE = ErrorSpec(400, 10133, "replicas count cannot be negative")
    CONSUMER_REPLICAS_SHOULD_MATCH_STREAM = ErrorSpec(
        400, 10134, "consumer config replicas must match interest retention stream's replicas"
    )
    CONSUMER_METADATA_LENGTH = ErrorSpec(400, 10135, "consumer metadata exceeds maximum size of {limit}")
    CONSUMER_DUPLICATE_FILTER_SUBJECTS = ErrorSpec(
        400, 10136, "consumer cannot have both FilterSubject and FilterSubjects specified"
    )
    CONSUMER_MULTIPLE_FILTERS_NOT_ALLOWED = ErrorSpec(
        400, 10137, "consumer with multiple subject filters cannot use subject based API"
    )
    CONSUMER_OVERLAPPING_SUBJECT_FILTERS = ErrorSpec(400, 10138, "consumer subject filters cannot overlap")
    CONSUMER_EMPTY_FILTER = ErrorSpec(400, 10139, "consumer filter in FilterSubjects cannot be empty")
    SOURCE_DUPLICATE_DETECTED = ErrorSpec(400, 10140, "duplicate source configuration detected")
    SOURCE_INVALID_STREAM_NAME = ErrorSpec(400, 10141, "sourced stream name is invalid")
    MIRROR_INVALID_STREAM_NAME = ErrorSpec(400, 10142, "mirrored stream name is invalid")
    MIRROR_WITH_FIRST_SEQ = ErrorSpec(400, 10143, "stream mirrors can not have first sequence configured")
    SOURCE_MULTIPLE_FILTERS_NOT_ALLOWED = ErrorSpec(
        400, 10144, "source with multiple subject transforms cannot also have a single subject filter"
    )
    SOURCE_INVALID_SUBJECT_FILTER = ErrorSpec(400, 10145, "source transform source: {err}")
    SOURCE_INVALID_TRANSFORM_DESTINATION = ErrorSpec(400, 10146, "source transform: {err}")
    SOURCE_OVERLAPPING_SUBJECT_FILTERS = ErrorSpec(400, 10147, "source filters can not overlap")
    CONSUMER_ALREADY_EXISTS = ErrorSpec(400, 10148, "consumer already exists")
    CONSUMER_DOES_NOT_EXIST = ErrorSpec(400, 10149, "consumer does not exist")
    MIRROR_MULTIPLE_FILTERS_NOT_ALLOWED = ErrorSpec(
        400, 10150, "mirror with multiple subject transforms cannot also have a single subject filter"
    )
    MIRROR_INVALID_SUBJECT_FILTER = ErrorSpec(400, 10151, "mirror transform source: {err}")
    MIRROR_OVERLAPPING_SUBJECT_FILTERS = ErrorSpec(400, 10152, "mirror subject filters can not overlap")
    CONSUMER_INACTIVE_THRESHOLD_EXCESS = ErrorSpec(
        400, 10153, "consumer inactive threshold exceeds system limit of {limit}"
    )
    MIRROR_INVALID_TRANSFORM_DESTINATION = ErrorSpec(400, 10154, "mirror transform: {err}")
    STREAM_TRANSFORM_INVALID_SOURCE = ErrorSpec(400, 10155, "stream transform source: {err}")
    STREAM_TRANSFORM_INVALID_DESTINATION = ErrorSpec(400, 10156, "stream transform: {err}")
    PEDANTIC = ErrorSpec(400, 10157, "pedantic mode: {err}")
    STREAM_DUPLICATE_MESSAGE_CONFLICT = ErrorSpec(409, 10158, "duplicate message id is in process")
    CONSUMER_PRIORITY_POLICY_WITHOUT_GROUP = ErrorSpec(
        400, 10159, "Setting PriorityPolicy requires at least one PriorityGroup to be set"
    )
    CONSUMER_INVALID_PRIORITY_GROUP = ErrorSpec(
        400, 10160, "Provided priority group does not exist for this consumer"
    )
    CONSUMER_EMPTY_GROUP_NAME = ErrorSpec(400, 10161, "Group name cannot be an empty string")
    CONSUMER_INVALID_GROUP_NAME = ErrorSpec(
        400,
        10162,
        "Valid priority group name must match A-Z, a-z, 0-9, -_/=)+ and may not exceed 16 characters",
    )
    STREAM_EXPECTED_LAST_SEQ_PER_SUBJECT_NOT_READY = ErrorSpec(
        503, 10163, "expected last sequence per subject temporarily unavailable"
    )
    STREAM_WRONG_LAST_SEQUENCE_CONSTANT = ErrorSpec(400, 10164, "wrong last sequence")
    MESSAGE_TTL_INVALID = ErrorSpec(400, 10165, "invalid per-message TTL")
    MESSAGE_TTL_DISABLED = ErrorSpec(400, 10166, "per-message TTL is disabled")
    STREAM_TOO_MANY_REQUESTS = ErrorSpec(429, 10167, "too many requests")
    MESSAGE_INCR_DISABLED = ErrorSpec(400, 10168, "message counters is disabled")
    MESSAGE_INCR_MISSING = ErrorSpec(400, 10169, "message counter increment is missing")
    MESSAGE_INCR_PAYLOAD = ErrorSpec(400, 10170, "message counter has payload")
    MESSAGE_INCR_INVALID = ErrorSpec(400, 10171, "message counter increment is invalid")
    MESSAGE_COUNTER_BROKEN = ErrorSpec(400, 10172, "message counter is broken")
    MIRROR_WITH_COUNTERS = ErrorSpec(400, 10173, "stream mirrors can not also calculate counters")
    ATOMIC_PUBLISH_DISABLED = ErrorSpec(400, 10174, "atomic publish is disabled")
    ATOMIC_PUBLISH_MISSING_SEQ = ErrorSpec(400, 10175, "atomic publish sequence is missing")
    ATOMIC_PUBLISH_INCOMPLETE_BATCH = ErrorSpec(400, 10176, "atomic publish batch is incomplete")
    ATOMIC_PUBLISH_UNSUPPORTED_HEADER_BATCH = ErrorSpec(
        400, 10177, "atomic publish unsupported header used: {header}"
    )
    CONSUMER_PUSH_WITH_PRIORITY_GROUP = ErrorSpec(
        400, 10178, "priority groups can not be used with push consumers"
    )
    ATOMIC_PUBLISH_INVALID_BATCH_ID = ErrorSpec(400, 10179, "atomic publish batch ID is invalid")
    STREAM_MIN_LAST_SEQ = ErrorSpec(412, 10180, "min last sequence")
    CONSUMER_ACK_POLICY_INVALID = ErrorSpec(400, 10181, "consumer ack policy invalid")
    CONSUMER_REPLAY_POLICY_INVALID = ErrorSpec(400, 10182, "consumer replay policy invalid")
    CONSUMER_ACK_WAIT_NEGATIVE = ErrorSpec(400, 10183, "consumer ack wait needs to be positive")
    CONSUMER_BACK_OFF_NEGATIVE = ErrorSpec(400, 10184, "consumer backoff needs to be positive")
    REQUIRED_API_LEVEL = ErrorSpec(412, 10185, "JetStream minimum api level required")
    MIRROR_WITH_MSG_SCHEDULES = ErrorSpec(400, 10186, "stream mirrors can not also schedule messages")
    SOURCE_WITH_MSG_SCHEDULES = ErrorSpec(400, 10187, "stream source can not also schedule messages")
    MESSAGE_SCHEDULES_DISABLED = ErrorSpec(400, 10188, "message schedules is disabled")
    MESSAGE_SCHEDULES_PATTERN_INVALID = ErrorSpec(400, 10189, "message schedules pattern is invalid")
    MESSAGE_SCHEDULES_TARGET_INVALID = ErrorSpec(400, 10190, "message schedules target is invalid")
    MESSAGE_SCHEDULES_TTL_INVALID = ErrorSpec(400, 10191, "message schedules invalid per-message TTL")
    MESSAGE_SCHEDULES_ROLLUP_INVALID = ErrorSpec(400, 10192, "message schedules invalid rollup")
    STREAM_EXPECTED_LAST_SEQ_PER_SUBJECT_INVALID = ErrorSpec(
        400, 10193, "missing sequence for expected last sequence per subject"
    )
    STREAM_OFFLINE_REASON = ErrorSpec(500, 10194, "stream is offline: {err}")
    CONSUMER_OFFLINE_REASON = ErrorSpec(500, 10195, "consumer is offline: {err}")
    CONSUMER_PRIORITY_GROUP_WITH_POLICY_NONE = ErrorSpec(
        400, 10196, "consumer can not have priority groups when policy is none"
    )
    CONSUMER_PINNED_TTL_WITHOUT_PRIORITY_POLICY_NONE = ErrorSpec(
        400, 10197, "PinnedTTL cannot be set when PriorityPolicy is none"
    )
    MIRROR_WITH_ATOMIC_PUBLISH = ErrorSpec(400, 10198, "stream mirrors can not also use atomic publishing")
    ATOMIC_PUBLISH_TOO_LARGE_BATCH = ErrorSpec(400, 10199, "atomic publish batch is too large: {size}")
    ATOMIC_PUBLISH_INVALID_BATCH_COMMIT = ErrorSpec(400, 10200, "atomic publish batch commit is invalid")
    ATOMIC_PUBLISH_CONTAINS_DUPLICATE_MESSAGE = ErrorSpec(
        400, 10201, "atomic publish batch contains duplicate message id"
    )
    CLUSTER_SERVER_MEMBER_CHANGE_INFLIGHT = ErrorSpec(400, 10202, "cluster member change is in progress")
    MESSAGE_SCHEDULES_SOURCE_INVALID = ErrorSpec(400, 10203, "message schedules source is invalid")
    CONSUMER_INVALID_RESET = ErrorSpec(400, 10204, "invalid reset: {err}")
    BATCH_PUBLISH_DISABLED = ErrorSpec(400, 10205, "batch publish is disabled")
    BATCH_PUBLISH_INVALID_PATTERN = ErrorSpec(400, 10206, "batch publish pattern is invalid")
    BATCH_PUBLISH_INVALID_BATCH_ID = ErrorSpec(400, 10207, "batch publish ID is invalid")
    BATCH_PUBLISH_UNKNOWN_BATCH_ID = ErrorSpec(400, 10208, "batch publish ID unknown")
    MIRROR_WITH_BATCH_PUBLISH = ErrorSpec(400, 10209, "stream mirrors can not also use batch publishing")
    ATOMIC_PUBLISH_TOO_MANY_INFLIGHT = ErrorSpec(429, 10210, "atomic publish too many inflight")
    BATCH_PUBLISH_TOO_MANY_INFLIGHT = ErrorSpec(429, 10211, "batch publish too many inflight")
    MESSAGE_SCHEDULES_SCHEDULER_INVALID = ErrorSpec(400, 10212, "message schedules invalid scheduler")
    MIRROR_DURABLE_CONSUMER_CFG_INVALID = ErrorSpec(400, 10213, "stream mirror consumer config is invalid")
    MIRROR_CONSUMER_REQUIRES_ACK_FC = ErrorSpec(
        400, 10214, "stream mirror consumer requires flow control ack policy"
    )
    SOURCE_DURABLE_CONSUMER_CFG_INVALID = ErrorSpec(400, 10215, "stream source consumer config is invalid")
    SOURCE_DURABLE_CONSUMER_DUPLICATE_DETECTED = ErrorSpec(
        400, 10216, "duplicate stream source consumer detected"
    )
    SOURCE_CONSUMER_REQUIRES_ACK_FC = ErrorSpec(
        400, 10217, "stream source consumer requires flow control ack policy"
    )
    CONSUMER_ACK_FC_REQUIRES_PUSH = ErrorSpec(
        400, 10218, "flow control ack policy requires a push based consumer"
    )
    CONSUMER_ACK_FC_REQUIRES_FC = ErrorSpec(400, 10219, "flow control ack policy requires flow control")
    CONSUMER_ACK_FC_REQUIRES_MAX_ACK_PENDING = ErrorSpec(
        400, 10220, "flow control ack policy requires max ack pending"
    )
    CONSUMER_ACK_FC_REQUIRES_NO_ACK_WAIT = ErrorSpec(
        400, 10221, "flow control ack policy requires unset ack wait"
    )
    CONSUMER_ACK_FC_REQUIRES_NO_MAX_DELIVER = ErrorSpec(
        400, 10222, "flow control ack policy requires unset max deliver"
    )
    MESSAGE_SCHEDULES_TIME_ZONE_INVALID = ErrorSpec(400, 10223, "message schedules time zone is invalid")
    CLUSTER_RESCUE = ErrorSpec(400, 10224, "JetStream system rescue not applied: {err}")
    CONSUMER_STREAM_IDENTITY_MISMATCH = ErrorSpec(
        400, 10225, "consumer's stream identity does not match: {msg}"
    )
    STREAM_RECONFIGURE_IN_PROGRESS = ErrorSpec(400, 10226, "stream reconfiguration already in progress")
    MESSAGE_SOURCE_HDR_NOT_ALLOWED = ErrorSpec(400, 10227, "message stream source header is not allowed")
