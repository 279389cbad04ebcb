"""``collide``: two subject filters overlap exactly when some literal subject matches both."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from jetlog.wire.subjects import collide, matches

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
