"""The JetStream API requests a cluster serves through its metadata (Raft).

Stream create/update/delete go through Raft; the reply is sent once the stream's leader serves
the result (so a client may publish as soon as it has the reply). Names, list and account info
are built from the metadata plus each stream's leader (asked over NATS). Leader stepdowns are
metadata decisions too. Validation and error texts are the single-node ones (``stream.config``),
so a cluster answers bad requests exactly as a single node and nats-server do.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec

from jetlog.api import models as M
from jetlog.cluster import meta as MT
from jetlog.cluster.controller import pick_leader, place
from jetlog.errors import ApiError, E, JetlogError
from jetlog.stream import config as C
from jetlog.wire import headers as H
from jetlog.wire.subjects import SubjectOwners, collide

log = logging.getLogger("jetlog.cluster.api")

T = "io.nats.jetstream.api.v1."
API_LEVEL = 5
READY_TIMEOUT = 5.0


def leading_subject(cluster: str, node: str) -> str:
    """Where ``node`` answers once its own view says it leads Raft (``META.LEADER.STEPDOWN``
    waits for the new leader's answer)."""
    return f"$JETLOG.{cluster}.LEADING.{node}"


class ClusterApi:
    """Handlers for the metadata requests of a cluster node."""

    def __init__(
        self,
        *,
        node: str,
        cfg: Any,
        state: Any,
        raft: Any,
        streams_api: Any,
        router: Any,
        streams: Any,
        reconciler: Any,
        alive: Callable[[str], bool],
        request: Callable[[str, bytes, float], Awaitable[bytes]],
    ) -> None:
        self.node = node
        self.cfg = cfg
        self.members = list(cfg.cluster.members())
        self.state = state
        self.raft = raft
        self.sapi = streams_api
        self.router = router
        self.streams = streams
        self.reconciler = reconciler
        self.alive = alive
        self.request = request
        # Subjects of the assigned streams, for the overlap check; brought up to date from the
        # metadata before each check (``_overlaps``), decoding only configs that changed.
        self._owners = SubjectOwners()
        self._owner_cfg: dict[str, bytes] = {}

    # ---- helpers ---------------------------------------------------------------------------

    def error_json(self, rtype: str, err: ApiError, **extra: Any) -> bytes:
        """An error reply body in nats-server's shape."""
        return self.sapi.error_body(rtype, err, **extra)

    def _err(self, reply: str | None, rtype: str, err: JetlogError, **extra: Any) -> None:
        self.router.reply_json(reply, self.error_json(rtype, err.to_api(), **extra), error=True)

    def _ok(self, reply: str | None, body: dict[str, Any]) -> None:
        self.router.reply_json(reply, M.encode_json_ordered(body))

    @staticmethod
    def _too_new(hdr: bytes) -> bool:
        if not hdr:
            return False
        v = (H.get(hdr, H.REQUIRED_API_LEVEL) or "").strip()
        return v.isdigit() and int(v) > API_LEVEL

    def _with_default_replicas(self, req: Any) -> Any:
        if not req.num_replicas:
            return msgspec.structs.replace(req, num_replicas=self.cfg.cluster.default_replicas)
        return req

    def _overlaps(self, subjects: list[str], exclude: str | None) -> bool:
        """True if a stream other than ``exclude`` has a subject colliding with ``subjects``.
        The metadata holds configs as bytes: decoding all of them for every create made
        creating N streams quadratic; only assignments whose config object changed are."""
        streams = self.state.streams
        seen = self._owner_cfg
        for name in seen.keys() - streams.keys():
            del seen[name]
            self._owners.drop(name)
        for name, a in streams.items():
            if seen.get(name) is not a.config:
                try:
                    subs = M.decode_stored_config(a.config).subjects or []
                except (msgspec.DecodeError, msgspec.ValidationError):
                    subs = []  # an unreadable config claims no subjects (as before)
                seen[name] = a.config
                self._owners.set(name, subs)
        return self._owners.collides(subjects, exclude)

    async def _propose(self, cmd: Any) -> Any:
        try:
            res = await self.raft.propose(cmd)
        except JetlogError as e:
            log.warning("metadata change %s failed: %s", type(cmd).__name__, e)
            raise E.CLUSTER_NOT_AVAIL() from None
        return res

    async def stream_info(self, name: str, timeout: float = READY_TIMEOUT) -> dict[str, Any]:
        """StreamInfo (config, created, state, cluster, ts) from the stream's leader, once it
        serves as leader; raises when it does not within ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            a = self.state.streams.get(name)
            if a is None:
                raise E.STREAM_NOT_FOUND()
            if a.leader == self.node:
                role = self.reconciler.role_of(name)
                stream = self.streams.get(name)
                if role is not None and role.kind == "leader" and stream is not None:
                    return self.sapi.info_dict(stream, cluster=True)
            elif a.leader:
                try:
                    raw = await self.request("$JS.API.STREAM.INFO." + name, b"", 1.0)
                    body = msgspec.json.decode(raw)
                    if isinstance(body, dict) and "error" not in body:
                        return {
                            k: body[k] for k in ("config", "created", "state", "cluster", "ts") if k in body
                        }
                except (TimeoutError, JetlogError, msgspec.DecodeError) as e:
                    log.debug("stream %s: leader info not ready: %s", name, e)
                except Exception as e:  # nats-py request errors (no responders, closed)
                    log.debug("stream %s: leader info not ready: %s", name, e)
            if time.monotonic() >= deadline:
                raise E.CLUSTER_NOT_AVAIL()
            await asyncio.sleep(0.03)

    # ---- create / update / delete ------------------------------------------------------------

    def create(self, name: str, reply: str | None, hdr: bytes, data: bytes) -> None:
        """``STREAM.CREATE.<name>`` through Raft."""
        self.router.spawn(self._create(name, reply, hdr, data), "STREAM.CREATE")

    async def _create(self, name: str, reply: str | None, hdr: bytes, data: bytes) -> None:
        rtype = "stream_create_response"
        try:
            if self._too_new(hdr):
                raise E.REQUIRED_API_LEVEL()
            req = M.decode_stream_config(data) if data.strip() else M.empty_stream_config()
            req = self._with_default_replicas(req)
            cfg = C.prepare_stream_create(req, name, clustered=True)
            a = self.state.streams.get(cfg.name)
            created = a is None
            if a is None:
                if cfg.num_replicas > len(self.members):
                    raise E.CLUSTER_NO_PEERS(err="no suitable peers for placement")
                if self._overlaps(list(cfg.subjects or ()), None):
                    raise E.STREAM_SUBJECT_OVERLAP()
                max_streams = self.cfg.api.max_streams
                if max_streams > 0 and len(self.state.streams) >= max_streams:
                    raise E.MAXIMUM_STREAMS_LIMIT()
                replicas = await self._place(cfg.num_replicas)
                cmd = MT.CreateStream(
                    name=cfg.name,
                    config=M.encode_stored_config(cfg),
                    created=time.time_ns(),
                    replicas=replicas,
                    leader=replicas[0],
                )
                res = await self._propose(cmd)
                if not res.ok and self.state.streams.get(cfg.name) is None:
                    raise E.STREAM_CREATE(err=res.error)
                a = self.state.streams.get(cfg.name)
                if a is not None and self.node in a.replicas:
                    await self.reconciler.reconcile(cfg.name)
            if a is not None and a.config != M.encode_stored_config(cfg):
                existing = M.decode_stored_config(a.config)
                if not C.same_config_for_create(existing, cfg):
                    raise E.STREAM_NAME_EXIST()
            info = await self.stream_info(cfg.name)
        except JetlogError as e:
            self._err(reply, rtype, e)
            return
        if created:
            self.sapi.advise(cfg.name, "create")
        self._ok(reply, {"type": T + rtype, **info, "did_create": True})

    def update(self, name: str, reply: str | None, hdr: bytes, data: bytes) -> None:
        """``STREAM.UPDATE.<name>`` on the stream's leader."""
        self.router.spawn(self._update(name, reply, hdr, data), "STREAM.UPDATE")

    async def _update(self, name: str, reply: str | None, hdr: bytes, data: bytes) -> None:
        rtype = "stream_update_response"
        try:
            if self._too_new(hdr):
                raise E.REQUIRED_API_LEVEL()
            req = M.decode_stream_config(data) if data.strip() else M.empty_stream_config()
            req = self._with_default_replicas(req)
            cfg = C.prepare_stream_update(req, name)
            a = self.state.streams.get(name)
            stream = self.streams.get(name)
            if a is None or stream is None:
                raise E.STREAM_NOT_FOUND()
            cfg = C.check_stream_update(stream.config, cfg, clustered=True)
            if self._overlaps(list(cfg.subjects or ()), name):
                raise E.STREAM_SUBJECT_OVERLAP()
            replicas = None
            if cfg.num_replicas != len(a.replicas):
                replicas = self._rescale(a, cfg.num_replicas)
            res = await self._propose(
                MT.UpdateStream(name=name, config=M.encode_stored_config(cfg), replicas=replicas)
            )
            if not res.ok:
                raise E.STREAM_UPDATE(err=res.error)
            # Reply once this (leader) node applied it (reconciling is idempotent and
            # serialised per stream, so doing it here rather than waiting for the event is safe).
            await self.reconciler.reconcile(name)
            await stream.wait_committed()
        except JetlogError as e:
            self._err(reply, rtype, e)
            return
        self.sapi.advise(name, "modify")
        self._ok(reply, {"type": T + rtype, **self.sapi.info_dict(stream, cluster=True)})

    async def _place(self, n: int) -> list[str]:
        # A member can look gone for a moment on a loaded machine (a late heartbeat): give
        # liveness a little time before refusing for lack of peers.
        deadline = time.monotonic() + 2.0
        while True:
            replicas = place(n, self.members, self.alive, self.state.streams.values())
            if replicas:
                return replicas
            if time.monotonic() >= deadline:
                raise E.CLUSTER_NO_PEERS(err="no suitable peers for placement")
            await asyncio.sleep(0.1)

    def _rescale(self, a: Any, n: int) -> list[str]:
        if n > len(self.members):
            raise E.CLUSTER_NO_PEERS(err="no suitable peers for placement")
        if n < len(a.replicas):
            keep = (
                [a.leader] + [r for r in a.isr if r != a.leader] + [r for r in a.replicas if r not in a.isr]
            )
            return keep[:n]
        extra = [m for m in self.members if m not in a.replicas and self.alive(m)]
        if len(extra) < n - len(a.replicas):
            raise E.CLUSTER_NO_PEERS(err="no suitable peers for placement")
        return list(a.replicas) + extra[: n - len(a.replicas)]

    def delete(self, name: str, reply: str | None, hdr: bytes, data: bytes) -> None:
        """``STREAM.DELETE.<name>`` through Raft."""
        self.router.spawn(self._delete(name, reply, hdr, data), "STREAM.DELETE")

    async def _delete(self, name: str, reply: str | None, hdr: bytes, data: bytes) -> None:
        rtype = "stream_delete_response"
        try:
            if self._too_new(hdr):
                raise E.REQUIRED_API_LEVEL()
            if not M.is_empty_request(data):
                raise E.NOT_EMPTY_REQUEST()
            if self.state.streams.get(name) is None:
                raise E.STREAM_NOT_FOUND()
            res = await self._propose(MT.DeleteStream(name=name))
            if not res.ok:
                raise E.STREAM_NOT_FOUND()
        except JetlogError as e:
            self._err(reply, rtype, e, success=False)
            return
        self.sapi.advise(name, "delete")
        self._ok(reply, {"type": T + rtype, "success": True})

    # ---- names / list / account -------------------------------------------------------------

    def names_or_list(self, op: str, reply: str | None, hdr: bytes, data: bytes) -> None:
        """``STREAM.NAMES`` / ``STREAM.LIST`` from the metadata (LIST asks the leaders)."""
        self.router.spawn(self._names_or_list(op, reply, hdr, data), "STREAM." + op)

    async def _names_or_list(self, op: str, reply: str | None, hdr: bytes, data: bytes) -> None:
        names_op = op == "NAMES"
        rtype = "stream_names_response" if names_op else "stream_list_response"
        limit = 1024 if names_op else 256
        try:
            if self._too_new(hdr):
                raise E.REQUIRED_API_LEVEL()
            req = (
                M.decode_request(M.StreamNamesRequest, data)
                if M.is_json_object_or_array(data)
                else M.StreamNamesRequest()
            )
        except JetlogError as e:
            self._err(reply, rtype, e, total=0, offset=0, limit=0, streams=None if names_op else [])
            return
        names = self._names(req.subject or None)
        total = len(names)
        offset = min(max(req.offset or 0, 0), total)
        page = names[offset : offset + limit]
        body: dict[str, Any] = {"type": T + rtype, "total": total, "offset": offset, "limit": limit}
        if names_op:
            body["streams"] = page or None
        else:
            infos, missing = await self.infos(page)
            body["streams"] = [infos[n] for n in page if n in infos]
            if missing:
                body["missing"] = missing
        self._ok(reply, body)

    def _names(self, subject: str | None) -> list[str]:
        out = []
        for name, a in self.state.streams.items():
            if subject:
                try:
                    subs = M.decode_stored_config(a.config).subjects or ()
                except (msgspec.DecodeError, msgspec.ValidationError):
                    continue
                if not any(collide(subject, s) for s in subs):
                    continue
            out.append(name)
        return sorted(out, key=lambda n: n.encode())

    async def infos(self, names: list[str]) -> tuple[dict[str, dict[str, Any]], list[str]]:
        async def one(n: str) -> tuple[str, dict[str, Any] | None]:
            try:
                return n, await self.stream_info(n, timeout=1.5)
            except JetlogError:
                return n, None

        got = await asyncio.gather(*(one(n) for n in names))
        infos = {n: i for n, i in got if i is not None}
        return infos, [n for n, i in got if i is None]

    def account_info(self, reply: str | None, hdr: bytes) -> None:
        """``$JS.API.INFO``: totals over every stream (from their leaders)."""
        self.router.spawn(self._account_info(reply, hdr), "INFO")

    async def _account_info(self, reply: str | None, hdr: bytes) -> None:
        if self._too_new(hdr):
            self._err(reply, "account_info_response", E.REQUIRED_API_LEVEL())
            return
        infos, _ = await self.infos(list(self.state.streams))
        memory = storage = consumers = 0
        for info in infos.values():
            st = info.get("state", {})
            if info.get("config", {}).get("storage") == "memory":
                memory += int(st.get("bytes", 0))
            else:
                storage += int(st.get("bytes", 0))
            consumers += int(st.get("consumer_count", 0))
        body: dict[str, Any] = {
            "type": T + "account_info_response",
            "memory": memory,
            "storage": storage,
            "reserved_memory": 0,
            "reserved_storage": 0,
            "streams": len(self.state.streams),
            "consumers": consumers,
            "limits": {
                "max_memory": -1,
                "max_storage": -1,
                "max_streams": self.cfg.api.max_streams,
                "max_consumers": -1,
                "max_ack_pending": -1,
                "memory_max_stream_bytes": -1,
                "storage_max_stream_bytes": -1,
                "max_bytes_required": False,
            },
        }
        if self.cfg.api.domain:
            body["domain"] = self.cfg.api.domain
        body["api"] = {"level": API_LEVEL, "total": self.router.total, "errors": self.router.errors}
        self._ok(reply, body)

    # ---- stepdowns --------------------------------------------------------------------------

    def meta_stepdown(self, reply: str | None, data: bytes) -> None:
        """``META.LEADER.STEPDOWN``: move the Raft leadership (and so the controller)."""
        self.router.spawn(self._meta_stepdown(reply, data), "META.LEADER.STEPDOWN")

    async def _meta_stepdown(self, reply: str | None, data: bytes) -> None:
        rtype = "meta_leader_stepdown_response"
        preferred = _preferred(data)
        try:
            new = await self.raft.transfer_leadership(preferred or None)
        except JetlogError as e:
            self._err(reply, rtype, e)
            return
        # This node learned of the new leader before the new leader's own view did (it hears
        # the first append). Every node picks who answers metadata requests from its own view,
        # so a request sent right after the reply could find nobody responsible: the new leader
        # thinks this node still leads. Reply once the new leader knows (bounded wait).
        try:
            ok = await self.request(leading_subject(self.cfg.cluster.name, new), b"", 2.5)
            if ok != b"1":
                log.info("meta stepdown: %s does not see itself leading yet", new)
        except (TimeoutError, JetlogError) as e:
            log.info("meta stepdown: no word from the new leader %s: %s", new, e)
        self._ok(reply, {"type": T + rtype, "success": True})

    def stream_stepdown(self, name: str, reply: str | None, data: bytes, consumer: bool = False) -> None:
        """``STREAM.LEADER.STEPDOWN.<name>`` on the leader: elect another in-sync replica.
        Consumers are led by their stream's leader, so ``CONSUMER.LEADER.STEPDOWN`` moves the
        stream's leadership (and with it every consumer of the stream)."""
        self.router.spawn(self._stream_stepdown(name, reply, data, consumer), "LEADER.STEPDOWN")

    async def _stream_stepdown(self, name: str, reply: str | None, data: bytes, consumer: bool) -> None:
        rtype = "consumer_leader_stepdown_response" if consumer else "stream_leader_stepdown_response"
        try:
            a = self.state.streams.get(name)
            if a is None:
                raise E.STREAM_NOT_FOUND()
            stream = self.streams.get(name)
            # A follower fetching from us is alive although its heartbeats may not have been
            # heard yet (right after a start: a stepdown then found "no suitable peers").
            role = self.reconciler.role_of(name)
            leader = role.obj if role is not None and role.kind == "leader" else None
            within = self.cfg.cluster.node_timeout

            def alive(n: str) -> bool:
                return self.alive(n) or (leader is not None and leader.fetched_within(n, within))

            cand = pick_leader(a, alive, exclude=self.node, preferred=_preferred(data))
            if not cand:
                raise E.CLUSTER_NO_PEERS(err="no suitable peers for placement")
            if stream is not None:
                # Let what is stored commit first, so the new leader has every acked message
                # and the handover does not cost acks in flight.
                await stream.wait_committed(timeout=2.0)
            res = await self._propose(MT.ElectLeader(name=name, leader=cand, isr=a.isr, expect_epoch=a.epoch))
            if not res.ok:
                raise E.CLUSTER_NOT_AVAIL()
        except JetlogError as e:
            self._err(reply, rtype, e, success=False)
            return
        self._ok(reply, {"type": T + rtype, "success": True})

    def peer_remove(self, name: str, reply: str | None) -> None:
        """``STREAM.PEER.REMOVE``/``EVACUATE``: not offered (replicas move with
        ``num_replicas`` updates); answered with the reason rather than left unanswered."""
        self._err(
            reply,
            "stream_remove_peer_response",
            E.STREAM_GENERAL_ERROR(err="peer removal is not supported: change num_replicas instead"),
            success=False,
        )


def _preferred(data: bytes) -> str:
    if not data.strip():
        return ""
    try:
        body = msgspec.json.decode(data)
    except msgspec.DecodeError:
        return ""
    if isinstance(body, dict):
        p = body.get("placement") or {}
        if isinstance(p, dict):
            return str(p.get("preferred") or "")
    return ""
