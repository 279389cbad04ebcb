"""The shipped fuzzer, short and seeded: hostile ``$JS.API`` requests against a ``jetlog serve``
process and the same sequence against ``nats-server -js``. The long run is ``jetlog fuzz
--requests 10000`` (figures in docs/fuzz.md)."""

from __future__ import annotations

import os
import subprocess
import sys

from jetlog.chaos.fuzz import render, run_fuzz, verdict

SEED = 11
REQUESTS = 400


async def test_short_seeded_fuzz_run_against_jetlog_and_nats_server() -> None:
    report = await run_fuzz(SEED, REQUESTS)
    text = render(report)
    jl, ref = report.jetlog, report.nats
    assert ref is not None
    assert len(jl.answers) == len(ref.answers) == REQUESTS, text
    # The measures of the brief: no crash, only JSON replies to JSON requests, no handler
    # errors in the node's log, healthy at the end, and nothing left unanswered that
    # nats-server answers.
    assert not jl.crashed, text
    assert jl.non_json == [], text
    assert jl.node_errors == [], text
    assert jl.healthy, text
    assert report.only_jetlog_unanswered == [], text
    assert verdict(report) == [], text
    # The run really exercised the node: most requests got answers, on both servers alike.
    answered = sum(1 for a in jl.answers if a.answered)
    assert answered > REQUESTS * 0.8, text
    assert answered == sum(1 for a in ref.answers if a.answered), text
    assert jl.probes and ref.probes, text
    assert ref.healthy, text


def test_fuzz_command_prints_a_report_and_exits_0() -> None:
    r = subprocess.run(
        [sys.executable, "-m", "jetlog", "fuzz", "--requests", "60", "--seed", "3", "--no-compare"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.startswith("jetlog fuzz: seed 3, 60 requests")
    assert "| jetlog | 60 |" in r.stdout
    assert r.stdout.rstrip().endswith("verdict: PASS")
