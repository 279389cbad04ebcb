"""Shared fixtures: real nats-server processes on free ports, one per test."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import AsyncIterator

import pytest

from jetlog.embedded import NatsServer, find_nats_server


def pytest_sessionstart(session: pytest.Session) -> None:
    # Fail loudly (not skip) when the binary is missing: every integration test needs it.
    find_nats_server()
    # Everything the run writes to the temp directory (pytest's tmp_path, nats-server configs,
    # killed `jetlog dev` processes' leftovers, Spark's local dirs and native libraries) goes to
    # one directory of its own, removed when the run passes and kept to look at when it fails
    # (for a day: the next run removes older ones).
    base = tempfile.gettempdir()
    _remove_old_runs(base)
    session.config.stash[_SESSION_TMP] = tmp = tempfile.mkdtemp(prefix=_RUN_PREFIX, dir=base)
    os.environ["TMPDIR"] = tmp
    tempfile.tempdir = None  # gettempdir() reads TMPDIR again


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    tmp = session.config.stash.get(_SESSION_TMP, None)
    if tmp is not None and exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        shutil.rmtree(tmp, ignore_errors=True)


_RUN_PREFIX = "jetlog-test-"
_KEEP_FAILED_RUN_S = 24 * 3600


def _remove_old_runs(base: str) -> None:
    """Remove the temp directories of runs that failed more than a day ago (a run still going
    keeps writing to its own, so a day-old one is not in use)."""
    now = time.time()
    with os.scandir(base) as it:
        for e in it:
            if e.name.startswith(_RUN_PREFIX) and e.is_dir(follow_symlinks=False):
                try:
                    old = now - e.stat(follow_symlinks=False).st_mtime > _KEEP_FAILED_RUN_S
                except OSError:
                    continue
                if old:
                    shutil.rmtree(e.path, ignore_errors=True)


_SESSION_TMP = pytest.StashKey[str]()
_LAST_POOL_USER = pytest.StashKey[bool]()


def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    # The tests on the shared 3-node clusters (tests/support/clusters.py) run first, together,
    # so the clusters can be stopped right after the last of them (see pytest_runtest_teardown).
    uses = [i for i in items if "cluster_pool" in getattr(i, "fixturenames", ())]
    if uses:
        items[:] = uses + [i for i in items if "cluster_pool" not in getattr(i, "fixturenames", ())]
        uses[-1].stash[_LAST_POOL_USER] = True


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> object:
    result = yield
    if item.stash.get(_LAST_POOL_USER, False):
        from tests.support.clusters import SHARED

        SHARED.close()
    return result


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
