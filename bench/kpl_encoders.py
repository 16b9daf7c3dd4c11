"""``python -m bench.kpl_encoders``: CPU per message of our KPL aggregation encoder against
AWS's Python module (``aws-kinesis-agg``, protobuf), on the sink's hot path.

Both pack the same 20,000 messages (1,000 stream ids, 200-byte payloads, our ``StreamMessage``
bytes) into aggregated records of at most 50 KB; ours also encodes each ``StreamMessage``. Runs
A/B/A/B/A/B rounds in one process and prints the median and spread of µs per message.
"""

from __future__ import annotations

import statistics
import time

from aws_kinesis_agg.aggregator import RecordAggregator

from streamlease.kinesis_records import encode_message, epoch_prefix
from streamlease.kpl import Aggregator

MESSAGES = 20_000
LIMIT = 50 * 1024
PAYLOAD = b'{"seq":123456,"ts":1700000000000,"data":"' + b"x" * 160 + b'"}'


def ours() -> float:
    prefix = epoch_prefix(3)
    start = time.process_time()
    aggregator, records = Aggregator("worker-1"), 0
    for n in range(MESSAGES):
        key = f"stream-{n % 1000:04d}"
        data = encode_message(prefix, n, 1_700_000_000_000 + n, PAYLOAD, "json")
        if aggregator.count and aggregator.size_with(key, len(data)) > LIMIT:
            aggregator.encode()
            aggregator, records = Aggregator("worker-1"), records + 1
        aggregator.add(key, data)
    aggregator.encode()
    return (time.process_time() - start) / MESSAGES * 1e6


def library() -> float:
    prefix = epoch_prefix(3)
    start = time.process_time()
    aggregator = RecordAggregator(max_size=LIMIT)
    for n in range(MESSAGES):
        data = encode_message(prefix, n, 1_700_000_000_000 + n, PAYLOAD, "json")
        full = aggregator.add_user_record(f"stream-{n % 1000:04d}", data)
        if full is not None:
            full.get_contents()
    aggregator.clear_and_get().get_contents()
    return (time.process_time() - start) / MESSAGES * 1e6


def main() -> None:
    """Print µs per message, median (min-max) of three rounds each, interleaved."""
    runs: dict[str, list[float]] = {"ours (hand-written)": [], "aws-kinesis-agg": []}
    for _ in range(3):
        runs["ours (hand-written)"].append(ours())
        runs["aws-kinesis-agg"].append(library())
    for name, values in runs.items():
        print(
            f"{name}: {statistics.median(values):.2f} µs per message"
            f" ({min(values):.2f}-{max(values):.2f})"
        )


if __name__ == "__main__":
    main()
