"""Small helpers for conformance tests: raw JetStream API requests and response scrubbing."""

from __future__ import annotations

import json
from typing import Any

import nats
from nats.aio.msg import Msg

# Fields whose values legitimately differ between servers (times, versions, server names).
_VOLATILE = {"ts", "created", "first_ts", "last_ts", "cluster", "time"}


async def api(nc: nats.NATS, subject: str, body: Any = b"", timeout: float = 3.0) -> dict[str, Any]:
    """Send a raw API request (``body`` bytes, str or JSON-able) and return the decoded reply."""
    if isinstance(body, (dict, list)):
        payload = json.dumps(body).encode()
    elif isinstance(body, str):
        payload = body.encode()
    else:
        payload = body
    msg = await nc.request(subject, payload, timeout=timeout)
    return json.loads(msg.data)


async def raw(
    nc: nats.NATS,
    subject: str,
    body: bytes = b"",
    headers: dict[str, str] | None = None,
    timeout: float = 3.0,
) -> Msg:
    """Send a request and return the raw reply message."""
    return await nc.request(subject, body, timeout=timeout, headers=headers)


def scrub(obj: Any) -> Any:
    """Drop volatile fields (times, server names/versions) so responses can be compared."""
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            if k in _VOLATILE:
                continue
            if k == "metadata" and isinstance(v, dict):
                v = {mk: mv for mk, mv in v.items() if mk != "_nats.ver"}
            out[k] = scrub(v)
        return out
    if isinstance(obj, list):
        return [scrub(x) for x in obj]
    return obj


def error_of(resp: dict[str, Any]) -> tuple[int, int, str] | None:
    """(code, err_code, description) of an API error reply, or None."""
    e = resp.get("error")
    if not e:
        return None
    return e["code"], e["err_code"], e["description"]


async def publish_req(
    nc: nats.NATS,
    subject: str,
    data: bytes = b"",
    headers: dict[str, str] | None = None,
    timeout: float = 3.0,
) -> dict[str, Any]:
    """Publish with a reply subject and return the PubAck JSON (success or error)."""
    msg = await nc.request(subject, data, timeout=timeout, headers=headers)
    return json.loads(msg.data)
