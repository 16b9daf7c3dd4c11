"""Former home of the checker's vocabulary, now :mod:`local.invariants.model`.

Kept only so that code importing the old path (``bench/``) runs on; new code imports
:mod:`local.invariants` and the event kinds from :mod:`streamlease.lease_events`.
"""

from local.invariants.model import (
    EXITED,
    EXPIRED,
    Overlap,
    Report,
    Segment,
    SeqGap,
    StreamReport,
    Takeover,
    Window,
)
from streamlease.lease_events import TERMINAL_KINDS, LeaseEventKind

ACQUIRED = LeaseEventKind.ACQUIRED
RENEWED = LeaseEventKind.RENEWED
SESSION_RENEWED = LeaseEventKind.SESSION_RENEWED
TERMINAL_EVENTS = TERMINAL_KINDS

__all__ = [
    "ACQUIRED",
    "EXITED",
    "EXPIRED",
    "RENEWED",
    "SESSION_RENEWED",
    "TERMINAL_EVENTS",
    "Overlap",
    "Report",
    "Segment",
    "SeqGap",
    "StreamReport",
    "Takeover",
    "Window",
]
