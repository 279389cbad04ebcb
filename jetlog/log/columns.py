"""Index columns that may be views of a mapped index file.

An index's per-message columns are ``array``s, or, for entries recovered from an index file,
read-only ``memoryview``s of its mapping (``idxfile.map_idx``): they index, slice, bisect,
compress and sum alike, but cannot grow and ``array.extend`` takes them an element at a time.
These two helpers are what code that copies or grows columns uses.
"""

from __future__ import annotations

from array import array
from typing import Any


def owned(col: array[Any], typecode: str) -> array[Any]:
    """``col`` itself if it is an array, else (a view of a mapped index file) a copy."""
    if isinstance(col, memoryview):
        a = array(typecode)
        a.frombytes(col.cast("B"))
        return a
    return col


def extend_col(dst: array[Any], src: array[Any]) -> None:
    """``dst.extend(src)`` with one copy whether ``src`` is an array or a mapped view."""
    if isinstance(src, memoryview):
        dst.frombytes(src.cast("B"))
    else:
        dst.extend(src)


def own_columns(obj: Any, spec: tuple[tuple[str, str], ...]) -> None:
    """Make each column ``name`` (of typecode ``tc``) of ``obj`` an array it owns (``owned``)."""
    for name, tc in spec:
        setattr(obj, name, owned(getattr(obj, name), tc))


_CHUNK = 1 << 15


def one_value(col: array[Any]) -> bool:
    """True if every entry of the non-empty ``col`` equals its first: byte comparisons, for
    arrays and mapped views alike (``array.count`` compares an int per entry; views have no
    ``count``). In chunks: two copies of a whole 100k-entry column cost more in fresh pages
    than in comparing."""
    step = _CHUNK // col.itemsize
    n = len(col)
    pat = col[:1].tobytes() * min(n, step)
    for c in range(0, n, step):
        part = col[c : c + step].tobytes()
        if part != (pat if len(part) == len(pat) else pat[: len(part)]):
            return False
    return True
