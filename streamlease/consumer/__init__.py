"""The consumer library: reads the Kinesis sink's records and checks the fencing token where
the data is read (architecture §4, "Fencing"), since Kinesis cannot.

Per stream it keeps the highest epoch seen and the last seq emitted, drops stale-epoch
messages and repeats, counts gaps, and keeps those watermarks per shard in a store
(in memory, or DynamoDB with conditional writes). The rule: :mod:`.rule`; the records and what
can be wrong with them: :mod:`.records`; the state: :mod:`.state`, :mod:`.dynamo_state`,
:mod:`.codec`; the loop: :mod:`.consumer`.
"""

from streamlease.consumer.codec import Watermark
from streamlease.consumer.consumer import Consumer, ProcessedBatch, StreamCounts
from streamlease.consumer.dynamo_state import DynamoWatermarks, create_watermark_table
from streamlease.consumer.records import (
    ConsumedMessage,
    ProblemKind,
    ReadProblem,
    SourceRecord,
)
from streamlease.consumer.state import MemoryWatermarks, ShardWatermarks, WatermarkStore
from streamlease.errors import WatermarkConflict

__all__ = [
    "ConsumedMessage",
    "Consumer",
    "DynamoWatermarks",
    "MemoryWatermarks",
    "ProblemKind",
    "ProcessedBatch",
    "ReadProblem",
    "ShardWatermarks",
    "SourceRecord",
    "StreamCounts",
    "Watermark",
    "WatermarkConflict",
    "WatermarkStore",
    "create_watermark_table",
]
