"""Stream endpoints: ``$JS.API.INFO``, ``STREAM.CREATE/UPDATE/INFO/DELETE/PURGE/NAMES/LIST``,
``STREAM.MSG.GET/DELETE``, the clustered-only stream subjects answered as a single server, and
the refusals of :mod:`jetlog.api.unsupported` (snapshot, restore, cancel move).

Validation order follows nats-server (spec §3.2, §3.4, §6) because it decides which error a
client sees. Responses are built in nats-server's key order.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import time
from typing import TYPE_CHECKING, Any

from jetlog.api import models as M
from jetlog.api import unsupported
from jetlog.errors import ApiError, E, JetlogError
from jetlog.observe import advisory
from jetlog.stream import config as C
from jetlog.wire.subjects import is_valid_subject, printable_subject
from jetlog.wire.timefmt import format_time

if TYPE_CHECKING:
    from jetlog.api.host import ApiHost, ApiReplies
    from jetlog.stream.stream import Stream

log = logging.getLogger("jetlog.api")

T = "io.nats.jetstream.api.v1."
NAMES_LIMIT = 1024
LIST_LIMIT = 256
SUBJECTS_LIMIT = 100_000
_is_empty = M.is_empty_request
_wants_json = M.is_json_object_or_array


class StreamApi:
    """Handlers for the stream-level API."""

    def __init__(self, node: ApiHost, router: ApiReplies) -> None:
        self.node = node
        self.router = router
        # Catalog changes (create/update/delete) are checked and applied under one lock, so
        # two concurrent creates of one name cannot both pass the existence check.
        self._catalog = asyncio.Lock()
        self.cluster_info: Any = None
        """Cluster: ``cluster_info(name) -> dict``, STREAM.INFO's ``cluster`` block."""

    def _cluster_block(self, name: str) -> dict[str, Any]:
        if self.cluster_info is not None:
            return dict(self.cluster_info(name))
        return {"leader": self.node.cfg.name}

    # ---- helpers ---------------------------------------------------------------------------

    @property
    def version(self) -> str:
        return self.node.client.server_version

    def error_body(self, rtype: str, err: ApiError, **extra: Any) -> bytes:
        """An error response: type, error object, then the endpoint's non-omitempty fields."""
        body: dict[str, Any] = {"type": T + rtype, "error": err.to_dict()}
        body.update(extra)
        return M.encode_json_ordered(body)

    def _err(self, reply: str | None, rtype: str, err: JetlogError, **extra: Any) -> None:
        self.router.reply_json(reply, self.error_body(rtype, err.to_api(), **extra), error=True)

    def _ok(self, reply: str | None, body: dict[str, Any], *, count: bool = True) -> None:
        self.router.reply_json(reply, M.encode_json_ordered(body), count=count)

    def config_dict(self, cfg: Any, *, runtime_meta: bool = True) -> Any:
        """The config as returned by the API (``_nats.ver``/``_nats.level`` added when asked)."""
        return M.stream_config_to_builtins(cfg, self.version if runtime_meta else None)

    def state_dict(
        self,
        stream: Stream,
        *,
        subjects_filter: str | None = None,
        offset: int = 0,
        deleted_details: bool = False,
    ) -> tuple[dict[str, Any], int, int]:
        """StreamState plus (total, offset) of the subjects page."""
        st = stream.store.state()
        first_seq = st.first_seq
        if st.last_seq == 0 and not stream.config.first_seq:
            first_seq = 0  # a never-written stream reports 0/0, like nats-server
        state: dict[str, Any] = {
            "messages": st.messages,
            "bytes": st.bytes,
            "first_seq": first_seq,
            "first_ts": format_time(st.first_ts),
            "last_seq": st.last_seq,
            "last_ts": format_time(st.last_ts),
        }
        total = 0
        if subjects_filter:
            subjects = stream.store.subjects_state(None if subjects_filter == ">" else subjects_filter)
            names = sorted(subjects)
            total = len(names)
            offset = min(max(offset, 0), total)
            page = names[offset : offset + SUBJECTS_LIMIT]
            if page:
                state["num_subjects"] = st.num_subjects
                state["subjects"] = {printable_subject(n): subjects[n].msgs for n in page}
            elif st.num_subjects:
                state["num_subjects"] = st.num_subjects
        elif st.num_subjects:
            state["num_subjects"] = st.num_subjects
        if st.num_deleted:
            state["num_deleted"] = st.num_deleted
            if deleted_details:
                state["deleted"] = stream.store.deleted_seqs()
        if st.lost_seqs:
            state["lost"] = {"msgs": list(st.lost_seqs), "bytes": st.lost_bytes}
        state["consumer_count"] = stream.consumer_count
        return state, total, offset

    def info_dict(self, stream: Stream, *, cluster: bool, runtime_meta: bool = True) -> dict[str, Any]:
        """StreamInfo (config, created, state, cluster?, ts)."""
        state, _, _ = self.state_dict(stream)
        info: dict[str, Any] = {
            "config": self.config_dict(stream.config, runtime_meta=runtime_meta),
            "created": format_time(stream.created),
            "state": state,
        }
        if cluster:
            info["cluster"] = self._cluster_block(stream.name)
        info["ts"] = format_time(time.time_ns())
        return info

    # ---- dispatch --------------------------------------------------------------------------

    def dispatch(self, rest: list[str], reply: str | None, hdr: bytes, data: bytes, too_new: bool) -> None:
        """STREAM.<op>[.<stream>]"""
        if len(rest) < 2:
            return
        op = rest[1]
        if op in ("NAMES", "LIST") and len(rest) == 2:
            rtype = "stream_names_response" if op == "NAMES" else "stream_list_response"
            if too_new:
                extra = {"total": 0, "offset": 0, "limit": 0, "streams": None}
                self._err(reply, rtype, E.REQUIRED_API_LEVEL(), **extra)
                return
            self._names_or_list(op, reply, data)
            return
        if op == "MSG" and len(rest) == 4 and rest[2] in ("GET", "DELETE"):
            name = rest[3]
            if rest[2] == "GET":
                self._after_commit(name, lambda: self._msg_get(name, reply, data, too_new), "MSG.GET")
            else:
                self.router.spawn(self._msg_delete(name, reply, data, too_new), "STREAM.MSG.DELETE")
            return
        if op == "LEADER" and len(rest) == 4 and rest[2] == "STEPDOWN":
            self._err(reply, "stream_leader_stepdown_response", E.CLUSTER_REQUIRED())
            return
        if op == "PEER" and len(rest) == 4 and rest[2] in ("REMOVE", "EVACUATE"):
            self._err(reply, "stream_remove_peer_response", E.CLUSTER_REQUIRED())
            return
        if len(rest) != 3:
            return
        name = rest[2]
        if op in unsupported.STREAM_OPS:
            exists = bool(self.node.streams and self.node.streams.get(name) is not None)
            self.router.reply_json(reply, unsupported.stream_op(op, name, data, too_new, exists), error=True)
            return
        if op == "CREATE":
            self.router.spawn(self._create(name, reply, data, too_new), "STREAM.CREATE")
        elif op == "UPDATE":
            self.router.spawn(self._update(name, reply, data, too_new), "STREAM.UPDATE")
        elif op == "INFO":
            self._after_commit(name, lambda: self._info(name, reply, data, too_new), "STREAM.INFO")
        elif op == "DELETE":
            self.router.spawn(self._delete(name, reply, data, too_new), "STREAM.DELETE")
        elif op == "PURGE":
            self.router.spawn(self._purge(name, reply, data, too_new), "STREAM.PURGE")

    def _after_commit(self, name: str, answer: Any, what: str) -> None:
        """Answer at once when the stream has nothing in flight, else after the commit in
        progress, so reads reflect exactly the durable state."""
        stream = self.node.streams.get(name) if self.node.streams else None
        if stream is None or stream.committed_seq >= stream.store.last_seq:
            answer()
            return

        async def later() -> None:
            try:
                await stream.wait_committed()
            except JetlogError as e:
                log.error("stream %s: flush before %s failed: %s", name, what, e)
            answer()

        self.router.spawn(later(), what)

    def advise(self, name: str, action: str) -> None:
        """The stream action advisory (``create``/``modify``/``delete``), sent before the reply
        as nats-server does."""
        advisory.stream_action(self.node.leaf, name, action, self.node.cfg.api.domain)

    # ---- account ---------------------------------------------------------------------------

    def account_info(self, reply: str | None, too_new: bool) -> None:
        """``$JS.API.INFO``."""
        if too_new:
            self._err(reply, "account_info_response", E.REQUIRED_API_LEVEL())
            return
        memory = storage = reserved_mem = reserved_sto = 0
        streams = self.node.streams.streams if self.node.streams else {}
        for s in streams.values():
            if s.config.storage == "memory":
                memory += s.store.bytes
                if s.config.max_bytes > 0:
                    reserved_mem += s.config.max_bytes
            else:
                storage += s.store.bytes
                if s.config.max_bytes > 0:
                    reserved_sto += s.config.max_bytes
        body: dict[str, Any] = {
            "type": T + "account_info_response",
            "memory": memory,
            "storage": storage,
            "reserved_memory": reserved_mem,
            "reserved_storage": reserved_sto,
            "streams": len(streams),
            "consumers": sum(s.consumer_count for s in streams.values()),
            "limits": {
                "max_memory": -1,
                "max_storage": -1,
                "max_streams": self.node.cfg.api.max_streams,
                "max_consumers": -1,
                "max_ack_pending": -1,
                "memory_max_stream_bytes": -1,
                "storage_max_stream_bytes": -1,
                "max_bytes_required": False,
            },
        }
        if self.node.cfg.api.domain:
            body["domain"] = self.node.cfg.api.domain
        body["api"] = {"level": 5, "total": self.router.total, "errors": self.router.errors}
        self._ok(reply, body)

    # ---- create / update / delete ----------------------------------------------------------

    async def _create(self, name: str, reply: str | None, data: bytes, too_new: bool) -> None:
        async with self._catalog:
            await self._create_locked(name, reply, data, too_new)

    async def _create_locked(self, name: str, reply: str | None, data: bytes, too_new: bool) -> None:
        rtype = "stream_create_response"
        mgr = self.node.streams
        assert mgr is not None
        try:
            if too_new:
                raise E.REQUIRED_API_LEVEL()
            req = M.decode_stream_config(data) if data.strip() else M.empty_stream_config()
            cfg = C.prepare_stream_create(req, name, version=self.version)
            existing = mgr.get(cfg.name)
            if existing is not None:
                if not C.same_config_for_create(existing.config, cfg):
                    raise E.STREAM_NAME_EXIST()
                body = {"type": T + rtype, **self.info_dict(existing, cluster=False), "did_create": True}
                self._ok(reply, body)
                return
            if mgr.overlaps(list(cfg.subjects or ()), exclude=None):
                raise E.STREAM_SUBJECT_OVERLAP()
            max_streams = self.node.cfg.api.max_streams
            if max_streams > 0 and len(mgr.streams) >= max_streams:
                raise E.MAXIMUM_STREAMS_LIMIT()
            stream = await mgr.create(cfg)
        except JetlogError as e:
            self._err(reply, rtype, e)
            return
        self.advise(name, "create")
        body = {"type": T + rtype, **self.info_dict(stream, cluster=False), "did_create": True}
        self._ok(reply, body)

    async def _update(self, name: str, reply: str | None, data: bytes, too_new: bool) -> None:
        async with self._catalog:
            await self._update_locked(name, reply, data, too_new)

    async def _update_locked(self, name: str, reply: str | None, data: bytes, too_new: bool) -> None:
        rtype = "stream_update_response"
        mgr = self.node.streams
        assert mgr is not None
        try:
            if too_new:
                raise E.REQUIRED_API_LEVEL()
            req = M.decode_stream_config(data) if data.strip() else M.empty_stream_config()
            cfg = C.prepare_stream_update(req, name, version=self.version)
            stream = mgr.get(name)
            if stream is None:
                raise E.STREAM_NOT_FOUND()
            cfg = C.check_stream_update(stream.config, cfg)
            if mgr.overlaps(list(cfg.subjects or ()), exclude=name):
                raise E.STREAM_SUBJECT_OVERLAP()
            await mgr.update(stream, cfg)
            await stream.sync()
        except JetlogError as e:
            self._err(reply, rtype, e)
            return
        self.advise(name, "modify")
        self._ok(reply, {"type": T + rtype, **self.info_dict(stream, cluster=False)})

    async def _delete(self, name: str, reply: str | None, data: bytes, too_new: bool) -> None:
        async with self._catalog:
            await self._delete_locked(name, reply, data, too_new)

    async def _delete_locked(self, name: str, reply: str | None, data: bytes, too_new: bool) -> None:
        rtype = "stream_delete_response"
        mgr = self.node.streams
        assert mgr is not None
        try:
            if too_new:
                raise E.REQUIRED_API_LEVEL()
            if not _is_empty(data):
                raise E.NOT_EMPTY_REQUEST()
            if not await mgr.delete(name):
                raise E.STREAM_NOT_FOUND()
        except JetlogError as e:
            self._err(reply, rtype, e, success=False)
            return
        self.advise(name, "delete")
        self._ok(reply, {"type": T + rtype, "success": True})

    # ---- info / names / list ---------------------------------------------------------------

    def _info(self, name: str, reply: str | None, data: bytes, too_new: bool) -> None:
        rtype = "stream_info_response"
        try:
            if too_new:
                raise E.REQUIRED_API_LEVEL()
            req = M.decode_request(M.StreamInfoRequest, data) if _wants_json(data) else M.StreamInfoRequest()
            stream = self.node.streams.get(name) if self.node.streams else None
            if stream is None:
                raise E.STREAM_NOT_FOUND()
        except JetlogError as e:
            self._err(reply, rtype, e, total=0, offset=0, limit=0)
            return
        state, total, offset = self.state_dict(
            stream,
            subjects_filter=req.subjects_filter or None,
            offset=req.offset or 0,
            deleted_details=bool(req.deleted_details),
        )
        limit = SUBJECTS_LIMIT if total else 0
        body: dict[str, Any] = {
            "type": T + rtype,
            "total": total,
            "offset": offset if total else 0,
            "limit": limit,
            "config": self.config_dict(stream.config),
            "created": format_time(stream.created),
            "state": state,
            "cluster": self._cluster_block(stream.name),
            "ts": format_time(time.time_ns()),
        }
        self._ok(reply, body)

    def _names_or_list(self, op: str, reply: str | None, data: bytes) -> None:
        names_op = op == "NAMES"
        rtype = "stream_names_response" if names_op else "stream_list_response"
        limit = NAMES_LIMIT if names_op else LIST_LIMIT
        mgr = self.node.streams
        assert mgr is not None
        try:
            req = (
                M.decode_request(M.StreamNamesRequest, data) if _wants_json(data) else M.StreamNamesRequest()
            )
        except JetlogError as e:
            self._err(reply, rtype, e, total=0, offset=0, limit=0, streams=None if names_op else [])
            return
        names = mgr.names(req.subject or None)
        total = len(names)
        offset = min(max(req.offset or 0, 0), total)
        page = names[offset : offset + limit]
        body: dict[str, Any] = {"type": T + rtype, "total": total, "offset": offset, "limit": limit}
        if names_op:
            body["streams"] = page or None
        else:
            infos = []
            for n in page:
                s = mgr.get(n)
                if s is not None:
                    infos.append(self.info_dict(s, cluster=False, runtime_meta=False))
            body["streams"] = infos
            if mgr.offline:
                body["offline"] = dict(sorted(mgr.offline.items()))
        self._ok(reply, body)

    # ---- purge -----------------------------------------------------------------------------

    async def _purge(self, name: str, reply: str | None, data: bytes, too_new: bool) -> None:
        rtype = "stream_purge_response"
        try:
            if too_new:
                raise E.REQUIRED_API_LEVEL()
            # Only a body starting with '{' or '[' is parsed: anything else purges everything.
            req = (
                M.decode_request(M.StreamPurgeRequest, data) if _wants_json(data) else M.StreamPurgeRequest()
            )
            if req.seq and req.keep:  # checked before the stream lookup, as nats-server does
                raise E.BAD_REQUEST()
            stream = self.node.streams.get(name) if self.node.streams else None
            if stream is None:
                raise E.STREAM_NOT_FOUND()
            purged = stream.purge(req.filter or None, req.seq or 0, req.keep or 0)
            await stream.sync()
        except JetlogError as e:
            self._err(reply, rtype, e, purged=0)
            return
        self._ok(reply, {"type": T + rtype, "success": True, "purged": purged})

    # ---- messages --------------------------------------------------------------------------

    def _msg_get(self, name: str, reply: str | None, data: bytes, too_new: bool) -> None:
        rtype = "stream_msg_get_response"
        try:
            if too_new:
                raise E.REQUIRED_API_LEVEL()
            req = M.decode_msg_get(data)
            seq = req.seq or 0
            last_for = req.last_by_subj or ""
            next_for = req.next_by_subj or ""
            start_time = req.start_time
            stream = self.node.streams.get(name) if self.node.streams else None
            if stream is None:
                raise E.STREAM_NOT_FOUND()
            store = stream.store
            if start_time is not None:
                seq = store.seq_for_time(M.time_ns(start_time))
            if seq > 0 and not next_for:
                m = store.load(seq)
            elif next_for:
                m = store.load_next(seq, next_for)
            else:
                # nats-server finds nothing for a filter that is not a valid subject (">.a").
                m = store.load_last(last_for) if last_for and is_valid_subject(last_for) else None
            if m is None:
                raise E.NO_MESSAGE_FOUND()
        except JetlogError as e:
            self._err(reply, rtype, e)
            return
        message: dict[str, Any] = {"subject": printable_subject(m.subject), "seq": m.seq}
        if m.hdr and not req.no_hdr:
            message["hdrs"] = base64.b64encode(m.hdr).decode()
        if m.data:
            message["data"] = base64.b64encode(m.data).decode()
        message["time"] = format_time(m.ts)
        # A successful MSG.GET is not counted in api.total (nats-server replies without the
        # API accounting for this one).
        self._ok(reply, {"type": T + rtype, "message": message}, count=False)

    async def _msg_delete(self, name: str, reply: str | None, data: bytes, too_new: bool) -> None:
        rtype = "stream_msg_delete_response"
        try:
            if too_new:
                raise E.REQUIRED_API_LEVEL()
            if _is_empty(data):
                raise E.BAD_REQUEST()
            req = M.decode_request(M.MsgDeleteRequest, data)
            stream = self.node.streams.get(name) if self.node.streams else None
            if stream is None:
                raise E.STREAM_NOT_FOUND()
            stream.delete_msg(req.seq or 0, erase=not req.no_erase)
            await stream.sync()
        except JetlogError as e:
            self._err(reply, rtype, e)
            return
        self._ok(reply, {"type": T + rtype, "success": True})
