"""Which node answers a JetStream API request in a cluster (docs/cluster.md §6).

Every node subscribes ``$JS.API.>`` (no queue group): every node sees every request and exactly
one is *responsible* for it; the others drop it.

* A stream- or consumer-scoped request (info, purge, msg get/delete, update, stepdown,
  consumer create/info/delete/list/next…) for a stream in the metadata is answered by the
  stream's leader, directly (no forwarding hop).
* Everything else (account info, stream create/delete/names/list, meta stepdown, requests for
  streams the metadata does not know, unknown subjects) is answered by the Raft leader, which
  serves metadata changes through Raft (:mod:`jetlog.cluster.api`) and otherwise the exact
  single-node answers (``stream not found``…).
* Direct Get and the bulk FETCH are not routed here: every replica of a stream subscribes them
  in a per-stream queue group and answers from its committed data (Spark's read tasks and KV
  reads spread over the replicas).

Why not one queue group for the whole API with forwarding: a frozen node (SIGSTOP, a long GC
pause) keeps its subscriptions until the upstream notices, which takes minutes by default, and
would swallow its share of every request. Responsibility follows leadership instead, and
leadership moves away from a frozen node within the node timeout.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from jetlog.errors import E

log = logging.getLogger("jetlog.cluster.routing")

# Response types for the errors this module answers itself (a stream without a leader).
_RTYPE = {
    "INFO": "stream_info_response",
    "PURGE": "stream_purge_response",
    "MSG": "stream_msg_get_response",
    "UPDATE": "stream_update_response",
    "LEADER": "stream_leader_stepdown_response",
    "PEER": "stream_remove_peer_response",
}


def stream_of(rest: list[str]) -> str | None:
    """The stream a stream- or consumer-scoped API subject names (``rest`` after ``$JS.API``)."""
    n = len(rest)
    kind = rest[0]
    if kind == "STREAM" and n >= 3:
        op = rest[1]
        if op in ("INFO", "PURGE", "UPDATE") and n == 3:
            return rest[2]
        if op in ("MSG", "LEADER", "PEER") and n == 4:
            return rest[3]
        return None
    if kind == "CONSUMER" and n >= 3:
        op = rest[1]
        if op in ("DURABLE", "MSG", "LEADER") and n >= 4:
            return rest[3]
        return rest[2]
    return None


class Router:
    """Decides, per request, whether this node answers it (the ApiRouter's ``route`` hook)."""

    def __init__(
        self,
        *,
        node: str,
        state: Any,
        members: list[str],
        fenced: Callable[[], bool],
        alone: Callable[[], bool],
        raft_leader: Callable[[], str | None],
        alive: Callable[[str], bool],
        is_leader_here: Callable[[str], bool],
        cluster_api: Any,
        reply_json: Callable[[str | None, bytes], None],
        reply_status: Callable[[str, int], None],
        wait_ready: Callable[[str], Awaitable[bool]],
        spawn: Callable[[Awaitable[None], str], None],
        handle: Callable[[list[str], str | None, bytes, bytes, bool], None],
    ) -> None:
        self.node = node
        self.state = state
        self.members = members
        self.fenced = fenced
        self.alone = alone
        self.raft_leader = raft_leader
        self.alive = alive
        self.is_leader_here = is_leader_here
        self.api = cluster_api
        self.reply_json = reply_json
        self.reply_status = reply_status
        self.wait_ready = wait_ready
        self.spawn = spawn
        self.handle = handle

    def metadata_node(self) -> str:
        """Who answers requests that are not a stream leader's: the Raft leader, or while
        there is none, the first live member (so a request never goes unanswered only because
        an election is running)."""
        leader = self.raft_leader()
        if leader:
            return leader
        for m in self.members:
            if self.alive(m):
                return m
        return self.node

    def route(self, rest: list[str], reply: str | None, hdr: bytes, data: bytes, forwarded: bool) -> bool:
        """The ApiRouter hook: True when the request was taken care of (answered elsewhere,
        dropped as another node's, or served through the cluster)."""
        kind = rest[0]
        n = len(rest)
        if kind == "DIRECT":
            return True  # per-stream queue subscriptions of the replicas answer these
        if self.fenced():
            # Cut off from the Raft group: our view may be stale and someone else is
            # responsible now; answering could contradict the node that really is. Only when
            # no other member is heard at all does this node say the cluster is unavailable.
            if self.alone():
                return self._unavailable(rest, reply)
            return True
        name = stream_of(rest)
        a = self.state.streams.get(name) if name is not None else None
        if a is None:
            if self.metadata_node() != self.node:
                return True
            return self._metadata_request(rest, reply, hdr, data)
        assert name is not None
        if a.leader != self.node:
            if not a.leader and self.metadata_node() == self.node:
                return self._unavailable(rest, reply)
            return True  # the stream's leader answers
        if not forwarded and not self.is_leader_here(name):
            return self._defer(name, rest, reply, hdr, data)
        if kind == "STREAM" and rest[1] == "UPDATE" and n == 3:
            self.api.update(name, reply, hdr, data)
            return True
        if kind == "STREAM" and rest[1] == "LEADER":
            self.api.stream_stepdown(name, reply, data)
            return True
        if kind == "STREAM" and rest[1] == "PEER":
            self.api.peer_remove(name, reply)
            return True
        if kind == "CONSUMER" and rest[1] == "LEADER":
            self.api.stream_stepdown(name, reply, data, consumer=True)
            return True
        return False  # the single-node handlers serve it, on the stream's leader

    def _metadata_request(self, rest: list[str], reply: str | None, hdr: bytes, data: bytes) -> bool:
        kind = rest[0]
        n = len(rest)
        if kind == "INFO" and n == 1:
            self.api.account_info(reply, hdr)
            return True
        if kind == "META" and rest[1:] == ["LEADER", "STEPDOWN"]:
            self.api.meta_stepdown(reply, data)
            return True
        if kind == "STREAM" and n >= 2:
            op = rest[1]
            if op in ("NAMES", "LIST") and n == 2:
                self.api.names_or_list(op, reply, hdr, data)
                return True
            if op == "CREATE" and n == 3:
                self.api.create(rest[2], reply, hdr, data)
                return True
            if op == "DELETE" and n == 3:
                self.api.delete(rest[2], reply, hdr, data)
                return True
        # Unknown stream or subject: the single-node handlers give nats-server's answers.
        return False

    def _defer(self, name: str, rest: list[str], reply: str | None, hdr: bytes, data: bytes) -> bool:
        """Elected here but still taking over (opening, consumers): serve once ready."""

        async def later() -> None:
            if await self.wait_ready(name):
                self.handle(rest, reply, hdr, data, True)
            else:
                self._unavailable(rest, reply)

        self.spawn(later(), "deferred " + ".".join(rest[:2]))
        return True

    def _unavailable(self, rest: list[str], reply: str | None) -> bool:
        if not reply:
            return True
        if rest[0] == "CONSUMER" and len(rest) > 1 and rest[1] == "MSG":
            self.reply_status(reply, 503)  # a pull request nobody can serve now
            return True
        rtype = "api_response"
        if rest[0] == "STREAM" and len(rest) > 1:
            rtype = _RTYPE.get(rest[1], "api_response")
        elif rest[0] == "CONSUMER":
            rtype = "consumer_info_response"
        elif rest[0] == "INFO":
            rtype = "account_info_response"
        self.reply_json(reply, self.api.error_json(rtype, E.CLUSTER_NOT_AVAIL()))
        return True
