"""Go ``encoding/json`` request decoding, reproduced with nats-server's exact error texts.

nats-server 2.15.1 is built with Go 1.27, whose ``encoding/json`` is the v1 API implemented on top
of ``encoding/json/v2`` with legacy semantics. Requests are decoded with a ``json.Decoder`` and
``DisallowUnknownFields`` in a loop (``unmarshalRequest``): several concatenated JSON values are
merged into the same struct, whitespace-only input is "no request", trailing garbage is a syntax
error. This module reproduces that behaviour in two phases:

1. :func:`scan` (here) — a port of the ``jsontext`` scanner: builds a tree of :class:`Node` and
   raises :class:`GoJSONError` with the v1-style text and offset (``invalid character 'n'
   looking for beginning of object key string at offset 2``) or ``unexpected EOF``.
2. :func:`jetlog.api.models_godecode.unmarshal` — walks a node against a Go type description
   exactly as the v2 "legacy" arshalers do.

This is the slow, exact path; :mod:`jetlog.api.models` tries msgspec first.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

__all__ = [
    "GoJSONError",
    "Node",
    "go_quote",
    "is_empty_request",
    "is_json_object_or_array",
    "scan",
]

_WS = b" \t\r\n"
_MAX_DEPTH = 10000
_EMPTY_OBJECT = re.compile(rb"[ \t\r\n]*\{[ \t\r\n]*\}[ \t\r\n]*")


class GoJSONError(ValueError):
    """A request Go's decoder rejects; ``str(err)`` is the exact text nats-server reports."""


# ---------------------------------------------------------------------------------------------
# Go string quoting (strconv.Quote / QuoteRune)

_SHORT_ESC = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v"}


def _quote_char(ch: str, quote: str) -> str:
    if ch == quote or ch == "\\":
        return "\\" + ch
    cp = ord(ch)
    if 0xDC80 <= cp <= 0xDCFF:  # a surrogate-escaped invalid UTF-8 byte
        return f"\\x{cp - 0xDC00:02x}"
    if ch.isprintable():
        return ch
    if ch in _SHORT_ESC:
        return _SHORT_ESC[ch]
    if cp < 0x20 or cp == 0x7F:
        return f"\\x{cp:02x}"
    if cp < 0x10000:
        return f"\\u{cp:04x}"
    return f"\\U{cp:08x}"


def go_quote(s: str | bytes) -> str:
    """Go ``strconv.Quote`` (``%q``): double-quoted with Go escapes; invalid UTF-8 as ``\\xNN``."""
    if isinstance(s, bytes):
        s = s.decode("utf-8", "surrogateescape")
    return '"' + "".join(_quote_char(c, '"') for c in s) + '"'


def _quote_rune(b: bytes) -> str:
    """``jsonwire.QuoteRune``: the first rune of ``b`` in single quotes."""
    ch, _ = _decode_rune(b, 0)
    if ch is None:
        return f"'\\x{b[0]:02x}'"
    return "'" + _quote_char(ch, "'") + "'"


def _decode_rune(b: bytes, i: int) -> tuple[str | None, int]:
    """Go ``utf8.DecodeRune`` at ``b[i:]``: (char, width) or (None, 1) for an invalid byte."""
    c = b[i]
    if c < 0x80:
        return chr(c), 1
    for width in (2, 3, 4):
        chunk = b[i : i + width]
        try:
            s = chunk.decode("utf-8")
        except UnicodeDecodeError:
            continue
        if len(s) == 1:
            return s, width
    return None, 1


def _invalid_char(b: bytes, pos: int, where: str) -> tuple[str, int]:
    """Text and legacy offset of ``jsonwire.NewInvalidCharacterError(b[pos:], where)``."""
    _, width = _decode_rune(b, pos)
    return f"invalid character {_quote_rune(b[pos:])} {where}", pos + width


def _syntax_error(msg: str, offset: int) -> GoJSONError:
    """v1 ``SyntaxError`` text as nats-server prints it (``%w at offset %d``)."""
    i = msg.find(" (expecting")
    if i >= 0 and " in literal" not in msg:
        msg = msg[:i]
    for old, new in _REPLACEMENTS:
        msg = msg.replace(old, new)
    return GoJSONError(f"{msg} at offset {offset}")


_REPLACEMENTS = (
    ("object name", "object key"),
    ("at start of value", "looking for beginning of value"),
    ("at start of string", "looking for beginning of object key string"),
    ("after object value", "after object key:value pair"),
    ("in number", "in numeric literal"),
)


def _eof() -> GoJSONError:
    return GoJSONError("unexpected EOF")


# ---------------------------------------------------------------------------------------------
# Syntax phase


@dataclass(slots=True)
class Node:
    """A parsed JSON value: ``kind`` is Go's ``jsontext.Kind`` (``n t f " 0 { [``).

    ``value`` is the decoded string (``"``), the number text (``0``), a list of nodes (``[``) or
    a list of ``(name, node)`` pairs in input order (``{``). ``start``/``end`` index the raw input.
    """

    kind: str
    start: int
    end: int
    value: Any = None


def _skip_ws(b: bytes, pos: int) -> int:
    n = len(b)
    while pos < n and b[pos] in _WS:
        pos += 1
    return pos


def _hex4(b: bytes, i: int) -> int | None:
    chunk = b[i : i + 4]
    if len(chunk) != 4:
        return None
    try:
        if not all(c in b"0123456789abcdefABCDEF" for c in chunk):
            return None
        return int(chunk, 16)
    except ValueError:
        return None


def _utf16_prefix(b: bytes, low: bool) -> bool:
    """``hasEscapedUTF16Prefix``: could ``b`` be a truncated ``\\uXXXX``?"""
    for i, c in enumerate(b):
        if i == 0 and c != 0x5C:
            return False
        if i == 1 and c != 0x75:
            return False
        if i == 2 and low and c not in b"dD":
            return False
        if i == 3 and low and c not in b"cdefCDEF":
            return False
        if 2 <= i < 6 and c not in b"0123456789abcdefABCDEF":
            return False
    return True


def _escape_error(what: bytes, pos: int) -> GoJSONError:
    label = "surrogate pair" if len(what) > 6 else "escape sequence"
    text = what.decode("utf-8", "surrogateescape")
    if len(text) == 1:
        shown = _quote_rune(what)
    elif any(c == "`" or c == "\ufffd" or c.isspace() or not c.isprintable() for c in text):
        shown = go_quote(what)
    else:
        shown = "`" + text + "`"
    return _syntax_error(f"invalid {label} {shown} in string", pos + len(what))


def _scan_string(b: bytes, pos: int) -> tuple[str, int]:
    """Validate and decode the JSON string at ``b[pos]`` (which is ``"``); return (value, end)."""
    n = len(b)
    i = pos + 1
    simple = True
    while i < n:
        c = b[i]
        if c == 0x22:
            break
        if c == 0x5C:
            simple = False
            if i + 1 >= n:
                raise _eof()
            e = b[i + 1]
            if e in b'"\\/bfnrt':
                i += 2
                continue
            if e == 0x75:
                if n < i + 6:
                    if _utf16_prefix(b[i:], False):
                        raise _eof()
                    raise _escape_error(b[i:], i)
                if _hex4(b, i + 2) is None:
                    raise _escape_error(b[i : i + 6], i)
                i += 6
                continue
            raise _escape_error(b[i : i + 2], i)
        if c < 0x20:
            msg, off = _invalid_char(b, i, "in string (expecting non-control character)")
            raise _syntax_error(msg, off)
        if c >= 0x80:
            simple = False
        i += 1
    else:
        raise _eof()
    raw = b[pos + 1 : i]
    if simple:
        return raw.decode("ascii"), i + 1
    return _unquote(raw), i + 1


def _unquote(raw: bytes) -> str:
    """Go ``AppendUnquote`` of a validated string body: escapes resolved, invalid UTF-8 and
    unpaired surrogates replaced by U+FFFD (one per invalid byte, like Go)."""
    out: list[str] = []
    i, n = 0, len(raw)
    start = 0

    def flush(upto: int) -> None:
        seg = raw[start:upto]
        if seg:
            try:
                out.append(seg.decode("utf-8"))
            except UnicodeDecodeError:
                j = 0
                while j < len(seg):
                    ch, w = _decode_rune(seg, j)
                    out.append("\ufffd" if ch is None else ch)
                    j += w

    while i < n:
        if raw[i] != 0x5C:
            i += 1
            continue
        flush(i)
        e = raw[i + 1]
        if e != 0x75:
            out.append({0x62: "\b", 0x66: "\f", 0x6E: "\n", 0x72: "\r", 0x74: "\t"}.get(e, chr(e)))
            i += 2
        else:
            v1 = _hex4(raw, i + 2)
            assert v1 is not None
            i += 6
            if 0xD800 <= v1 < 0xE000:
                v2 = _hex4(raw, i + 2) if raw[i : i + 2] == b"\\u" else None
                if v1 < 0xDC00 and v2 is not None and 0xDC00 <= v2 < 0xE000:
                    out.append(chr(0x10000 + ((v1 - 0xD800) << 10) + (v2 - 0xDC00)))
                    i += 6
                else:
                    out.append("\ufffd")
            else:
                out.append(chr(v1))
        start = i
    flush(n)
    return "".join(out)


def _scan_number(b: bytes, pos: int) -> int:
    """End of the JSON number at ``pos`` (``jsonwire.ConsumeNumber``), or raise."""
    n = len(b)
    i = pos
    if i < n and b[i] == 0x2D:
        i += 1
    if i >= n:
        raise _eof()
    c = b[i]
    if c == 0x30:
        i += 1
    elif 0x31 <= c <= 0x39:
        i += 1
        while i < n and 0x30 <= b[i] <= 0x39:
            i += 1
    else:
        raise _syntax_error(*_invalid_char(b, i, "in number (expecting digit)"))
    if i < n and b[i] == 0x2E:
        i += 1
        if i >= n:
            raise _eof()
        if not 0x30 <= b[i] <= 0x39:
            raise _syntax_error(*_invalid_char(b, i, "in number (expecting digit)"))
        while i < n and 0x30 <= b[i] <= 0x39:
            i += 1
    if i < n and b[i] in b"eE":
        i += 1
        if i < n and b[i] in b"+-":
            i += 1
        if i >= n:
            raise _eof()
        if not 0x30 <= b[i] <= 0x39:
            raise _syntax_error(*_invalid_char(b, i, "in number (expecting digit)"))
        while i < n and 0x30 <= b[i] <= 0x39:
            i += 1
    return i


_LITERALS = {0x6E: (b"null", "n"), 0x74: (b"true", "t"), 0x66: (b"false", "f")}


def _scan_scalar(b: bytes, pos: int) -> Node:
    c = b[pos]
    if c == 0x22:
        value, end = _scan_string(b, pos)
        return Node('"', pos, end, value)
    if c == 0x2D or 0x30 <= c <= 0x39:
        end = _scan_number(b, pos)
        return Node("0", pos, end, b[pos:end].decode("ascii"))
    lit = _LITERALS.get(c)
    if lit is not None:
        word, kind = lit
        for k in range(len(word)):
            if pos + k >= len(b):
                raise _eof()
            if b[pos + k] != word[k]:
                expecting = chr(word[k])
                raise _syntax_error(
                    *_invalid_char(b, pos + k, f"in literal {word.decode()} (expecting '{expecting}')")
                )
        return Node(kind, pos, pos + len(word))
    raise _syntax_error(*_invalid_char(b, pos, "at start of value"))


def scan(b: bytes, pos: int) -> Node:
    """Scan one JSON value starting at ``b[pos]`` (no leading whitespace); iterative, so deep
    nesting cannot exhaust Python's stack. Raises :class:`GoJSONError` with Go's texts."""
    n = len(b)
    if pos >= n:
        raise _eof()
    c = b[pos]
    if c != 0x7B and c != 0x5B:
        return _scan_scalar(b, pos)
    root = Node(chr(c), pos, -1, [])
    # Open containers, each with the member name its pending value belongs to (objects).
    stack: list[tuple[Node, str | None]] = [(root, None)]
    i = pos + 1
    first = True  # just after '{' or '[': the container may close immediately
    while stack:
        top = stack[-1][0]
        i = _skip_ws(b, i)
        if i >= n:
            raise _eof()
        if first:
            first = False
            if b[i] == (0x7D if top.kind == "{" else 0x5D):
                top.end = i + 1
                stack.pop()
                if not stack:
                    break
                _attach(stack, top)
                i = _after_value(b, i + 1, stack)
                continue
        if top.kind == "{":
            if b[i] != 0x22:
                raise _syntax_error(*_invalid_char(b, i, "at start of string (expecting '\"')"))
            name, i = _scan_string(b, i)
            i = _skip_ws(b, i)
            if i >= n:
                raise _eof()
            if b[i] != 0x3A:
                raise _syntax_error(*_invalid_char(b, i, "after object name (expecting ':')"))
            i = _skip_ws(b, i + 1)
            if i >= n:
                raise _eof()
            stack[-1] = (top, name)
        c = b[i]
        if c == 0x7B or c == 0x5B:
            if len(stack) >= _MAX_DEPTH:
                raise _syntax_error("exceeded max depth", i + 1)
            stack.append((Node(chr(c), i, -1, []), None))
            i += 1
            first = True
            continue
        node = _scan_scalar(b, i)
        _attach(stack, node)
        i = _after_value(b, node.end, stack)
    return root


def _attach(stack: list[tuple[Node, str | None]], node: Node) -> None:
    parent, name = stack[-1]
    if parent.kind == "{":
        assert name is not None
        parent.value.append((name, node))
        stack[-1] = (parent, None)
    else:
        parent.value.append(node)


def _after_value(b: bytes, i: int, stack: list[tuple[Node, str | None]]) -> int:
    """After a member/element: consume ``,`` or close containers; returns the new position."""
    n = len(b)
    while stack:
        top, _ = stack[-1]
        i = _skip_ws(b, i)
        if i >= n:
            raise _eof()
        c = b[i]
        if c == 0x2C:
            return i + 1
        if top.kind == "{":
            if c != 0x7D:
                raise _syntax_error(*_invalid_char(b, i, "after object value (expecting ',' or '}')"))
        elif c != 0x5D:
            raise _syntax_error(*_invalid_char(b, i, "after array element (expecting ',' or ']')"))
        top.end = i + 1
        i += 1
        stack.pop()
        if stack:
            _attach(stack, top)
        else:
            return i
    return i


def is_empty_request(body: bytes) -> bool:
    """nats-server ``isEmptyRequest``: empty, or exactly one JSON object with no members (``{}``
    with optional whitespace). Whitespace-only, ``null``, ``[]`` and ``{} {}`` are *not* empty."""
    return not body or _EMPTY_OBJECT.fullmatch(body) is not None


def is_json_object_or_array(body: bytes) -> bool:
    """nats-server ``isJSONObjectOrArray``: first non-whitespace byte is ``{`` or ``[``."""
    pos = _skip_ws(body, 0)
    return pos < len(body) and body[pos] in b"{["
