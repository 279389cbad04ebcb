"""nats-py KV and object-store operations that need no consumer (watch/keys/get-of-objects
need consumers and are covered with the consumer work): jetlog and nats-server -js."""

from __future__ import annotations

import nats
import pytest
from nats.js.errors import BadRequestError, KeyDeletedError, KeyNotFoundError, KeyWrongLastSequenceError

from .jsutil import api


@pytest.mark.parametrize("direct", [False, True])
async def test_kv_put_get_update_delete(nc: nats.NATS, direct: bool) -> None:
    js = nc.jetstream()
    kv = await js.create_key_value(bucket="cfg", history=5, direct=direct)
    assert await kv.put("a", b"1") == 1
    assert await kv.put("b", b"x") == 2
    e = await kv.get("a")
    assert (e.key, e.value, e.revision) == ("a", b"1", 1)
    assert await kv.update("a", b"2", last=1) == 3
    with pytest.raises(KeyWrongLastSequenceError):
        await kv.update("a", b"3", last=1)
    with pytest.raises(KeyWrongLastSequenceError):
        await kv.create("b", b"y")
    assert await kv.create("c", b"new") == 4
    await kv.delete("a")
    with pytest.raises((KeyNotFoundError, KeyDeletedError)):
        await kv.get("a")
    assert await kv.create("a", b"again") == 6  # create over a delete marker
    e = await kv.get("a", revision=3)
    assert e.value == b"2"
    await kv.purge("b")
    with pytest.raises((KeyNotFoundError, KeyDeletedError)):
        await kv.get("b")
    st = await kv.status()
    assert st.bucket == "cfg" and st.history == 5
    # Idempotent bucket creation; a different history is a different config.
    await js.create_key_value(bucket="cfg", history=5, direct=direct)
    with pytest.raises(BadRequestError):
        await js.create_key_value(bucket="cfg", history=6, direct=direct)


async def test_kv_history_limit(nc: nats.NATS) -> None:
    js = nc.jetstream()
    kv = await js.create_key_value(bucket="h", history=2)
    for i in range(5):
        await kv.put("k", str(i).encode())
    r = await api(nc, "$JS.API.STREAM.INFO.KV_h")
    assert r["state"]["messages"] == 2
    assert (await kv.get("k")).value == b"4"


async def test_kv_ttl_bucket(nc: nats.NATS) -> None:
    js = nc.jetstream()
    kv = await js.create_key_value(bucket="t", history=1, ttl=60)
    assert await kv.put("k", b"v") == 1
    r = await api(nc, "$JS.API.STREAM.INFO.KV_t")
    assert r["config"]["max_age"] == 60_000_000_000
    assert r["config"]["duplicate_window"] == 60_000_000_000


async def test_object_store_put_info_delete(nc: nats.NATS) -> None:
    js = nc.jetstream()
    obs = await js.create_object_store("files")
    data = bytes(range(256)) * 1200  # 307200 bytes: 3 chunks of 128 KiB
    info = await obs.put("blob.bin", data)
    assert info.size == len(data) and info.chunks == 3
    got = await obs.get_info("blob.bin")
    assert got.size == len(data) and got.digest == info.digest
    # Replacing an object purges the old chunks.
    info2 = await obs.put("blob.bin", b"small")
    assert info2.chunks == 1
    r = await api(nc, "$JS.API.STREAM.INFO.OBJ_files")
    assert r["state"]["messages"] == 2  # one chunk + one meta
    await obs.delete("blob.bin")
    r = await api(nc, "$JS.API.STREAM.INFO.OBJ_files")
    assert r["state"]["messages"] == 1  # the deleted-marker meta
    st = await obs.status()
    assert st.bucket == "files"
    await obs.seal()
    r = await api(nc, "$JS.API.STREAM.INFO.OBJ_files")
    assert r["config"]["sealed"] is True
