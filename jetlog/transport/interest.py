"""The hub's subscription interest as a leaf link sees it (``LS+``/``LS-``).

jetlog needs it to know whether a push consumer's deliver subject or a pull request's inbox is
still listened to, and for ephemeral consumer cleanup. The view is rebuilt from scratch on each
(re)connect: the hub re-announces everything between our CONNECT and its PONG, and at that PONG
the new view replaces the old one so listeners see only the net difference.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable

from jetlog.wire.subjects import Sublist

log = logging.getLogger("jetlog.transport.leaf")

InterestListener = Callable[[str, str, str | None], None]
"""``cb(event, subject, queue)`` with event ``"+"`` or ``"-"``."""

# Hub subscriptions that are not application interest: loop detection, system services,
# gateway reply routing. Tracked separately and never reported to listeners.
HIDDEN_PREFIXES = ("$LDS.", "$SYS.", "_GR_.", "$GR.")


class InterestView:
    """(subject, queue) -> weight as announced by the hub, with wildcard matching."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._interest: dict[tuple[str, str | None], int] = {}
        self._interest_sl: Sublist[str | None] = Sublist()
        self._hidden: dict[tuple[str, str | None], int] = {}
        self._staging: dict[tuple[str, str | None], int] | None = None
        self._listeners: list[InterestListener] = []

    def begin_rebuild(self) -> None:
        """Start collecting a fresh view (a new connection's CONNECT was sent)."""
        self._staging = {}

    def abort_rebuild(self) -> None:
        """The handshake failed: keep the old view."""
        self._staging = None

    def finish_rebuild(self) -> None:
        """The handshake PONG arrived: swap in the collected view."""
        staged = self._staging or {}
        self._staging = None
        self._replace(staged)

    def add(self, subject: str, queue: str | None, weight: int) -> None:
        key = (subject, queue)
        if self._staging is not None:
            self._staging[key] = weight
            return
        if subject.startswith(HIDDEN_PREFIXES):
            self._hidden[key] = weight
            return
        new = key not in self._interest
        self._interest[key] = weight  # a repeated LS+ on a queue key updates its weight
        if new:
            self._interest_sl.insert(subject, queue)
            self._notify("+", subject, queue)

    def remove(self, subject: str, queue: str | None) -> None:
        key = (subject, queue)
        if self._staging is not None:
            self._staging.pop(key, None)
            return
        if self._hidden.pop(key, None) is not None:
            return
        if self._interest.pop(key, None) is not None:
            self._interest_sl.remove(subject, queue)
            self._notify("-", subject, queue)

    def _replace(self, staged: dict[tuple[str, str | None], int]) -> None:
        old = self._interest
        self._hidden = {}
        new: dict[tuple[str, str | None], int] = {}
        for key, w in staged.items():
            if key[0].startswith(HIDDEN_PREFIXES):
                self._hidden[key] = w
            else:
                new[key] = w
        sl: Sublist[str | None] = Sublist()
        for subject, queue in new:
            sl.insert(subject, queue)
        self._interest, self._interest_sl = new, sl
        for subject, queue in old.keys() - new.keys():
            self._notify("-", subject, queue)
        for subject, queue in new.keys() - old.keys():
            self._notify("+", subject, queue)

    def _notify(self, event: str, subject: str, queue: str | None) -> None:
        for cb in list(self._listeners):
            try:
                cb(event, subject, queue)
            except Exception:
                log.exception("leaf link %s: interest listener failed", self.name)

    def has_interest(self, subject: str) -> bool:
        """True if some hub subscription (plain or queue) matches the literal ``subject``."""
        return bool(self._interest_sl.match(subject))

    def queue_groups(self, subject: str) -> set[str]:
        """Queue groups on the hub with a subscription matching the literal ``subject``."""
        return {q for q in self._interest_sl.match(subject) if q is not None}

    def queue_weight(self, subject: str, queue: str) -> int:
        """The hub-announced member count of ``queue`` on exactly the subscription ``subject``."""
        return self._interest.get((subject, queue), 0)

    def snapshot(self) -> dict[tuple[str, str | None], int]:
        """Snapshot of the hub's application interest: (subject, queue) -> weight (1 for plain)."""
        return dict(self._interest)

    def add_listener(self, cb: InterestListener) -> Callable[[], None]:
        """Call ``cb("+"|"-", subject, queue)`` when a hub subscription key appears or goes.

        Queue weight changes do not fire events (see :meth:`queue_weight`). Returns a function
        that removes the listener.
        """
        self._listeners.append(cb)

        def remove() -> None:
            with contextlib.suppress(ValueError):
                self._listeners.remove(cb)

        return remove
