"""``write_report``: each bench mode rewrites its own part of docs/benchmarks.md and leaves the
others, and the hand-written notes, as they were."""

from __future__ import annotations

from jetlog.bench.report import KEEP_MARKER, write_marked, write_report


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


def test_a_marked_section_is_replaced_where_it_is_and_appended_when_absent(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "b.md"
    write_marked(str(path), "spark", "## Spark\n\nfirst\n")  # no file yet: created
    assert path.read_text() == "<!-- spark:start -->\n## Spark\n\nfirst\n<!-- spark:end -->\n"
    path.write_text(
        f"# top\n\n{KEEP_MARKER}\n\nnotes before\n\n{path.read_text()}\nnotes after (hand-written)\n"
    )
    write_marked(str(path), "spark", "## Spark\n\nsecond\n")
    write_marked(str(path), "spark-r3", "### R3\n\nr3 table\n")  # absent: appended
    text = path.read_text()
    assert text == (
        f"# top\n\n{KEEP_MARKER}\n\nnotes before\n\n"
        "<!-- spark:start -->\n## Spark\n\nsecond\n<!-- spark:end -->\n\nnotes after (hand-written)\n\n"
        "<!-- spark-r3:start -->\n### R3\n\nr3 table\n<!-- spark-r3:end -->\n"
    )
    # The main report rewrites the top and keeps the marked sections among the notes.
    write_report(str(path), "# top again\n")
    assert path.read_text().startswith("# top again\n\n" + KEEP_MARKER)
    assert "second" in path.read_text() and "r3 table" in path.read_text()


def test_the_cluster_report_compares_r3_sync_publishes_with_a_syncing_nats_cluster() -> None:
    import argparse

    from jetlog.bench.cases import Result
    from jetlog.bench.runner import _report

    kinds = ["jetlog-r3", "nats-r3", "jetlog", "nats-r3-sync"]
    results = {
        "pub-sync 128B": {
            "jetlog-r3": [Result(600.0, 1500.0, cpu_us=2000.0)],
            "nats-r3": [Result(1600.0, 600.0, cpu_us=760.0)],
            "jetlog": [Result(1700.0, 580.0)],
            "nats-r3-sync": [Result(900.0, 1200.0)],
        }
    }
    text = _report(results, kinds, argparse.Namespace(rounds=1, quick=False))
    header = next(line for line in text.splitlines() if line.startswith("| case |"))
    assert "jetlog R3 / nats R3 sync (both fsync)" in header
    assert "p50 µs jetlog-r3 / nats-r3-sync" in header
    row = next(line for line in text.splitlines() if line.startswith("| pub-sync 128B |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1:5] == ["600", "1,600", "1,700", "900"]
    assert cells[5:8] == ["0.38", "0.35", "0.67"]  # vs nats R3, vs R1, vs the syncing nats R3
    assert cells[8] == "1500 / 600 (2.50x)"
    assert cells[9] == "1500 / 1200 (1.25x)"
    assert cells[10] == "2000.0 / 760.0 (2.6x)"
    assert len(cells) == len(header.strip("|").split("|"))


def test_the_floor_columns_show_a_dash_for_cases_the_stand_in_does_not_run() -> None:
    import argparse

    from jetlog.bench.cases import Result
    from jetlog.bench.runner import _report

    results = {
        "direct-get": {
            "jetlog": [Result(3000.0, 330.0, cpu_us=220.0)],
            "nats": [Result(5000.0, 190.0, cpu_us=90.0)],
            "floor": [Result(3500.0, 300.0, cpu_us=180.0)],
        },
        "fetch(1000) ack none": {
            "jetlog": [Result(30000.0, cpu_us=6.0)],
            "nats": [Result(33000.0, cpu_us=2.5)],
            "floor": [],
        },
    }
    text = _report(results, ["jetlog", "nats", "floor"], argparse.Namespace(rounds=1, quick=False))
    assert "floor / nats (the relay's bound) | jetlog / floor |" in text
    assert "| direct-get | 3,000 | 5,000 | 3,500 | 0.60 | 0.70 | 0.86 |" in text
    assert text.count("| 300 / 180.0 |") == 1
    dash = "\u2013"
    row = f"| fetch(1000) ack none | 30,000 | 33,000 | {dash} | 0.91 | {dash} | {dash} | {dash} | 6.0 / 2.5 (2.4x) | {dash} |"
    assert row in text
