"""Locating the client environments the Makefile builds, and running scenario scripts in them.

The environments are built by ``make clients-env`` (a prerequisite of ``make test``):

* ``tests/clients/js/node_modules`` — ``npm ci`` from the committed lockfile;
* ``.venv313`` — Python 3.13 with nats-jetstream 0.3.0 + nats-core 0.2.0 + nkeys.

A missing environment is a test **failure** with the reason, never a skip.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
from functools import cache
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
JS_DIR = ROOT / "tests" / "clients" / "js"
PY313_DIR = ROOT / "tests" / "clients" / "py313"
VENV313 = ROOT / ".venv313"
VENV313_MISSING = VENV313 / "MISSING"  # written by the Makefile when no Python 3.13 exists

# What the environments must contain (kept in step with package.json and the Makefile).
NODE_PINS = {
    "@nats-io/jetstream": "3.4.0",
    "@nats-io/kv": "3.4.0",
    "@nats-io/transport-node": "3.4.0",
    "@nats-io/nats-core": "3.4.0",
}
PY313_PINS = {"nats-jetstream": "0.3.0", "nats-core": "0.2.0"}


class ScenarioError(AssertionError):
    pass


@cache
def _node_problem() -> str | None:
    node = shutil.which("node")
    if node is None:
        return "node is not on PATH (node >= 20 is required for the @nats-io/jetstream client tests)"
    for pkg, want in NODE_PINS.items():
        pj = JS_DIR / "node_modules" / pkg / "package.json"
        if not pj.exists():
            return f"{pkg} is not installed in {JS_DIR}/node_modules: run `make clients-env`"
        got = json.loads(pj.read_text())["version"]
        if got != want:
            return f"{pkg} {got} installed, {want} expected: run `make clients-env`"
    return None


def node_cmd() -> list[str]:
    problem = _node_problem()
    if problem:
        pytest.fail(f"@nats-io/jetstream environment missing: {problem}", pytrace=False)
    return [shutil.which("node") or "node", str(JS_DIR / "scenarios.mjs")]


@cache
def _py313_problem() -> str | None:
    if VENV313_MISSING.exists():
        return VENV313_MISSING.read_text().strip()
    py = VENV313 / "bin" / "python"
    if not py.exists():
        return f"{py} does not exist: run `make clients-env` (it needs a Python 3.13 interpreter)"
    stamp = VENV313 / ".installed-stamp"
    if not stamp.exists():
        return f"{VENV313} is incomplete (no {stamp.name}): run `make clients-env`"
    for pkg, want in PY313_PINS.items():
        dist = pkg.replace("-", "_")
        hits = (VENV313 / "lib" / "python3.13" / "site-packages").glob(f"{dist}-*.dist-info")
        versions = [h.name.removeprefix(f"{dist}-").removesuffix(".dist-info") for h in hits]
        if versions != [want]:
            return (
                f"{pkg}=={want} expected in {VENV313}, found {versions or 'nothing'}: run `make clients-env`"
            )
    return None


def py313_cmd() -> list[str]:
    problem = _py313_problem()
    if problem:
        pytest.fail(f"nats-jetstream (Python 3.13) environment missing: {problem}", pytrace=False)
    return [str(VENV313 / "bin" / "python"), str(PY313_DIR / "scenarios.py")]


async def run_scenario(cmd: list[str], url: str, scenario: str, timeout: float = 30.0) -> dict[str, Any]:
    """Run ``cmd url scenario`` without blocking the event loop (an in-process jetlog node shares
    it) and return the scenario's JSON result; a failed scenario raises with its error."""
    proc = await asyncio.create_subprocess_exec(
        *cmd,
        url,
        scenario,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1", "NODE_NO_WARNINGS": "1"},
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        out, err = await proc.communicate()
        raise ScenarioError(
            f"scenario {scenario!r} did not finish within {timeout}s\nstdout:\n{out.decode()[-2000:]}\n"
            f"stderr:\n{err.decode()[-2000:]}"
        ) from None
    lines = [ln for ln in out.decode().splitlines() if ln.strip()]
    if not lines:
        raise ScenarioError(
            f"scenario {scenario!r} printed nothing (exit {proc.returncode})\nstderr:\n{err.decode()[-3000:]}"
        )
    try:
        res = json.loads(lines[-1])
    except ValueError:
        raise ScenarioError(
            f"scenario {scenario!r}: last line is not JSON: {lines[-1][:500]!r}\nstderr:\n{err.decode()[-2000:]}"
        ) from None
    if not res.get("ok"):
        raise ScenarioError(
            f"scenario {scenario!r} failed: {res.get('error')}\nstderr:\n{err.decode()[-2000:]}"
        )
    return res
