"""``collide``: two subject filters overlap exactly when some literal subject matches both."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from jetlog.wire.subjects import SubjectOwners, Sublist, collide, matches

_LIT = ("x", "y")
# Witnesses: every literal subject of up to 4 tokens over the filters' literals plus one other
# token (what a wildcard may stand for). Filters have at most 3 tokens, so a witness needs at
# most 4 (a '>' covers one token or more).
_WITNESSES = [".".join(t) for n in range(1, 5) for t in itertools.product((*_LIT, "z"), repeat=n)]


@st.composite
def filters(draw: st.DrawFn) -> str:
    n = draw(st.integers(1, 3))
    toks = [draw(st.sampled_from((*_LIT, "*"))) for _ in range(n)]
    if draw(st.booleans()):
        toks[-1] = ">"
    return ".".join(toks)


@given(filters(), filters())
def test_collide_iff_a_common_literal_subject_exists(a: str, b: str) -> None:
    expected = any(matches(a, s) and matches(b, s) for s in _WITNESSES)
    assert collide(a, b) == expected
    assert collide(b, a) == expected


def test_first_token_cases() -> None:
    assert not collide("orders.>", "payments.>")
    assert collide("*.eu", "orders.>")
    assert collide(">", "orders.eu")
    assert not collide("orders", "orders.eu")
    assert collide("orders.*", "orders.eu")


@given(st.lists(filters(), max_size=8), filters())
def test_sublist_colliding_finds_exactly_the_colliding_patterns(stored: list[str], query: str) -> None:
    sl: Sublist[int] = Sublist()
    for i, p in enumerate(stored):
        sl.insert(p, i)
    got = sorted(sl.colliding(query))
    # The walk is exact on its own (no candidate needs the pairwise confirmation).
    assert got == [i for i, p in enumerate(stored) if collide(p, query)]


@given(
    st.lists(
        st.tuples(st.sampled_from(("A", "B", "C", "D")), st.lists(filters(), max_size=3) | st.none()),
        max_size=12,
    ),
    st.lists(filters(), min_size=1, max_size=3),
    st.sampled_from(("A", "B", None)),
)
def test_subject_owners_matches_a_pairwise_scan(
    ops: list[tuple[str, list[str] | None]], query: list[str], exclude: str | None
) -> None:
    owners = SubjectOwners()
    model: dict[str, list[str]] = {}
    for name, subjects in ops:  # None: the owner is dropped
        if subjects is None:
            owners.drop(name)
            model.pop(name, None)
        else:
            owners.set(name, subjects)
            model[name] = subjects
    expected = any(
        collide(a, b) for name, subs in model.items() if name != exclude for a in subs for b in query
    )
    assert owners.collides(query, exclude=exclude) == expected
    assert len(owners) == len(model)
    assert {n: owners.subjects(n) for n in model} == {n: tuple(s) for n, s in model.items()}


def test_subject_owners_examples() -> None:
    owners = SubjectOwners()
    owners.set("ORDERS", ["orders.>"])
    owners.set("EU", ["*.eu", "audit"])
    assert owners.collides(["orders.us"])
    assert not owners.collides(["orders.us"], exclude="ORDERS")
    assert owners.collides(["x.eu"], exclude="ORDERS")
    assert not owners.collides(["orders"])  # ">" needs one more token
    assert owners.collides([">"])
    owners.set("ORDERS", ["shipments.*"])  # an update replaces the patterns
    assert not owners.collides(["orders.us"])
    assert owners.collides(["shipments.>"])
    owners.drop("EU")
    assert not owners.collides(["x.eu", "audit"])
    owners.drop("EU")  # unknown: nothing
    assert len(owners) == 1


@given(st.lists(filters(), min_size=1, max_size=8), st.data())
def test_an_owned_prefix_routes_exactly_as_match_does(stored: list[str], data: st.DataObject) -> None:
    """Every witness subject under a pattern's owned prefix matches that pattern's one value and
    nothing else; a pattern whose subjects other patterns could match owns no prefix."""
    sl: Sublist[int] = Sublist()
    for i, p in enumerate(stored):
        sl.insert(p, i)
    k = data.draw(st.integers(0, len(stored) - 1))
    pattern = stored[k]
    prefix = sl.owned_prefix(pattern)
    under = [s for s in _WITNESSES if matches(pattern, s)]
    if prefix is None:
        owns = (
            pattern.endswith(".>")
            and "*" not in pattern.split(".")
            and all(sorted(sl.match(s)) == [k] for s in under)
            and stored.count(pattern) == 1
        )
        # The witnesses cover every way two filters of these literals can overlap.
        assert not owns, (stored, pattern)
        return
    assert pattern == prefix + ">"
    for s in _WITNESSES:
        if s.startswith(prefix):
            assert sl.match(s) == [k], (stored, pattern, s)


def test_owned_prefix_examples_and_invalidation() -> None:
    sl: Sublist[str] = Sublist()
    sl.insert("$JS.ACK.S.>", "acks S")
    sl.insert("$JS.ACK.T.>", "acks T")
    sl.insert("orders.*", "orders")
    assert sl.owned_prefix("$JS.ACK.S.>") == "$JS.ACK.S."
    assert sl.owned_prefix("orders.*") is None  # not a '>' pattern
    sl.insert("$JS.ACK.*.C.>", "other")  # now some subjects under S match two values
    assert sl.owned_prefix("$JS.ACK.S.>") is None
    assert sl.remove("$JS.ACK.*.C.>", "other")
    assert sl.owned_prefix("$JS.ACK.S.>") == "$JS.ACK.S."
    sl.insert("$JS.ACK.S.>", "acks S again")  # two values under the pattern itself
    assert sl.owned_prefix("$JS.ACK.S.>") is None
