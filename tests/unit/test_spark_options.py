"""Option parsing of the Spark connector: defaults, Kafka-style offsets specs, clear errors."""

from __future__ import annotations

import pytest

from jetlog.spark.options import (
    EARLIEST,
    LATEST,
    OptionError,
    parse_duration_ms,
    parse_sink_options,
    parse_source_options,
)


def test_defaults_stream_and_batch() -> None:
    o = parse_source_options({"streams": "ORDERS"}, batch=False)
    assert o.streams == ("ORDERS",)
    assert o.starting == {"ORDERS": LATEST}
    assert o.starting_timestamp_ms is None
    assert o.conn.servers == ("nats://127.0.0.1:4222",)
    assert o.fail_on_data_loss and not o.include_headers and o.fetch == "auto"
    assert o.max_offsets_per_trigger is None and o.min_partitions == 1
    assert o.max_trigger_delay_ms == 15 * 60_000
    b = parse_source_options({"stream": "ORDERS"}, batch=True)
    assert b.starting == {"ORDERS": EARLIEST} and b.ending == {"ORDERS": LATEST} and not b.ending_given


def test_names_are_case_insensitive_and_streams_sorted() -> None:
    o = parse_source_options(
        {
            "STREAMS": " b, a ,b",
            "maxoffsetspertrigger": "10",
            "FailOnDataLoss": "False",
            "includeheaders": "TRUE",
            "servers": "nats://h1:1, tls://h2:2",
            "fetch": "Direct",
        },
        batch=False,
    )
    assert o.streams == ("a", "b")
    assert o.max_offsets_per_trigger == 10 and not o.fail_on_data_loss and o.include_headers
    assert o.conn.servers == ("nats://h1:1", "tls://h2:2") and o.fetch == "direct"


def test_offsets_json_per_stream() -> None:
    o = parse_source_options({"streams": "A,B", "startingOffsets": '{"A": 23, "B": -2}'}, batch=False)
    assert o.starting == {"A": 23, "B": EARLIEST}
    b = parse_source_options({"streams": "A,B", "endingOffsets": '{"A": 100, "B": -1}'}, batch=True)
    assert b.ending == {"A": 100, "B": LATEST} and b.ending_given


@pytest.mark.parametrize(
    ("opts", "batch", "message"),
    [
        ({}, False, "option streams is required"),
        ({"streams": "A.B"}, False, "invalid stream name"),
        ({"streams": "A", "startingOffsets": "newest"}, False, "expected earliest, latest or a JSON object"),
        ({"streams": "A", "startingOffsets": '{"A": "x"}'}, False, "Expected `int`"),
        ({"streams": "A", "startingOffsets": "{nope"}, False, "not valid JSON"),
        ({"streams": "A,B", "startingOffsets": '{"A": 1}'}, False, "no value for stream(s) B"),
        ({"streams": "A", "startingOffsets": '{"A": 1, "C": 2}'}, False, "C not in option streams"),
        ({"streams": "A", "startingOffsets": '{"A": 0}'}, False, "is not a sequence"),
        ({"streams": "A", "endingOffsets": "latest"}, False, "only for batch reads"),
        ({"streams": "A", "endingOffsets": "earliest"}, True, "not allowed for an ending offset"),
        ({"streams": "A", "endingOffsets": '{"A": -2}'}, True, "not allowed for an ending offset"),
        ({"streams": "A", "maxOffsetsPerTrigger": "0"}, False, "must be >= 1"),
        ({"streams": "A", "maxOffsetsPerTrigger": "ten"}, False, "expected an integer"),
        (
            {"streams": "A", "maxOffsetsPerTrigger": "5", "minOffsetsPerTrigger": "6"},
            False,
            "exceeds maxOffsetsPerTrigger",
        ),
        ({"streams": "A", "maxTriggerDelay": "soon"}, False, "expected a duration"),
        ({"streams": "A", "failOnDataLoss": "maybe"}, False, "expected true or false"),
        ({"streams": "A", "fetch": "fast"}, False, "expected auto, bulk or direct"),
        ({"streams": "A", "user": "u"}, False, "user and password must be given together"),
        ({"streams": "A", "tlsCertFile": "c"}, False, "tlsCertFile and tlsKeyFile"),
        ({"streams": "A", "creds": "x", "nkeySeed": "y"}, False, "creds and nkeySeed are exclusive"),
        ({"streams": "A", "servers": "http://h:1"}, False, "unsupported URL"),
        ({"streams": "A", "startingOffsetsByTimestamp": '{"A": -5}'}, False, "negative timestamp"),
    ],
)
def test_errors_name_the_option(opts: dict[str, str], batch: bool, message: str) -> None:
    with pytest.raises(OptionError, match=None) as ei:
        parse_source_options(opts, batch=batch)
    assert message in str(ei.value)


def test_timestamp_precedence() -> None:
    o = parse_source_options(
        {
            "streams": "A,B",
            "startingTimestamp": "1700000000000",
            "startingOffsetsByTimestamp": '{"A": 1, "B": 2}',
        },
        batch=False,
    )
    assert o.starting_timestamp_ms == {"A": 1700000000000, "B": 1700000000000}
    o = parse_source_options(
        {"streams": "A,B", "startingOffsetsByTimestamp": '{"A": 1, "B": 2}'}, batch=False
    )
    assert o.starting_timestamp_ms == {"A": 1, "B": 2}


def test_durations() -> None:
    assert parse_duration_ms("x", "500") == 500
    assert parse_duration_ms("x", "500ms") == 500
    assert parse_duration_ms("x", "30s") == 30_000
    assert parse_duration_ms("x", "15m") == 900_000
    assert parse_duration_ms("x", "2 minutes") == 120_000
    assert parse_duration_ms("x", "1h") == 3_600_000
    assert parse_duration_ms("x", "1d") == 86_400_000
    with pytest.raises(OptionError):
        parse_duration_ms("x", "1 fortnight")


def test_auth_and_tls_options() -> None:
    o = parse_source_options(
        {
            "streams": "A",
            "user": "u",
            "password": "p",
            "tlsCaFile": "/ca.pem",
            "requestTimeoutMs": "2500",
        },
        batch=False,
    )
    c = o.conn
    assert (c.user, c.password, c.tls, c.tls_ca_file) == ("u", "p", True, "/ca.pem")
    assert o.request_timeout_s == 2.5 and c.connect_timeout == 2.5
    o = parse_source_options({"streams": "A", "token": "t", "tls": "true"}, batch=False)
    assert o.conn.token == "t" and o.conn.tls


def test_sink_options() -> None:
    s = parse_sink_options(
        {"servers": "nats://h:1", "subject": "out.x", "msgIdColumn": "id", "stream": "OUT"}
    )
    assert (s.subject, s.msg_id_column, s.stream, s.max_inflight) == ("out.x", "id", "OUT", 1024)
    with pytest.raises(OptionError, match="not a literal subject"):
        parse_sink_options({"subject": "out.*"})
    with pytest.raises(OptionError, match="must be >= 1"):
        parse_sink_options({"maxInflight": "0"})
