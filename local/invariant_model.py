"""Former home of the checker's vocabulary, now :mod:`local.invariants.model`.

Kept only for what ``bench/`` still imports from this path; new code imports
:mod:`local.invariants` and the event kinds from :mod:`streamlease.lease_events`.
"""

from local.invariants.model import Report
from streamlease.lease_events import LeaseEventKind

ACQUIRED = LeaseEventKind.ACQUIRED

__all__ = ["ACQUIRED", "Report"]
