"""A node's membership in a cluster: wires Raft, liveness, controller, reconciler, replication
and routing together (docs/cluster.md). ``Node`` creates one when ``cluster.peers`` lists more
than one member; nothing here runs on a single node.

Start-up order: Raft first (this node must see the current metadata before it acts on it —
the metadata is replayed and then a barrier commits), then liveness, the replication and
forwarding subscriptions, the reconciler's first pass (open every replica this node holds, take
or hand over leadership), then the controller.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec

from jetlog.api import fetch
from jetlog.cluster import meta as MT
from jetlog.cluster.api import ClusterApi, leading_subject
from jetlog.cluster.controller import Controller
from jetlog.cluster.follower import StreamFollower, consumer_dir
from jetlog.cluster.leader import StreamLeader
from jetlog.cluster.liveness import Liveness
from jetlog.cluster.mux import MuxReplier, MuxRequester
from jetlog.cluster.raftloop import Applied as MT_Applied
from jetlog.cluster.reconcile import Reconciler
from jetlog.cluster.routing import Router
from jetlog.cluster.status import ClusterViews
from jetlog.errors import ApiError, E, JetlogError, TransportError
from jetlog.observe import advisory
from jetlog.tasklog import failure_logger
from jetlog.wire import headers as H
from jetlog.wire import repl as R
from jetlog.wire import repl_mux as RM
from jetlog.wire.leaf import LeafFrameError

log = logging.getLogger("jetlog.cluster")
_log_failure = failure_logger(log)

READY_TIMEOUT = 60.0
STATUS_SUBJECT = "$JETLOG.API.CLUSTER"
LEADING_WAIT_S = 2.0
"""``jetlog status``: members, the Raft leader, and each stream's leader, ISR and lag."""


class ClusterNode(ClusterViews):
    """Everything cluster-specific one node runs."""

    def __init__(self, node: Any) -> None:
        from jetlog.cluster.raft import MetaRaft

        cfg = node.cfg
        self.node = node
        self.cfg = cfg
        self.name: str = cfg.name
        self.cluster: str = cfg.cluster.name
        self.members = cfg.cluster.members()
        self.state = MT.MetaState()
        self.raft = MetaRaft.from_config(cfg, self.state, rejoin=cfg.cluster.rejoin)
        # Subscribed before start: the replayed history arrives too (applied to local state
        # only once the metadata is current, see ``start``).
        self._events_q = self.raft.subscribe()
        self.client = node.client
        self.repl_subject = f"$JETLOG.{self.cluster}.R.{self.name}"
        # Replication requests and replies between two nodes travel batched, one message per
        # loop pass (``mux``); the inbox is under ``R.>`` so the deployed permissions that keep
        # apps off replication cover it (deploy/nats). Its last token is new at every start:
        # request ids restart at 1, and a reply a leader sends to this node's previous
        # incarnation must not answer a request of this one (it could be another stream's).
        self.mux = MuxRequester(self.client, f"{self.repl_subject}.MUX.{secrets.token_hex(8)}")
        self.mux_replies = MuxReplier(self.client)
        self.liveness = Liveness(
            self.client,
            f"$JETLOG.{self.cluster}.HB",
            self.name,
            list(self.members),
            timeout=cfg.cluster.node_timeout,
            raft_ok=self._raft_ok,
            leads=lambda: self.reconciler.leads() if self.reconciler is not None else 0,
            links_ok=lambda: bool(node.client.connected and node.leaf.connected),
        )
        self.controller = Controller(
            self.raft,
            self.state,
            self.liveness.alive,
            self._nats_isolated,
            self.liveness.heard_recently,
            self.liveness.unconfirmed_loss,
            lambda: self.raft.seconds_since_leader_contact() <= cfg.cluster.node_timeout / 2,
        )
        self.reconciler: Reconciler | None = None
        self.router: Router | None = None
        self.api: ClusterApi | None = None
        self._sids: list[int] = []
        self._events: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self.api_router: Any = None
        self._replica_subs: dict[str, list[int]] = {}
        self._subs_lock = asyncio.Lock()
        self.ready = False
        # Per stream: (leader, epoch, time.monotonic()) of the last fetch reply a follower here
        # got. A leadership that follows another waits out the lease that reply gave the
        # previous one (``StreamLeader.deliveries_held``).
        self._last_reply: dict[str, tuple[str, int, float]] = {}

    # ---- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Join the cluster and take up this node's replicas (see module docstring)."""
        node = self.node
        # A delivery that waited out a stall longer than a node timeout may have been made by a
        # leader deposed meanwhile: the leaf link drops it (see ``LeafOut.stale_after``).
        node.leaf.stale_after = self.cfg.cluster.node_timeout
        await self.raft.start()
        self._sids.append(await self.mux.start())
        if os.environ.get("JETLOG_FAULT_CONTROL") == "1":
            # Test-only (chaos, fault tests): silent Raft partitions on command. Off unless the
            # environment asks for it, so no production node exposes it. Subscribed before the
            # wait for Raft: a harness must be able to heal a partition that keeps us waiting.
            log.warning("fault control enabled on $JETLOG.%s.FAULT.%s", self.cluster, self.name)
            subject = f"$JETLOG.{self.cluster}.FAULT.{self.name}"
            self._sids.append(await self.client.subscribe_raw(subject, self._on_fault))
        await self.raft.wait_ready(READY_TIMEOUT)
        # The replayed history is in the state now; the first reconcile pass covers it.
        while not self._events_q.empty():
            self._events_q.get_nowait()
        self.reconciler = Reconciler(
            self.name,
            self.state,
            node.streams,
            self.raft,
            alive=self.liveness.alive,
            decode_config=node.decode_config,
            make_leader=self._make_leader,
            make_follower=self._make_follower,
            on_role_change=self._role_changed,
        )
        await self.liveness.start()
        self.liveness.listeners.append(lambda n, up: self.controller.poke())
        self._sids.append(await self.client.subscribe_raw(self.repl_subject, self._on_repl))
        self._sids.append(await self.client.subscribe_raw(STATUS_SUBJECT, self._on_status))
        self._sids.append(
            await self.client.subscribe_raw(leading_subject(self.cluster, self.name), self._on_leading)
        )
        self._events = asyncio.get_running_loop().create_task(self._follow_events(), name="meta-events")
        self._events.add_done_callback(_log_failure)
        await self.reconciler.start()
        self.controller.start()
        self._spawn(self._periodic(), "cluster-periodic")
        self.ready = True
        log.info(
            "node %s joined cluster %s (members %s, Raft leader %s)",
            self.name,
            self.cluster,
            ",".join(self.members),
            self.raft.leader() or "-",
        )

    def attach_api(self, router: Any) -> None:
        """Hook routing into the API router (after it exists)."""
        node = self.node
        assert self.reconciler is not None
        self.api = ClusterApi(
            node=self.name,
            cfg=self.cfg,
            state=self.state,
            raft=self.raft,
            streams_api=router.streams,
            router=router,
            streams=node.streams,
            reconciler=self.reconciler,
            alive=self.liveness.alive,
            request=self.request,
        )
        self.router = Router(
            node=self.name,
            state=self.state,
            members=list(self.members),
            fenced=self.fenced,
            alone=self.alone,
            raft_leader=self.raft.leader,
            alive=self.liveness.alive,
            is_leader_here=self.leads_here,
            cluster_api=self.api,
            reply_json=lambda reply, body: router.reply_json(reply, body, error=True),
            reply_status=lambda reply, code: self._send(reply, b"", H.status(code, "", [])),
            wait_ready=self.wait_leading,
            spawn=router.spawn,
            handle=router.handle,
        )
        router.route = self.router.route
        router.clustered = True
        router.streams.cluster_info = self.cluster_info
        router.offsets_route = self.route_offsets
        self.api_router = router
        for name in list(node.streams.streams):
            self.replica_changed(name)

    # ---- per-replica subscriptions (Direct Get, FETCH, offsets) -------------------------------

    def replica_changed(self, name: str) -> None:
        """A replica was opened or closed here: (un)subscribe its read endpoints."""
        if self.api_router is None:
            return
        self._spawn(self._sync_replica_subs(name), f"replica-subs:{name}")

    def _replica_subjects(self, name: str) -> list[tuple[str, Any]]:
        router = self.api_router
        out: list[tuple[str, Any]] = [
            (f"$JS.API.DIRECT.GET.{name}", router.on_direct),
            (f"$JS.API.DIRECT.GET.{name}.>", router.on_direct),
            (f"$JETLOG.API.FETCH.{name}", router.on_fetch),
            (f"$JETLOG.{self.cluster}.OFF.{name}", self._on_offsets_one),
        ]
        domain = self.cfg.api.domain
        if domain:
            out.append((f"$JS.{domain}.API.DIRECT.GET.{name}", router.on_direct))
            out.append((f"$JS.{domain}.API.DIRECT.GET.{name}.>", router.on_direct))
        return out

    async def _sync_replica_subs(self, name: str) -> None:
        async with self._subs_lock:
            want = self.node.streams.get(name) is not None
            have = self._replica_subs.get(name)
            if want and have is None:
                # A queue group per stream: one replica answers each read, any replica may.
                queue = f"jetlog_r_{name}"
                sids = [
                    await self.client.subscribe_raw(subj, cb, queue)
                    for subj, cb in self._replica_subjects(name)
                ]
                self._replica_subs[name] = sids
            elif not want and have is not None:
                del self._replica_subs[name]
                for sid in have:
                    with contextlib.suppress(JetlogError):
                        await self.client.unsubscribe(sid)

    def _on_offsets_one(self, subject: str, reply: str | None, hdr: bytes, data: bytes) -> None:
        if reply:
            name = subject.rsplit(".", 1)[1]
            self._send(reply, fetch.offsets_reply({name: self.node.streams.get(name)}))

    def route_offsets(self, reply: str | None, data: bytes) -> bool:
        """``$JETLOG.API.OFFSETS`` in a cluster: whichever node the queue group picks answers,
        asking the replicas of the streams it does not hold.

        Not the metadata node: right after a leader dies the survivors may each believe someone
        else leads Raft, and a request nobody takes is a 30 s stall for the Spark driver. Any
        replica's committed mark is a safe answer (committed is committed; a lagging one is only
        lower)."""
        req = fetch.decode_offsets(data)
        if isinstance(req, str) or not reply:
            return False
        self._spawn(self._offsets(reply, list(req.streams)), "offsets")
        return True

    async def _offsets(self, reply: str, names: list[str]) -> None:
        out: dict[str, Any] = {}
        missing: list[str] = []

        async def one(name: str) -> None:
            local = self.node.streams.get(name)
            if local is not None or name not in self.state.streams:
                out[name] = msgspec.json.decode(fetch.offsets_reply({name: local}))["streams"][name]
                return
            try:
                raw = await self.request(f"$JETLOG.{self.cluster}.OFF.{name}", b"", 2.0)
                out[name] = msgspec.json.decode(raw)["streams"][name]
            except (TimeoutError, JetlogError, msgspec.DecodeError, KeyError):
                missing.append(name)

        await asyncio.gather(*(one(n) for n in names))
        if missing:
            # The stream exists but no replica answered (all down, or frozen): saying "no such
            # stream" would read as a deletion to the Spark source. Unavailable: it retries.
            log.info("offsets: no replica of %s answered", ", ".join(sorted(missing)))
            err = ApiError(E.CLUSTER_NOT_AVAIL).to_dict()
            self._send(reply, msgspec.json.encode({"error": err}))
            return
        self._send(reply, msgspec.json.encode({"streams": {n: out.get(n) for n in names}}))

    async def stop(self) -> None:
        """Leave: stop roles, controller, liveness, Raft."""
        self.ready = False
        await self.controller.stop()
        if self._events is not None:
            self._events.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._events
        for t in list(self._tasks):
            t.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await t
        for sid in self._sids:
            with contextlib.suppress(JetlogError):
                await self.client.unsubscribe(sid)
        self._sids.clear()
        if self.reconciler is not None:
            await self.reconciler.stop()
        await self.liveness.stop()
        await self.raft.stop()

    def _spawn(self, coro: Awaitable[None], name: str) -> None:
        t = asyncio.ensure_future(coro)
        self._tasks.add(t)
        t.add_done_callback(self._tasks.discard)
        t.add_done_callback(_log_failure)

    async def _follow_events(self) -> None:
        """Apply metadata changes to local state in log order."""
        assert self.reconciler is not None
        while True:
            ev = await self._events_q.get()
            if isinstance(ev, MT_Applied):
                names = sorted(self.state.streams) if ev.reset else ev.changed
                for name in names:
                    await self.reconciler.reconcile(name)
                if ev.reset:
                    for name in list(self.reconciler.roles):
                        if name not in self.state.streams:
                            await self.reconciler.reconcile(name)
            self.controller.poke()

    async def _periodic(self) -> None:
        assert self.reconciler is not None
        while True:
            await asyncio.sleep(1.0)
            for name in self.reconciler.pending():
                await self.reconciler.reconcile(name)

    # ---- roles -------------------------------------------------------------------------------

    def _role_changed(self, name: str) -> None:
        self.controller.poke()
        self.replica_changed(name)
        role = self.reconciler.role_of(name) if self.reconciler is not None else None
        if role is not None and role.kind == "leader":
            self._advise_stream("LEADER_ELECTED", name, "stream_leader_elected", leader=self.name)

    def _advise_stream(self, event: str, name: str, kind: str, **extra: Any) -> None:
        """nats-server's clustered stream advisories (``STREAM.LEADER_ELECTED`` / ``QUORUM_LOST``),
        sent by the stream's leader with the replicas as STREAM.INFO shows them."""
        fields: dict[str, Any] = {"account": "$G", "stream": name, **extra}
        fields["replicas"] = self.cluster_info(name).get("replicas", [])
        if self.cfg.api.domain:
            fields["domain"] = self.cfg.api.domain
        advisory.send(self.node.leaf, f"STREAM.{event}.{name}", kind, fields)

    def _quorum_lost(self, name: str) -> None:
        self._advise_stream("QUORUM_LOST", name, "stream_quorum_lost")

    def _raft_ok(self) -> bool:
        return self.raft.seconds_since_leader_contact() <= self.cfg.cluster.node_timeout

    def fenced(self) -> bool:
        """True while this node has lost the Raft group: it must not act as a stream leader."""
        return not self._raft_ok()

    def _nats_isolated(self) -> bool:
        """No other member's heartbeat for a node timeout while Raft still works: this node's
        NATS links are the ones cut (were the others gone, Raft would have no quorum). Heard
        at all, not alive: right after an election the others' latest heartbeats still say
        they lost Raft, and a new Raft leader that read that as isolation handed leadership
        over again and again (12 terms in 0.13 s after a Raft outage)."""
        return not self.liveness.hears_anyone() and self.raft.has_quorum

    def alone(self) -> bool:
        """No other member is heard (heartbeats): nobody else could answer a request."""
        return not any(self.liveness.alive(m) for m in self.members if m != self.name)

    def min_insync(self, replicas: int) -> int:
        """In-sync replicas a publish needs for a stream of ``replicas``."""
        want = self.cfg.cluster.min_insync or (replicas // 2 + 1)
        return min(want, replicas)

    def _prior_reply(self, name: str, a: Any) -> float | None:
        """When this node last got a fetch reply for ``name`` from a leadership other than
        ``a``'s (None: not in this process)."""
        last = self._last_reply.get(name)
        return last[2] if last is not None and (last[0], last[1]) != (a.leader, a.epoch) else None

    def _heard_leader(self, name: str, leader: str, epoch: int) -> None:
        self._last_reply[name] = (leader, epoch, time.monotonic())

    def _make_leader(self, stream: Any, a: Any) -> StreamLeader:
        store = stream.store
        if hasattr(store, "max_batch_bytes"):
            store.max_batch_bytes = max(4096, self.client.max_payload - 16384)
        return StreamLeader(
            stream,
            node=self.name,
            epoch=a.epoch,
            replicas=a.replicas,
            isr=a.isr,
            isr_version=a.isr_version,
            min_insync=self.min_insync(len(a.replicas)),
            isr_lag_time=self.cfg.cluster.isr_lag_time,
            propose_isr=self._propose_isr,
            max_payload=lambda: self.client.max_payload,
            fenced=self.fenced,
            alone=self.alone,
            alive=self.liveness.alive,
            hold_after=self.cfg.cluster.node_timeout,
            on_quorum_lost=lambda: self._quorum_lost(stream.name),
            prior_reply=self._prior_reply(stream.name, a),
        )

    def _make_follower(self, stream: Any, a: Any) -> StreamFollower:
        return StreamFollower(
            stream,
            node=self.name,
            leader=a.leader,
            epoch=a.epoch,
            subject=f"$JETLOG.{self.cluster}.R.{a.leader}",
            request=self.mux.request,
            max_payload=lambda: self.client.max_payload,
            consumer_dir=consumer_dir(stream, self.node.streams.root),
            prior_reply=self._prior_reply(stream.name, a),
            on_reply=lambda: self._heard_leader(stream.name, a.leader, a.epoch),
        )

    async def _propose_isr(self, name: str, epoch: int, version: int, isr: list[str]) -> bool:
        res = await self.raft.propose(
            MT.AlterIsr(name=name, leader_epoch=epoch, expect_isr_version=version, isr=isr), timeout=2.0
        )
        return bool(res.ok)

    def leads_here(self, name: str) -> bool:
        """This node serves ``name`` as its leader right now."""
        role = self.reconciler.role_of(name) if self.reconciler is not None else None
        return role is not None and role.kind == "leader"

    async def wait_leading(self, name: str, timeout: float = 3.0) -> bool:
        """Wait until this node serves ``name`` as leader (after an election)."""
        deadline = time.monotonic() + timeout
        while not self.leads_here(name):
            a = self.state.streams.get(name)
            if a is None or a.leader != self.name or time.monotonic() >= deadline:
                return False
            await asyncio.sleep(0.01)
        return True

    def _on_fault(self, subject: str, reply: str | None, hdr: bytes, data: bytes) -> None:
        try:
            cmd = msgspec.json.decode(data, type=dict[str, list[str]])
        except (msgspec.DecodeError, msgspec.ValidationError) as e:
            if reply:
                self._send(reply, msgspec.json.encode({"error": str(e)}))
            return
        drop = [n for n in cmd.get("raft_drop", []) if n in self.members and n != self.name]
        self.raft._drop = {self.members[n] for n in drop}
        log.warning("fault control: Raft traffic with %s dropped", ",".join(drop) or "nobody")
        if reply:
            self._send(reply, msgspec.json.encode({"raft_drop": drop}))

    # ---- replication requests ----------------------------------------------------------------

    def _on_repl(self, subject: str, reply: str | None, hdr: bytes, data: bytes) -> None:
        if RM.is_request(data):
            try:
                ret, items = RM.decode_request(data)
            except RM.MuxError as e:
                log.warning("dropping a damaged batch of replication requests: %s", e)
                return
            out = self.mux_replies
            for rid, one in items:
                self._serve_repl(one, functools.partial(out.reply, ret, rid))
            return
        if reply:
            self._serve_repl(data, lambda payload: self._send(reply, payload))

    def _serve_repl(self, data: bytes, answer: Callable[[bytes], None]) -> None:
        """Answer one replication request (plain or out of a batch) through ``answer``."""
        try:
            req, _ = R.decode_request(data)
        except R.ReplError as e:
            answer(R.encode(R.FetchReply(code=R.ERROR, error=str(e))))
            return
        role = self.reconciler.role_of(req.stream) if self.reconciler is not None else None
        if role is None or role.kind != "leader":
            code = R.NOT_LEADER if self.state.streams.get(req.stream) is not None else R.NO_STREAM
            if isinstance(req, R.EpochEndRequest):
                answer(R.encode(R.EpochEndReply(code=code)))
            else:
                answer(R.encode(R.FetchReply(code=code)))
            return
        leader: StreamLeader = role.obj
        if isinstance(req, R.EpochEndRequest):
            answer(leader.handle_epoch_end(req))
        elif isinstance(req, R.HwRequest):
            answer(leader.handle_hw(req))
        else:
            leader.handle_fetch(req, answer)

    def _on_leading(self, subject: str, reply: str | None, hdr: bytes, data: bytes) -> None:
        """Answer once this node's own view says it leads Raft (bounded wait): a former
        leader handing over asks before it replies to ``META.LEADER.STEPDOWN``."""
        if not reply:
            return

        async def answer() -> None:
            leading = await self.raft.wait_own_leadership(LEADING_WAIT_S)
            self._send(reply, b"1" if leading else b"0")

        self._spawn(answer(), "leading")

    def _send(self, reply: str, payload: bytes, hdr: bytes = b"") -> None:
        try:
            self.client.send(reply, payload, hdr)
        except TransportError as e:
            log.debug("replication reply not sent: %s", e)

    async def request(self, subject: str, data: bytes, timeout: float) -> bytes:
        """A request over the client link; the reply's payload."""
        try:
            return await self.client.request(subject, data, timeout)
        except (TransportError, LeafFrameError) as e:  # link down, no responders, too large
            raise TransportError(f"request to {subject} failed: {e}") from e

    # ---- API hooks ---------------------------------------------------------------------------

    def ack_owner(self, stream: str) -> bool:
        """Whether this node answers acks for ``stream`` (its leader; the Raft leader for a
        stream nobody has, so exactly one node sends the "no responders" answer)."""
        if self.fenced():
            return False
        a = self.state.streams.get(stream)
        if a is None:
            return bool(self.raft.is_leader)
        return a.leader == self.name

    def _on_status(self, subject: str, reply: str | None, hdr: bytes, data: bytes) -> None:
        # One node answers: the metadata node (the Raft leader), else nobody would agree.
        if not reply or self.router is None or self.router.metadata_node() != self.name:
            return
        st = self.status()
        st["members"][self.name]["leads"] = self.reconciler.leads() if self.reconciler is not None else 0
        self._spawn(self._status_with_lag(reply, st), "status")

    async def _status_with_lag(self, reply: str, st: dict[str, Any]) -> None:
        """Add each stream's replica lag (from its leader's STREAM.INFO)."""
        if self.api is not None:
            infos, _ = await self.api.infos(list(st["streams"]))
            for name, info in infos.items():
                reps = info.get("cluster", {}).get("replicas", [])
                st["streams"][name]["lag"] = {r["name"]: r.get("lag", 0) for r in reps}
                st["streams"][name]["messages"] = info.get("state", {}).get("messages", 0)
        self._send(reply, msgspec.json.encode(st))
