"""The cluster metadata state machine (docs/cluster.md §2-§3): pure, deterministic and total.

Every replica of the metadata Raft group applies the same log entries to its own ``MetaState``
and must end in the same state, so ``apply`` follows three rules (``shared/notes/pysyncobj.md``
§5.3):

- **deterministic**: the result depends only on the state and the entry bytes. No clock (time
  comes from the command: ``created``, the envelope's ``ts``), no randomness, no iteration over
  anything whose order could differ between replicas (streams are kept sorted by name, the
  request-id memory in insertion order, which is log order).
- **total**: ``apply`` never raises. pysyncobj re-applies an entry whose method raised, forever,
  on every node (a wedged cluster), so every failure - undecodable bytes, an unknown command, a
  bug - becomes a rejected ``Result`` that is the same on every replica.
- **idempotent by request id**: the proposer does not always learn whether its entry was
  committed (leader change, timeout); it then proposes the *same* envelope again. The state
  remembers the result of the last ``DEDUP_MAX`` request ids (in the snapshot too) and answers a
  repeat with the first result instead of applying it twice.

Every controller decision is a compare-and-set: ``ElectLeader`` names the epoch it expects,
``AlterIsr`` the leader epoch and ISR version. A decision taken on stale state (a deposed Raft
leader that has not noticed yet) is rejected when applied.

Thread model (``jetlog.cluster.raft``): ``apply_entry``/``restore`` run on pysyncobj's tick
thread; readers on the event loop use ``get``/``streams``. ``streams`` is copy-on-write (a new
dict per change) and ``StreamAssignment`` is frozen, so a reader sees a consistent map without
locking; the lock only orders ``apply``/``snapshot``/``restore`` among themselves.
"""

from __future__ import annotations

import hashlib
import threading
import uuid
from typing import Final

import msgspec

from jetlog.errors import ClusterError

SCHEMA_VERSION: Final = 1
"""Envelope version this code applies; any other is rejected (never guessed at)."""

DEDUP_MAX: Final = 4096
"""Request ids whose result is remembered. A constant (not a setting): every replica must evict
the same ids at the same entry, or a late repeat would be applied on some and not on others."""


class StreamAssignment(msgspec.Struct, frozen=True, kw_only=True):
    """One stream's replicated metadata. Replaced whole on every change (never mutated)."""

    name: str
    config: bytes
    """The stored stream config JSON, opaque here."""
    created: int
    """Creation time in ns (from the proposer)."""
    replicas: list[str]
    """Node names holding a copy, in preference order."""
    leader: str = ""
    """Node name of the stream leader ("" = none)."""
    epoch: int = 0
    """Leader epoch: bumped by every leader change; the data path fences on it."""
    isr: list[str] = msgspec.field(default_factory=list)
    """In-sync replicas, always in ``replicas`` order."""
    isr_version: int = 0
    """Bumped by every ISR change (the CAS token of ``AlterIsr``)."""


class _Cmd(msgspec.Struct, tag_field="op", forbid_unknown_fields=True, frozen=True, kw_only=True):
    pass


class CreateStream(_Cmd, tag="create_stream", frozen=True):
    """Create a stream at epoch 1 with every replica in sync. Repeating it with the same config and
    replicas is a no-op success; anything else for an existing name is rejected ``exists``."""

    name: str
    config: bytes
    created: int
    replicas: list[str]
    leader: str


class UpdateStream(_Cmd, tag="update_stream", frozen=True):
    """Replace the config and, when ``replicas`` is given and differs, the replica set: the leader
    stays if still a replica (else an in-sync new replica takes over at epoch + 1), the ISR is cut
    to the new replicas (never empty: the leader stays in it) and its version bumped."""

    name: str
    config: bytes
    replicas: list[str] | None = None


class DeleteStream(_Cmd, tag="delete_stream", frozen=True):
    """Remove a stream's metadata."""

    name: str


class ElectLeader(_Cmd, tag="elect_leader", frozen=True):
    """CAS on ``epoch``: set leader and ISR, epoch + 1, ISR version + 1."""

    name: str
    leader: str
    isr: list[str]
    expect_epoch: int


class AlterIsr(_Cmd, tag="alter_isr", frozen=True):
    """CAS on (``epoch``, ``isr_version``): set the ISR (the leader stays in it), version + 1."""

    name: str
    leader_epoch: int
    expect_isr_version: int
    isr: list[str]


class Barrier(_Cmd, tag="barrier", frozen=True):
    """No change. Once applied locally, every entry committed before it is applied too."""


Command = CreateStream | UpdateStream | DeleteStream | ElectLeader | AlterIsr | Barrier


class Envelope(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """What a Raft log entry carries (msgpack-encoded)."""

    v: int
    req_id: str
    ts: int
    """Proposer's wall clock in ns (informational; never read by ``apply``)."""
    cmd: Command


class Result(msgspec.Struct, frozen=True, kw_only=True):
    """The outcome of one applied entry, identical on every replica.

    ``code`` is "" on success, else a stable reason: ``malformed``, ``unsupported_version``,
    ``invalid``, ``exists``, ``not_found``, ``stale_epoch``, ``stale_isr_version``, ``internal``.
    ``epoch``/``isr_version`` are the stream's values after the command (the current ones on a
    rejection, so a CAS loser learns what it raced with); ``index`` is the log index at which the
    request was first applied.
    """

    ok: bool
    code: str = ""
    error: str = ""
    epoch: int = 0
    isr_version: int = 0
    index: int = 0


class _Snapshot(msgspec.Struct, forbid_unknown_fields=True):
    v: int
    applied_index: int
    streams: list[StreamAssignment]
    dedup: list[tuple[str, Result]]


class MetaSnapshotError(ClusterError):
    """A metadata snapshot could not be decoded (never applied half-way)."""


_ENV_ENC = msgspec.msgpack.Encoder()
_ENV_DEC = msgspec.msgpack.Decoder(Envelope)
_SNAP_ENC = msgspec.msgpack.Encoder()
_SNAP_DEC = msgspec.msgpack.Decoder(_Snapshot)


def new_req_id() -> str:
    """A fresh request id (random: made by the proposer, never inside ``apply``)."""
    return uuid.uuid4().hex


def encode_envelope(cmd: Command, req_id: str, ts: int) -> bytes:
    """The bytes a proposer submits for ``cmd`` (re-submit the same bytes to retry)."""
    return _ENV_ENC.encode(Envelope(v=SCHEMA_VERSION, req_id=req_id, ts=ts, cmd=cmd))


class _Reject(Exception):
    """Internal: a deterministic rejection (code, text)."""

    def __init__(self, code: str, text: str, current: StreamAssignment | None = None) -> None:
        super().__init__(text)
        self.code = code
        self.text = text
        self.current = current


def _node_list(values: list[str], what: str) -> list[str]:
    if not values:
        raise _Reject("invalid", f"{what} must not be empty")
    for v in values:
        if not v:
            raise _Reject("invalid", f"{what} contains an empty node name")
    if len(set(values)) != len(values):
        raise _Reject("invalid", f"{what} lists a node twice")
    return list(values)


def _isr_in(replicas: list[str], isr: list[str], leader: str) -> list[str]:
    """``isr`` validated against ``replicas`` and returned in replica order."""
    _node_list(isr, "isr")
    rs = set(replicas)
    outside = [n for n in isr if n not in rs]
    if outside:
        raise _Reject("invalid", f"isr member {outside[0]!r} is not a replica")
    if leader not in isr:
        raise _Reject("invalid", f"leader {leader!r} is not in the isr")
    members = set(isr)
    return [r for r in replicas if r in members]


class MetaState:
    """The replicated metadata: ``streams[name] -> StreamAssignment`` plus request-id memory."""

    def __init__(self) -> None:
        self._streams: dict[str, StreamAssignment] = {}
        self._dedup: dict[str, Result] = {}
        self._lock = threading.Lock()
        self.applied_index = 0
        """Log index of the last entry applied (0: none)."""

    # ---------------------------------------------------------------- reads (any thread)
    @property
    def streams(self) -> dict[str, StreamAssignment]:
        """The current map, sorted by name. Treat as read-only: it is replaced, not mutated."""
        return self._streams

    def get(self, name: str) -> StreamAssignment | None:
        """The assignment of stream ``name`` (None if absent)."""
        return self._streams.get(name)

    def state_hash(self) -> str:
        """sha256 of the canonical snapshot: equal on replicas that applied the same log."""
        return hashlib.sha256(self.snapshot()).hexdigest()

    # ---------------------------------------------------------------------- apply
    def apply(self, raw: bytes, index: int | None = None) -> Result:
        """Apply one log entry (see ``apply_entry``) and return its result."""
        return self.apply_entry(raw, index)[0]

    def apply_entry(self, raw: bytes, index: int | None = None) -> tuple[Result, tuple[str, ...]]:
        """Apply the entry at log ``index`` (default: the next one); never raises.

        Returns the result and the names of the streams it changed (sorted; empty when nothing
        changed, e.g. a rejection, a barrier or a repeated request id).
        """
        with self._lock:
            try:
                idx = self.applied_index + 1 if index is None else int(index)
                self.applied_index = idx
            except Exception as e:  # an absurd index: still never raise
                return Result(ok=False, code="internal", error=f"bad index: {e!r}"), ()
            try:
                env = _ENV_DEC.decode(raw)
            except Exception as e:  # msgspec errors, or raw not even bytes
                return Result(ok=False, code="malformed", error=f"undecodable entry: {e}", index=idx), ()
            try:
                if env.v != SCHEMA_VERSION:
                    res: Result = Result(
                        ok=False,
                        code="unsupported_version",
                        error=f"envelope version {env.v} (this node applies {SCHEMA_VERSION})",
                        index=idx,
                    )
                    changed: tuple[str, ...] = ()
                else:
                    first = self._dedup.get(env.req_id) if env.req_id else None
                    if first is not None:
                        return first, ()
                    res, changed = self._dispatch(env.cmd, idx)
            except Exception as e:  # a bug in a handler: deterministic rejection, not a wedge
                res, changed = (
                    Result(ok=False, code="internal", error=f"{type(e).__name__}: {e}", index=idx),
                    (),
                )
            if env.req_id and not isinstance(env.cmd, Barrier):
                self._remember(env.req_id, res)
            return res, changed

    def _remember(self, req_id: str, res: Result) -> None:
        self._dedup[req_id] = res
        while len(self._dedup) > DEDUP_MAX:
            del self._dedup[next(iter(self._dedup))]  # oldest first: insertion = log order

    def _dispatch(self, cmd: Command, idx: int) -> tuple[Result, tuple[str, ...]]:
        try:
            if isinstance(cmd, Barrier):
                return Result(ok=True, index=idx), ()
            if isinstance(cmd, CreateStream):
                sa, changed = self._create(cmd)
            elif isinstance(cmd, UpdateStream):
                sa, changed = self._update(cmd)
            elif isinstance(cmd, DeleteStream):
                sa = self._existing(cmd.name)
                self._put(cmd.name, None)
                return Result(ok=True, epoch=sa.epoch, isr_version=sa.isr_version, index=idx), (cmd.name,)
            elif isinstance(cmd, ElectLeader):
                sa = self._elect(cmd)
                changed = True
            elif isinstance(cmd, AlterIsr):
                sa = self._alter_isr(cmd)
                changed = True
            else:  # unreachable with the typed decoder; kept so a new command cannot raise
                return Result(
                    ok=False, code="invalid", error=f"unknown command {type(cmd).__name__}", index=idx
                ), ()
        except _Reject as r:
            cur = r.current
            return (
                Result(
                    ok=False,
                    code=r.code,
                    error=r.text,
                    epoch=cur.epoch if cur else 0,
                    isr_version=cur.isr_version if cur else 0,
                    index=idx,
                ),
                (),
            )
        if changed:
            self._put(sa.name, sa)
        return Result(ok=True, epoch=sa.epoch, isr_version=sa.isr_version, index=idx), (
            (sa.name,) if changed else ()
        )

    def _put(self, name: str, sa: StreamAssignment | None) -> None:
        # Copy-on-write, kept sorted: readers on other threads never see a map being changed,
        # and every replica (log-built or snapshot-restored) iterates streams in one order.
        new = dict(self._streams)
        if sa is None:
            new.pop(name, None)
        else:
            new[name] = sa
        self._streams = dict(sorted(new.items()))

    def _existing(self, name: str) -> StreamAssignment:
        sa = self._streams.get(name)
        if sa is None:
            raise _Reject("not_found", f"stream {name!r} not found")
        return sa

    def _create(self, c: CreateStream) -> tuple[StreamAssignment, bool]:
        if not c.name:
            raise _Reject("invalid", "stream name must not be empty")
        replicas = _node_list(c.replicas, "replicas")
        if c.leader not in replicas:
            raise _Reject("invalid", f"leader {c.leader!r} is not a replica")
        cur = self._streams.get(c.name)
        if cur is not None:
            if cur.config == c.config and cur.replicas == replicas:
                return cur, False  # a repeat of the create that made it: success, no change
            raise _Reject("exists", f"stream {c.name!r} already exists", cur)
        sa = StreamAssignment(
            name=c.name,
            config=c.config,
            created=c.created,
            replicas=replicas,
            leader=c.leader,
            epoch=1,
            isr=list(replicas),
            isr_version=1,
        )
        return sa, True

    def _update(self, c: UpdateStream) -> tuple[StreamAssignment, bool]:
        cur = self._existing(c.name)
        replicas = cur.replicas if c.replicas is None else _node_list(c.replicas, "replicas")
        if replicas == cur.replicas:
            if c.config == cur.config:
                return cur, False
            return msgspec.structs.replace(cur, config=c.config), True
        kept = set(cur.isr)
        isr = [r for r in replicas if r in kept]
        leader, epoch = cur.leader, cur.epoch
        if leader not in replicas:
            # Prefer a replica that holds the data (in the ISR); only when none survives does the
            # first new replica take over. A new leader always means a new epoch (fencing).
            leader = isr[0] if isr else replicas[0]
            epoch += 1
        if leader not in isr:
            members = set(isr) | {leader}
            isr = [r for r in replicas if r in members]
        sa = msgspec.structs.replace(
            cur,
            config=c.config,
            replicas=replicas,
            leader=leader,
            epoch=epoch,
            isr=isr,
            isr_version=cur.isr_version + 1,
        )
        return sa, True

    def _elect(self, c: ElectLeader) -> StreamAssignment:
        cur = self._existing(c.name)
        if c.expect_epoch != cur.epoch:
            raise _Reject("stale_epoch", f"epoch is {cur.epoch}, expected {c.expect_epoch}", cur)
        if c.leader not in cur.replicas:
            raise _Reject("invalid", f"leader {c.leader!r} is not a replica", cur)
        try:
            isr = _isr_in(cur.replicas, c.isr, c.leader)
        except _Reject as r:
            raise _Reject(r.code, r.text, cur) from None
        return msgspec.structs.replace(
            cur, leader=c.leader, isr=isr, epoch=cur.epoch + 1, isr_version=cur.isr_version + 1
        )

    def _alter_isr(self, c: AlterIsr) -> StreamAssignment:
        cur = self._existing(c.name)
        if c.leader_epoch != cur.epoch:
            raise _Reject("stale_epoch", f"epoch is {cur.epoch}, expected {c.leader_epoch}", cur)
        if c.expect_isr_version != cur.isr_version:
            raise _Reject(
                "stale_isr_version", f"isr version is {cur.isr_version}, expected {c.expect_isr_version}", cur
            )
        try:
            isr = _isr_in(cur.replicas, c.isr, cur.leader)
        except _Reject as r:
            raise _Reject(r.code, r.text, cur) from None
        return msgspec.structs.replace(cur, isr=isr, isr_version=cur.isr_version + 1)

    # ------------------------------------------------------------------- snapshots
    def snapshot(self) -> bytes:
        """The whole state as canonical msgpack (no pickle)."""
        with self._lock:
            snap = _Snapshot(
                v=SCHEMA_VERSION,
                applied_index=self.applied_index,
                streams=list(self._streams.values()),
                dedup=list(self._dedup.items()),
            )
        return _SNAP_ENC.encode(snap)

    def restore(self, data: bytes) -> tuple[str, ...]:
        """Replace the whole state with a ``snapshot()``; returns the names present before or after
        (what a listener must re-derive). Raises ``MetaSnapshotError`` and changes nothing when
        ``data`` is not a valid snapshot."""
        try:
            snap = _SNAP_DEC.decode(data)
        except Exception as e:
            raise MetaSnapshotError(f"undecodable metadata snapshot: {e}") from e
        if snap.v != SCHEMA_VERSION:
            raise MetaSnapshotError(f"metadata snapshot version {snap.v} (this node reads {SCHEMA_VERSION})")
        streams = {sa.name: sa for sa in sorted(snap.streams, key=lambda s: s.name)}
        with self._lock:
            before = set(self._streams)
            self._streams = streams
            self._dedup = dict(snap.dedup)
            self.applied_index = snap.applied_index
        return tuple(sorted(before | set(streams)))
