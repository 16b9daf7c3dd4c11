"""The project's small error tree. boto3's ``ClientError`` is translated where boto3 is called."""

from __future__ import annotations


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
    """An acquire lost: the stream is owned by someone else, stopped, or gone."""

    def __init__(self, stream_id: str, reason: str) -> None:
        super().__init__(f"cannot acquire {stream_id!r}: {reason}")
        self.stream_id = stream_id
        self.reason = reason


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


class StateConflict(StreamleaseError):
    """A control-plane change cannot be made in the item's current state (HTTP 409)."""


class UpstreamRejected(StreamleaseError):
    """The upstream refused the stream for good (4xx at handshake, policy violation)."""


class SinkError(StreamleaseError):
    """A sink could not write records, after its own retries. Some records may have landed."""


class UrlRejected(StreamleaseError):
    """An upstream URL breaks the URL policy. ``field`` names the part at fault."""

    def __init__(self, message: str, field: str = "ws_url") -> None:
        super().__init__(message)
        self.field = field
