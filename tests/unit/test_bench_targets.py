"""The benchmark's nats-server clusters: the syncing one has exactly one ``jetstream`` block,
with ``sync_interval: always``, on every server."""

from __future__ import annotations

from jetlog.bench.targets import nats_cluster


def test_a_syncing_nats_cluster_syncs_every_write_on_every_server(tmp_path) -> None:  # type: ignore[no-untyped-def]
    plain = nats_cluster(str(tmp_path / "a"))
    synced = nats_cluster(str(tmp_path / "b"), sync_always=True)
    for i, (p, s) in enumerate(zip(plain, synced, strict=True)):
        pc, sc = p._config(str(tmp_path)), s._config(str(tmp_path))
        assert pc.count("jetstream {") == 1 and "sync_interval" not in pc
        assert sc.count("jetstream {") == 1
        assert "sync_interval: always" in sc
        assert f'store_dir: "{tmp_path / "b" / f"js{i}"}"' in sc
        assert "cluster { name: C" in sc and "routes: [" in sc
