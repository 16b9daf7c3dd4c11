"""Former home of the checker's inputs, now :mod:`local.invariants.inputs`.

Kept only so that code importing the old path (``bench/``) runs on; new code imports
:mod:`local.invariants` and :class:`streamlease.lease_events.LeaseEvent`.
"""

from local.invariants.inputs import SinkRecord, load_events, load_records
from streamlease.lease_events import LeaseEvent

__all__ = ["LeaseEvent", "SinkRecord", "load_events", "load_records"]
