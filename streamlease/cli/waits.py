"""``--wait``: the streams still held after their calls, looked at together until each holder
lets go of its stream (``stop --wait``, ``rm --wait``).

Every request goes first; then each round looks once at every stream still held, a few calls
at a time, and the rounds repeat every ``poll_seconds`` until each stream is settled or its own
``--wait-timeout`` has passed. A stream waited for never holds back the others.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator
from dataclasses import dataclass, replace
from typing import Any, Final

from streamlease.cli.batch import Outcome, Target, run_all
from streamlease.cli.client import ApiClient, ApiError
from streamlease.cli.render import worker_name
from streamlease.cli.signing import CredentialsMissing
from streamlease.cli.transport import TransportError
from streamlease.errors import StreamleaseError

FAILED: Final = "failed"
"""The verb of an outcome that carries an error."""
DEFAULT_WAIT_SECONDS: Final = 60.0
WAIT_POLL_SECONDS: Final = 0.5


class WaitTimedOut(StreamleaseError):
    """``--wait`` gave up: the stream's holder had not let go of it in time."""


@dataclass(frozen=True)
class Waiting:
    """``--wait``: how long to wait for each stream's holder to let go of it, and how often to
    look (seconds). ``sleep`` and ``clock`` (monotonic seconds) are seams for tests."""

    timeout_seconds: float = DEFAULT_WAIT_SECONDS
    poll_seconds: float = WAIT_POLL_SECONDS
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic


Settle = Callable[
    [ApiClient, Target, str, dict[str, Any] | None], tuple[str, dict[str, Any] | None]
]
"""One look at a target after its call under ``--wait``, given the verb and stream so far:
the final (verb, stream), or :data:`RELEASING` and the stream as read when not yet."""

RELEASING: Final = "releasing"
"""The verb of a stream whose holder has not let go of it yet (``--wait`` looks again)."""


def settled(
    settle: Settle,
    client: ApiClient,
    pending: list[tuple[Outcome, float]],
    concurrency: int,
    waiting: Waiting,
) -> Generator[Outcome, None, None]:
    """The outcomes of ``pending`` (each with its deadline, monotonic seconds) as each is
    settled; one look at every stream per round, a round at most every ``poll_seconds``."""
    deadlines = {id(o.target): d for o, d in pending}
    latest = {id(o.target): o for o, _ in pending}

    def look(target: Target) -> Outcome:
        last = latest[id(target)]
        try:
            verb, stream = settle(client, target, last.verb, last.stream)
        except (ApiError, TransportError, CredentialsMissing) as exc:
            return Outcome(target, FAILED, error=exc)
        return Outcome(target, verb, stream)

    waiting_for = [o.target for o, _ in pending]
    while waiting_for:
        round_started = waiting.clock()
        still: list[Target] = []
        looks = run_all(waiting_for, look, concurrency=concurrency)
        try:
            for outcome in looks:
                if outcome.error is None and outcome.verb == RELEASING:
                    latest[id(outcome.target)] = replace(
                        latest[id(outcome.target)], stream=outcome.stream
                    )
                    still.append(outcome.target)
                else:
                    yield outcome
        finally:
            looks.close()
        now = waiting.clock()
        waiting_for = []
        for target in still:
            if now >= deadlines[id(target)]:
                timed_out = _still_held(target.id, latest[id(target)].stream, waiting)
                yield Outcome(target, FAILED, error=timed_out)
            else:
                waiting_for.append(target)
        if waiting_for:
            waiting.sleep(max(0.0, waiting.poll_seconds - (waiting.clock() - round_started)))


def _still_held(stream_id: str, stream: dict[str, Any] | None, waiting: Waiting) -> WaitTimedOut:
    owner = (stream or {}).get("owner")
    return WaitTimedOut(
        f"{stream_id} is still held by {worker_name(owner)} after "
        f"{waiting.timeout_seconds:g} s (--wait-timeout)"
    )
