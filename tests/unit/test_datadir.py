"""The data directory's format marker: written on first use, kept across restarts, a newer
format refused with an explanation and nothing touched."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from jetlog import __version__
from jetlog.datadir import FORMAT_VERSION, MARKER, check_and_mark
from jetlog.errors import StorageError


def test_new_and_premarker_directories_get_the_marker(tmp_path: Path) -> None:
    d = tmp_path / "data"
    m = check_and_mark(str(d))
    assert (m.format, m.jetlog) == (FORMAT_VERSION, __version__)
    assert json.loads((d / MARKER).read_bytes()) == {"format": FORMAT_VERSION, "jetlog": __version__}
    # Restart: unchanged, not rewritten.
    before = os.stat(d / MARKER).st_mtime_ns
    check_and_mark(str(d))
    assert os.stat(d / MARKER).st_mtime_ns == before
    # A directory from before the marker (streams already there): format 1, data untouched.
    old = tmp_path / "old"
    (old / "streams" / "S").mkdir(parents=True)
    (old / "streams" / "S" / "stream.json").write_text("{}")
    check_and_mark(str(old))
    assert (old / "streams" / "S" / "stream.json").read_text() == "{}"
    assert json.loads((old / MARKER).read_bytes())["format"] == 1


def test_newer_format_is_refused_and_left_alone(tmp_path: Path) -> None:
    d = tmp_path / "data"
    d.mkdir()
    body = json.dumps({"format": FORMAT_VERSION + 1, "jetlog": "9.9.9"}).encode()
    (d / MARKER).write_bytes(body)
    with pytest.raises(StorageError) as ei:
        check_and_mark(str(d))
    text = str(ei.value)
    assert (
        f"on-disk format {FORMAT_VERSION + 1}" in text
        and "jetlog 9.9.9" in text
        and "nothing was changed" in text
    )
    assert (d / MARKER).read_bytes() == body


def test_garbage_marker_is_refused(tmp_path: Path) -> None:
    d = tmp_path / "data"
    d.mkdir()
    (d / MARKER).write_bytes(b"\x00not json")
    with pytest.raises(StorageError, match="is not a jetlog format marker"):
        check_and_mark(str(d))
