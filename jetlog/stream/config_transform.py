"""Subject transform validation with nats-server's error texts (``ValidateMapping`` and
``NewSubjectTransform`` of ``server/subject_transform.go`` / ``sublist.go``), used by the stream
config check for ``subject_transform`` (``10155``/``10156``) and ``republish``.

Only validation: applying transforms is the stream layer's business.
"""

from __future__ import annotations

import re

__all__ = ["subject_transform_error", "validate_mapping"]

_WS = "[\t\n\f\r ]"


def _fn_re(name: str) -> re.Pattern[str]:
    return re.compile("{{" + _WS + "*" + name + _WS + r"*\((.*)\)" + _WS + "*}}")


_FN = {
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
_COMMA = re.compile(",[\t\n\f\r ]*")
_INVALID = "invalid mapping destination"
_NOT_ENOUGH = _INVALID + ": not enough arguments passed to the function"
_TOO_MANY = _INVALID + ": too many arguments passed to the function"
_BAD_ARG = _INVALID + ": function argument is invalid or in the wrong format"
_OUT_OF_RANGE = _INVALID + ": wildcard index out of range"
_UNKNOWN_FN = _INVALID + ": unknown function"
_BAD_DEST = _INVALID + ": invalid transform"
_ATOI = re.compile(r"[+-]?[0-9]+\Z")


def _atoi(s: str, bits: int = 64) -> int | None:
    s = s.strip(" ")
    if not _ATOI.match(s):
        return None
    v = int(s)
    return v if -(1 << (bits - 1)) <= v < (1 << (bits - 1)) else None


class _MapErr(Exception):
    def __init__(self, token: str, err: str) -> None:
        super().__init__(f"{err} in {token}" if token else err)


def _args(name: str, token: str) -> list[str] | None:
    m = _FN[name].search(token)
    return None if m is None else _COMMA.split(m.group(1))


def _index_int_args(token: str, args: list[str], kind: str) -> tuple[str, list[int]]:
    if len(args) < 2:
        raise _MapErr(token, _NOT_ENOUGH)
    if len(args) > 2:
        raise _MapErr(token, _TOO_MANY)
    i = _atoi(args[0])
    if i is None or _atoi(args[1], 32) is None:
        raise _MapErr(token, _BAD_ARG)
    return kind, [i]


def _placeholder(token: str) -> tuple[str, list[int]]:
    """``indexPlaceHolders``: (transform kind, wildcard indexes) of a destination token."""
    n = len(token)
    if n > 1 and token[0] == "$":
        tp = _atoi(token[1:])
        return ("none", []) if tp is None else ("wildcard", [tp])
    if n > 4 and token.startswith("{{") and token.endswith("}}"):
        args = _args("wildcard", token)
        if args is not None:
            if len(args) == 1 and args[0] == "":
                raise _MapErr(token, _NOT_ENOUGH)
            if len(args) != 1:
                raise _MapErr(token, _TOO_MANY)
            i = _atoi(args[0])
            if i is None:
                raise _MapErr(token, _BAD_ARG)
            return "wildcard", [i]
        args = _args("partition", token)
        if args is not None:
            num = _atoi(args[0])
            if num is None or num > (1 << 31) - 1:
                raise _MapErr(token, _BAD_ARG)
            idx = [_atoi(a) for a in args[1:]]
            if any(i is None for i in idx):
                raise _MapErr(token, _BAD_ARG)
            return "partition", [i for i in idx if i is not None]
        for fn in ("splitfromleft", "splitfromright", "slicefromleft", "slicefromright", "right", "left"):
            args = _args(fn, token)
            if args is not None:
                return _index_int_args(token, args, fn)
        args = _args("split", token)
        if args is not None:
            if len(args) < 2:
                raise _MapErr(token, _NOT_ENOUGH)
            if len(args) > 2:
                raise _MapErr(token, _TOO_MANY)
            i = _atoi(args[0])
            if i is None or " " in args[1] or "." in args[1]:
                raise _MapErr(token, _BAD_ARG)
            return "split", [i]
        args = _args("random", token)
        if args is not None:
            if len(args) != 1:
                raise _MapErr(token, _NOT_ENOUGH)
            num = _atoi(args[0])
            if num is None or num > (1 << 31) - 1:
                raise _MapErr(token, _BAD_ARG)
            return "random", []
        raise _MapErr(token, _UNKNOWN_FN)
    return "none", []


def _subject_info(subject: str) -> tuple[bool, list[str], int, bool]:
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


def subject_transform_error(src: str, dest: str) -> str | None:
    """``NewSubjectTransform(src, dest)``: ``None`` if valid, else Go's error text."""
    if not dest:
        return None
    src = src or ">"
    sv, _, npwcs, sfwc = _subject_info(src)
    dv, dtoks, dnpwcs, dfwc = _subject_info(dest)
    if not sv or not dv or dnpwcs > 0 or sfwc != dfwc:
        return "invalid subject"
    try:
        for token in dtoks:
            kind, idx = _placeholder(token)
            if npwcs > 0 or sfwc:
                if kind not in ("none", "random"):
                    for i in idx:
                        if i > npwcs:
                            raise _MapErr(f"{token}: [{i}]", _OUT_OF_RANGE)
            elif kind not in ("none", "random", "partition"):
                raise _MapErr(token, _OUT_OF_RANGE)
    except _MapErr as e:
        return str(e)
    return None


def validate_mapping(src: str, dest: str) -> str | None:
    """``ValidateMapping(src, dest)``: ``None`` if valid, else Go's error text."""
    if not dest:
        return None
    fwc = False
    for t in dest.split("."):
        if not t or fwc:
            return _BAD_DEST
        if len(t) > 4 and t.startswith("{{") and t.endswith("}}"):
            if not any(rx.search(t) for rx in _FN.values()):
                return f"{_UNKNOWN_FN} in {t}"
            continue
        if t == ">":
            fwc = True
        elif any(c in t for c in "\t\n\f\r "):
            return _BAD_DEST
    return subject_transform_error(src, dest)
