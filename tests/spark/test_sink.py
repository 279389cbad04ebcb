"""The jetlog sink: PubAcked publishes, deterministic Nats-Msg-Ids, replayed micro-batches
deduplicated by the stream, batch writes."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.spark.conftest import Backend, batch_sizes, read_stream, run_available_now

pytestmark = [pytest.mark.slow, pytest.mark.spark]


def _log(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_sink_replay_is_deduplicated(spark: Any, jetlog: Backend, tmp_path: Path) -> None:
    src, dst = jetlog.name("SRC"), jetlog.name("DST")
    jetlog.add_stream(src, [f"{src.lower()}.>"])
    jetlog.add_stream(dst, [f"{dst.lower()}.>"], duplicate_window=600.0)
    jetlog.fill(f"{src.lower()}.x", 3000)
    ck, commit_log = tmp_path / "ck", tmp_path / "commits.jsonl"

    def run_plain() -> Any:
        df = read_stream(spark, jetlog.url, src, startingOffsets="earliest", maxOffsetsPerTrigger=1000)
        df = df.selectExpr(f"concat('{dst.lower()}.', cast(seq % 3 as string)) as subject", "data")
        return run_available_now(
            df, "", str(ck), fmt="jetlog", servers=jetlog.url, stream=dst, commitLog=str(commit_log)
        )

    q = run_plain()
    assert batch_sizes(q) == [1000, 1000, 1000]
    assert jetlog.state(dst).messages == 3000
    entries = _log(commit_log)
    assert [(e["batch"], e["published"], e["duplicates"]) for e in entries] == [
        (0, 1000, 0),
        (1, 1000, 0),
        (2, 1000, 0),
    ]
    first = jetlog.bg.run(jetlog.js.get_msg(dst, 1))
    assert first.headers["Nats-Msg-Id"].startswith(f"{q.id}-b0-p0-r")

    # Forget that batch 2 was committed: Spark replays it with the same offsets on restart.
    (ck / "commits" / "2").unlink()
    (ck / "commits" / ".2.crc").unlink()
    q = run_plain()
    assert batch_sizes(q) == [1000]
    assert jetlog.state(dst).messages == 3000
    last = _log(commit_log)[-1]
    assert (last["batch"], last["published"], last["duplicates"]) == (2, 0, 1000)


def test_batch_write_with_headers_and_id_column(spark: Any, jetlog: Backend) -> None:
    dst = jetlog.name("BW")
    jetlog.add_stream(dst, [f"{dst.lower()}.>"])
    df = spark.range(200).selectExpr(
        f"'{dst.lower()}.' || cast(id % 2 as string) as subject",
        "cast(id as string) as data",
        "array(named_struct('key', 'k', 'value', cast(id as string))) as headers",
        "concat('row-', cast(id as string)) as rid",
    )
    w = df.write.format("jetlog").option("servers", jetlog.url).option("msgIdColumn", "rid").mode("append")
    w.save()
    assert jetlog.state(dst).messages == 200
    w.save()  # same ids: the stream drops them all
    assert jetlog.state(dst).messages == 200
    m = jetlog.bg.run(jetlog.js.get_msg(dst, 1))
    assert m.headers["k"] == m.data.decode() and m.headers["Nats-Msg-Id"] == f"row-{m.data.decode()}"
    with pytest.raises(Exception, match="only appends"):
        df.write.format("jetlog").option("servers", jetlog.url).mode("overwrite").save()


def test_sink_reports_unroutable_subject(spark: Any, jetlog: Backend) -> None:
    df = spark.range(3).selectExpr("'nostream.here' as subject", "cast(cast(id as string) as binary) as data")
    with pytest.raises(Exception, match=re.escape("no stream captures subject 'nostream.here'")):
        df.write.format("jetlog").option("servers", jetlog.url).mode("append").save()
