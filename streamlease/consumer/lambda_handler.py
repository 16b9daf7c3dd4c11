"""A Lambda consumer of the sink stream: :func:`make_handler` turns a function of one
:class:`ConsumedMessage` into a handler for a Kinesis event source mapping.

Per invocation (one batch of one shard, ``parallelization_factor`` 1):

1. the shard's watermarks are loaded (and its parents', for a shard not seen before) from the
   watermark table (:class:`DynamoWatermarks`, ``watermark_table_name``);
2. the batch is processed at once (:meth:`Consumer.process`): repeats and stale epochs dropped;
3. Powertools' :class:`BatchProcessor` walks the records in order: each record's messages go to
   ``on_message``. A record that is not the sink's (corrupt, another producer's) is reported as
   a batch item failure, never dropped in silence: Lambda retries from it, then bisects and
   sends the batch's description to the on-failure destination. If ``on_message`` raises, that
   record and every later record of its shard are reported (the shard stops there, so a
   stream's messages are never handed on out of order);
4. the watermarks are committed, one write, **before** the response is returned: up to the
   first record ``on_message`` refused (what was handed on), else the whole batch.

So each message reaches ``on_message`` once in the newest epoch's order, unless a commit fails
after ``on_message`` ran (then the batch is retried whole and its messages are handed on again:
at least once). Never logs a payload.
"""

from __future__ import annotations

from collections import defaultdict
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
    WatermarkStore,
)
from streamlease.errors import ConfigError, StreamleaseError
from streamlease.settings import Settings, env_name
from streamlease.telemetry import CONSUMER_SERVICE

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext

Handler = Callable[[Mapping[str, Any], "LambdaContext"], Mapping[str, Any]]

logger = Logger(service=CONSUMER_SERVICE)


class UnreadableRecord(StreamleaseError):
    """A record of the batch is not what the sink writes: reported, never dropped."""


class ShardStopped(StreamleaseError):
    """An earlier record of this shard was refused by ``on_message``: this one waits for the
    retry, so the shard's order holds."""


def make_handler(
    on_message: Callable[[ConsumedMessage], None],
    *,
    table_name: str | None = None,
    store: Callable[[], WatermarkStore] | None = None,
) -> Handler:
    """A Lambda handler for a Kinesis event source mapping on the sink stream that hands each
    message to ``on_message`` (see the module docstring). Its watermarks are in ``table_name``
    (default: the ``watermark_table_name`` setting); ``store`` replaces that table (tests).
    The table's client is made on the first invocation. Raises :class:`ConfigError` then when
    no table is named."""
    stores: list[WatermarkStore] = []

    def watermarks() -> WatermarkStore:
        if not stores:
            stores.append(store() if store is not None else _dynamo_store(table_name))
        return stores[0]

    def handler(event: Mapping[str, Any], context: LambdaContext) -> Mapping[str, Any]:
        run = _Invocation(watermarks(), on_message, event.get("Records", []))
        processor = BatchProcessor(event_type=EventType.KinesisDataStreams)
        try:
            return process_partial_response(
                event=dict(event), record_handler=run.record, processor=processor, context=context
            )
        finally:
            run.commit()  # before the response (or the error) leaves

    return handler


def _dynamo_store(table_name: str | None) -> WatermarkStore:
    settings = Settings.from_env()
    name = table_name or settings.watermark_table_name
    if not name:
        raise ConfigError(f"the consumer needs {env_name('watermark_table_name')}")
    return DynamoWatermarks(aws.client("dynamodb", settings), name)


@dataclass
class _Invocation:
    """One event's records: processed per shard up front, handed on record by record."""

    store: WatermarkStore
    on_message: Callable[[ConsumedMessage], None]
    raw_records: list[Mapping[str, Any]]
    consumer: Consumer = field(init=False)
    records: dict[str, list[SourceRecord]] = field(init=False)
    batches: dict[str, ProcessedBatch] = field(init=False)
    messages: dict[str, list[ConsumedMessage]] = field(init=False)
    problems: dict[str, str] = field(init=False)
    refused_at: dict[str, int] = field(default_factory=dict)
    """Shard → index (in its records) of the first record ``on_message`` refused."""

    def __post_init__(self) -> None:
        self.consumer = Consumer(self.store)
        self.records = defaultdict(list)
        for raw in self.raw_records:
            record = SourceRecord.from_lambda(raw)
            self.records[record.shard_id].append(record)
        self.batches, self.messages, self.problems = {}, defaultdict(list), {}
        for shard_id, records in self.records.items():
            self.consumer.open_shard(shard_id)
            batch = self.consumer.process(shard_id, records)
            self.batches[shard_id] = batch
            for message in batch.messages:
                self.messages[message.sequence_number].append(message)
            for problem in batch.problems:
                self.problems[problem.sequence_number] = str(problem.kind)

    def record(self, record: KinesisStreamRecord) -> None:
        """Powertools' record handler: hand on this record's messages, or raise to report it."""
        shard_id = record.event_id.split(":", 1)[0]
        sequence_number = record.kinesis.sequence_number
        if shard_id in self.refused_at:
            raise ShardStopped(f"{shard_id}: waits for an earlier record's retry")
        if sequence_number in self.problems:
            logger.warning(
                "unreadable record",
                extra={
                    "shard_id": shard_id,
                    "sequence_number": sequence_number,
                    "problem": self.problems[sequence_number],
                },
            )
            raise UnreadableRecord(
                f"{shard_id} {sequence_number}: {self.problems[sequence_number]}"
            )
        try:
            for message in self.messages.get(sequence_number, ()):
                self.on_message(message)
        except Exception:
            numbers = [r.sequence_number for r in self.records[shard_id]]
            self.refused_at[shard_id] = numbers.index(sequence_number)
            raise

    def commit(self) -> None:
        """One watermark write per shard: the whole batch, or what precedes a refused record
        (processed again from the stored state, so nothing after it is marked as seen)."""
        for shard_id, batch in self.batches.items():
            stop = self.refused_at.get(shard_id)
            if stop is None:
                self.consumer.commit(batch)
                continue
            if stop == 0:
                continue
            again = Consumer(self.store)
            again.open_shard(shard_id)
            again.commit(again.process(shard_id, self.records[shard_id][:stop]))
