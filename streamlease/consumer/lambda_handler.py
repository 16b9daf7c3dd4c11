"""A Lambda consumer of the sink stream: :func:`make_handler` turns a function of one
:class:`ConsumedMessage` into a handler for a Kinesis event source mapping.

Per invocation (one batch of one shard: ``parallelization_factor`` 1):

1. the shard's watermarks are loaded from the watermark table (:class:`DynamoWatermarks`,
   ``watermark_table_name``); a shard never written starts from its parents' (found once per
   container with ``ListShards``), as after a reshard;
2. Powertools' :class:`BatchProcessor` walks the records in order; each record is processed
   (:meth:`Consumer.process`: repeats and stale epochs dropped) and its messages go to
   ``on_message``. A record that is not the sink's (corrupt, cut, another producer's) is
   reported as a batch item failure — never dropped in silence: Lambda retries from it, then
   bisects and sends the batch's description to the on-failure destination. If ``on_message``
   raises, that record and every later record of its shard are reported: the shard stops
   there, so no stream's messages are handed on out of order;
3. the watermarks are committed, one write, **before** the response is returned: as of the
   last record whose messages were all handed on.

So each message reaches ``on_message`` once, in order, of the newest epoch — at least once when
a commit fails after ``on_message`` ran, or ``on_message`` fails midway through a record's
messages (its batch is retried and the messages before are handed on again). Payloads are
never logged.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.utilities.batch import (
    BatchProcessor,
    EventType,
    process_partial_response,
)
from aws_lambda_powertools.utilities.data_classes.kinesis_stream_event import KinesisStreamRecord

from streamlease import aws
from streamlease.consumer import (
    ConsumedMessage,
    Consumer,
    DynamoWatermarks,
    ProcessedBatch,
    SourceRecord,
)
from streamlease.consumer.records import HashRange, listed_shard
from streamlease.errors import ConfigError, SourceError, StreamleaseError
from streamlease.settings import Settings, env_name
from streamlease.telemetry import CONSUMER_SERVICE

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext
    from types_boto3_dynamodb import DynamoDBClient
    from types_boto3_kinesis import KinesisClient

Handler = Callable[[dict[str, Any], "LambdaContext"], Mapping[str, Any]]

logger = Logger(service=CONSUMER_SERVICE)


class UnreadableRecord(StreamleaseError):
    """A record of the batch is not (wholly) what the sink writes: reported, never dropped."""


class ShardStopped(StreamleaseError):
    """An earlier record of this shard was refused by ``on_message``: this one waits for the
    retry, so the shard's order holds."""


def make_handler(
    on_message: Callable[[ConsumedMessage], None],
    *,
    table_name: str | None = None,
    namespace: str | None = None,
    settings: Settings | None = None,
) -> Handler:
    """A Lambda handler for a Kinesis event source mapping on the sink stream that hands each
    message to ``on_message`` (see the module docstring).

    Watermarks go to ``table_name`` (default: the ``watermark_table_name`` setting) under
    ``namespace`` (default: ``consumer/<stream name>``; a second application reading the same
    stream needs its own). ``settings`` default to the environment's, read on the first
    invocation, when the clients are made too; a missing table name is a
    :class:`ConfigError` then."""
    shared = _Shared(on_message, table_name, namespace, settings)

    def handler(event: dict[str, Any], context: LambdaContext) -> Mapping[str, Any]:
        run = _Invocation(shared)
        processor = BatchProcessor(event_type=EventType.KinesisDataStreams)
        try:
            return process_partial_response(
                event=event, record_handler=run.record, processor=processor, context=context
            )
        finally:
            run.commit()  # before the response (or the error) leaves

    return handler


@dataclass
class _Shared:
    """What a container keeps between invocations: settings, clients, stores, shard parents."""

    on_message: Callable[[ConsumedMessage], None]
    table_name: str | None
    namespace: str | None
    settings: Settings | None
    stores: dict[str, DynamoWatermarks] = field(default_factory=dict)
    shards: dict[str, tuple[tuple[str, ...], HashRange]] = field(default_factory=dict)
    """Shard → the shards it was split or merged from, and its hash key range."""
    _dynamodb: DynamoDBClient | None = None
    _kinesis: KinesisClient | None = None

    def store(self, stream_arn: str) -> DynamoWatermarks:
        """The watermark store of the stream ``stream_arn`` names."""
        if stream_arn not in self.stores:
            settings = self._settings()
            table = self.table_name or settings.watermark_table_name
            if not table:
                raise ConfigError(f"the consumer needs {env_name('watermark_table_name')}")
            if self._dynamodb is None:
                self._dynamodb = aws.client("dynamodb", settings)
            space = self.namespace or f"consumer/{_stream_name(stream_arn)}"
            self.stores[stream_arn] = DynamoWatermarks(self._dynamodb, table, space)
        return self.stores[stream_arn]

    def lineage(self, stream_arn: str, shard_id: str) -> tuple[tuple[str, ...], HashRange | None]:
        """The shards ``shard_id`` was split or merged from and its hash key range (a
        ``ListShards`` of the stream when the shard is new to this container; a shard not
        listed: none and None). Raises :class:`SourceError`."""
        if shard_id not in self.shards:
            if self._kinesis is None:
                self._kinesis = aws.client("kinesis", self._settings())
            self.shards.update(_list_shards(self._kinesis, stream_arn))
        return self.shards.get(shard_id, ((), None))

    def _settings(self) -> Settings:
        if self.settings is None:
            self.settings = Settings.from_env()
        return self.settings


def _stream_name(stream_arn: str) -> str:
    """``arn:aws:kinesis:REGION:ACCOUNT:stream/NAME`` → ``NAME``."""
    return stream_arn.rsplit("/", 1)[-1]


def _list_shards(
    kinesis: KinesisClient, stream_arn: str
) -> dict[str, tuple[tuple[str, ...], HashRange]]:
    from botocore.exceptions import BotoCoreError, ClientError

    found: dict[str, tuple[tuple[str, ...], HashRange]] = {}
    token: str | None = None
    try:
        while True:
            page = (
                kinesis.list_shards(NextToken=token)
                if token
                else kinesis.list_shards(StreamARN=stream_arn)
            )
            for shard in page.get("Shards", []):
                found[shard["ShardId"]] = listed_shard(shard)
            token = page.get("NextToken")
            if not token:
                return found
    except (ClientError, BotoCoreError) as exc:
        raise SourceError(
            f"cannot list the shards of {stream_arn}: {exc}",
            code="ListShards",
            stream_name=_stream_name(stream_arn),
        ) from None


@dataclass
class _Invocation:
    """One event: records processed and handed on one by one, in order."""

    shared: _Shared
    consumer: Consumer | None = None
    handed_on: dict[str, ProcessedBatch] = field(default_factory=dict)
    """Shard → the batch of its last record whose messages were all handed on."""
    stopped: set[str] = field(default_factory=set)
    opened: set[str] = field(default_factory=set)

    def record(self, record: KinesisStreamRecord) -> None:
        """Powertools' record handler: hand on this record's messages, or raise to report it."""
        source = SourceRecord.from_lambda(record.raw_event)
        shard_id = source.shard_id
        if shard_id in self.stopped:
            raise ShardStopped(f"{shard_id}: waits for the retry of an earlier record")
        if self.consumer is None:
            self.consumer = Consumer(self.shared.store(record.event_source_arn))
        if shard_id not in self.opened:
            self.consumer.open_shard(
                shard_id, *self.shared.lineage(record.event_source_arn, shard_id)
            )
            self.opened.add(shard_id)
        batch = self.consumer.process(shard_id, [source])
        try:
            for message in batch.messages:
                self.shared.on_message(message)
        except Exception:
            self.stopped.add(shard_id)
            raise
        self.handed_on[shard_id] = batch
        if batch.problems:
            for problem in batch.problems:
                logger.warning(
                    "unreadable record",
                    extra={
                        "shard_id": problem.shard_id,
                        "sequence_number": problem.sequence_number,
                        "kind": problem.kind,
                        "detail": problem.detail,
                    },
                )
            kinds = ", ".join(sorted({str(p.kind) for p in batch.problems}))
            raise UnreadableRecord(f"{shard_id} {source.sequence_number}: {kinds}")

    def commit(self) -> None:
        """One watermark write per shard, as of its last record handed on whole."""
        if self.consumer is None:
            return
        for batch in self.handed_on.values():
            self.consumer.commit(batch)
