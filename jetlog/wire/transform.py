"""Subject transforms, exactly as nats-server 2.15.1 applies them (``server/subject_transform.go``).

Used for a stream's ``subject_transform`` (the stored subject is the transformed one) and
``republish`` (the destination of the republished copy).

A destination is a ``.``-separated list of tokens; each is one of

* a literal token, copied as is (``$x``, ``{{}}`` and other non-placeholders included);
* ``$N`` (legacy) or ``{{wildcard(N)}}``: the N-th ``*`` of the source;
* ``{{partition(n, i, j, ...)}}``: FNV-1a 32 of the listed wildcard tokens *concatenated without a
  separator*, modulo ``n``; ``{{partition(n)}}`` (or any partition when the source has no
  wildcard) hashes the whole subject;
* ``{{splitFromLeft(i, pos)}}``, ``{{splitFromRight(i, pos)}}``, ``{{sliceFromLeft(i, size)}}``,
  ``{{sliceFromRight(i, size)}}``, ``{{split(i, delim)}}``, ``{{left(i, len)}}``, ``{{right(i, len)}}``:
  functions of the i-th wildcard token that may produce several tokens;
* ``{{random(n)}}``: a random number in ``[0, n)``;
* a final ``>`` (only if the source ends in ``>``): the tokens the source's ``>`` matched.

Function names match the server's regexes: the first letter of each word may be upper case
(``SplitFromLeft``), with whitespace (``[\\t\\n\\f\\r ]``) around the name and after commas.

Server quirks reproduced on purpose (all measured on the 2.15.1 binary):

* a wildcard index ``<= 0`` (``$0``, ``{{wildcard(-1)}}``) silently refers to source token 0;
* lengths and positions count UTF-8 *bytes*, so a function may cut a character in two (the
  result then holds surrogate escapes, the form jetlog decodes invalid UTF-8 subjects into);
* ``split`` drops empty pieces, except that two or more leading delimiters leave one empty token
  (``split(--a)`` is ``.a``), and a token made only of delimiters maps to nothing; the server
  stores such subjects with empty tokens as they are;
* ``split`` with an empty delimiter (``{{split(1,)}}``) splits into characters;
* partition and random counts are ``int32``: ``0`` gives ``"0"``, negatives wrap like Go's
  ``uint32(int32)``;
* a source token starting with ``*`` (``*x``, a literal) matches *any* subject token.

The destination is compiled into a plan when the transform is built; :meth:`SubjectTransform.apply`
only splits the subject, checks it against the source and walks the plan (no regular expressions).
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from functools import lru_cache
from operator import itemgetter
from typing import Any, NamedTuple

from jetlog.wire.subjects import is_valid_literal_subject

__all__ = [
    "FUNCTIONS",
    "MappingError",
    "Placeholder",
    "SubjectTransform",
    "TransformError",
    "fnv1a32",
    "parse_placeholder",
]

# --- error texts (``server/errors.go``) ------------------------------------------------------

BAD_SUBJECT = "invalid subject"
INVALID_DEST = "invalid mapping destination"
NOT_ENOUGH_ARGS = INVALID_DEST + ": not enough arguments passed to the function"
TOO_MANY_ARGS = INVALID_DEST + ": too many arguments passed to the function"
INVALID_ARG = INVALID_DEST + ": function argument is invalid or in the wrong format"
INDEX_OUT_OF_RANGE = INVALID_DEST + ": wildcard index out of range"
UNKNOWN_FUNCTION = INVALID_DEST + ": unknown function"
INVALID_TRANSFORM = INVALID_DEST + ": invalid transform"


class TransformError(ValueError):
    """An invalid transform source or destination; ``str()`` is nats-server's error text."""


class MappingError(TransformError):
    """Go's ``mappingDestinationErr``: ``"<err> in <token>"``."""

    def __init__(self, token: str, err: str) -> None:
        super().__init__(f"{err} in {token}" if token else err)
        self.token = token
        self.err = err


# --- placeholder parsing (``indexPlaceHolders``) -----------------------------------------------

_WS = "[\t\n\f\r ]"  # Go's \s


def _fn_re(name: str) -> re.Pattern[str]:
    return re.compile("{{" + _WS + "*" + name + _WS + r"*\((.*)\)" + _WS + "*}}")


#: The server's mapping-function regexes, by lower-case function name (searched, not anchored).
FUNCTIONS: dict[str, re.Pattern[str]] = {
    "partition": _fn_re("[pP]artition"),
    "wildcard": _fn_re("[wW]ildcard"),
    "splitfromleft": _fn_re("[sS]plit[fF]rom[lL]eft"),
    "splitfromright": _fn_re("[sS]plit[fF]rom[rR]ight"),
    "slicefromleft": _fn_re("[sS]lice[fF]rom[lL]eft"),
    "slicefromright": _fn_re("[sS]lice[fF]rom[rR]ight"),
    "split": _fn_re("[sS]plit"),
    "left": _fn_re("[lL]eft"),
    "right": _fn_re("[rR]ight"),
    "random": _fn_re("[rR]andom"),
}
_COMMA = re.compile("," + _WS + "*")
_ATOI = re.compile(r"[+-]?[0-9]+\Z")
_MAX_INT32 = (1 << 31) - 1

# Index+int functions, in the order the server tries them.
_INDEX_INT_FUNCTIONS = ("splitfromleft", "splitfromright", "slicefromleft", "slicefromright", "right", "left")


def _atoi(s: str, bits: int = 64) -> int | None:
    """Go's ``strconv.Atoi`` (``bits=64``) / ``ParseInt(s, 10, bits)``: None on error."""
    if not _ATOI.match(s):
        return None
    v = int(s)
    return v if -(1 << (bits - 1)) <= v < (1 << (bits - 1)) else None


def _int32(v: int) -> int:
    """Go's ``int32(v)`` conversion (wraps)."""
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v > _MAX_INT32 else v


class Placeholder(NamedTuple):
    """A parsed destination token.

    ``kind`` is ``"none"`` (a literal token) or a lower-case function name (``$N`` is
    ``"wildcard"``); ``indexes`` are the 1-based wildcard indexes it refers to; ``num`` is the
    integer argument (partition/random count, position, size, length; 0 when there is none) and
    ``sep`` the ``split`` delimiter.
    """

    kind: str
    indexes: tuple[int, ...] = ()
    num: int = 0
    sep: str = ""


_LITERAL = Placeholder("none")


def _args(name: str, token: str) -> list[str] | None:
    m = FUNCTIONS[name].search(token)
    return None if m is None else _COMMA.split(m.group(1))


def parse_placeholder(token: str) -> Placeholder:
    """``indexPlaceHolders``: what a destination token does. Raises :class:`MappingError`."""
    n = len(token)
    if n > 1 and token[0] == "$":
        # Legacy $N; anything else starting with $ is a literal token. No trimming here.
        tp = _atoi(token[1:])
        return _LITERAL if tp is None else Placeholder("wildcard", (tp,))
    if not (n > 4 and token.startswith("{{") and token.endswith("}}")):
        return _LITERAL

    args = _args("wildcard", token)
    if args is not None:
        if len(args) == 1 and args[0] == "":
            raise MappingError(token, NOT_ENOUGH_ARGS)
        if len(args) != 1:
            raise MappingError(token, TOO_MANY_ARGS)
        i = _atoi(args[0].strip(" "))
        if i is None:
            raise MappingError(token, INVALID_ARG)
        return Placeholder("wildcard", (i,))

    args = _args("partition", token)
    if args is not None:
        num = _atoi(args[0].strip(" "))
        if num is None or num > _MAX_INT32:
            raise MappingError(token, INVALID_ARG)
        idx: list[int] = []
        for a in args[1:]:
            i = _atoi(a.strip(" "))
            if i is None:
                raise MappingError(token, INVALID_ARG)
            idx.append(i)
        return Placeholder("partition", tuple(idx), _int32(num))

    for fn in _INDEX_INT_FUNCTIONS:
        args = _args(fn, token)
        if args is not None:
            if len(args) < 2:
                raise MappingError(token, NOT_ENOUGH_ARGS)
            if len(args) > 2:
                raise MappingError(token, TOO_MANY_ARGS)
            i = _atoi(args[0].strip(" "))
            v = _atoi(args[1].strip(" "), 32)
            if i is None or v is None:
                raise MappingError(token, INVALID_ARG)
            return Placeholder(fn, (i,), v)

    args = _args("split", token)
    if args is not None:
        if len(args) < 2:
            raise MappingError(token, NOT_ENOUGH_ARGS)
        if len(args) > 2:
            raise MappingError(token, TOO_MANY_ARGS)
        i = _atoi(args[0].strip(" "))
        if i is None or " " in args[1] or "." in args[1]:
            raise MappingError(token, INVALID_ARG)
        return Placeholder("split", (i,), 0, args[1])

    args = _args("random", token)
    if args is not None:
        if len(args) != 1:
            raise MappingError(token, NOT_ENOUGH_ARGS)
        num = _atoi(args[0].strip(" "))
        if num is None or num > _MAX_INT32:
            raise MappingError(token, INVALID_ARG)
        return Placeholder("random", (), _int32(num))

    raise MappingError(token, UNKNOWN_FUNCTION)


def _subject_info(subject: str) -> tuple[bool, list[str], int, bool]:
    """``subjectInfo``: (valid, tokens, number of ``*``, ends in ``>``)."""
    if not subject:
        return False, [], 0, False
    npwcs, fwc = 0, False
    tokens = subject.split(".")
    for t in tokens:
        if not t or fwc:
            return False, [], 0, False
        if t == ">":
            fwc = True
        elif t == "*":
            npwcs += 1
    return True, tokens, npwcs, fwc


# --- the functions, on Go byte semantics -----------------------------------------------------


def fnv1a32(data: bytes) -> int:
    """32-bit FNV-1a (Go's ``hash/fnv.New32a``)."""
    h = 0x811C9DC5
    for b in data:
        h = ((h ^ b) * 0x01000193) & 0xFFFFFFFF
    return h


def _as_bytes_str(s: str) -> str:
    """``s``'s UTF-8 bytes as a str of code points 0-255, so slicing counts bytes like Go."""
    return s if s.isascii() else s.encode("utf-8", "surrogateescape").decode("latin-1")


def _from_bytes_str(s: str) -> str:
    return s if s.isascii() else s.encode("latin-1").decode("utf-8", "surrogateescape")


def _split_from_left(t: str, pos: int) -> str:
    if 0 < pos < len(t):
        return t[:pos] + "." + t[pos:]
    return t


def _split_from_right(t: str, pos: int) -> str:
    n = len(t)
    if 0 < pos < n:
        return t[: n - pos] + "." + t[n - pos :]
    return t


def _slice_from_left(t: str, size: int) -> str:
    n = len(t)
    if 0 < size < n:
        return ".".join([t[i : i + size] for i in range(0, n, size)])
    return t


def _slice_from_right(t: str, size: int) -> str:
    n = len(t)
    if 0 < size < n:
        rem = n % size
        pieces = [t[:rem]] if rem else []
        pieces.extend(t[i : i + size] for i in range(rem, n, size))
        return ".".join(pieces)
    return t


def _left(t: str, size: int) -> str:
    return t[:size] if 0 < size < len(t) else t


def _right(t: str, size: int) -> str:
    n = len(t)
    return t[n - size :] if 0 < size < n else t


_BYTE_FUNCTIONS = {
    "splitfromleft": _split_from_left,
    "splitfromright": _split_from_right,
    "slicefromleft": _slice_from_left,
    "slicefromright": _slice_from_right,
    "left": _left,
    "right": _right,
}


def _split(t: str, sep: str) -> str:
    if not sep:
        # Go's strings.Split(s, "") explodes into UTF-8 sequences, an invalid byte on its own:
        # exactly the characters of the surrogateescape-decoded str.
        parts = list(t)
    elif t.isascii() and sep.isascii():
        parts = t.split(sep)
    else:
        parts = [_from_bytes_str(p) for p in _as_bytes_str(t).split(_as_bytes_str(sep))]
    out: list[str] = []
    last = len(parts) - 1
    for j, p in enumerate(parts):
        if p:
            out.append(p)
        if j < last and parts[j + 1] and not (j == 0 and not p):
            out.append(".")
    return "".join(out)


@lru_cache(maxsize=4096)
def _partition(key: str, buckets: int) -> str:
    """FNV-1a of ``key``'s bytes modulo ``buckets`` read as Go's ``uint32(int32)``; cached, as
    partitioned subjects repeat."""
    if buckets == 0:
        return "0"
    return str(fnv1a32(key.encode("utf-8", "surrogateescape")) % (buckets & 0xFFFFFFFF))


def _random(ceiling: int) -> str:
    if ceiling == 0:
        return "0"
    # Go: int(rand.Int31()) % ceiling, which has the dividend's (non-negative) sign.
    return str(random.getrandbits(31) % abs(ceiling))


# Plan step opcodes.
_LIT, _WC, _PART, _PART_ALL, _BYTEFN, _SPLIT, _RAND = range(7)


class _Step(NamedTuple):
    """One destination token: ``op`` with the source token position(s) it reads, its integer
    argument, its string (literal token or split delimiter) and, for ``_BYTEFN``, the function."""

    op: int
    pos: int = -1
    positions: tuple[int, ...] = ()
    num: int = 0
    text: str = ""
    fn: Callable[[str, int], str] | None = None


class SubjectTransform:
    """Map subjects matching ``src`` onto ``dest`` (nats-server's ``NewSubjectTransform`` + ``Match``).

    Raises :class:`TransformError` (with the server's text) for an invalid pair. An empty ``src``
    means ``>``; an empty ``dest`` is an error here (the server treats it as "no transform").
    """

    __slots__ = (
        "_always_publishable",
        "_fwc_at",
        "_getter",
        "_getter_lits",
        "_getter_one",
        "_identity",
        "_literals",
        "_nsrc",
        "_plan",
        "dest",
        "src",
    )

    def __init__(self, src: str, dest: str) -> None:
        src = src or ">"
        self.src = src
        self.dest = dest
        sv, stoks, npwcs, sfwc = _subject_info(src)
        dv, dtoks, dnpwcs, dfwc = _subject_info(dest)
        if not sv or not dv or dnpwcs > 0 or sfwc != dfwc:
            raise TransformError(BAD_SUBJECT)
        self._identity = src == ">" and dest == ">"
        self._nsrc = len(stoks)
        # 0-based position of the source's ">", or -1.
        self._fwc_at = len(stoks) - 1 if sfwc else -1
        # Literal source tokens to compare; one starting with "*" matches anything (server quirk).
        self._literals = tuple((i, t) for i, t in enumerate(stoks) if t[0] != "*" and t != ">")
        # 1-based wildcard index -> source token position; any other index gets 0 (Go map default).
        sti = dict(enumerate((i for i, t in enumerate(stoks) if t == "*"), 1))
        wild = npwcs > 0 or sfwc

        plan: list[_Step] = []
        for token in dtoks:
            ph = parse_placeholder(token)
            kind = ph.kind
            if kind == "none":
                if token == ">":
                    break  # always the last token: the source's ">" tail follows
                plan.append(_Step(_LIT, text=token))
            elif kind == "random":
                plan.append(_Step(_RAND, num=ph.num))
            elif not wild:
                # No wildcard in the source: only partition (of the whole subject) is allowed.
                if kind != "partition":
                    raise MappingError(token, INDEX_OUT_OF_RANGE)
                plan.append(_Step(_PART_ALL, num=ph.num))
            else:
                for i in ph.indexes:
                    if i > npwcs:
                        raise MappingError(f"{token}: [{i}]", INDEX_OUT_OF_RANGE)
                positions = tuple(sti.get(i, 0) for i in ph.indexes)
                if kind == "partition":
                    op = _PART if positions else _PART_ALL
                    plan.append(_Step(op, positions=positions, num=ph.num))
                elif kind == "wildcard":
                    plan.append(_Step(_WC, pos=positions[0]))
                elif kind == "split":
                    plan.append(_Step(_SPLIT, pos=positions[0], text=ph.sep))
                else:
                    plan.append(_Step(_BYTEFN, pos=positions[0], num=ph.num, fn=_BYTE_FUNCTIONS[kind]))
        self._plan = tuple(plan)
        # Fast path for destinations of literals and plain wildcards only (the common case): one
        # itemgetter over the subject's tokens followed by the literals (at negative indexes, so
        # they stay put whatever the length of a ">" tail).
        self._getter: Callable[[list[str]], Any] | None = None
        self._getter_one = len(plan) == 1
        self._getter_lits: list[str] = [s.text for s in plan if s.op == _LIT]
        if plan and all(s.op in (_LIT, _WC) for s in plan):
            idx: list[int] = []
            k = -len(self._getter_lits)
            for s in plan:
                if s.op == _LIT:
                    idx.append(k)
                    k += 1
                else:
                    idx.append(s.pos)
            self._getter = itemgetter(*idx)
        # Literal and wildcard tokens only, no whitespace: every result is a valid publish subject
        # (tokens copied from a matched subject are non-empty, literal and free of whitespace).
        self._always_publishable = self._getter is not None and all(
            is_valid_literal_subject(t) for t in self._getter_lits
        )

    def __repr__(self) -> str:
        return f"SubjectTransform({self.src!r}, {self.dest!r})"

    def matches(self, subject: str) -> bool:
        """True if :meth:`apply` transforms ``subject`` (Go's ``Match`` does not fail)."""
        return self._identity or self.apply(subject) is not None

    def apply(self, subject: str) -> str | None:
        """The transformed subject, or None if ``subject`` does not match the source (or is not a
        valid literal subject)."""
        if self._identity:
            return subject
        toks = subject.split(".")
        n = len(toks)
        fwc_at = self._fwc_at
        if n != self._nsrc and (fwc_at < 0 or n < self._nsrc):
            return None
        for i, lit in self._literals:
            if toks[i] != lit:
                return None
        # isValidLiteralSubject (Go checks it first; either way the answer is "no match").
        if "" in toks or "*" in toks or ">" in toks:
            return None

        getter = self._getter
        head: str
        if getter is not None:
            if self._getter_one:
                head = getter(toks + self._getter_lits)
            else:
                head = ".".join(getter(toks + self._getter_lits))
            return head if fwc_at < 0 else head + "." + ".".join(toks[fwc_at:])
        out: list[str] = []
        for op, pos, positions, num, text, fn in self._plan:
            if op == _LIT:
                out.append(text)
            elif op == _WC:
                out.append(toks[pos])
            elif op == _BYTEFN:
                assert fn is not None
                t = toks[pos]
                out.append(fn(t, num) if t.isascii() else _from_bytes_str(fn(_as_bytes_str(t), num)))
            elif op == _SPLIT:
                out.append(_split(toks[pos], text))
            elif op == _PART:
                key = toks[positions[0]] if len(positions) == 1 else "".join([toks[p] for p in positions])
                out.append(_partition(key, num))
            elif op == _PART_ALL:
                out.append(_partition(subject, num))
            else:
                out.append(_random(num))
        if fwc_at >= 0:
            out.extend(toks[fwc_at:])
        return ".".join(out)

    def apply_publishable(self, subject: str) -> str | None:
        """:meth:`apply`, but None when the result is not a valid publish subject: what the server
        does with a ``republish`` destination (``processJetStreamMsg`` drops that copy, logging
        "suppressing republish with invalid subject"), e.g. ``out..a`` from ``{{split(1,-)}}``."""
        r = self.apply(subject)
        if r is None or self._always_publishable:
            return r
        return r if is_valid_literal_subject(r) else None

    def apply_or_same(self, subject: str) -> str:
        """The transformed subject, or ``subject`` unchanged when it does not match."""
        r = self.apply(subject)
        return subject if r is None else r
