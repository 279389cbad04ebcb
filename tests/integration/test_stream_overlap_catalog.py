"""The overlap check of a stream create follows the catalog through updates, deletes and a
restart (the node keeps an index of the streams' subjects instead of scanning them)."""

from __future__ import annotations

import nats

from .jsutil import api, error_of
from .nodeproc import node_and_client

OVERLAP = (400, 10065, "subjects overlap with an existing stream")


async def _create(nc: nats.NATS, name: str, subjects: list[str]) -> tuple[int, int, str] | None:
    r = await api(nc, f"$JS.API.STREAM.CREATE.{name}", {"name": name, "subjects": subjects})
    return error_of(r) if "error" in r else None


async def test_overlap_follows_updates_deletes_and_restart(tmp_path) -> None:  # type: ignore[no-untyped-def]
    async with node_and_client(str(tmp_path / "data")) as (node, nc):
        assert await _create(nc, "A", ["a.>"]) is None
        assert await _create(nc, "B", ["a.b"]) == OVERLAP
        assert await _create(nc, "B", ["a.*"]) == OVERLAP  # a wildcard on the new side
        assert await _create(nc, "B", ["b.*", "c"]) is None
        # An update moves A's subjects: the old ones are free, the new ones taken.
        r = await api(nc, "$JS.API.STREAM.UPDATE.A", {"name": "A", "subjects": ["x.>"]})
        assert "error" not in r, r
        assert await _create(nc, "C", ["a.b"]) is None
        assert await _create(nc, "D", ["x.y"]) == OVERLAP
        # An update is checked against the others, not against the stream's own subjects.
        r = await api(nc, "$JS.API.STREAM.UPDATE.A", {"name": "A", "subjects": ["x.>", "y"]})
        assert "error" not in r, r
        r = await api(nc, "$JS.API.STREAM.UPDATE.A", {"name": "A", "subjects": ["b.z"]})
        assert error_of(r) == OVERLAP
        # A delete frees its subjects.
        r = await api(nc, "$JS.API.STREAM.DELETE.C")
        assert r.get("success") is True, r
        assert await _create(nc, "E", ["a.*"]) is None
        await node.terminate()
        await node.start()
        # Streams loaded at start take part.
        assert await _create(nc, "F", ["y"]) == OVERLAP
        assert await _create(nc, "F", ["b.q"]) == OVERLAP
        assert await _create(nc, "F", ["a.q"]) == OVERLAP
        assert await _create(nc, "F", ["a.b.c"]) is None  # no stream claims three tokens under a
