"""Client acceptance suites: real @nats-io/jetstream (node) and nats-jetstream (Python 3.13)
scenario scripts run as subprocesses against jetlog (one node, and two 3-node clusters) and
against nats-server -js.

``target`` is ``tests.support.clusters.client_target``: one in-process jetlog node beside a plain
nats-server, a real ``nats-server -js``, or a shared 3-node cluster (``cluster``: R1 streams
placed anywhere; ``cluster-r3``: R3 by default); subprocess clients just get ``Target.url``.
"""

from __future__ import annotations

from tests.integration.conftest import Target
from tests.support.clusters import client_target, cluster_pool

__all__ = ["Target", "client_target", "cluster_pool"]
