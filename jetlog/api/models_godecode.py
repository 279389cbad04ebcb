"""Go ``encoding/json`` semantic decoding (the v2 "legacy" arshalers nats-server 2.15.1 runs).

:func:`unmarshal` walks a :class:`~jetlog.api.models_gojson.Node` against a Go type description
(:class:`GoType`): case-insensitive member names; ``null`` is a no-op for scalars and value
structs and ``nil`` for pointers/slices/maps; repeated names and concatenated values merge; the
*first* semantic error in document order wins (``json: unknown field "x"``, ``json: cannot
unmarshal string into Go struct field StreamConfigRequest.max_msgs of type int64``); errors of
``UnmarshalJSON`` methods (enums) and of time parsing are reported verbatim. :func:`decode_go`
adds the ``json.Decoder`` loop of nats-server's ``unmarshalRequest``.

The output is plain Python data (dicts keyed by JSON member name) for ``msgspec.convert``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from jetlog.api.models_gojson import (
    GoJSONError,
    Node,
    _invalid_char,
    _skip_ws,
    _syntax_error,
    go_quote,
    scan,
)
from jetlog.wire.timefmt import parse_time

__all__ = ["GoType", "MethodFn", "decode_go", "struct_type", "unmarshal"]

MethodFn = Callable[[bytes, "Node"], Any]  # returns the value or raises GoJSONError


@dataclass(slots=True)
class GoType:
    """A Go type as the v2 arshalers see it.

    ``kind``: ``string bool int uint slice map ptr struct method time``. ``name`` is Go's
    ``reflect.Type.String()`` used in messages (``int64``, ``time.Duration``, ``[]string``,
    ``server.Placement``). ``bits`` for ints; ``elem`` for slice/map/ptr; ``fields`` for structs
    (JSON name → type) with ``folded`` for the case-insensitive lookup; ``method`` decodes a
    type with an ``UnmarshalJSON`` method from its raw bytes.
    """

    kind: str
    name: str
    bits: int = 64
    elem: GoType | None = None
    fields: dict[str, GoType] = field(default_factory=dict)
    folded: dict[str, str] = field(default_factory=dict)
    method: MethodFn | None = None


def _fold(name: str) -> str:
    # strings.EqualFold on ASCII-cased names; Kelvin sign and long s fold like Go.
    return name.replace("\u212a", "k").replace("\u017f", "s").lower()


def struct_type(name: str, fields: dict[str, GoType]) -> GoType:
    """A Go struct type with the given JSON member names."""
    return GoType("struct", name, fields=fields, folded={_fold(k): k for k in fields})


class _SemErr:
    """The first semantic error (Go keeps the earliest; later ones are dropped)."""

    __slots__ = ("msg",)

    def __init__(self) -> None:
        self.msg: str | None = None

    def set(self, msg: str) -> None:
        if self.msg is None:
            self.msg = msg


def _ptr_token(name: str) -> str:
    return name.replace("~", "~0").replace("/", "~1")


def _kind_word(node: Node) -> str:
    return {"n": "null", '"': "string", "0": "number", "t": "bool", "f": "bool", "[": "array", "{": "object"}[
        node.kind
    ]


class _Ctx:
    __slots__ = ("errors", "root", "strict")

    def __init__(self, root: str, strict: bool) -> None:
        self.root = root
        self.strict = strict
        self.errors = _SemErr()

    def type_error(self, path: list[str], value: str, go_name: str) -> None:
        if not path:
            self.errors.set(f"json: cannot unmarshal {value} into Go value of type {go_name}")
            return
        fpath = ".".join(path)
        last = path[-1]
        into = "" if last and last.isdigit() and last.isascii() else "Go struct field "
        self.errors.set(f"json: cannot unmarshal {value} into {into}{self.root}.{fpath} of type {go_name}")


def _parse_int(text: str, bits: int, signed: bool) -> int | None:
    neg = text.startswith("-")
    digits = text[1:] if neg else text
    if not digits.isdigit() or not digits.isascii() or (len(digits) > 1 and digits[0] == "0"):
        return None
    if neg and not signed:
        return None
    v = int(digits)
    if signed:
        if (neg and v > 1 << (bits - 1)) or (not neg and v > (1 << (bits - 1)) - 1):
            return None
        return -v if neg else v
    if v > (1 << bits) - 1:
        return None
    return v


def _unmarshal(node: Node, t: GoType, existing: Any, path: list[str], ctx: _Ctx, raw: bytes) -> Any:
    k = node.kind
    kind = t.kind
    if kind == "ptr":
        assert t.elem is not None
        if k == "n":
            return None
        return _unmarshal(node, t.elem, existing, path, ctx, raw)
    if kind == "method":
        assert t.method is not None
        try:
            return t.method(raw[node.start : node.end], node)
        except GoJSONError as e:
            ctx.errors.set(str(e))
            return existing
    if k == "n" and kind in ("string", "bool", "int", "uint", "struct", "time"):
        return existing  # v1 merge semantics: null leaves the value alone
    if kind == "string":
        if k == '"':
            return node.value
    elif kind == "bool":
        if k in "tf":
            return k == "t"
    elif kind in ("int", "uint"):
        if k == "0":
            v = _parse_int(node.value, t.bits, kind == "int")
            if v is None:
                ctx.type_error(path, f"number {node.value}", t.name)
                return existing
            return v
    elif kind == "time":
        if k == '"':
            try:
                parse_time(node.value)
            except ValueError as e:
                ctx.errors.set(str(e))
                return existing
            return node.value
    elif kind == "slice":
        assert t.elem is not None
        if k == "n":
            return None
        if k == "[":
            old = existing if isinstance(existing, list) else []
            out = []
            for i, item in enumerate(node.value):
                prev = old[i] if i < len(old) else None
                out.append(_zero_or(_unmarshal(item, t.elem, prev, [*path, str(i)], ctx, raw), t.elem))
            return out
    elif kind == "map":
        assert t.elem is not None
        if k == "n":
            return None
        if k == "{":
            m = existing if isinstance(existing, dict) else {}
            for name, item in node.value:
                m[name] = _zero_or(
                    _unmarshal(item, t.elem, None, [*path, _ptr_token(name)], ctx, raw), t.elem
                )
            return m
    elif kind == "struct" and k == "{":
        obj = existing if isinstance(existing, dict) else {}
        for name, item in node.value:
            key = name if name in t.fields else t.folded.get(_fold(name))
            if key is None:
                if ctx.strict:
                    ctx.errors.set(f"json: unknown field {go_quote(name)}")
                continue
            v = _unmarshal(item, t.fields[key], obj.get(key), [*path, _ptr_token(name)], ctx, raw)
            if v is None:
                obj.pop(key, None)  # nil pointer/slice/map: same as absent
            else:
                obj[key] = v
        return obj
    ctx.type_error(path, _kind_word(node), t.name)
    return existing


def _zero_or(v: Any, t: GoType) -> Any:
    """Slice elements and map values exist even when null/failed: Go keeps the element's zero
    value (``nil`` only for pointer elements)."""
    if v is not None or t.kind == "ptr":
        return v
    if t.kind == "struct":
        return {}
    return {"string": "", "bool": False, "int": 0, "uint": 0}.get(t.kind)


def unmarshal(node: Node, t: GoType, existing: Any, raw: bytes, *, root: str, strict: bool = True) -> Any:
    """Decode ``node`` into Go type ``t`` (merging into ``existing``); raise the first error.

    ``root`` is the bare name of the top-level struct (``StreamConfigRequest``) used in
    ``Go struct field Root.path`` messages; ``strict`` rejects unknown members.
    """
    ctx = _Ctx(root, strict)
    out = _unmarshal(node, t, existing, [], ctx, raw)
    if ctx.errors.msg is not None:
        raise GoJSONError(ctx.errors.msg)
    return out


def decode_go(body: bytes, t: GoType, *, strict: bool = True, stream: bool = True) -> dict[str, Any]:
    """Decode a request body like nats-server does; return a dict of the members set.

    ``stream=True`` is ``unmarshalRequest`` (a ``json.Decoder`` loop: empty/whitespace input is
    fine, several values merge); ``stream=False`` is ``json.Unmarshal`` (exactly one value).
    Raises :class:`GoJSONError` with the exact Go text.
    """
    root = t.name.rpartition(".")[2]
    out: Any = {}
    pos = _skip_ws(body, 0)
    n = len(body)
    if not stream and pos >= n:
        raise GoJSONError("unexpected end of JSON input")
    while pos < n:
        c = body[pos]
        if c == 0x2C or c == 0x3A:
            raise _syntax_error(*_invalid_char(body, pos, "at start of value"))
        node = scan(body, pos)
        out = unmarshal(node, t, out, body, root=root, strict=strict)
        pos = _skip_ws(body, node.end)
        if not stream:
            if pos < n:
                raise _syntax_error(*_invalid_char(body, pos, "after top-level value"))
            break
    return out if isinstance(out, dict) else {}
