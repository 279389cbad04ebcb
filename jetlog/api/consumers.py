"""Consumer endpoints: ``CONSUMER.CREATE`` (all subject forms), ``DURABLE.CREATE``, ``INFO``,
``DELETE``, ``NAMES``, ``LIST``, ``PAUSE``, ``UNPIN``, ``MSG.NEXT``, the clustered-only
``LEADER.STEPDOWN`` and the refusal of ``RESET`` (:mod:`jetlog.api.unsupported`).

Config validation, defaults and error texts come from ``jetlog.consumer.config`` (checked
byte-for-byte against nats-server); this module applies the result to the engine.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from jetlog.api import models as M
from jetlog.api import models_consumer as MC
from jetlog.api import unsupported
from jetlog.api.models_gojson import go_quote
from jetlog.consumer import frames as F
from jetlog.consumer import wire as W
from jetlog.consumer.config import prepare_consumer_create, valid_group_name, with_pause
from jetlog.consumer.config_defaults import ServerLimits
from jetlog.consumer.pull import Waiting
from jetlog.errors import ApiError, E, JetlogError
from jetlog.wire.timefmt import format_time, parse_time

if TYPE_CHECKING:
    from jetlog.api.host import ApiHost, ApiReplies
    from jetlog.consumer.consumer import Consumer

log = logging.getLogger("jetlog.api")

NAMES_LIMIT = 1024
LIST_LIMIT = 256
ZERO = "0001-01-01T00:00:00Z"


def pull_from_body(c: Consumer, body: bytes, hdr: bytes = b"") -> Waiting | bytes:
    """A waiting request from a ``MSG.NEXT`` body, or the status header that rejects it."""
    level = None
    if hdr:
        from jetlog.wire import headers as H

        level = H.get(hdr, H.REQUIRED_API_LEVEL)
    r = W.parse_pull_request(body, c.config, required_api_level=level)
    if isinstance(r, W.Rejection):
        return r.header
    now = time.time_ns()
    batch = r.batch if r.batch > 0 else 1
    if r.expires < 0:
        return F.request_timeout(batch, r.max_bytes)
    return Waiting(
        reply="",
        batch=batch,
        max_bytes=max(r.max_bytes, 0),  # nats-server: a negative budget is no budget
        no_wait=r.no_wait,
        expires=now + r.expires if r.expires else 0,
        heartbeat=r.idle_heartbeat,
    )


PRIORITY_GROUPS_UNSUPPORTED = "priority groups are not supported by jetlog (priority_policy {policy})"


def refuse_priority_groups(config: Any) -> None:
    """jetlog does not implement priority groups (overflow, pinned_client, prioritized): a
    consumer that asks for them is refused with ``400/10094`` once nats-server's own checks of
    the fields passed (so an invalid group config gets nats-server's error), rather than
    created and then delivered to as if it had no policy."""
    policy = getattr(config, "priority_policy", "none")
    if policy != "none":
        raise E.CONSUMER_INVALID_POLICY(err=PRIORITY_GROUPS_UNSUPPORTED.format(policy=go_quote(policy)))


def _seq_info(cseq: int, sseq: int, active: int) -> MC.SequenceInfo:
    return MC.SequenceInfo(
        consumer_seq=cseq, stream_seq=sseq, last_active=format_time(active) if active else None
    )


def consumer_info(c: Consumer) -> MC.ConsumerInfo:
    """ConsumerInfo of a live consumer (spec §3)."""
    st = c.state
    now = time.time_ns()
    paused = c.paused_until > now
    return MC.ConsumerInfo(
        stream_name=c.stream.name,
        name=c.name,
        created=format_time(c.created),
        config=c.config,
        delivered=_seq_info(st.dseq, st.sseq, st.last_delivered_ts),
        ack_floor=_seq_info(st.floor_dseq, st.floor_sseq, st.last_ack_ts),
        num_ack_pending=st.num_ack_pending,
        num_redelivered=st.num_redelivered,
        num_waiting=len(c.waiting),
        num_pending=c.num_pending(),
        push_bound=bool(c.p.push and c.active),
        paused=paused,
        pause_remaining=c.paused_until - now if paused else 0,
        ts=format_time(now),
    )


class ConsumerConfigsView(Mapping[str, Any]):
    """A stream's consumers as name -> config, read through (no copy: a create must not cost
    time in the number of consumers the stream already has)."""

    __slots__ = ("_consumers",)

    def __init__(self, consumers: Mapping[str, Any]) -> None:
        self._consumers = consumers

    def __getitem__(self, name: str) -> Any:
        return self._consumers[name].config

    def __iter__(self) -> Iterator[str]:
        return iter(self._consumers)

    def __len__(self) -> int:
        return len(self._consumers)


class ConsumerApi:
    """Handlers for ``$JS.API.CONSUMER.*``."""

    def __init__(self, node: ApiHost, router: ApiReplies) -> None:
        self.node = node
        self.router = router
        self._limits = ServerLimits(default_max_consumers=node.cfg.api.default_max_consumers)

    @property
    def version(self) -> str:
        return self.node.client.server_version

    def _reply(self, reply: str | None, body: bytes, *, error: bool = False) -> None:
        self.router.reply_json(reply, body, error=error, ordered=True)

    def _reply_error(self, reply: str | None, cls: type[Any], err: JetlogError) -> None:
        self._reply(reply, M.encode_error(cls, err.to_api()), error=True)

    def _stream_consumers(self, stream: str) -> tuple[Any, Any]:
        s = self.node.streams.get(stream) if self.node.streams else None
        if s is None or s.consumers is None:
            raise E.STREAM_NOT_FOUND()
        return s, s.consumers

    def _consumer(self, stream: str, name: str) -> Consumer:
        _, cset = self._stream_consumers(stream)
        c = cset.consumers.get(name)
        if c is None:
            raise E.CONSUMER_NOT_FOUND()
        return c

    # ---- dispatch --------------------------------------------------------------------------

    def dispatch(
        self, rest: list[str], reply: str | None, hdr: bytes, data: bytes, level: str | None
    ) -> None:
        """``CONSUMER.<op>...`` (``rest`` starts at ``CONSUMER``)."""
        if len(rest) < 3:
            return
        op = rest[1]
        if op == "CREATE" or (op == "DURABLE" and len(rest) >= 3 and rest[2] == "CREATE"):
            self.router.spawn(self._create(rest, reply, data, level), "CONSUMER.CREATE")
            return
        if op == "MSG" and len(rest) == 5 and rest[2] == "NEXT":
            self._next(rest[3], rest[4], reply, hdr, data)
            return
        if op == "LEADER" and len(rest) == 5 and rest[2] == "STEPDOWN":
            body: dict[str, Any] = {
                "type": "io.nats.jetstream.api.v1.consumer_leader_stepdown_response",
                "error": E.CLUSTER_REQUIRED().to_dict(),
            }
            self._reply(reply, M.encode_json_ordered(body), error=True)
            return
        too_new = W.required_api_level_rejected(level)
        if op in ("NAMES", "LIST") and len(rest) == 3:
            self._names_or_list(op, rest[2], reply, data, too_new)
        elif op == "INFO" and len(rest) == 4:
            self._info(rest[2], rest[3], reply, data, too_new)
        elif op == "DELETE" and len(rest) == 4:
            self.router.spawn(self._delete(rest[2], rest[3], reply, data, too_new), "CONSUMER.DELETE")
        elif op == "PAUSE" and len(rest) == 4:
            self._pause(rest[2], rest[3], reply, data, too_new)
        elif op == "UNPIN" and len(rest) == 4:
            self._unpin(rest[2], rest[3], reply, data, too_new)
        elif op == "RESET" and len(rest) == 4:
            self._reset(rest[2], rest[3], reply, data, too_new)

    # ---- create ----------------------------------------------------------------------------

    async def _create(self, rest: list[str], reply: str | None, data: bytes, level: str | None) -> None:
        tokens = ["$JS", "API", *rest]
        cls = MC.ConsumerCreateResponse
        leaf = self.node.leaf

        def lookup(stream: str) -> tuple[Any, Mapping[str, Any]] | None:
            s = self.node.streams.get(stream) if self.node.streams else None
            if s is None or s.consumers is None:
                return None
            return s.config, ConsumerConfigsView(s.consumers.consumers)

        try:
            plan = prepare_consumer_create(
                tokens,
                data,
                lookup=lookup,
                required_api_level=level,
                limits=self._limits,
                has_interest=leaf.has_interest,
            )
            if plan is None:
                return
            refuse_priority_groups(plan.config)
            _s, cset = self._stream_consumers(plan.stream)
            existing = cset.consumers.get(plan.name)
            if existing is not None:
                if plan.existing is not None and plan.config != existing.config:
                    cset.update(existing, plan.config)
                c = existing
            else:
                c = cset.create(plan.name, plan.config, plan.durable)
            if cset.clog is not None and c.cid:
                await cset.clog.sync()
        except JetlogError as e:
            self._reply_error(reply, cls, e)
            return
        if plan.empty_reply:
            self._reply(reply, b"")
            return
        info = consumer_info(c)
        self._reply(reply, M.encode_json(MC.info_response(cls, info, version=self.version)))

    # ---- info / delete / names / list ------------------------------------------------------------

    def _info(self, stream: str, name: str, reply: str | None, data: bytes, too_new: bool) -> None:
        cls = MC.ConsumerInfoResponse
        try:
            M.check_empty_request(data)  # before the API level, as nats-server does (INFO only)
            if too_new:
                raise E.REQUIRED_API_LEVEL()
            c = self._consumer(stream, name)
        except JetlogError as e:
            self._reply_error(reply, cls, e)
            return
        self._reply(reply, M.encode_json(MC.info_response(cls, consumer_info(c), version=self.version)))

    async def _delete(self, stream: str, name: str, reply: str | None, data: bytes, too_new: bool) -> None:
        cls = MC.ConsumerDeleteResponse
        try:
            if too_new:
                raise E.REQUIRED_API_LEVEL()
            M.check_empty_request(data)
            _, cset = self._stream_consumers(stream)
            c = cset.consumers.get(name)
            if c is None:
                raise E.CONSUMER_NOT_FOUND()
            cset.delete(name)
            if cset.clog is not None and c.cid:
                await cset.clog.sync()
            await s_flush(cset)
        except JetlogError as e:
            self._reply_error(reply, cls, e)
            return
        self._reply(reply, M.encode_json(cls(success=True)))

    def _names_or_list(self, op: str, stream: str, reply: str | None, data: bytes, too_new: bool) -> None:
        cls = MC.ConsumerNamesResponse if op == "NAMES" else MC.ConsumerListResponse
        try:
            if too_new:
                raise E.REQUIRED_API_LEVEL()
            req = MC.ConsumersRequest()
            if M.is_json_object_or_array(data):
                req = MC.decode_consumer_request(MC.ConsumersRequest, data)
            _, cset = self._stream_consumers(stream)
        except JetlogError as e:
            self._reply_error(reply, cls, e)
            return
        names = sorted(cset.consumers, key=lambda n: n.encode())
        total = len(names)
        offset = min(max(req.offset, 0), total)
        if op == "NAMES":
            page = names[offset : offset + NAMES_LIMIT]
            out: Any = MC.ConsumerNamesResponse(total=total, offset=offset, limit=NAMES_LIMIT, consumers=page)
        else:
            page = names[offset : offset + LIST_LIMIT]
            infos = [consumer_info(cset.consumers[n]) for n in page]
            out = MC.ConsumerListResponse(total=total, offset=offset, limit=LIST_LIMIT, consumers=infos)
        self._reply(reply, M.encode_json(out))

    # ---- pause / unpin ---------------------------------------------------------------------

    def _pause(self, stream: str, name: str, reply: str | None, data: bytes, too_new: bool) -> None:
        cls = MC.ConsumerPauseResponse
        try:
            # nats-server: a body that is not a JSON object or array is no request (resume);
            # the body is decoded before the API level is checked.
            req = MC.ConsumerPauseRequest()
            if M.is_json_object_or_array(data):
                req = MC.decode_consumer_request(MC.ConsumerPauseRequest, data)
            if too_new:
                raise E.REQUIRED_API_LEVEL()
            c = self._consumer(stream, name)
        except JetlogError as e:
            self._reply_error(reply, cls, e)
            return
        # nats-server keeps the deadline (a past one too) in the consumer's config; only the
        # zero time clears it.
        pause = req.pause_until
        stored = None if not pause or MC.time_ns(pause) == MC.time_ns(ZERO) else MC.go_time(pause, utc=True)
        until = parse_time(stored) if stored else 0
        c.host.update(c, with_pause(c.config, stored))
        c.set_pause(until)
        c.host.advisory_pause(c)
        now = time.time_ns()
        if c.paused_until > now:
            body = cls(paused=True, pause_until=stored or ZERO, pause_remaining=c.paused_until - now)
        else:
            body = cls(paused=False, pause_until=stored or ZERO)
        self._reply(reply, M.encode_json(body))

    def _unpin(self, stream: str, name: str, reply: str | None, data: bytes, too_new: bool) -> None:
        # nats-server's order: API level, body (json.Unmarshal), group, stream, consumer, group
        # membership.
        cls = MC.ConsumerUnpinResponse
        try:
            if too_new:
                raise E.REQUIRED_API_LEVEL()
            req = MC.decode_consumer_request(MC.ConsumerUnpinRequest, data, strict=False, stream=False)
            if not req.group:
                raise E.INVALID_JSON(err="consumer group not specified")
            if not valid_group_name(req.group):
                raise E.CONSUMER_INVALID_GROUP_NAME()
            self._consumer(stream, name)
            # jetlog refuses priority policies (README), so no consumer has a group to unpin.
            raise E.CONSUMER_INVALID_PRIORITY_GROUP()
        except JetlogError as e:
            self._reply_error(reply, cls, e)

    def _reset(self, stream: str, name: str, reply: str | None, data: bytes, too_new: bool) -> None:
        if not reply:
            return
        s = self.node.streams.get(stream) if self.node.streams else None
        if s is None or s.consumers is None or s.consumers.consumers.get(name) is None:
            # nats-server answers RESET from the consumer's own subscription; its API
            # dispatcher has no handler for it, so an unknown consumer gets no reply at all.
            return
        self.router.reply_json(reply, unsupported.consumer_reset(data, too_new), error=True)

    # ---- pull ------------------------------------------------------------------------------

    def _next(self, stream: str, name: str, reply: str | None, hdr: bytes, data: bytes) -> None:
        if not reply:
            return
        c = None
        s = self.node.streams.get(stream) if self.node.streams else None
        cset = s.consumers if s is not None else None
        if cset is not None:
            c = cset.consumers.get(name)
        if c is None or cset is None:
            # nats-server subscribes each consumer's exact MSG.NEXT subject: nobody answers.
            self.node.egress.send(reply, b"", F.no_responders(f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{name}"))
            return
        cset.pull_request(c, reply, data, hdr)


async def s_flush(cset: Any) -> None:
    """Make the stream's removals (interest re-evaluation after a delete) durable."""
    try:
        await cset.stream.sync()
    except JetlogError as e:
        raise ApiError(E.STREAM_STORE_FAILED, err=str(e)) from e
