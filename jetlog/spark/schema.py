"""Spark schemas of the source and the columns the sink understands.

Source rows mirror the Kafka source's, with NATS names::

    stream STRING, seq LONG, subject STRING, data BINARY, timestamp TIMESTAMP
    [, headers ARRAY<STRUCT<key: STRING, value: STRING>>]     -- includeHeaders=true

Header values are strings and may repeat, so headers are an ordered array of pairs, not a map.
The source's output is directly writable by the sink (``subject``, ``data``, ``headers``).
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

HEADERS_TYPE = ArrayType(StructType([StructField("key", StringType()), StructField("value", StringType())]))


def source_schema(include_headers: bool) -> StructType:
    """The read schema."""
    fields = [
        StructField("stream", StringType()),
        StructField("seq", LongType()),
        StructField("subject", StringType()),
        StructField("data", BinaryType()),
        StructField("timestamp", TimestampType()),
    ]
    if include_headers:
        fields.append(StructField("headers", HEADERS_TYPE))
    return StructType(fields)


def _shape(t: DataType) -> str:
    """A type's simpleString without nullability (what a user-given schema must match)."""
    return t.simpleString()


def check_read_schema(schema: StructType, include_headers: bool) -> None:
    """Reject a user-specified schema (``readStream.schema(...)``) that is not the source's."""
    want = source_schema(include_headers)
    if [(f.name, _shape(f.dataType)) for f in schema.fields] != [
        (f.name, _shape(f.dataType)) for f in want.fields
    ]:
        raise ValueError(
            f"the jetlog source has a fixed schema: {want.simpleString()} "
            f"(got {schema.simpleString()}); do not set .schema(), or set includeHeaders"
        )


@dataclass(frozen=True)
class SinkColumns:
    """Where the sink finds what it publishes."""

    subject: str | None
    data: str
    data_is_binary: bool
    headers: str | None
    msg_id: str | None


def sink_columns(schema: StructType, subject_option: str | None, msg_id_column: str | None) -> SinkColumns:
    """Validate a DataFrame's columns for the sink: ``data`` (binary or string) and ``subject``
    (string, or the ``subject`` option) are required; ``headers`` (the source's type) and the
    ``msgIdColumn`` are optional; other columns are ignored."""
    by_name = {f.name: f.dataType for f in schema.fields}
    if "data" not in by_name:
        raise ValueError(
            f"the jetlog sink needs a 'data' column (binary or string); columns: {', '.join(by_name)}"
        )
    data_t = by_name["data"]
    if not isinstance(data_t, BinaryType | StringType):
        raise ValueError(f"column data must be binary or string, not {data_t.simpleString()}")
    subject: str | None = None
    if "subject" in by_name:
        if not isinstance(by_name["subject"], StringType):
            raise ValueError(f"column subject must be a string, not {by_name['subject'].simpleString()}")
        subject = "subject"
    elif subject_option is None:
        raise ValueError("the jetlog sink needs a 'subject' column or the 'subject' option")
    headers: str | None = None
    if "headers" in by_name:
        if _shape(by_name["headers"]) != _shape(HEADERS_TYPE):
            raise ValueError(
                f"column headers must be {HEADERS_TYPE.simpleString()}, not {by_name['headers'].simpleString()}"
            )
        headers = "headers"
    if msg_id_column is not None and msg_id_column not in by_name:
        raise ValueError(f"option msgIdColumn: no column {msg_id_column!r}; columns: {', '.join(by_name)}")
    return SinkColumns(subject, "data", isinstance(data_t, BinaryType), headers, msg_id_column)
