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
