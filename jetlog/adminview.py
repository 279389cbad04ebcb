"""How ``jetlog stream …`` / ``jetlog consumer …`` (``jetlog.admin``) read and show values:
durations and sizes in the ``nats`` CLI's words, rich tables, ``--json``."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

DURATION_UNITS = {
    "ns": 1,
    "us": 1_000,
    "ms": 1_000_000,
    "s": 10**9,
    "m": 60 * 10**9,
    "h": 3600 * 10**9,
    "d": 86400 * 10**9,
}


def parse_duration(text: str) -> int:
    """``90s``, ``5m``, ``1h``, ``2d``, ``500ms`` or plain nanoseconds → nanoseconds."""
    t = text.strip().lower()
    for unit in sorted(DURATION_UNITS, key=len, reverse=True):
        if t.endswith(unit) and t[: -len(unit)].replace(".", "", 1).isdigit():
            return int(float(t[: -len(unit)]) * DURATION_UNITS[unit])
    if t.isdigit():
        return int(t)
    raise argparse.ArgumentTypeError(f"not a duration: {text!r} (e.g. 90s, 5m, 1h, 2d)")


def human_bytes(n: int) -> str:
    """1536 → ``1.5 KiB``."""
    v = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if v < 1024 or unit == "TiB":
            return f"{int(v)} {unit}" if unit == "B" else f"{v:.1f} {unit}"
        v /= 1024
    return f"{n} B"


def human_duration(ns: int) -> str:
    """Nanoseconds → ``1h30m``-style text (``0`` → ``-``)."""
    if not ns:
        return "-"
    s = ns // 10**9
    if s == 0:
        return f"{ns // 10**6}ms"
    out = ""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if s >= size:
            out += f"{s // size}{unit}"
            s %= size
    return out


def console() -> Any:
    """A rich console (piped output at 160 columns)."""
    from rich.console import Console

    # Piped output is not cut at 80 columns (rich's default without a terminal).
    return Console(highlight=False, soft_wrap=False, width=None if sys.stdout.isatty() else 160)


def table(title: str, columns: list[str], rows: list[list[str]]) -> None:
    """Print rows under a title and column heads."""
    from rich.table import Table

    t = Table(title=title, title_justify="left", header_style="bold")
    for c in columns:
        t.add_column(c, overflow="fold", min_width=len(c))
    for r in rows:
        t.add_row(*r)
    console().print(t)


def pairs(title: str, pairs: list[tuple[str, str]]) -> None:
    """Print name/value pairs under a title."""
    from rich.table import Table

    t = Table(title=title, title_justify="left", show_header=False, box=None, pad_edge=False)
    t.add_column(style="bold", justify="right")
    t.add_column()
    for k, v in pairs:
        t.add_row(k, v)
    console().print(t)


def print_json(obj: Any) -> None:
    """Print a reply body as indented JSON (``--json``)."""
    print(json.dumps(obj, indent=2, sort_keys=False))


def cluster_text(info: dict[str, Any]) -> str:
    """A stream's leader and followers (``!``: not current) in one line."""
    cl = info.get("cluster") or {}
    if not cl.get("leader"):
        return "-"
    reps = cl.get("replicas") or []
    followers = ", ".join(
        f"{r['name']}{'' if r.get('current') else '!'}" + (f" lag {r['lag']}" if r.get("lag") else "")
        for r in reps
    )
    return cl["leader"] + (f" ({followers})" if followers else "")


def limits_text(c: dict[str, Any]) -> str:
    """A stream config's limits in one line (``none`` without any)."""
    parts = []
    for key, label in (("max_msgs", "msgs"), ("max_bytes", "bytes"), ("max_msgs_per_subject", "per subject")):
        v = c.get(key, -1)
        if v not in (-1, 0, None):
            parts.append(f"{label} {human_bytes(v) if key == 'max_bytes' else f'{v:,}'}")
    if c.get("max_age"):
        parts.append(f"age {human_duration(c['max_age'])}")
    return ", ".join(parts) or "none"
