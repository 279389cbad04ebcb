"""Shared fixtures: real nats-server processes on free ports, one per test."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from jetlog.embedded import NatsServer, find_nats_server


def pytest_sessionstart(session: pytest.Session) -> None:
    # Fail loudly (not skip) when the binary is missing: every integration test needs it.
    find_nats_server()


@pytest.fixture
async def nats_server() -> AsyncIterator[NatsServer]:
    """An upstream nats-server with JetStream OFF and a leafnode listener (what jetlog sits beside)."""
    async with NatsServer(leafnode=True) as srv:
        yield srv


@pytest.fixture
async def js_server(tmp_path) -> AsyncIterator[NatsServer]:  # type: ignore[no-untyped-def]
    """A real nats-server with JetStream ON: the reference jetlog is compared against."""
    async with NatsServer(jetstream=True, leafnode=False, store_dir=str(tmp_path / "js")) as srv:
        yield srv
