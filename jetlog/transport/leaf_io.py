"""``LeafIO``: the traffic of the leaf link — its state, the frames it reads, the local
subscriptions and the hub's interest. Writing (queueing, flushing, backpressure, PING/PONG
flushes) is in its base class ``LeafOut`` (:mod:`jetlog.transport.leaf_out`).
``LeafConnection`` (:mod:`jetlog.transport.leaf`) adds connecting, the handshake and supervision
on top; the design is described there.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import Callable, Sequence
from typing import Any

from jetlog.errors import TransportError
from jetlog.transport.interest import InterestListener, InterestView
from jetlog.transport.leaf_auth import parse_url
from jetlog.transport.leaf_out import LeafOut
from jetlog.transport.leaf_proto import (
    LeafProtocol,
    LeafStats,
    LeafSubscription,
    LinkState,
    MsgCallback,
    RunCallback,
)
from jetlog.wire import leaf as wire
from jetlog.wire.subjects import Sublist, is_literal, is_valid_subject

log = logging.getLogger("jetlog.transport.leaf")

EVENT_SLICE = 1024
"""Inbound frames handled per loop callback before yielding (see ``_on_events``)."""

# Subjects the hub denies on leaf connections unless JetStream is extended (denyAllClientJs).
# An LS+ on a *literal* subject in these namespaces makes the hub close the whole link
# (leafSubPermViolation); a wildcard is accepted but never gets messages.
DENIED_PREFIXES = ("$JS.API.", "$KV.", "$OBJ.")


def _sole_run_sub(subs: list[LeafSubscription]) -> LeafSubscription | None:
    """The subscription that takes runs, when it is the only one ``subs`` holds."""
    return subs[0] if len(subs) == 1 and subs[0].run_cb is not None else None


class LeafIO(LeafOut):
    """State, reading, subscriptions and interest of a leaf link (writing: its base
    :class:`~jetlog.transport.leaf_out.LeafOut`). Not used on its own: create a
    :class:`~jetlog.transport.leaf.LeafConnection` (its arguments are documented there).
    """

    def __init__(
        self,
        url: str | Sequence[str],
        *,
        name: str,
        user: str | None = None,
        password: str | None = None,
        token: str | None = None,
        nkey_seed: str | bytes | None = None,
        creds_file: str | None = None,
        tls: ssl.SSLContext | None = None,
        tls_hostname: str | None = None,
        tls_handshake_first: bool = False,
        ping_interval: float = 20.0,
        max_outstanding_pings: int = 3,
        reconnect_delay: float = 0.1,
        reconnect_max_delay: float = 5.0,
        max_reconnect_attempts: int = -1,
        max_pending_bytes: int = 8 * 1024 * 1024,
        write_high_water: int = 1024 * 1024,
        max_control_line: int = wire.MAX_CONTROL_LINE,
        on_state_change: Callable[[LinkState], None] | None = None,
    ) -> None:
        urls = [u.strip() for u in url.split(",")] if isinstance(url, str) else list(url)
        if not urls:
            raise TransportError("no leafnode URL")
        self._endpoints = [parse_url(u) for u in urls]
        self.name = name
        self._user, self._password, self._token = user, password, token
        self._nkey_seed = nkey_seed.encode() if isinstance(nkey_seed, str) else nkey_seed
        self._creds_file = creds_file
        self._tls = tls
        self._tls_hostname = tls_hostname
        self._tls_first = tls_handshake_first
        self.ping_interval = ping_interval
        self.max_outstanding_pings = max_outstanding_pings
        self.reconnect_delay = reconnect_delay
        self.reconnect_max_delay = reconnect_max_delay
        self.max_reconnect_attempts = max_reconnect_attempts
        self.max_pending_bytes = max_pending_bytes
        self.write_high_water = write_high_water
        self.max_control_line = max_control_line
        self.on_state_change = on_state_change

        self.stats = LeafStats()
        self.server_info: dict[str, Any] = {}
        self.max_payload = 0  # from INFO; 0 until connected
        self._state = LinkState.DISCONNECTED
        self._proto: LeafProtocol | None = None
        self._ep_index = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._supervisor: asyncio.Task[None] | None = None
        self._state_waiters: list[asyncio.Future[None]] = []

        self._init_out()  # outgoing data and PONG waiters (leaf_out.LeafOut)
        self._pings_out = 0
        self._had_connection = False
        self._state_listeners: list[Callable[[LinkState], None]] = []
        self._down_since = 0.0
        self._attempts = 0
        self._hub_error = ""

        # Local subscriptions.
        self._subs: Sublist[LeafSubscription] = Sublist()
        self._sub_keys: dict[tuple[str, str | None], list[LeafSubscription]] = {}
        self._has_queue_subs = 0
        self._rr = 0

        # The hub's interest, rebuilt on every (re)connect.
        self.interest_view = InterestView(name)

    # ------------------------------------------------------------------------------- state

    @property
    def state(self) -> LinkState:
        """Current :class:`LinkState`."""
        return self._state

    @property
    def connected(self) -> bool:
        """True while the handshake is complete and the socket is up."""
        return self._state is LinkState.CONNECTED

    @property
    def closed(self) -> bool:
        """True after :meth:`close` (or when reconnect attempts ran out)."""
        return self._state is LinkState.CLOSED

    @property
    def interest_current(self) -> bool:
        """False while disconnected: the interest view is then the last one known."""
        return self.connected

    def _set_state(self, state: LinkState) -> None:
        if state is self._state:
            return
        self._state = state
        log.debug("leaf link %s: %s", self.name, state.value)
        for f in self._state_waiters:
            if not f.done():
                f.set_result(None)
        self._state_waiters.clear()
        hooks = [self.on_state_change] if self.on_state_change is not None else []
        for hook in [*hooks, *self._state_listeners]:
            try:
                hook(state)
            except Exception:  # a listener bug must not break the link
                log.exception("leaf link %s: state listener failed", self.name)

    def add_state_listener(self, cb: Callable[[LinkState], None]) -> Callable[[], None]:
        """Call ``cb(state)`` on every state change; returns a function that removes it."""
        self._state_listeners.append(cb)

        def remove() -> None:
            with contextlib.suppress(ValueError):
                self._state_listeners.remove(cb)

        return remove

    async def wait_connected(self, timeout: float | None = None) -> None:
        """Wait until the link is connected; TransportError if it closes or on timeout."""

        async def _wait() -> None:
            while not self.connected:
                if self.closed:
                    raise TransportError("leaf link closed")
                fut = asyncio.get_running_loop().create_future()
                self._state_waiters.append(fut)
                await fut

        try:
            await asyncio.wait_for(_wait(), timeout)
        except TimeoutError:
            raise TransportError(f"leaf link not connected within {timeout}s") from None

    # ---------------------------------------------------------------------------- reading

    def _on_events(self, proto: LeafProtocol, events: list[wire.Event], start: int = 0) -> None:
        if proto is not self._proto:
            return
        MSG = wire.MSG
        end = min(len(events), start + EVENT_SLICE)
        # Consecutive messages that only one subscription with a ``run_cb`` matches (a stream's
        # capture) go to it in one call; the rest one by one, all in arrival order. A message
        # is matched after every callback before it has run, as with one call per message (a
        # callback may change the subscriptions).
        run: list[wire.Event] = []
        run_sub: LeafSubscription | None = None
        last_subject = None
        subs: list[LeafSubscription] = []
        sole: LeafSubscription | None = None
        # The prefix ``sole``'s pattern owns (``Sublist.owned_prefix``): a subject starting
        # with it goes to ``sole`` without a match. Acks (``$JS.ACK.<stream>.>``, a new
        # subject each) and captures of many subjects under one wildcard missed the match
        # cache every time. Valid only while no callback has run since it was taken: it is set
        # by a match made after the last flush of a run, and it is "\x00" (no subject starts
        # with it) whenever ``sole`` is None, so a message handed to ``_dispatch`` is always
        # followed by a fresh match.
        owned = "\x00"
        for i in range(start, end):
            ev = events[i]
            if ev[0] == MSG and not self._has_queue_subs:
                subject = ev[1]
                if subject != last_subject:
                    last_subject = subject
                    if not subject.startswith(owned):
                        subs = self._subs.match(subject)
                        sole = _sole_run_sub(subs)
                        if run and sole is not run_sub:
                            self._run(run_sub, run)  # type: ignore[arg-type]
                            run = []
                            subs = self._subs.match(subject)
                            sole = _sole_run_sub(subs)
                        owned = (
                            self._subs.owned_prefix(sole.subject) if sole is not None else None
                        ) or "\x00"
                if sole is not None:
                    run_sub = sole
                    run.append(ev)
                    continue
                # ``run`` is empty here (a run ends above when a message is not for it), and no
                # callback ran since ``subs`` was matched: hand it over without a second match.
                last_subject = None  # its callbacks may change the subscriptions
                self._dispatch(subject, ev[2], ev[3], ev[4], ev[5], subs)
                continue
            if run:
                self._run(run_sub, run)  # type: ignore[arg-type]
                run = []
                run_sub = None
            last_subject = None
            owned = "\x00"
            if ev[0] == MSG:
                self._dispatch(ev[1], ev[2], ev[3], ev[4], ev[5])
            else:
                self._on_control(proto, ev)
        if run:
            self._run(run_sub, run)  # type: ignore[arg-type]
        if end < len(events) and proto.transport is not None:
            # One socket read can hold thousands of messages (milliseconds of work). Yield to
            # the loop between slices so fsync completions, timers (heartbeats, ack waits) and
            # acks on other links are not held up; reading stays paused meanwhile, so the rest
            # of this read is processed before anything that arrives after it.
            if not proto.reading_paused:
                proto.reading_paused = True
                proto.transport.pause_reading()
            loop = self._loop
            assert loop is not None
            loop.call_soon(self._continue_events, proto, events, end)
        elif proto.reading_paused and proto.transport is not None:
            proto.reading_paused = False
            proto.transport.resume_reading()

    def _continue_events(self, proto: LeafProtocol, events: list[wire.Event], start: int) -> None:
        self._on_events(proto, events, start)

    def _dispatch(
        self,
        subject: str,
        reply: str | None,
        hdr: bytes,
        payload: bytes,
        queues: tuple[str, ...],
        subs: list[LeafSubscription] | None = None,
    ) -> None:
        """Hand one message to its subscriptions (``subs``: their match, if just made)."""
        stats = self.stats
        stats.msgs_in += 1
        stats.bytes_in += len(hdr) + len(payload)
        if subs is None:
            subs = self._subs.match(subject)
        if not subs:
            return
        if not self._has_queue_subs:
            for s in subs:
                try:
                    s.cb(subject, reply, hdr, payload)
                except Exception:
                    stats.callback_errors += 1
                    log.exception("leaf link %s: callback for %s failed", self.name, s.subject)
            return
        # Plain subscribers always get it; a local queue group only when the hub picked this
        # link for that group (the group is named in the frame), and then one member of it.
        picked: dict[str, list[LeafSubscription]] = {}
        for s in subs:
            if s.queue is None:
                self._call(s, subject, reply, hdr, payload)
            elif s.queue in queues:
                picked.setdefault(s.queue, []).append(s)
        for members in picked.values():
            self._rr += 1
            self._call(members[self._rr % len(members)], subject, reply, hdr, payload)

    def _run(self, s: LeafSubscription, run: list[wire.Event]) -> None:
        stats = self.stats
        stats.msgs_in += len(run)
        stats.bytes_in += sum([len(ev[3]) + len(ev[4]) for ev in run])
        try:
            s.run_cb(run)  # type: ignore[misc]
        except Exception:
            stats.callback_errors += 1
            log.exception("leaf link %s: callback for %s failed", self.name, s.subject)

    def _call(self, s: LeafSubscription, subject: str, reply: str | None, hdr: bytes, payload: bytes) -> None:
        try:
            s.cb(subject, reply, hdr, payload)
        except Exception:
            self.stats.callback_errors += 1
            log.exception("leaf link %s: callback for %s failed", self.name, s.subject)

    def _on_control(self, proto: LeafProtocol, ev: wire.Event) -> None:
        kind = ev[0]
        if kind == wire.LS_ADD:
            self.interest_view.add(ev[1], ev[2], ev[3])
        elif kind == wire.LS_DEL:
            self.interest_view.remove(ev[1], ev[2])
        elif kind == wire.PING:
            self._send_control(wire.PONG_FRAME, proto)
        elif kind == wire.PONG:
            if proto.handshake_stage == "pong":
                if not proto.handshake.done():
                    proto.handshake.set_result(None)
                return
            self._pings_out = 0
            if self._pongs:
                f = self._pongs.popleft()
                if f is not None and not f.done():
                    f.set_result(None)
        elif kind == wire.INFO:
            info = ev[1]
            self.server_info.update(info)
            if "max_payload" in info:
                self.max_payload = int(info["max_payload"])
            if proto.handshake_stage == "info" and not proto.handshake.done():
                proto.handshake.set_result(info)
        elif kind == wire.ERR:
            msg = ev[1]
            if proto.handshake_stage != "done":
                if not proto.handshake.done():
                    proto.handshake.set_exception(
                        TransportError(f"leaf link {self.name}: hub refused: {msg}")
                    )
            elif "permissions violation" in msg.lower():
                log.warning("leaf link %s: hub error: %s", self.name, msg)  # the link stays up
            else:
                # Other -ERRs are followed by the hub closing the link: the "down" line says it.
                self._hub_error = msg
                log.debug("leaf link %s: hub error: %s", self.name, msg)
        elif kind == wire.OK:
            pass
        else:
            log.warning("leaf link %s: unexpected frame from hub: %r", self.name, ev[:2])

    # ------------------------------------------------------------------------ subscriptions

    def subscribe(
        self, subject: str, cb: MsgCallback, queue: str | None = None, run_cb: RunCallback | None = None
    ) -> LeafSubscription:
        """Ask the hub for messages on ``subject`` (``LS+``); ``cb(subject, reply, hdr, payload)``.

        ``run_cb``, if given, takes instead the ``MSG`` events of one socket read that only this
        subscription matches and that arrived next to each other, in one call (in order).

        Several local subscriptions on one (subject, queue) share one hub subscription. With a
        ``queue`` the hub counts this link as ``weight`` = local member count in that group.
        Literal subjects under ``$JS.API.``, ``$KV.``, ``$OBJ.`` are refused: the hub would
        close the link (those are captured over the client connection instead).
        """
        if not is_valid_subject(subject):
            raise wire.LeafFrameError(f"invalid subject {subject!r}")
        if queue is not None:
            wire.check_token(queue, "queue group")
        if subject.startswith(DENIED_PREFIXES):
            if is_literal(subject):
                raise wire.LeafFrameError(
                    f"{subject!r} is denied on leaf connections; the hub would close the link"
                )
            log.warning(
                "leaf link %s: %s is denied by the hub on leaf links; it will get nothing", self.name, subject
            )
        if self.closed:
            raise TransportError(f"leaf link {self.name} is closed")
        sub = LeafSubscription(self, subject, queue, cb, None if queue is not None else run_cb)
        key = (subject, queue)
        members = self._sub_keys.setdefault(key, [])
        members.append(sub)
        self._subs.insert(subject, sub)
        if queue is not None:
            self._has_queue_subs += 1
            self._send_control(wire.encode_sub(subject, queue, len(members)))
        elif len(members) == 1:
            self._send_control(wire.encode_sub(subject))
        return sub

    def unsubscribe(self, sub: LeafSubscription) -> None:
        """Remove a local subscription; ``LS-`` goes out when the last one on its key goes."""
        if not sub.active:
            return
        sub.active = False
        key = (sub.subject, sub.queue)
        members = self._sub_keys.get(key)
        if not members or sub not in members:
            return
        members.remove(sub)
        self._subs.remove(sub.subject, sub)
        if sub.queue is not None:
            self._has_queue_subs -= 1
        if not members:
            del self._sub_keys[key]
            self._send_control(wire.encode_unsub(sub.subject, sub.queue))
        elif sub.queue is not None:
            self._send_control(wire.encode_sub(sub.subject, sub.queue, len(members)))

    # ----------------------------------------------------------------------------- interest

    def has_interest(self, subject: str) -> bool:
        """True if some hub subscription (plain or queue) matches the literal ``subject``."""
        return self.interest_view.has_interest(subject)

    def queue_groups(self, subject: str) -> set[str]:
        """Queue groups on the hub with a subscription matching the literal ``subject``."""
        return self.interest_view.queue_groups(subject)

    def queue_weight(self, subject: str, queue: str) -> int:
        """The hub-announced member count of ``queue`` on exactly the subscription ``subject``."""
        return self.interest_view.queue_weight(subject, queue)

    def interest(self) -> dict[tuple[str, str | None], int]:
        """Snapshot of the hub's application interest: (subject, queue) -> weight (1 for plain)."""
        return self.interest_view.snapshot()

    def add_interest_listener(self, cb: InterestListener) -> Callable[[], None]:
        """Call ``cb("+"|"-", subject, queue)`` when a hub subscription key appears or goes;
        returns a function that removes the listener."""
        return self.interest_view.add_listener(cb)
