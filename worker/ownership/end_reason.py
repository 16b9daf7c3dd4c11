"""Why a holder stops holding its stream, and which reasons are graceful."""

from __future__ import annotations

from enum import StrEnum
from typing import Final


class EndReason(StrEnum):
    """Why a holder stops holding its stream."""

    STOPPED = "stopped"
    """desired_state became STOPPED: close 1000, final checkpoint, release, no handoff."""
    SHED = "shed"
    """The rebalancer gives it away: final checkpoint, release, handoff, close 1001."""
    SHUTDOWN = "shutdown"
    """The worker is draining: as SHED."""
    ENDED = "ended"
    """The upstream finished the stream (close 1000): release it STOPPED, no handoff."""
    FAILED = "failed"
    """An unexpected error in the holder: release with ``last_error``, then a handoff."""
    LOST = "lost"
    """DynamoDB says the lease (or the session) is not ours: stop at once, write nothing more."""
    FENCED = "fenced"
    """A per-stream lease's fencing deadline passed without a renewal: stop at once."""


GRACEFUL: Final = frozenset(
    {EndReason.STOPPED, EndReason.SHED, EndReason.SHUTDOWN, EndReason.ENDED, EndReason.FAILED}
)
GIVEN_AWAY: Final = frozenset({EndReason.SHED, EndReason.SHUTDOWN})
"""Ends after which this worker leaves the stream to others for a while."""
PRIORITY: Final = {
    EndReason.SHED: 0,
    EndReason.SHUTDOWN: 1,
    EndReason.FAILED: 2,
    EndReason.ENDED: 3,
    EndReason.STOPPED: 3,
    EndReason.FENCED: 4,
    EndReason.LOST: 4,
}
"""A later end request replaces an earlier one only with a higher priority: losing the lease
during a graceful drain stops the drain; a second abrupt reason changes nothing."""
