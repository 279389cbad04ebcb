"""``write_report``: each bench mode rewrites its own part of docs/benchmarks.md and leaves the
others, and the hand-written notes, as they were."""

from __future__ import annotations

from jetlog.bench.report import KEEP_MARKER, write_report


def test_sections_replace_only_their_own_part(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = str(tmp_path / "b.md")
    write_report(path, "# main 1\n")
    write_report(path, "## scale 1\n", section="scale")
    write_report(path, "## cluster 1\n", section="cluster")
    with open(path, "a") as f:
        f.write(f"\n{KEEP_MARKER}\nnotes stay\n")
    write_report(path, "# main 2\n")
    write_report(path, "## scale 2\n", section="scale")
    with open(path) as f:
        text = f.read()
    assert text == (
        "# main 2\n\n"
        "<!-- cluster:start -->\n## cluster 1\n<!-- cluster:end -->\n\n"
        "<!-- scale:start -->\n## scale 2\n<!-- scale:end -->\n\n"
        f"{KEEP_MARKER}\nnotes stay\n"
    )


def test_capture_lag_is_reported_for_plain_publishes() -> None:
    import argparse

    from jetlog.bench.cases import Result
    from jetlog.bench.runner import _report

    results = {
        "pub-fire 128B": {
            "jetlog": [Result(1000.0, lag_ms=90.0), Result(900.0, lag_ms=110.0)],
            "nats": [Result(2000.0, lag_ms=20.0)],
            "nats-sync": [Result(800.0)],
        },
        "pub-sync 128B": {"jetlog": [Result(10.0, 500.0)], "nats": [Result(20.0, 150.0)]},
    }
    results["pub-sync 128B"]["nats-sync"] = [Result(5.0, 900.0)]
    text = _report(results, ["jetlog", "nats", "nats-sync"], argparse.Namespace(rounds=2, quick=False))
    assert "pub-fire 128B: jetlog 100 ms, nats 20 ms, nats-sync \u2013 (not every message stored" in text
    assert "pub-sync 128B:" not in text
    assert "| pub-fire 128B | 950 | 2,000 | 800 | 0.47 |" in text
