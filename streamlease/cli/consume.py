"""``streamlease consume [STREAM_ID ...]``: read the deployment's sink stream, fenced.

Every message of the Kinesis sink stream is read through :class:`~streamlease.consumer.Consumer`
(repeats and messages of an older lease epoch dropped, gaps counted) and printed as one JSON line
(:meth:`ConsumedMessage.to_json`); with stream ids, only theirs. ``--raw`` prints what the
stream holds, repeats and stale epochs included (still counted). At the end, on ``--until-idle``
or Ctrl-C, a summary per stream and the records that could not be read go to stderr (one JSON
object with ``--json``). Watermarks are kept in memory: each run starts afresh.

**Which stream.** The AWS side is found as ``secret put`` finds it (:mod:`streamlease.cli.target`:
the local stack's moto server, or the region of an ``execute-api`` URL). The stream's name is
``--stream NAME``, else ``STREAMLEASE_KINESIS_STREAM_NAME``, else the local stack's own (its
``/local/stack`` description). A deployment on AWS prints it as the ``SinkStreamName`` output of
its stateful stack; the CLI does not guess a stack name.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import signal
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO

from streamlease.cli.batch import InputError, check_stream_id
from streamlease.cli.target import AwsTarget
from streamlease.errors import StreamleaseError
from streamlease.settings import env_name

# The consumer library is imported when ``consume`` runs, not with the CLI: every other command
# starts without it.
if TYPE_CHECKING:
    from streamlease.consumer import ConsumedMessage, ProcessedBatch, ReadProblem, StreamCounts
    from streamlease.consumer.kinesis_reader import StartPosition

FROM_CHOICES = {"trim-horizon": "TRIM_HORIZON", "latest": "LATEST"}


class ConsumeUsageError(StreamleaseError):
    """The command line of ``consume`` is malformed, or the stream cannot be named."""


def add_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    """Add ``consume`` to the CLI's subcommands."""
    help_text = "print the sink stream's messages as JSON lines, repeats and stale epochs dropped"
    consume = commands.add_parser("consume", parents=[common], help=help_text, description=__doc__)
    consume.formatter_class = argparse.RawDescriptionHelpFormatter
    consume.add_argument("stream_ids", nargs="*", metavar="STREAM_ID", help="only these streams")
    consume.add_argument(
        "--from",
        dest="start",
        default="trim-horizon",
        metavar="trim-horizon|latest|TIME",
        help="where to start: the oldest record kept (default), new records only, or an ISO 8601"
        " time (2026-03-01T09:30:00Z; no zone: UTC)",
    )
    consume.add_argument(
        "--raw", action="store_true", help="print every message: repeats and stale epochs too"
    )
    consume.add_argument(
        "--until-idle",
        type=float,
        metavar="SECONDS",
        help="stop after this long without a new record (default: run until Ctrl-C)",
    )
    consume.add_argument(
        "--stream",
        metavar="NAME",
        help=f"the Kinesis stream (default: ${env_name('kinesis_stream_name')}, else the local "
        "stack's sink stream)",
    )


def start_position(text: str) -> StartPosition:
    """``--from``'s value. Raises :class:`ConsumeUsageError` for one that does not parse."""
    from streamlease.consumer.kinesis_reader import StartPosition

    if text.lower() in FROM_CHOICES:
        return StartPosition(FROM_CHOICES[text.lower()])
    try:
        return StartPosition.at(dt.datetime.fromisoformat(text))
    except ValueError:
        raise ConsumeUsageError(
            f"--from must be trim-horizon, latest or an ISO 8601 time, got {text!r}"
        ) from None


def stream_name(explicit: str | None, configured: str, target: AwsTarget) -> str:
    """``--stream``, else the setting, else the local stack's sink stream. Raises
    :class:`ConsumeUsageError` when none names one."""
    name = explicit or configured or str(target.stack.get("kinesis_stream_name") or "")
    if not name:
        raise ConsumeUsageError(
            f"which Kinesis stream? give --stream NAME or set {env_name('kinesis_stream_name')}"
            " (a deployment prints it as its stateful stack's SinkStreamName output)"
        )
    return name


@dataclass
class ConsumeRun:
    """One ``consume``: prints each message a batch emits, then the summary."""

    out: TextIO
    err: TextIO
    stream_ids: frozenset[str]
    as_json: bool

    def on_batch(self, batch: ProcessedBatch) -> None:
        """Print the batch's messages (of the chosen streams) as JSON lines."""
        lines = [
            json.dumps(m.to_json(), separators=(",", ":")) + "\n"
            for m in batch.messages
            if self.wanted(m)
        ]
        if lines:
            self.out.write("".join(lines))
            self.out.flush()

    def wanted(self, message: ConsumedMessage) -> bool:
        """Whether ``message`` is of a stream asked for (all, when none was named)."""
        return not self.stream_ids or message.stream_id in self.stream_ids

    def summary(
        self, counts: Mapping[str, StreamCounts], problems: Sequence[ReadProblem], *, records: int
    ) -> None:
        """The per-stream counts and the read problems, on stderr."""
        chosen = {k: v for k, v in sorted(counts.items()) if self.wanted_id(k)}
        if self.as_json:
            body = {
                "records": records,
                "streams": {k: _counts_json(v) for k, v in chosen.items()},
                "problems": [_problem_json(p) for p in problems],
            }
            self.err.write(json.dumps({"summary": body}, sort_keys=True) + "\n")
        else:
            self.err.write("".join(line + "\n" for line in summary_lines(chosen, problems)))
        self.err.flush()

    def wanted_id(self, stream_id: str) -> bool:
        """Whether ``stream_id`` was asked for (all, when none was named)."""
        return not self.stream_ids or stream_id in self.stream_ids


HEADERS = ("STREAM", "MESSAGES", "REPEATS", "STALE", "GAPS", "MISSING")


def summary_lines(counts: Mapping[str, StreamCounts], problems: Sequence[ReadProblem]) -> list[str]:
    """The human summary: a table of the streams' counts, then one line per read problem."""
    rows = [
        (sid, str(c.messages), str(c.repeats), str(c.stale), str(c.gaps), str(c.missing))
        for sid, c in counts.items()
    ]
    if not rows:
        lines = ["no messages"]
    else:
        widths = [max(len(r[i]) for r in [HEADERS, *rows]) for i in range(len(HEADERS))]
        lines = [
            "  ".join(
                cell.ljust(w) if i == 0 else cell.rjust(w)
                for i, (cell, w) in enumerate(zip(row, widths, strict=True))
            ).rstrip()
            for row in [HEADERS, *rows]
        ]
    lines += [
        f"unreadable record: shard {p.shard_id} sequence number {p.sequence_number}: {p.kind}"
        f" ({p.detail})"
        for p in problems
    ]
    return lines


def _counts_json(counts: StreamCounts) -> dict[str, int]:
    return dict(counts._asdict())


def _problem_json(problem: ReadProblem) -> dict[str, Any]:
    return dict(problem._asdict())


def run_consume(
    args: argparse.Namespace,
    find_target: Callable[[], AwsTarget],
    *,
    configured_stream: str,
    out: TextIO,
    err: TextIO,
    as_json: bool,
) -> int:
    """Run ``consume`` until idle or Ctrl-C; 0 when it ended so. The arguments are checked
    before ``find_target`` looks for the deployment. Raises :class:`ConsumeUsageError` for bad
    arguments and :class:`~streamlease.errors.SourceError` when the stream cannot be read."""
    if args.until_idle is not None and not args.until_idle > 0:
        raise ConsumeUsageError("--until-idle must be more than 0 seconds")
    for stream_id in args.stream_ids:
        try:
            check_stream_id(stream_id)
        except InputError as exc:
            raise ConsumeUsageError(str(exc)) from None
    start = start_position(args.start)
    target = find_target()
    name = stream_name(args.stream, configured_stream, target)
    from streamlease.consumer import Consumer, MemoryWatermarks
    from streamlease.consumer.kinesis_reader import KinesisReader

    consumer = Consumer(MemoryWatermarks(), raw=args.raw)
    stop = threading.Event()
    # Waits end at once on Ctrl-C; a call under way (one GetRecords, never long) finishes.
    reader = KinesisReader(target.client("kinesis"), name, consumer, start=start, sleep=stop.wait)
    run = ConsumeRun(out, err, frozenset(args.stream_ids), as_json)
    with _ctrl_c_sets(stop), contextlib.suppress(KeyboardInterrupt):
        reader.run(run.on_batch, until_idle_seconds=args.until_idle, stop=stop)
    run.summary(consumer.counts, consumer.problems, records=reader.progress.records)
    return 0


@contextlib.contextmanager
def _ctrl_c_sets(stop: threading.Event) -> Iterator[None]:
    """While the block runs, the first SIGINT only sets ``stop`` (the read ends between two
    calls, so the batch in hand is printed and counted); a second one interrupts as usual.

    A KeyboardInterrupt raised wherever the signal lands can be lost: one that lands in a
    finalizer (``__del__`` of a closed connection, run by the garbage collector) is printed
    and ignored, and the read would go on. Off the main thread (a test's) nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def first(signum: int, frame: Any) -> None:
        stop.set()
        signal.signal(signal.SIGINT, signal.default_int_handler)

    previous = signal.signal(signal.SIGINT, first)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
