"""Former home of the checker's inputs, now :mod:`local.invariants.inputs`.

Kept only for what ``bench/`` still imports from this path; new code imports
:class:`streamlease.lease_events.LeaseEvent` and the loaders from :mod:`local.invariants`.
"""

from streamlease.lease_events import LeaseEvent

__all__ = ["LeaseEvent"]
