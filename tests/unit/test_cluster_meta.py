"""The metadata state machine (pure): rules, CAS, request-id memory, totality, snapshots."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jetlog.cluster.meta import (
    DEDUP_MAX,
    AlterIsr,
    Barrier,
    Command,
    CreateStream,
    DeleteStream,
    ElectLeader,
    MetaSnapshotError,
    MetaState,
    Result,
    UpdateStream,
    encode_envelope,
)

N3 = ["n1", "n2", "n3"]


def env(cmd: Command, req_id: str = "", ts: int = 0) -> bytes:
    return encode_envelope(cmd, req_id, ts)


def create(s: MetaState, name: str = "S", replicas: list[str] | None = None, leader: str = "n1") -> Result:
    return s.apply(
        env(CreateStream(name=name, config=b'{"a":1}', created=7, replicas=replicas or N3, leader=leader))
    )


# ----------------------------------------------------------------------------- rules
def test_create_sets_epoch_one_and_full_isr() -> None:
    s = MetaState()
    res, changed = s.apply_entry(
        env(CreateStream(name="S", config=b"{}", created=5, replicas=N3, leader="n2")), index=10
    )
    assert res == Result(ok=True, epoch=1, isr_version=1, index=10)
    assert changed == ("S",)
    sa = s.get("S")
    assert sa is not None
    assert (sa.leader, sa.epoch, sa.isr, sa.isr_version, sa.created) == ("n2", 1, N3, 1, 5)
    assert s.applied_index == 10


def test_create_is_idempotent_only_for_identical_config_and_replicas() -> None:
    s = MetaState()
    assert create(s).ok
    again, changed = s.apply_entry(
        env(CreateStream(name="S", config=b'{"a":1}', created=99, replicas=N3, leader="n3"))
    )
    assert again.ok and changed == ()
    assert s.get("S").leader == "n1"  # type: ignore[union-attr]
    other = s.apply(env(CreateStream(name="S", config=b'{"a":2}', created=1, replicas=N3, leader="n1")))
    assert (other.ok, other.code, other.epoch) == (False, "exists", 1)
    fewer = s.apply(env(CreateStream(name="S", config=b'{"a":1}', created=1, replicas=["n1"], leader="n1")))
    assert fewer.code == "exists"


@pytest.mark.parametrize(
    ("replicas", "leader"),
    [(N3, "n9"), ([], "n1"), (["n1", "n1"], "n1"), (["n1", ""], "n1")],
)
def test_create_rejects_bad_replica_sets(replicas: list[str], leader: str) -> None:
    s = MetaState()
    res = s.apply(env(CreateStream(name="S", config=b"{}", created=1, replicas=replicas, leader=leader)))
    assert (res.ok, res.code) == (False, "invalid")
    assert s.get("S") is None


def test_update_config_only_keeps_isr_version() -> None:
    s = MetaState()
    create(s)
    res, changed = s.apply_entry(env(UpdateStream(name="S", config=b'{"a":3}')))
    assert res.ok and changed == ("S",)
    sa = s.get("S")
    assert sa is not None and (sa.config, sa.isr_version, sa.epoch) == (b'{"a":3}', 1, 1)
    same, changed = s.apply_entry(env(UpdateStream(name="S", config=b'{"a":3}', replicas=list(N3))))
    assert same.ok and changed == ()


def test_update_replicas_keeps_leader_and_cuts_isr() -> None:
    s = MetaState()
    create(s, leader="n2")
    res = s.apply(env(UpdateStream(name="S", config=b"{}", replicas=["n2", "n4"])))
    sa = s.get("S")
    assert res.ok and sa is not None
    assert (sa.leader, sa.epoch, sa.isr, sa.isr_version, sa.replicas) == ("n2", 1, ["n2"], 2, ["n2", "n4"])


def test_update_replicas_moves_leader_to_an_in_sync_replica_at_a_new_epoch() -> None:
    s = MetaState()
    create(s, leader="n1")
    res = s.apply(env(UpdateStream(name="S", config=b"{}", replicas=["n4", "n3"])))
    sa = s.get("S")
    assert res.ok and sa is not None
    # n4 is first but holds nothing; n3 was in sync, so it leads (epoch + 1).
    assert (sa.leader, sa.epoch, sa.isr, sa.isr_version) == ("n3", 2, ["n3"], 2)
    res = s.apply(env(UpdateStream(name="S", config=b"{}", replicas=["n5", "n6"])))
    sa = s.get("S")
    assert res.ok and sa is not None
    assert (sa.leader, sa.epoch, sa.isr, sa.isr_version) == ("n5", 3, ["n5"], 3)


def test_elect_leader_is_a_cas_on_epoch() -> None:
    s = MetaState()
    create(s)
    res = s.apply(env(ElectLeader(name="S", leader="n2", isr=["n3", "n2"], expect_epoch=1)))
    sa = s.get("S")
    assert res == Result(ok=True, epoch=2, isr_version=2, index=2)
    assert sa is not None and (sa.leader, sa.isr) == ("n2", ["n2", "n3"])  # replica order
    stale = s.apply(env(ElectLeader(name="S", leader="n3", isr=["n3"], expect_epoch=1)))
    assert (stale.ok, stale.code, stale.epoch, stale.isr_version) == (False, "stale_epoch", 2, 2)
    assert s.get("S") == sa


@pytest.mark.parametrize(
    ("leader", "isr"),
    [("n9", ["n9"]), ("n1", ["n2"]), ("n1", ["n1", "n9"]), ("n1", []), ("n1", ["n1", "n1"])],
)
def test_elect_leader_validates_leader_and_isr(leader: str, isr: list[str]) -> None:
    s = MetaState()
    create(s)
    res = s.apply(env(ElectLeader(name="S", leader=leader, isr=isr, expect_epoch=1)))
    assert (res.ok, res.code, res.epoch) == (False, "invalid", 1)
    assert s.get("S").epoch == 1  # type: ignore[union-attr]


def test_alter_isr_is_a_cas_on_epoch_and_version() -> None:
    s = MetaState()
    create(s)
    ok = s.apply(env(AlterIsr(name="S", leader_epoch=1, expect_isr_version=1, isr=["n1", "n3"])))
    assert (ok.ok, ok.epoch, ok.isr_version) == (True, 1, 2)
    assert s.get("S").isr == ["n1", "n3"]  # type: ignore[union-attr]
    stale_v = s.apply(env(AlterIsr(name="S", leader_epoch=1, expect_isr_version=1, isr=["n1"])))
    assert (stale_v.code, stale_v.isr_version) == ("stale_isr_version", 2)
    stale_e = s.apply(env(AlterIsr(name="S", leader_epoch=0, expect_isr_version=2, isr=["n1"])))
    assert stale_e.code == "stale_epoch"
    no_leader = s.apply(env(AlterIsr(name="S", leader_epoch=1, expect_isr_version=2, isr=["n2", "n3"])))
    assert no_leader.code == "invalid"
    assert s.get("S").isr == ["n1", "n3"]  # type: ignore[union-attr]


def test_delete_and_not_found() -> None:
    s = MetaState()
    create(s)
    res, changed = s.apply_entry(env(DeleteStream(name="S")))
    assert res.ok and changed == ("S",) and s.get("S") is None
    for cmd in (
        DeleteStream(name="S"),
        UpdateStream(name="S", config=b"{}"),
        ElectLeader(name="S", leader="n1", isr=["n1"], expect_epoch=1),
        AlterIsr(name="S", leader_epoch=1, expect_isr_version=1, isr=["n1"]),
    ):
        r = s.apply(env(cmd))
        assert (r.ok, r.code) == (False, "not_found")


def test_barrier_reports_its_index_and_changes_nothing() -> None:
    s = MetaState()
    create(s)
    before = dict(s.streams)
    res, changed = s.apply_entry(env(Barrier(), req_id="b1"), index=42)
    assert res == Result(ok=True, index=42) and changed == ()
    assert s.applied_index == 42 and s.streams == before
    # Barriers are not remembered by request id (they would crowd out real commands).
    assert s.apply(env(Barrier(), req_id="b1"), index=43).index == 43


def test_streams_are_kept_sorted() -> None:
    s = MetaState()
    for n in ("c", "a", "b"):
        create(s, name=n)
    assert list(s.streams) == ["a", "b", "c"]


# ------------------------------------------------------------------- request ids
def test_repeated_request_id_returns_the_first_result_without_reapplying() -> None:
    s = MetaState()
    create(s)
    raw = env(ElectLeader(name="S", leader="n2", isr=N3, expect_epoch=1), req_id="r1")
    first, changed1 = s.apply_entry(raw)
    again, changed2 = s.apply_entry(raw)
    assert first.ok and first == again and changed1 == ("S",) and changed2 == ()
    assert s.get("S").epoch == 2  # type: ignore[union-attr]
    # A rejection is remembered too: repeating a rejected create after the name was freed
    # must not create it.
    dup = env(CreateStream(name="S", config=b"x", created=1, replicas=N3, leader="n1"), req_id="r2")
    assert s.apply(dup).code == "exists"
    s.apply(env(DeleteStream(name="S")))
    assert s.apply(dup).code == "exists" and s.get("S") is None


def test_request_id_memory_is_bounded_oldest_first() -> None:
    s = MetaState()
    create(s)
    first = env(ElectLeader(name="S", leader="n1", isr=N3, expect_epoch=1), req_id="first")
    assert s.apply(first).ok
    for i in range(DEDUP_MAX):
        s.apply(env(UpdateStream(name="S", config=str(i).encode()), req_id=f"u{i}"))
    # "first" was evicted: applying it again is a new application (rejected by its CAS).
    assert s.apply(first).code == "stale_epoch"
    assert s.apply(env(UpdateStream(name="S", config=b"x"), req_id=f"u{DEDUP_MAX - 1}")).ok


# --------------------------------------------------------------------- totality
@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"\xc1",
        msgspec.msgpack.encode({"v": 1, "req_id": "x", "ts": 0, "cmd": {"op": "nope"}}),
        msgspec.msgpack.encode({"v": 1, "req_id": "x", "ts": 0, "cmd": {"op": "barrier", "extra": 1}}),
        msgspec.msgpack.encode({"v": 1, "req_id": "x", "ts": "now", "cmd": {"op": "barrier"}}),
        msgspec.msgpack.encode([1, 2, 3]),
    ],
)
def test_malformed_entries_are_rejected(raw: bytes) -> None:
    s = MetaState()
    res = s.apply(raw, index=3)
    assert (res.ok, res.code, res.index) == (False, "malformed", 3)
    assert s.applied_index == 3 and not s.streams


def test_unknown_envelope_version_is_rejected_not_guessed() -> None:
    s = MetaState()
    raw = msgspec.msgpack.encode(
        {"v": 2, "req_id": "x", "ts": 0, "cmd": {"op": "delete_stream", "name": "S"}}
    )
    create(s)
    res = s.apply(raw)
    assert (res.ok, res.code) == (False, "unsupported_version")
    assert s.get("S") is not None


def test_non_bytes_input_never_raises() -> None:
    s = MetaState()
    assert s.apply(None).code == "malformed"  # type: ignore[arg-type]
    assert s.apply(b"x", index="zz").code == "internal"  # type: ignore[arg-type]


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_never_raise(raw: bytes) -> None:
    s = MetaState()
    res = s.apply(raw)
    assert isinstance(res, Result)
    assert not res.ok


# --------------------------------------------------------------- snapshots, hashes
def test_restore_rejects_garbage_and_keeps_state() -> None:
    s = MetaState()
    create(s)
    h = s.state_hash()
    for bad in (b"", b"\x00\x01", msgspec.msgpack.encode({"v": 9})):
        with pytest.raises(MetaSnapshotError):
            s.restore(bad)
    assert s.state_hash() == h


def test_restore_reports_streams_before_and_after() -> None:
    a, b = MetaState(), MetaState()
    create(a, name="x")
    create(b, name="y")
    assert a.restore(b.snapshot()) == ("x", "y")
    assert list(a.streams) == ["y"] and a.state_hash() == b.state_hash()


NODES = ["n1", "n2", "n3", "n4"]
names = st.sampled_from(["a", "b"])
# Mostly valid node sets (unique, non-empty), sometimes not: both paths must be deterministic.
node_sets = st.one_of(
    st.lists(st.sampled_from(NODES), min_size=1, max_size=3, unique=True),
    st.lists(st.sampled_from([*NODES, ""]), max_size=4),
)


@st.composite
def creates(draw: st.DrawFn) -> CreateStream:
    replicas = draw(node_sets)
    leader = draw(st.sampled_from(replicas) if replicas and draw(st.booleans()) else st.sampled_from(NODES))
    config = draw(st.sampled_from([b"{}", b'{"x":1}']))
    return CreateStream(
        name=draw(names), config=config, created=draw(st.integers(0, 5)), replicas=replicas, leader=leader
    )


epochs = st.integers(0, 4)
commands = st.one_of(
    creates(),
    creates(),
    st.builds(
        UpdateStream, name=names, config=st.sampled_from([b"{}", b"u"]), replicas=st.none() | node_sets
    ),
    st.builds(DeleteStream, name=names),
    st.builds(ElectLeader, name=names, leader=st.sampled_from(NODES), isr=node_sets, expect_epoch=epochs),
    st.builds(ElectLeader, name=names, leader=st.sampled_from(NODES), isr=node_sets, expect_epoch=epochs),
    st.builds(AlterIsr, name=names, leader_epoch=epochs, expect_isr_version=epochs, isr=node_sets),
    st.builds(AlterIsr, name=names, leader_epoch=epochs, expect_isr_version=epochs, isr=node_sets),
    st.builds(Barrier),
)
entries = st.lists(
    st.one_of(
        st.builds(env, commands, req_id=st.sampled_from(["", "", "r1", "r2"]), ts=st.integers(0, 9)),
        st.builds(env, commands, req_id=st.sampled_from(["", "", "r1", "r2"]), ts=st.integers(0, 9)),
        st.builds(env, commands, req_id=st.sampled_from(["", "", "r1", "r2"]), ts=st.integers(0, 9)),
        st.binary(max_size=20),
    ),
    max_size=40,
)


def check_invariants(s: MetaState) -> None:
    assert list(s.streams) == sorted(s.streams)
    for name, sa in s.streams.items():
        assert sa.name == name
        assert sa.replicas and len(set(sa.replicas)) == len(sa.replicas)
        assert sa.leader in sa.replicas and sa.leader in sa.isr
        assert sa.isr == [r for r in sa.replicas if r in set(sa.isr)]
        assert sa.epoch >= 1 and sa.isr_version >= 1


HSET = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@HSET
@given(entries)
def test_same_entries_same_state_and_results(log: list[bytes]) -> None:
    a, b = MetaState(), MetaState()
    ra = [a.apply_entry(raw) for raw in log]
    rb = [b.apply_entry(raw) for raw in log]
    assert ra == rb
    assert a.state_hash() == b.state_hash()
    check_invariants(a)


@HSET
@given(entries, st.data())
def test_snapshot_round_trip_mid_log(log: list[bytes], data: st.DataObject) -> None:
    cut = data.draw(st.integers(0, len(log)))
    whole = MetaState()
    expected = [whole.apply_entry(raw) for raw in log]
    part = MetaState()
    for raw in log[:cut]:
        part.apply_entry(raw)
    restored = MetaState()
    restored.restore(part.snapshot())
    assert restored.state_hash() == part.state_hash()
    assert [restored.apply_entry(raw) for raw in log[cut:]] == expected[cut:]
    assert restored.state_hash() == whole.state_hash()


@HSET
@given(entries)
def test_epochs_and_isr_versions_never_go_back(log: list[bytes]) -> None:
    s = MetaState()
    seen: dict[str, tuple[int, int]] = {}
    for raw in log:
        res, changed = s.apply_entry(raw)
        for name in changed:
            sa = s.get(name)
            if sa is None:
                seen.pop(name, None)  # deleted: a re-created stream starts again at epoch 1
                continue
            prev = seen.get(name)
            if prev is not None:
                assert sa.epoch >= prev[0] and sa.isr_version >= prev[1]
            seen[name] = (sa.epoch, sa.isr_version)
        if not res.ok:
            assert changed == ()
        check_invariants(s)
