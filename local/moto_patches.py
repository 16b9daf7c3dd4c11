"""moto's backends patched to behave as AWS does where the lease protocol and the sinks need it.

The SQS backend's methods run one at a time, with the long-poll wait outside the lock; Kinesis
splits a shard as Kinesis does (the parent keeps its records and takes no new ones); moto stops
recording every model instance it makes. :mod:`local.moto_server` applies them before serving.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any


class _ReleasableLock:
    """A re-entrant lock whose holder can step out of it entirely for a while (the SQS wait)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._local = threading.local()

    def __enter__(self) -> None:
        depth = getattr(self._local, "depth", 0)
        if depth == 0:
            self._lock.acquire()
        self._local.depth = depth + 1

    def __exit__(self, *exc: object) -> None:
        self._local.depth -= 1
        if self._local.depth == 0:
            self._lock.release()

    @contextlib.contextmanager
    def released(self) -> Iterator[None]:
        """Give the lock up completely (whatever the nesting) and take it back afterwards."""
        depth = getattr(self._local, "depth", 0)
        if depth == 0:
            yield
            return
        self._local.depth = 0
        self._lock.release()
        try:
            yield
        finally:
            self._lock.acquire()
            self._local.depth = depth


def serialise_sqs_backend() -> None:
    """Make every public ``SQSBackend`` method run under one lock, except the long-poll wait.

    moto's ``receive_message`` loops "scan visible messages, mark them received, else
    ``queue.wait_for_messages(1)``"; two unlocked scans deliver the same message twice. The
    wait itself is moved outside the lock so a long poll does not block other SQS callers.
    Idempotent.
    """
    from moto.sqs import models

    if getattr(models.SQSBackend, "_streamlease_serialised", False):
        return
    lock = _ReleasableLock()

    def locked(method: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            with lock:
                return method(*args, **kwargs)

        call.__name__ = method.__name__
        call.__doc__ = method.__doc__
        return call

    for name, member in list(vars(models.SQSBackend).items()):
        if not name.startswith("_") and inspect.isfunction(member):
            setattr(models.SQSBackend, name, locked(member))

    original_wait = models.Queue.wait_for_messages

    def wait_for_messages(self: Any, timeout: int) -> None:
        with lock.released():
            original_wait(self, timeout)

    models.Queue.wait_for_messages = wait_for_messages  # type: ignore[method-assign]
    models.SQSBackend._streamlease_serialised = True  # type: ignore[attr-defined]


def reshard_as_kinesis_does() -> None:
    """Make ``SplitShard`` behave as Kinesis: the parent keeps its records and takes no more,
    new records go to the open child whose range holds their key, and the parent's last read
    answers no next iterator.

    moto 5 (up to 5.2.5 at least) routes every record to the first shard whose range holds its
    key, closed or not, so after a split every write still lands on the closed parent, and the
    split itself re-puts the parent's records (renumbered, through that same routing). A
    reader's "finish the parent before its children" and a writer's "the record landed on
    another shard than packed for" can then never be exercised. Idempotent.
    """
    from moto.kinesis import models
    from moto.kinesis.utils import decompose_shard_iterator

    if getattr(models.Stream, "_streamlease_resharding", False):
        return
    original_route = models.Stream.get_shard_for_key
    original_split = models.Stream.split_shard

    def get_shard_for_key(self: Any, partition_key: str, explicit_hash_key: str) -> Any:
        shard = original_route(self, partition_key, explicit_hash_key)
        if shard is None or shard.is_open:
            return shard
        key = int(explicit_hash_key) if explicit_hash_key else _md5_key(partition_key)
        for candidate in self.shards.values():
            if candidate.is_open and candidate.starting_hash <= key <= candidate.ending_hash:
                return candidate
        return shard

    def split_shard(self: Any, shard_to_split: str, new_starting_hash_key: str) -> None:
        parent = self.shards.get(shard_to_split)
        if parent is None:
            original_split(self, shard_to_split, new_starting_hash_key)  # its own error
            return
        kept = parent.records
        parent.records = OrderedDict()  # nothing for the split to move
        try:
            original_split(self, shard_to_split, new_starting_hash_key)
        finally:
            parent.records = kept

    original_get_records = models.KinesisBackend.get_records

    def get_records(self: Any, stream_arn: Any, shard_iterator: str, limit: Any) -> Any:
        """A closed shard read to its end answers no next iterator (a reader then knows it
        may read the children)."""
        following, records, behind = original_get_records(self, stream_arn, shard_iterator, limit)
        stream_name, shard_id, last = decompose_shard_iterator(following)
        shard = self.describe_stream(stream_arn=stream_arn, stream_name=stream_name).get_shard(
            shard_id
        )
        if not shard.is_open and int(last) >= shard.get_max_sequence_number():
            return None, records, behind
        return following, records, behind

    models.Stream.get_shard_for_key = get_shard_for_key  # type: ignore[method-assign]
    models.Stream.split_shard = split_shard  # type: ignore[method-assign]
    models.KinesisBackend.get_records = get_records  # type: ignore[method-assign]
    models.Stream._streamlease_resharding = True  # type: ignore[attr-defined]


def _md5_key(partition_key: str) -> int:
    """The hash key Kinesis gives ``partition_key``: its MD5 as a 128-bit number."""
    return int.from_bytes(hashlib.md5(partition_key.encode()).digest(), "big")  # noqa: S324


def stop_tracking_model_instances() -> None:
    """Stop moto from keeping every model object it ever made, so the server's memory stays flat.

    moto's ``BaseModel.__new__`` appends each new instance to a list on its class, for its own
    dashboard (``/moto-api/``) and nothing else we use, and never prunes it. Every DynamoDB
    ``Item`` counts, including the deep copy a ``Query`` makes of each item it answers with: a
    local stack with 45 streams grew by about 5 MB a minute, all of it query answers nobody
    could reach any more. Instances are still made the same way, only not recorded. Idempotent.
    """
    from moto.core.common_models import BaseModel
    from moto.core.model_instances import reset_model_data

    def untracked(cls: type[Any], *args: Any, **kwargs: Any) -> Any:
        return super(BaseModel, cls).__new__(cls)

    BaseModel.__new__ = staticmethod(untracked)  # type: ignore[method-assign]
    reset_model_data()
