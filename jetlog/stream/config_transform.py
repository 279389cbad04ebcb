"""Subject transform validation with nats-server's error texts (``ValidateMapping`` and
``NewSubjectTransform`` of ``server/subject_transform.go`` / ``sublist.go``), used by the stream
config check for ``subject_transform`` (``10155``/``10156``) and ``republish``.

Only validation; the placeholder parser and the transform itself (which performs exactly the
``NewSubjectTransform`` checks when built) live in :mod:`jetlog.wire.transform`.
"""

from __future__ import annotations

from jetlog.wire.transform import (
    FUNCTIONS,
    INVALID_TRANSFORM,
    UNKNOWN_FUNCTION,
    SubjectTransform,
    TransformError,
)

__all__ = ["subject_transform_error", "validate_mapping"]


def subject_transform_error(src: str, dest: str) -> str | None:
    """``NewSubjectTransform(src, dest)``: ``None`` if valid, else Go's error text."""
    if not dest:
        return None
    try:
        SubjectTransform(src, dest)
    except TransformError as e:
        return str(e)
    return None


def validate_mapping(src: str, dest: str) -> str | None:
    """``ValidateMapping(src, dest)``: ``None`` if valid, else Go's error text."""
    if not dest:
        return None
    fwc = False
    for t in dest.split("."):
        if not t or fwc:
            # Go's mappingDestinationErr{t, ...}: " in <token>" unless the token is empty.
            return f"{INVALID_TRANSFORM} in {t}" if t else INVALID_TRANSFORM
        if len(t) > 4 and t.startswith("{{") and t.endswith("}}"):
            if not any(rx.search(t) for rx in FUNCTIONS.values()):
                return f"{UNKNOWN_FUNCTION} in {t}"
            continue
        if t == ">":
            fwc = True
        elif any(c in t for c in "\t\n\f\r "):
            return INVALID_TRANSFORM
    return subject_transform_error(src, dest)
