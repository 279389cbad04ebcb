"""The ``jetlog`` command line: every flag documented, ``--version``, and ``status`` failing fast
and plainly against a server that is not there (refused, silent, unknown host)."""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from importlib.metadata import version

import pytest

from jetlog.cli import build_parser


def _parsers(
    p: argparse.ArgumentParser, path: str = "jetlog"
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    yield path, p
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, f"{path} {name}")


def test_every_flag_of_every_subcommand_has_help() -> None:
    seen = 0
    missing = []
    for path, p in _parsers(build_parser()):
        for action in p._actions:
            if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
                continue
            seen += 1
            if not action.help or action.help == argparse.SUPPRESS:
                missing.append(f"{path} {'/'.join(action.option_strings) or action.dest}")
    assert seen > 40  # the walk really visited serve, dev, status, bench and fuzz
    assert not missing, missing


def test_subcommands_are_all_there() -> None:
    names = {path for path, _ in _parsers(build_parser())}
    assert {"jetlog serve", "jetlog dev", "jetlog status", "jetlog bench", "jetlog fuzz"} <= names


def _jetlog(*args: str, timeout: float = 30) -> tuple[int, str, str, float]:
    t0 = time.monotonic()
    r = subprocess.run(
        [sys.executable, "-m", "jetlog", *args], capture_output=True, text=True, timeout=timeout
    )
    return r.returncode, r.stdout, r.stderr, time.monotonic() - t0


def test_version_comes_from_the_package_metadata() -> None:
    rc, out, err, _ = _jetlog("--version")
    assert rc == 0, err
    assert out.strip() == f"jetlog {version('jetlog')}"


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A TCP port that accepts connections and never says anything (a hung server)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        yield s.getsockname()[1]


def _refused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again: connecting is refused


@pytest.mark.parametrize("kind", ["refused", "silent", "unknown-host"])
def test_status_against_an_unreachable_url_fails_fast_with_one_line(kind: str, silent_port: int) -> None:
    url = {
        "refused": f"nats://127.0.0.1:{_refused_port()}",
        "silent": f"nats://127.0.0.1:{silent_port}",
        "unknown-host": "nats://no-such-host.invalid:4222",
    }[kind]
    rc, out, err, took = _jetlog("status", "--nats-url", url, "--timeout", "1")
    assert rc == 1
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"jetlog: cannot connect to {url}: ")
    assert "Traceback" not in err
    # The connect timeout (1 s) plus the interpreter's start-up, never nats-py's retry loop.
    assert took < 1 + 4, took


class _Node:
    """What ``_serve_until_signal`` drives: a start that succeeds or fails."""

    def __init__(self, fail: bool | BaseException) -> None:
        self.fail = fail
        self.gc_during_start: bool | None = None
        self.stopped = False

    async def start(self) -> None:
        import gc

        from jetlog.errors import JetlogError

        self.gc_during_start = gc.isenabled()
        if isinstance(self.fail, BaseException):
            raise self.fail
        if self.fail:
            raise JetlogError("no")

    async def stop(self) -> None:
        self.stopped = True


@pytest.mark.parametrize("fail", [False, True])
async def test_cyclic_gc_is_off_while_a_node_starts_and_on_after(fail: bool) -> None:
    """Off during the start; on after it, with the young generation collected every
    ``GC_YOUNG`` allocations instead of CPython's 700 (the older generations' thresholds kept)."""
    import asyncio
    import gc

    from jetlog.cli import GC_YOUNG, _gc_quiet_start, _serve_until_signal

    node = _Node(fail)
    stop = asyncio.Event()
    ready: list[bool] = []
    assert gc.isenabled()
    before = gc.get_threshold()
    gc.set_threshold(700, *before[1:])  # CPython's default, whatever an earlier test left
    _gc_quiet_start()
    try:
        stop.set()  # return at once after the start
        rc = await _serve_until_signal(node, lambda: ready.append(gc.isenabled()), stop)
        assert node.gc_during_start is False
        assert gc.isenabled()
        assert gc.get_threshold() == (GC_YOUNG, *before[1:])
        assert rc == (1 if fail else 0) and node.stopped
        assert ready == []  # the stop was already requested: no "ready" line
    finally:
        gc.enable()
        gc.set_threshold(*before)


async def test_a_start_failing_otherwise_still_stops_the_node_before_it_propagates() -> None:
    """Not a JetlogError (a bug, a cancellation): the node is stopped first. Left to the loop's
    shutdown, a cluster node's tasks were cancelled without its roles stopped, and the process
    hung instead of exiting (a taken monitoring port did that, 2026-11-28)."""
    import asyncio
    import gc

    from jetlog.cli import _serve_until_signal

    before = gc.get_threshold()
    try:
        for exc in (RuntimeError("bug"), asyncio.CancelledError()):
            node = _Node(exc)
            with pytest.raises(type(exc)):
                await _serve_until_signal(node, None, asyncio.Event())
            assert node.stopped
    finally:
        gc.set_threshold(*before)  # a served node's thresholds are not the test process's


async def test_a_taken_http_address_is_a_configuration_error_naming_it() -> None:
    import socket

    from prometheus_client import CollectorRegistry

    from jetlog.errors import ConfigError
    from jetlog.observe.http import HttpEndpoint

    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        ep = HttpEndpoint(f"127.0.0.1:{port}", CollectorRegistry(), lambda: (True, "ready"), None)
        with pytest.raises(ConfigError) as info:
            await ep.start()
    assert info.value.key == "http.listen"
    # The words ``jetlog dev`` / ``LocalCluster`` look for to retry on a new port.
    assert f"('127.0.0.1', {port}): address already in use" in str(info.value)


def test_a_node_without_the_http_endpoint_does_not_import_prometheus() -> None:
    """prometheus_client (and http.server with it) is imported when the endpoint starts, not
    on every start: ~40 ms of a start's CPU here for metrics nobody could scrape."""
    code = "import sys, jetlog.cli, jetlog.node; print(sorted(m for m in ('prometheus_client', 'http.server') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
