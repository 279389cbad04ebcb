"""Readiness in a cluster waits for every replica a node holds to be back in its ISR: which
streams keep a node "catching up"."""

from __future__ import annotations

from jetlog.cluster.meta import StreamAssignment
from jetlog.cluster.status import catching_up


def _a(
    name: str, leader: str, isr: list[str], replicas: tuple[str, ...] = ("n1", "n2", "n3")
) -> StreamAssignment:
    return StreamAssignment(
        name=name, config=b"{}", created=1, replicas=list(replicas), leader=leader, isr=isr
    )


def test_only_replicas_outside_the_isr_of_a_stream_led_elsewhere() -> None:
    streams = {
        "A": _a("A", "n1", ["n1", "n3"]),  # n2 out of sync: catching up
        "B": _a("B", "n1", ["n1", "n2", "n3"]),  # in sync
        "C": _a("C", "", ["n3"]),  # leaderless: nothing to catch up from
        "D": _a("D", "n2", ["n2"]),  # n2 leads it
        "E": _a("E", "n1", ["n1"], replicas=("n1",)),  # not a replica here
        "F": _a("F", "n3", ["n3"]),
    }
    assert catching_up("n2", streams) == ["A", "F"]
    assert catching_up("n1", streams) == ["D", "F"]
    assert catching_up("n3", streams) == ["D"]
