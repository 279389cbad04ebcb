"""A stream's limits: ``max_msgs``, ``max_bytes`` and ``max_msgs_per_subject``. With discard
new a store that would exceed one is refused (with nats-server's errors) before it happens;
with discard old the oldest messages go after it. ``enforce_limits`` applies them all, ``max_age``
included, at start and after an update lowered them. :class:`StreamLimits` is a base class of
``jetlog.stream.stream.Stream``.
"""

from __future__ import annotations

from jetlog.errors import E
from jetlog.stream.expiry import StreamExpiry
from jetlog.wire import headers as H


class StreamLimits(StreamExpiry):
    """Limits of a stream (the state used is declared on :class:`StreamExpiry`)."""

    def _check_discard_new(self, subject: str, hdr: bytes, data: bytes) -> None:
        p, store = self.policy, self.store
        at_subject_limit = False
        ss = None
        if p.max_msgs_per_subject > 0:
            ss = store.subject_state(subject)
            at_subject_limit = ss is not None and ss.msgs >= p.max_msgs_per_subject
        if at_subject_limit and p.discard_new_per_subject and H.get(hdr, H.ROLLUP) is None:
            raise E.STREAM_STORE_FAILED(err="maximum messages per subject exceeded")
        if p.max_msgs > 0 and store.msgs >= p.max_msgs and not at_subject_limit:
            raise E.STREAM_STORE_FAILED(err="maximum messages exceeded")
        if p.max_bytes > 0:
            size = self._size_of(subject, hdr, data)
            if store.bytes + size > p.max_bytes:
                if not at_subject_limit or ss is None:
                    raise E.STREAM_STORE_FAILED(err="maximum bytes exceeded")
                # At the per-subject limit the oldest of this subject will be replaced: allowed
                # only if it frees at least as many bytes as the new message takes.
                if store.msg_size(ss.first) < size:
                    raise E.STREAM_STORE_FAILED(err="maximum bytes exceeded")

    def _size_of(self, subject: str, hdr: bytes, data: bytes) -> int:
        if self.policy.memory:
            return len(subject) + len(hdr) + len(data) + 16
        size = 22 + len(subject) + len(data) + 8
        if hdr:
            size += 4 + len(hdr)
        return size

    def _enforce_after_store(self, subject: str) -> None:
        p, store = self.policy, self.store
        if p.max_msgs_per_subject > 0:
            ss = store.subject_state(subject)
            while ss is not None and ss.msgs > p.max_msgs_per_subject:
                if not store.remove(ss.first):
                    break
                ss = store.subject_state(subject)
        if not p.discard_new:
            if p.max_msgs > 0:
                while store.msgs > p.max_msgs and store.remove(store.first_seq):
                    pass
            if p.max_bytes > 0:
                while store.bytes > p.max_bytes and store.remove(store.first_seq):
                    pass

    def enforce_limits(self) -> None:
        """Bring the stream within its limits (after an update lowered them, or at start)."""
        p, store = self.policy, self.store
        if p.max_msgs_per_subject > 0:
            for subj, ss in store.subjects_state(None).items():
                extra = ss.msgs - p.max_msgs_per_subject
                if extra > 0:
                    store.purge(subj, keep=p.max_msgs_per_subject)
        if p.max_msgs > 0 and store.msgs > p.max_msgs:
            store.purge(None, keep=p.max_msgs)
        if p.max_bytes > 0:
            while store.bytes > p.max_bytes and store.remove(store.first_seq):
                pass
        if p.max_age > 0:
            self._expire_age(self.clock())
