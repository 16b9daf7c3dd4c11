"""Per-stream progress as the stream item carries it (pure; shared by the worker and the API).

A holder counts, for its holding (since ``lease_acquired_at_ms``): frames received, messages
delivered (acknowledged by the sink), frames that could not be delivered (malformed), sequence
gaps, and when the last delivered message was received. The worker writes them into the stream
item with its connection-state changes and otherwise at most every ``progress_seconds``, only
when they changed; an acquisition clears them, a release writes the final ones (they stay for
an operator looking at a stopped stream).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from streamlease.schema import StreamAttr


@dataclass(frozen=True, slots=True)
class Progress:
    """One holding's counters (see the module docstring)."""

    frames_received: int = 0
    frames_delivered: int = 0
    frames_malformed: int = 0
    seq_gaps: int = 0
    last_message_at_ms: int | None = None
    """Wall-clock epoch ms the last delivered message was received (None: none yet)."""

    def to_item(self) -> dict[str, int]:
        """The attributes to set on the stream item (``progress_at_ms`` is the writer's)."""
        item = {
            StreamAttr.FRAMES_RECEIVED: self.frames_received,
            StreamAttr.FRAMES_DELIVERED: self.frames_delivered,
            StreamAttr.FRAMES_MALFORMED: self.frames_malformed,
            StreamAttr.SEQ_GAPS: self.seq_gaps,
        }
        if self.last_message_at_ms is not None:
            item[StreamAttr.LAST_MESSAGE_AT_MS] = self.last_message_at_ms
        return item

    @classmethod
    def from_item(cls, item: Mapping[str, Any]) -> Progress | None:
        """The progress a stream item carries (None: never written for its holding)."""
        if StreamAttr.FRAMES_RECEIVED not in item:
            return None
        last = item.get(StreamAttr.LAST_MESSAGE_AT_MS)
        return cls(
            frames_received=int(item[StreamAttr.FRAMES_RECEIVED]),
            frames_delivered=int(item.get(StreamAttr.FRAMES_DELIVERED, 0)),
            frames_malformed=int(item.get(StreamAttr.FRAMES_MALFORMED, 0)),
            seq_gaps=int(item.get(StreamAttr.SEQ_GAPS, 0)),
            last_message_at_ms=None if last is None else int(last),
        )


PROGRESS_ATTRIBUTES: tuple[str, ...] = (
    StreamAttr.FRAMES_RECEIVED,
    StreamAttr.FRAMES_DELIVERED,
    StreamAttr.FRAMES_MALFORMED,
    StreamAttr.SEQ_GAPS,
    StreamAttr.LAST_MESSAGE_AT_MS,
    StreamAttr.PROGRESS_AT_MS,
)
"""Every progress attribute (what an acquisition removes)."""
