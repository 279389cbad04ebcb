"""NATS subjects: validation, wildcard matching, collision and subset tests, and a sublist.

Semantics follow nats-server (``server/sublist.go``): tokens are separated by ``.``; ``*`` and
``>`` are wildcards only as whole tokens (``a*`` is a literal token); ``>`` must be the last
token; no token may be empty or contain whitespace.

Subjects are bytes on the wire and nats-server does not require them to be UTF-8. jetlog keeps
them as ``str`` with every byte that is not valid UTF-8 held as a surrogate escape (Python's
``surrogateescape``): :func:`subject_bytes` and :func:`subject_from_bytes` convert exactly,
:func:`printable_subject` is what Go's JSON encoder writes for such a subject.

Pure functions, no I/O. Hot paths (``matches`` on literal subjects, ``Sublist.match``) avoid
allocations where they can and cache results.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Generic, TypeVar

PWC = "*"
FWC = ">"
_WS = frozenset(" \t\n\r\f")

V = TypeVar("V")


def subject_bytes(subject: str) -> bytes:
    """The wire bytes of ``subject`` (surrogate escapes back to the bytes they stand for)."""
    try:
        return subject.encode()
    except UnicodeEncodeError:
        return subject.encode("utf-8", "surrogateescape")


def subject_from_bytes(raw: bytes) -> str:
    """``raw`` as a subject ``str``; never fails (invalid UTF-8 becomes surrogate escapes)."""
    try:
        return raw.decode()
    except UnicodeDecodeError:
        return raw.decode("utf-8", "surrogateescape")


def printable_subject(subject: str) -> str:
    """``subject`` as valid text: each byte that is not valid UTF-8 becomes U+FFFD, one per byte,
    as Go's JSON encoder writes it (``MSG.GET``, ``STREAM.INFO`` subjects)."""
    if subject.isascii():
        return subject
    raw = subject_bytes(subject)
    out: list[str] = []
    while True:
        try:
            out.append(raw.decode())
            return "".join(out)
        except UnicodeDecodeError as e:
            out.append(raw[: e.start].decode())
            out.append("\ufffd")
            raw = raw[e.start + 1 :]


def is_valid_subject(subject: str) -> bool:
    """True if ``subject`` is a valid subject or filter (wildcards allowed)."""
    if not subject:
        return False
    saw_fwc = False
    for tok in subject.split("."):
        if not tok or saw_fwc:
            return False
        if len(tok) > 1:
            if not _WS.isdisjoint(tok):
                return False
            continue
        if tok == FWC:
            saw_fwc = True
        elif tok in _WS:
            return False
    return True


def is_literal(subject: str) -> bool:
    """True if ``subject`` has no wildcard token."""
    if "*" not in subject and ">" not in subject:
        return True
    return all(tok not in (PWC, FWC) for tok in subject.split("."))


def is_valid_literal_subject(subject: str) -> bool:
    """True if ``subject`` is valid and contains no wildcard tokens (a publish subject)."""
    return is_valid_subject(subject) and is_literal(subject)


def matches(filter_: str, subject: str) -> bool:
    """True if the literal ``subject`` matches ``filter_`` (which may hold wildcards)."""
    if filter_ == subject:
        return True
    if "*" not in filter_ and ">" not in filter_:
        return False
    ftoks = filter_.split(".")
    stoks = subject.split(".")
    last = len(ftoks) - 1
    for i, ft in enumerate(ftoks):
        if ft == FWC and i == last:
            # Only a last ">" is a wildcard (as in nats-server and Sublist): in ">.a" it is a
            # literal token, and such a filter matched everything (a purge emptied the stream).
            return len(stoks) > i
        if i >= len(stoks):
            return False
        if ft != PWC and ft != stoks[i]:
            return False
    return len(ftoks) == len(stoks)


def _can_match(t1: str, t2: str) -> bool:
    return t1 in (PWC, FWC) or t2 in (PWC, FWC) or t1 == t2


def collide(a: str, b: str) -> bool:
    """True if some literal subject matches both ``a`` and ``b`` (either may hold wildcards)."""
    if a == b:
        return True
    # Most pairs differ in a literal first token: no subject can match both. This check keeps
    # the catalog's overlap scans (every stream against a new one) cheap with many streams.
    ha, hb = a.partition(".")[0], b.partition(".")[0]
    if ha != hb and ha != PWC and ha != FWC and hb != PWC and hb != FWC:
        return False
    la, lb = is_literal(a), is_literal(b)
    if la and lb:
        return False
    if la:
        return matches(b, a)
    if lb:
        return matches(a, b)
    ta, tb = a.split("."), b.split(".")
    fa, fb = ta[-1] == FWC, tb[-1] == FWC
    # The shorter one must end in '>' to reach the longer one's tokens.
    if len(ta) != len(tb) and ((len(ta) < len(tb) and not fa) or (len(tb) < len(ta) and not fb)):
        return False
    return all(_can_match(x, y) for x, y in zip(ta, tb, strict=False))


def is_subset(sub: str, of: str) -> bool:
    """True if every subject matching ``sub`` also matches ``of``."""
    if sub == of:
        return True
    st, ot = sub.split("."), of.split(".")
    for i, o in enumerate(ot):
        if o == FWC:
            return len(st) > i
        if i >= len(st):
            return False
        s = st[i]
        if s == FWC:
            return False
        if o == PWC:
            continue
        if s == PWC or s != o:
            return False
    return len(st) == len(ot)


def num_tokens(subject: str) -> int:
    """Number of tokens in ``subject``."""
    return subject.count(".") + 1


class _Node(Generic[V]):
    __slots__ = ("children", "fwc", "pwc", "values")

    def __init__(self) -> None:
        self.children: dict[str, _Node[V]] = {}
        self.pwc: _Node[V] | None = None
        self.fwc: list[V] = []
        self.values: list[V] = []

    def empty(self) -> bool:
        return not (self.children or self.pwc or self.fwc or self.values)


class Sublist(Generic[V]):
    """Patterns (literal or wildcard) mapped to values; ``match`` finds the values whose
    pattern matches a literal subject. Results are cached until the next insert/remove.

    Duplicate (pattern, value) pairs are kept as separate entries, so a value inserted twice
    must be removed twice (useful for reference-counted interest).
    """

    _CACHE_MAX = 4096

    def __init__(self) -> None:
        self._root: _Node[V] = _Node()
        self._count = 0
        self._cache: dict[str, list[V]] = {}
        self._owned: dict[str, str | None] = {}

    def __len__(self) -> int:
        return self._count

    def insert(self, pattern: str, value: V) -> None:
        """Add ``value`` under ``pattern`` (which must be a valid subject)."""
        node = self._root
        toks = pattern.split(".")
        for i, tok in enumerate(toks):
            if tok == FWC and i == len(toks) - 1:
                node.fwc.append(value)
                break
            if tok == PWC:
                if node.pwc is None:
                    node.pwc = _Node()
                node = node.pwc
            else:
                nxt = node.children.get(tok)
                if nxt is None:
                    nxt = node.children[tok] = _Node()
                node = nxt
        else:
            node.values.append(value)
        self._count += 1
        self._cache.clear()
        self._owned.clear()

    def remove(self, pattern: str, value: V) -> bool:
        """Remove one entry of ``value`` under ``pattern``; False if it was not there."""
        path: list[tuple[_Node[V], str]] = []
        node: _Node[V] | None = self._root
        toks = pattern.split(".")
        target: list[V] | None = None
        for i, tok in enumerate(toks):
            assert node is not None
            if tok == FWC and i == len(toks) - 1:
                target = node.fwc
                break
            path.append((node, tok))
            node = node.pwc if tok == PWC else node.children.get(tok)
            if node is None:
                return False
        else:
            assert node is not None
            target = node.values
        try:
            target.remove(value)
        except ValueError:
            return False
        self._count -= 1
        self._cache.clear()
        self._owned.clear()
        # Prune empty nodes bottom-up so long-lived sublists do not grow without bound.
        for parent, tok in reversed(path):
            child = parent.pwc if tok == PWC else parent.children.get(tok)
            if child is None or not child.empty():
                break
            if tok == PWC:
                parent.pwc = None
            else:
                del parent.children[tok]
        return True

    def match(self, subject: str) -> list[V]:
        """Values whose pattern matches the literal ``subject`` (may contain duplicates)."""
        hit = self._cache.get(subject)
        if hit is not None:
            return hit
        out: list[V] = []
        self._match(self._root, subject.split("."), 0, out)
        if len(self._cache) >= self._CACHE_MAX:
            self._cache.clear()
        self._cache[subject] = out
        return out

    def _match(self, node: _Node[V], toks: list[str], i: int, out: list[V]) -> None:
        if node.fwc and i < len(toks):
            out.extend(node.fwc)
        if i == len(toks):
            out.extend(node.values)
            return
        child = node.children.get(toks[i])
        if child is not None:
            self._match(child, toks, i + 1, out)
        if node.pwc is not None:
            self._match(node.pwc, toks, i + 1, out)

    def colliding(self, pattern: str) -> list[V]:
        """Values whose pattern collides with ``pattern`` (wildcards allowed on both sides:
        some literal subject matches both; see :func:`collide`). May contain duplicates. Walks
        only the branches ``pattern`` can reach, instead of testing every stored pattern."""
        out: list[V] = []
        self._collide(self._root, pattern.split("."), 0, out)
        return out

    def _collide(self, node: _Node[V], toks: list[str], i: int, out: list[V]) -> None:
        if i == len(toks):
            out.extend(node.values)  # a stored ">" here needs one more token: no collision
            return
        tok = toks[i]
        if tok == FWC and i == len(toks) - 1:
            # One or more tokens of anything: every pattern below this node collides.
            out.extend(node.fwc)
            stack = [*node.children.values()]
            if node.pwc is not None:
                stack.append(node.pwc)
            while stack:
                n = stack.pop()
                out.extend(n.values)
                out.extend(n.fwc)
                stack.extend(n.children.values())
                if n.pwc is not None:
                    stack.append(n.pwc)
            return
        out.extend(node.fwc)  # a stored ">" takes this token and whatever follows
        if tok == PWC:
            for child in node.children.values():
                self._collide(child, toks, i + 1, out)
        else:
            nxt = node.children.get(tok)
            if nxt is not None:
                self._collide(nxt, toks, i + 1, out)
        if node.pwc is not None:
            self._collide(node.pwc, toks, i + 1, out)

    def owned_prefix(self, pattern: str) -> str | None:
        """For a stored ``pattern`` of the form ``<literal tokens>.>`` held by one value that no
        other stored pattern collides with: its prefix with the trailing dot (``"$JS.ACK.S."``
        for ``"$JS.ACK.S.>"``). Every literal subject that starts with it matches that one value
        and nothing else, so a caller may route such subjects without :meth:`match` (acks and
        captures of many distinct subjects miss the match cache every time). None otherwise.
        Cached until the next insert/remove."""
        try:
            return self._owned[pattern]
        except KeyError:
            pass
        prefix: str | None = None
        if pattern.endswith(".>") and PWC not in pattern.split(".") and len(self.colliding(pattern)) == 1:
            prefix = pattern[:-1]
        if len(self._owned) >= self._CACHE_MAX:
            self._owned.clear()
        self._owned[pattern] = prefix
        return prefix

    def has_interest(self, subject: str) -> bool:
        """True if any pattern matches ``subject``."""
        return bool(self.match(subject))

    def patterns(self) -> Iterator[tuple[str, V]]:
        """Every (pattern, value) entry."""
        stack: list[tuple[_Node[V], list[str]]] = [(self._root, [])]
        while stack:
            node, prefix = stack.pop()
            for v in node.values:
                yield ".".join(prefix), v
            for v in node.fwc:
                yield ".".join([*prefix, FWC]), v
            for tok, child in node.children.items():
                stack.append((child, [*prefix, tok]))
            if node.pwc is not None:
                stack.append((node.pwc, [*prefix, PWC]))


class SubjectOwners:
    """Owners (streams) and their subject patterns, to answer "does any other owner's pattern
    collide with these?" without testing every pattern: creating the 1,000th stream tested
    its subjects against all 999 others (a Python call per pair, ~0.5 ms per create, so
    creating N streams was quadratic). Candidates come from a :class:`Sublist` walk and are
    confirmed with :func:`collide`, so the answer is exactly the pairwise one."""

    def __init__(self) -> None:
        self._sl: Sublist[tuple[str, str]] = Sublist()
        self._of: dict[str, tuple[str, ...]] = {}

    def __len__(self) -> int:
        return len(self._of)

    def subjects(self, owner: str) -> tuple[str, ...] | None:
        """The patterns recorded for ``owner`` (None if unknown)."""
        return self._of.get(owner)

    def set(self, owner: str, subjects: Iterable[str]) -> None:
        """Record ``owner``'s patterns (replacing what it had)."""
        new = tuple(subjects)
        old = self._of.get(owner)
        if old == new:
            return
        if old is not None:
            self.drop(owner)
        for pat in new:
            self._sl.insert(pat, (owner, pat))
        self._of[owner] = new

    def drop(self, owner: str) -> None:
        """Forget ``owner`` (nothing if unknown)."""
        old = self._of.pop(owner, None)
        for pat in old or ():
            self._sl.remove(pat, (owner, pat))

    def collides(self, subjects: Iterable[str], exclude: str | None = None) -> bool:
        """True if a pattern of an owner other than ``exclude`` collides with one of
        ``subjects``."""
        for b in subjects:
            for owner, a in self._sl.colliding(b):
                if owner != exclude and collide(a, b):
                    return True
        return False
