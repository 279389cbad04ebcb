"""Subject transforms (stream ``subject_transform`` and ``republish``).

Supports the mapping forms nats-server accepts for streams: ``$N`` (legacy) and
``{{wildcard(N)}}`` placeholders referring to the N-th wildcard token of the source pattern.
"""

from __future__ import annotations

import re

from jetlog.wire.subjects import FWC, PWC, matches

_WILDCARD = re.compile(r"^\{\{\s*wildcard\s*\(\s*(\d+)\s*\)\s*\}\}$", re.IGNORECASE)
_LEGACY = re.compile(r"^\$(\d+)$")


class TransformError(ValueError):
    """An invalid transform source or destination."""


class SubjectTransform:
    """Map subjects matching ``src`` onto ``dest``."""

    def __init__(self, src: str, dest: str) -> None:
        self.src = src
        self.dest = dest
        stoks = src.split(".")
        # Positions of wildcard tokens in the source, 1-based in placeholder numbering.
        self._wild_pos = [i for i, t in enumerate(stoks) if t in (PWC, FWC)]
        self._src_has_fwc = stoks[-1] == FWC
        self._plan: list[str | int] = []
        for tok in dest.split("."):
            m = _WILDCARD.match(tok) or _LEGACY.match(tok)
            if m:
                n = int(m.group(1))
                if n < 1 or n > len(self._wild_pos):
                    raise TransformError(f"invalid mapping destination: wildcard index {n} out of range")
                self._plan.append(n)
            elif tok.startswith("{{"):
                raise TransformError(f"invalid mapping destination: unsupported function {tok!r}")
            elif tok == FWC:
                self._plan.append(-1)
            else:
                self._plan.append(tok)

    def apply(self, subject: str) -> str | None:
        """The transformed subject, or None if ``subject`` does not match the source."""
        if not matches(self.src, subject):
            return None
        toks = subject.split(".")
        out: list[str] = []
        for item in self._plan:
            if isinstance(item, int):
                if item == -1:
                    out.extend(toks[len(self.src.split(".")) - 1 :])
                else:
                    pos = self._wild_pos[item - 1]
                    if self._src_has_fwc and pos == len(self.src.split(".")) - 1:
                        out.extend(toks[pos:])
                    else:
                        out.append(toks[pos])
            else:
                out.append(item)
        return ".".join(out)

    def apply_or_same(self, subject: str) -> str:
        """The transformed subject, or ``subject`` unchanged when it does not match."""
        r = self.apply(subject)
        return subject if r is None else r
