"""Node configuration: TOML + flag overrides, errors that name the key, CLI exit status 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from jetlog.config import load_config
from jetlog.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]


def test_shipped_example_config_is_valid() -> None:
    cfg = load_config(str(ROOT / "deploy" / "jetlog.toml"))
    assert cfg.storage.fsync == "always"
    assert cfg.upstream.leafnode_url == "nats-leaf://127.0.0.1:7422"


def test_flags_override_file(tmp_path: Path) -> None:
    p = tmp_path / "j.toml"
    p.write_text('name = "a"\n[upstream]\nurl = "nats://h:1"\n')
    cfg = load_config(str(p), {"upstream.url": "nats://other:2", "name": None})
    assert cfg.upstream.url == "nats://other:2"
    assert cfg.name == "a"


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        ({"upstream.url": "http://x:1"}, "upstream.url"),
        ({"upstream.leafnode_url": "nats-leaf://nohostport"}, "upstream.leafnode_url"),
        ({"storage.fsync": "never"}, "storage.fsync"),
        ({"storage.segment_bytes": 10}, "storage.segment_bytes"),
        ({"storage.sync_interval": "x"}, "storage.sync_interval"),
        ({"upstream.bogus": 1}, "upstream.bogus"),
        ({"name": "has space"}, "name"),
        ({"http.listen": "nope"}, "http.listen"),
        ({"upstream.creds_file": "/does/not/exist"}, "upstream.creds_file"),
    ],
)
def test_bad_values_name_the_key(overrides: dict[str, object], key: str) -> None:
    with pytest.raises(ConfigError) as e:
        load_config(None, overrides)
    assert e.value.key == key
    assert key in str(e.value)


def test_bad_toml(tmp_path: Path) -> None:
    p = tmp_path / "bad.toml"
    p.write_text("name = \n")
    with pytest.raises(ConfigError) as e:
        load_config(str(p))
    assert "invalid TOML" in str(e.value)


def test_cli_exits_2_naming_the_key(tmp_path: Path) -> None:
    p = tmp_path / "j.toml"
    p.write_text('[storage]\nfsync = "sometimes"\n')
    r = subprocess.run(
        [sys.executable, "-m", "jetlog", "serve", "--config", str(p)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2
    assert "storage.fsync" in r.stderr
    assert r.stdout == ""


def test_serve_exits_1_when_upstream_unreachable(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "jetlog",
            "serve",
            "--nats-url",
            f"nats://127.0.0.1:{port}",
            "--leafnode-url",
            f"nats-leaf://127.0.0.1:{port}",
            "--data-dir",
            str(tmp_path / "d"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 1
    assert "cannot connect" in r.stderr
    assert r.stdout == ""
