"""The project's small error tree. boto3's ``ClientError`` is translated where boto3 is called."""

from __future__ import annotations

from collections.abc import Sequence


class StreamleaseError(Exception):
    """Base of every error this project raises on purpose."""


class ConfigError(StreamleaseError):
    """A setting is missing, does not parse, or breaks a rule."""


class StoreError(StreamleaseError):
    """DynamoDB (or SQS) did not answer usefully: throttled, unreachable, timed out.

    The operation may or may not have taken effect; callers retry idempotent ones.
    """


class StreamNotFound(StreamleaseError):
    """No stream item with that id."""

    def __init__(self, stream_id: str) -> None:
        super().__init__(f"stream {stream_id!r} does not exist")
        self.stream_id = stream_id


class LeaseConflict(StreamleaseError):
    """An acquire lost: the stream is owned by someone else, stopped, or gone.

    ``write_may_land``: the acquire's own write got no answer and the conflict was read after
    it, so that write may still land later (what it would attach, such as a session's slot,
    must not be given to anything else meanwhile).
    """

    def __init__(self, stream_id: str, reason: str, *, write_may_land: bool = False) -> None:
        super().__init__(f"cannot acquire {stream_id!r}: {reason}")
        self.stream_id = stream_id
        self.reason = reason
        self.write_may_land = write_may_land


class LeaseLost(StreamleaseError):
    """A renew or release failed because the caller no longer owns the lease at that epoch.

    The holder must stop delivering at once and write nothing more for the stream.
    """

    def __init__(self, stream_id: str, epoch: int, reason: str) -> None:
        super().__init__(f"lease on {stream_id!r} at epoch {epoch} lost: {reason}")
        self.stream_id = stream_id
        self.epoch = epoch
        self.reason = reason


class StreamStopped(StreamleaseError):
    """A renew failed because the stream's desired state is STOPPED; the lease is still ours.

    The holder closes the upstream normally, writes a final checkpoint and releases.
    """

    def __init__(self, stream_id: str, epoch: int) -> None:
        super().__init__(f"stream {stream_id!r} was stopped (epoch {epoch} still held)")
        self.stream_id = stream_id
        self.epoch = epoch


class SessionExpired(StreamleaseError):
    """A worker's session is a tombstone (EXPIRED) or gone: it can never renew again.

    Every stream attached to it is lost; the worker writes nothing more under it and starts a
    new session under a new id.
    """

    def __init__(self, worker_id: str) -> None:
        super().__init__(f"session {worker_id!r} has expired")
        self.worker_id = worker_id


class WatermarkConflict(StreamleaseError):
    """A consumer's watermark write lost: the shard's stored watermarks are no longer the
    version this consumer read (another consumer wrote them, or this one is stale). The
    consumer re-opens the shard (reloading them) and processes its records again."""

    def __init__(self, shard_id: str, expected: int, found: int | None) -> None:
        super().__init__(f"watermarks of shard {shard_id!r} are at version {found}, not {expected}")
        self.shard_id = shard_id
        self.expected = expected
        self.found = found


class StateConflict(StreamleaseError):
    """A control-plane change cannot be made in the item's current state (HTTP 409)."""


class UpstreamRejected(StreamleaseError):
    """The upstream refused the stream for good (4xx at handshake, policy violation)."""


class SinkError(StreamleaseError):
    """A sink could not write records, after its own retries. Some records may have landed.

    ``unsent``: the records of the call that were *not* stored, when the sink knows (the caller
    retries only those, so a retry repeats nothing); None means any of them may be missing.
    """

    def __init__(self, message: str, unsent: Sequence[object] | None = None) -> None:
        super().__init__(message)
        self.unsent = unsent


class SinkDeadlinePassed(SinkError):
    """A sink stopped before sending (more of) a call's records: the holder's fencing deadline
    passed. Nothing is sent after it; ``unsent`` says what was not stored."""


class SourceError(StreamleaseError):
    """A Kinesis stream could not be read: it does not exist, access was refused, no
    credentials were found, or it did not answer. ``code`` is AWS's error code
    (``ResourceNotFoundException``, ``AccessDeniedException``, ...), ``NoCredentials`` or
    ``Unreachable``; ``stream_name`` the stream."""

    def __init__(self, message: str, *, code: str, stream_name: str) -> None:
        super().__init__(message)
        self.code = code
        self.stream_name = stream_name


class UrlRejected(StreamleaseError):
    """An upstream URL breaks the URL policy. ``field`` names the part at fault."""

    def __init__(self, message: str, field: str = "ws_url") -> None:
        super().__init__(message)
        self.field = field
