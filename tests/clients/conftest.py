"""Client acceptance suites: real @nats-io/jetstream (node) and nats-jetstream (Python 3.13)
scenario scripts run as subprocesses against jetlog and against nats-server -js.

The ``target`` fixture is the integration suite's: one in-process jetlog node beside a plain
nats-server, or a real ``nats-server -js``; subprocess clients just get ``Target.url``.
"""

from __future__ import annotations

from tests.integration.conftest import Target, target

__all__ = ["Target", "target"]
