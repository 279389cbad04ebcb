"""The configuration reference cannot drift from the code: ``docs/configuration.md`` is exactly
what ``jetlog.configdoc`` renders from the config structs, every key has a description, and the
sample ``deploy/jetlog.toml`` shows every key (and loads)."""

from __future__ import annotations

import re
from pathlib import Path

from jetlog.config import load_config
from jetlog.configdoc import render, rows

ROOT = Path(__file__).resolve().parents[2]


def test_reference_is_generated_from_the_structs() -> None:
    doc = (ROOT / "docs" / "configuration.md").read_text()
    assert doc == render(), (
        "docs/configuration.md is stale: python -m jetlog.configdoc > docs/configuration.md"
    )


def test_every_key_is_described_and_in_the_sample_toml() -> None:
    sample = (ROOT / "deploy" / "jetlog.toml").read_text()
    keys, section = set(), ""
    for line in sample.splitlines():
        if m := re.match(r"\s*\[(\w+)\]", line):
            section = m.group(1)
        elif m := re.match(r"\s*#?\s*(\w+)\s*=", line):
            keys.add(f"{section}.{m.group(1)}" if section else m.group(1))
    all_rows = rows()
    assert len(all_rows) > 30
    for key, _typ, _default, _flag, _env, desc in all_rows:
        assert desc, f"{key} has no description in jetlog/config.py"
        assert key in keys, f"{key} is missing from deploy/jetlog.toml"
    cfg = load_config(str(ROOT / "deploy" / "jetlog.toml"))
    assert cfg.storage.fsync == "always" and cfg.logging.format == "text"
