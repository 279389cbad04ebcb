"""Replies and buffered frames above max_payload: the pure helpers."""

from __future__ import annotations

import json

from jetlog.api.oversize import TOO_LARGE_STATUS, fit_frames, json_too_large
from jetlog.transport.leaf_proto import fitting_frames
from jetlog.wire import leaf as wire


def test_json_too_large_keeps_the_response_type() -> None:
    body = (
        b'{"type":"io.nats.jetstream.api.v1.stream_msg_get_response","message":{"data":"'
        + b"A" * 5000
        + b'"}}'
    )
    out = json.loads(json_too_large(body, 4096))
    assert list(out) == ["type", "error"]
    assert out["type"] == "io.nats.jetstream.api.v1.stream_msg_get_response"
    err = out["error"]
    assert list(err) == ["code", "err_code", "description"]
    assert (err["code"], err["err_code"]) == (400, 10054)
    assert err["description"].startswith(
        f"message size exceeds maximum allowed: the {len(body)}-byte reply exceeds the upstream max_payload "
        "of 4096 bytes"
    )
    assert "Direct Get" in err["description"]
    other = json.loads(json_too_large(b'{"type":"io.nats.jetstream.api.v1.stream_list_response","x":1}', 10))
    assert (
        other["type"].endswith("stream_list_response") and "Direct Get" not in other["error"]["description"]
    )
    untyped = json.loads(json_too_large(b'{"x":' + b"1" * 100 + b"}", 10))
    assert list(untyped) == ["error"]


def test_fit_frames() -> None:
    a, b, c = (b"NATS/1.0\r\nA: 1\r\n\r\n", b"x" * 50), (b"", b"y" * 100), (b"", b"z" * 10)
    assert fit_frames([a, b, c], 0) == [a, b, c]  # unknown limit: unchecked
    assert fit_frames([a, b, c], 100) == [a, b, c]  # exactly the limit fits
    assert fit_frames([a, b, c], 99) == [a, TOO_LARGE_STATUS]  # cut at the first too large
    assert fit_frames([b, c], 10) == [TOO_LARGE_STATUS]
    assert TOO_LARGE_STATUS == (b"NATS/1.0 413 Message Size Exceeds Max Payload\r\n\r\n", b"")


def test_fitting_frames_drops_only_oversize_messages() -> None:
    small = wire.encode_msg("a", b"x" * 10)
    big = wire.encode_msg("a", b"x" * 200, reply="r", queues=("q1", "q2"))
    hbig = wire.encode_msg("a", b"x" * 150, hdr=b"NATS/1.0\r\nK: " + b"v" * 40 + b"\r\n\r\n")
    exact = wire.encode_msg("a", b"x" * 100)
    frames = [small, big, wire.PING_FRAME, hbig, exact, wire.encode_sub("s")]
    assert fitting_frames(frames, 0, "t") == frames
    assert fitting_frames(frames, 100, "t") == [small, wire.PING_FRAME, exact, wire.encode_sub("s")]
    assert fitting_frames(frames, 10_000, "t") == frames
