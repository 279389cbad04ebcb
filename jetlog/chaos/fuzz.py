"""``jetlog fuzz``: hostile JetStream API requests against jetlog, compared with nats-server.

By default it starts its own targets: a ``nats-server`` (JetStream off, leafnode on) with a
``jetlog serve`` child process beside it, and — for the comparison — a ``nats-server -js``.
``--url`` fuzzes any running server instead (jetlog or nats-server; the node's own logs are then
not watched). The request sequence comes from :mod:`jetlog.chaos.fuzzgen` and depends only on
``--seed``, ``--requests`` and the servers' ``max_payload``, so a run is reproducible.

What a run measures (:func:`verdict` turns it into the exit status):

* **crashes**: the node process exited, or stopped answering ``$JS.API.INFO`` (probed every
  ``probe_every`` requests and at the end);
* **non-JSON replies** to JSON API requests and publishes (every such reply must be a JSON
  object: a result or a JetStream error);
* **node errors**: ``ERROR`` log lines and tracebacks of the jetlog process (a handler that
  raised is a bug even when the client got an answer);
* **health at the end**: ``STREAM.INFO``, a publish and a pull consume on the fuzzed stream;
* **unanswered differences**: requests jetlog leaves unanswered that nats-server answers (must
  be none) and the reverse (reported). ``$JETLOG.API.*`` is jetlog's own and not compared.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import tempfile
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from jetlog.chaos import fuzzreq as R
from jetlog.chaos.fuzzrun import Answer, FuzzError, RawClient, TargetResult, run_target
from jetlog.devcluster import serve_argv
from jetlog.embedded import NatsServer

__all__ = ["FuzzReport", "compare", "jetlog_node", "render", "run_fuzz", "verdict"]


@dataclass
class FuzzReport:
    """A whole run: the jetlog target and, optionally, the nats-server reference."""

    seed: int
    count: int
    jetlog: TargetResult
    nats: TargetResult | None = None
    only_jetlog_unanswered: list[tuple[Answer, Answer]] = field(default_factory=list)
    only_nats_unanswered: list[tuple[Answer, Answer]] = field(default_factory=list)
    sig_diffs: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    sig_examples: dict[tuple[str, str, str], Answer] = field(default_factory=dict)


def compare(report: FuzzReport) -> None:
    """Fill the differences between the jetlog and nats-server runs."""
    if report.nats is None:
        return
    for a, b in zip(report.jetlog.answers, report.nats.answers, strict=False):
        if a.req.kind == R.KIND_JETLOG or not a.req.reply:
            continue
        if not a.answered and b.answered:
            report.only_jetlog_unanswered.append((a, b))
        elif a.answered and not b.answered:
            report.only_nats_unanswered.append((a, b))
        elif a.sig != b.sig:
            key = (a.req.op, a.sig, b.sig)
            report.sig_diffs[key] += 1
            report.sig_examples.setdefault(key, a)


class _NodeChild:
    """A ``jetlog serve`` child process; its stderr is kept for the error scan."""

    def __init__(self, srv: NatsServer, data_dir: str) -> None:
        self.srv = srv
        self.data_dir = data_dir
        self.proc: asyncio.subprocess.Process | None = None
        self.stderr: list[str] = []
        self._drain: asyncio.Task[None] | None = None

    async def start(self, timeout: float = 60.0) -> None:
        self.proc = await asyncio.create_subprocess_exec(
            *serve_argv(self.srv.url, self.srv.leaf_url, self.data_dir, "warning"),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self._drain = asyncio.create_task(self._read_stderr())
        assert self.proc.stdout is not None
        try:
            line = await asyncio.wait_for(self.proc.stdout.readline(), timeout)
        except TimeoutError:
            line = b""
        if not line.startswith(b"ready "):
            await self.stop()
            raise FuzzError("jetlog did not start:\n" + "\n".join(self.stderr[-20:]))

    async def _read_stderr(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        while line := await self.proc.stderr.readline():
            if len(self.stderr) < 20000:
                self.stderr.append(line.decode(errors="replace").rstrip())

    def alive(self) -> str:
        """ "" while the process runs, else its exit status."""
        if self.proc is None or self.proc.returncode is None:
            return ""
        return f"jetlog process exited with status {self.proc.returncode}"

    def link_drops(self) -> list[str]:
        """WARNING lines saying an upstream link was lost (the node reconnects; requests sent
        meanwhile go unanswered)."""
        return [
            ln
            for ln in self.stderr
            if " WARNING " in ln and ("connection lost" in ln or "connection error" in ln)
        ]

    def errors(self) -> list[str]:
        """ERROR/CRITICAL lines the node wrote, each traceback reduced to its last frame and
        its exception line."""
        out: list[str] = []
        lines = self.stderr
        for i, ln in enumerate(lines):
            if " ERROR " in ln or " CRITICAL " in ln:
                out.append(ln)
            elif ln.startswith("Traceback"):
                j = i + 1
                while j < len(lines) and (lines[j].startswith(" ") or not lines[j].strip()):
                    j += 1
                frames = [x.strip() for x in lines[i + 1 : j] if x.strip().startswith("File ")]
                tail = lines[j] if j < len(lines) else "?"
                out.append(f"  {frames[-1] if frames else ''}: {tail}")
        return out

    async def stop(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.terminate()
            try:
                await asyncio.wait_for(self.proc.wait(), 30)
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()
        if self._drain is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait_for(self._drain, 5)


@contextlib.asynccontextmanager
async def jetlog_node() -> AsyncIterator[tuple[str, _NodeChild]]:
    """A nats-server (leafnode on) and a ``jetlog serve`` child beside it, in a temp dir."""
    tmp = tempfile.mkdtemp(prefix="jetlog-fuzz-")
    try:
        async with NatsServer(leafnode=True) as srv:
            node = _NodeChild(srv, os.path.join(tmp, "data"))
            await node.start()
            try:
                yield srv.url, node
            finally:
                await node.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@contextlib.asynccontextmanager
async def nats_reference() -> AsyncIterator[str]:
    """A ``nats-server -js`` in a temp dir."""
    tmp = tempfile.mkdtemp(prefix="jetlog-fuzz-js-")
    try:
        async with NatsServer(jetstream=True, leafnode=False, store_dir=tmp) as srv:
            yield srv.url
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


async def _max_payload(url: str) -> int:
    c = RawClient()
    await c.connect(url)
    try:
        return c.max_payload
    finally:
        await c.close()


async def run_fuzz(
    seed: int,
    count: int,
    *,
    url: str = "",
    nats_url: str = "",
    compare_nats: bool = True,
    answer_timeout: float = 0.5,
    oversize_reads: bool = False,
    progress: Callable[[str, int], None] | None = None,
) -> FuzzReport:
    """One run against jetlog (embedded unless ``url``) and, if asked, nats-server -js
    (embedded unless ``nats_url``); the same sequence on both."""
    async with contextlib.AsyncExitStack() as stack:
        node: _NodeChild | None = None
        if not url:
            url, node = await stack.enter_async_context(jetlog_node())
        if compare_nats and not nats_url:
            nats_url = await stack.enter_async_context(nats_reference())
        max_payload = await _max_payload(url)
        if nats_url:
            max_payload = min(max_payload, await _max_payload(nats_url))

        def tick(name: str) -> Callable[[int], None] | None:
            return (lambda i: progress(name, i)) if progress else None

        opts: dict[str, Any] = {"answer_timeout": answer_timeout, "oversize_reads": oversize_reads}
        jl = await run_target(
            "jetlog",
            url,
            seed,
            count,
            max_payload,
            alive=node.alive if node else None,
            progress=tick("jetlog"),
            **opts,
        )
        if node is not None:
            await asyncio.sleep(0.2)  # the last log lines
            jl.node_errors = node.errors()
            jl.link_drops = node.link_drops()
        report = FuzzReport(seed, count, jl)
        if nats_url:
            report.nats = await run_target(
                "nats-server", nats_url, seed, count, max_payload, progress=tick("nats"), **opts
            )
        compare(report)
        return report


def verdict(report: FuzzReport) -> list[str]:
    """What makes the run fail (empty: it passed)."""
    jl = report.jetlog
    bad = []
    if jl.crashed:
        bad.append(f"crash: {jl.crashed}")
    if jl.non_json:
        bad.append(f"{len(jl.non_json)} non-JSON replies to JSON API requests")
    if jl.node_errors:
        bad.append(f"{len(jl.node_errors)} ERROR lines/tracebacks in the node's log")
    if not jl.crashed and not jl.healthy:
        bad.append(f"node unhealthy at the end ({jl.health_detail})")
    if report.only_jetlog_unanswered:
        bad.append(
            f"{len(report.only_jetlog_unanswered)} requests unanswered by jetlog but answered by nats-server"
        )
    return bad


def _row(r: TargetResult) -> str:
    ans = [a for a in r.answers if a.req.reply]
    unanswered = sum(1 for a in ans if not a.answered)
    late = sum(1 for a in ans if a.late)
    p = sorted(r.probes)
    probe = f"{p[len(p) // 2] * 1000:.1f}/{p[-1] * 1000:.1f}" if p else "-"
    health = "yes" if r.healthy else f"NO ({r.health_detail})"
    return (
        f"| {r.name} | {len(r.answers)} | {len(ans) - unanswered} | {unanswered} | {late} | "
        f"{len(r.non_json)} | {r.crashed or 0} | {len(r.node_errors)} | {probe} | {health} | {r.seconds:.0f} |"
    )


def render(report: FuzzReport, examples: int = 8) -> str:
    """The report as markdown."""
    jl = report.jetlog
    out = [
        f"jetlog fuzz: seed {report.seed}, {report.count} requests, max_payload {jl.max_payload} B",
        "",
        "| target | requests | answered | unanswered | late | non-JSON | crashes | node errors "
        "| INFO probe p50/max ms | healthy at end | s |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
        _row(jl),
    ]
    if report.nats is not None:
        out.append(_row(report.nats))
    ops = Counter(a.req.op for a in jl.answers)
    muts = Counter(a.req.mutation for a in jl.answers)
    out += ["", "requests by endpoint: " + ", ".join(f"{k} {v}" for k, v in sorted(ops.items()))]
    out += ["requests by mutation: " + ", ".join(f"{k} {v}" for k, v in sorted(muts.items()))]
    if report.nats is not None:
        out += [
            "",
            f"unanswered by jetlog only: {len(report.only_jetlog_unanswered)}; "
            f"by nats-server only: {len(report.only_nats_unanswered)}",
        ]
        for title, pairs in (
            ("jetlog left unanswered, nats-server answered", report.only_jetlog_unanswered),
            ("nats-server left unanswered, jetlog answered", report.only_nats_unanswered),
        ):
            if pairs:
                by_op = Counter(a.req.op for a, _ in pairs)
                out.append(f"{title}: " + ", ".join(f"{k} {v}" for k, v in sorted(by_op.items())))
                out += [
                    f"  {a.req.describe(100)} -> jetlog {a.sig}, nats {b.sig}" for a, b in pairs[:examples]
                ]
        if report.sig_diffs:
            out.append(
                f"answered differently (endpoint, jetlog, nats-server: count): {sum(report.sig_diffs.values())}"
            )
            for key, n in report.sig_diffs.most_common(examples * 2):
                eg = report.sig_examples[key].req.describe(80)
                out.append(f"  {key[0]}: {key[1]} vs {key[2]}: {n}, e.g. {eg}")
    for a in jl.non_json[:examples]:
        out.append(f"non-JSON: {a.req.describe(100)} -> {a.sig} {a.first[:120]!r}")
    out += [f"node: {line}" for line in jl.node_errors[: examples * 3]]
    if jl.link_drops:
        out.append(f"upstream link lost {len(jl.link_drops)} times:")
        out += [f"node: {line}" for line in jl.link_drops[:examples]]
    out += [f"client: {e}" for e in jl.client_errors[:examples]]
    bad = verdict(report)
    out += ["", "verdict: " + ("PASS" if not bad else "FAIL: " + "; ".join(bad))]
    return "\n".join(out)
