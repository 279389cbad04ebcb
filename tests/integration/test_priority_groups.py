"""Consumer priority groups (ADR-42): nats-server 2.15.1 implements them; jetlog refuses them.

The config checks are nats-server's on both targets (same errors, same order). A valid priority
policy is where they part: nats-server creates the consumer and, for ``pinned_client``, pins the
first puller (``Nats-Pin-Id`` on every delivery); jetlog answers ``400/10094`` and creates
nothing, as the README says, instead of creating a consumer that ignores the policy."""

from __future__ import annotations

import json
from typing import Any

import nats
import pytest

from jetlog.chaos.fuzzrun import RawClient
from tests.integration.conftest import Target


async def create(nc: nats.NATS, name: str, **cfg: Any) -> dict[str, Any]:
    body = {"stream_name": "PG", "config": {"durable_name": name, **cfg}}
    msg = await nc.request(f"$JS.API.CONSUMER.CREATE.PG.{name}", json.dumps(body).encode(), timeout=3)
    return json.loads(msg.data)


async def _stream(nc: nats.NATS) -> None:
    await nc.jetstream().add_stream(name="PG", subjects=["pg.>"])


@pytest.mark.parametrize(
    ("cfg", "code"),
    [
        ({"priority_policy": "overflow"}, 10159),
        ({"priority_groups": ["g"]}, 10196),
        ({"priority_timeout": 5}, 10197),
        ({"priority_policy": "pinned_client", "priority_groups": [""]}, 10161),
        ({"priority_policy": "pinned_client", "priority_groups": ["a b"]}, 10162),
        ({"priority_policy": "overflow", "priority_groups": ["g"], "deliver_subject": "dl.pg"}, 10178),
    ],
)
async def test_invalid_priority_configs_get_nats_servers_errors(
    nc: nats.NATS, cfg: dict[str, Any], code: int
) -> None:
    await _stream(nc)
    r = await create(nc, "c", **cfg)
    assert r["error"]["err_code"] == code, r


@pytest.mark.parametrize("policy", ["overflow", "pinned_client", "prioritized"])
async def test_a_valid_priority_policy(nc: nats.NATS, target: Target, policy: str) -> None:
    await _stream(nc)
    r = await create(nc, "pc", priority_policy=policy, priority_groups=["g"], ack_policy="explicit")
    info = await nc.request("$JS.API.CONSUMER.INFO.PG.pc", b"", timeout=3)
    if target.is_jetlog:
        assert r["error"] == {
            "code": 400,
            "err_code": 10094,
            "description": f'priority groups are not supported by jetlog (priority_policy "{policy}")',
        }
        assert json.loads(info.data)["error"]["err_code"] == 10014  # nothing was created
        return
    assert "error" not in r and r["config"]["priority_policy"] == policy
    assert r["priority_groups"] == [{"group": "g", "pinned_ts": "0001-01-01T00:00:00Z"}]
    if policy == "pinned_client":
        await nc.jetstream().publish("pg.a", b"x")
        raw = RawClient()  # deliveries carry the stream subject: route the reply by sid
        await raw.connect(target.url)
        try:
            msg = await raw.request("$JS.API.CONSUMER.MSG.NEXT.PG.pc", b'{"batch":1,"group":"g"}', 3)
        finally:
            await raw.close()
        assert msg is not None and msg.data == b"x"
        assert msg.header("Nats-Pin-Id")


async def test_an_update_cannot_add_a_priority_policy(nc: nats.NATS, target: Target) -> None:
    await _stream(nc)
    assert "error" not in await create(nc, "up", ack_policy="explicit")
    r = await create(nc, "up", ack_policy="explicit", priority_policy="overflow", priority_groups=["g"])
    if target.is_jetlog:
        assert r["error"]["err_code"] == 10094
        info = json.loads((await nc.request("$JS.API.CONSUMER.INFO.PG.up", b"", timeout=3)).data)
        assert "priority_policy" not in info["config"]
    else:
        assert r["config"]["priority_policy"] == "overflow"
