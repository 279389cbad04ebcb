"""What a node reports of the cluster: STREAM.INFO's ``cluster`` block, ``/metrics``,
``/jsz``'s ``meta_cluster``, ``jetlog status`` and the streams still catching up (readiness).

Separate from ``service.py`` because these are read-only views of the metadata, liveness and
this node's roles; they send and subscribe nothing. :class:`ClusterViews` is a base of
``ClusterNode``, which answers the requests that use them; this module does not import
``service.py``.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from jetlog.cluster import meta as MT
from jetlog.cluster.liveness import Liveness
from jetlog.cluster.reconcile import Reconciler

if TYPE_CHECKING:
    from jetlog.cluster.raft import MetaRaft


class ClusterViews:
    """The reports of :mod:`jetlog.cluster.status`; a base of ``ClusterNode``, whose
    ``__init__`` sets every attribute below."""

    name: str
    cluster: str
    members: dict[str, str]
    state: MT.MetaState
    raft: MetaRaft
    liveness: Liveness
    reconciler: Reconciler | None

    def cluster_info(self, name: str) -> dict[str, Any]:
        """STREAM.INFO's ``cluster`` block (nats-server's shape)."""
        a = self.state.streams.get(name)
        out: dict[str, Any] = {"name": self.cluster}
        if a is None:
            return out
        if a.leader:
            out["leader"] = a.leader
        role = self.reconciler.role_of(name) if self.reconciler is not None else None
        replicas = []
        leader_obj = role.obj if role is not None and role.kind == "leader" else None
        lags = leader_obj.lags() if leader_obj is not None else {}
        now = time.monotonic()
        for r in a.replicas:
            if r == a.leader:
                continue
            item: dict[str, Any] = {"name": r, "current": r in a.isr}
            if leader_obj is not None and r in leader_obj.followers:
                item["active"] = int(max(0.0, now - leader_obj.followers[r].last_fetch) * 1e9)
                item["lag"] = lags[r]
            else:
                item["active"] = 0
            if not self.liveness.alive(r):
                item["offline"] = True
            replicas.append(item)
        if replicas:
            out["replicas"] = replicas
        return out

    def catching_up(self) -> list[str]:
        """Streams whose replica here is out of the ISR while another node leads them (this node
        is still catching up); leaderless streams do not count (nothing to catch up from)."""
        return catching_up(self.name, self.state.streams)

    def metrics_view(self) -> dict[str, Any]:
        """Figures for ``/metrics``: this node's Raft role and term, and per stream it holds a
        replica of: ISR and replica counts, epoch, whether it leads, each follower's lag
        (messages behind the leader's log end; known on the leader only), where it follows,
        the replication fetches it has made (a caught-up follower of an idle stream makes one
        per long poll), and whether its metadata could not be applied here yet."""
        streams: dict[str, Any] = {}
        for name, a in self.state.streams.items():
            if self.name not in a.replicas:
                continue
            role = self.reconciler.role_of(name) if self.reconciler is not None else None
            leads = role is not None and role.kind == "leader"
            streams[name] = {
                "leader": leads,
                "isr": len(a.isr),
                "replicas": len(a.replicas),
                "epoch": a.epoch,
                "lag": role.obj.lags() if leads else {},  # type: ignore[union-attr]
                "unapplied": self.reconciler is not None and self.reconciler.unapplied(name),
            }
            if role is not None and role.kind == "follower":
                streams[name]["fetches"] = role.obj.fetches
        return {
            "raft_leader": bool(self.raft.is_leader),
            "raft_term": int(self.raft.term),
            "streams": streams,
        }

    def meta_info(self) -> dict[str, Any]:
        """``/jsz``'s ``meta_cluster`` (nats-server's MetaClusterInfo): the metadata group."""
        out: dict[str, Any] = {"name": self.cluster}
        leader = self.raft.leader()
        if leader:
            out["leader"] = leader
        out["peer"] = self.name
        out["replicas"] = [
            {"name": m, "current": self.liveness.alive(m), "active": 0} for m in self.members if m != leader
        ]
        out["cluster_size"] = len(self.members)
        return out

    def status(self) -> dict[str, Any]:
        """Members, the Raft leader and each stream's leader/ISR (``jetlog status``)."""
        streams = {}
        for name, a in sorted(self.state.streams.items()):
            streams[name] = {
                "leader": a.leader,
                "epoch": a.epoch,
                "replicas": list(a.replicas),
                "isr": list(a.isr),
            }
        raft = self.raft.status()
        return {
            "node": self.name,
            "cluster": self.cluster,
            "raft_leader": raft.get("leader"),
            "raft_term": raft.get("term"),
            "raft": raft,
            "members": {
                m: {"alive": self.liveness.alive(m), "leads": self.liveness.load.get(m, 0)}
                for m in self.members
            },
            "streams": streams,
        }


def catching_up(node: str, streams: dict[str, Any]) -> list[str]:
    """Names of the streams ``node`` holds a replica of outside the ISR while another node
    leads them (what keeps the node not ready)."""
    return sorted(
        name
        for name, a in streams.items()
        if node in a.replicas and node not in a.isr and a.leader and a.leader != node
    )
