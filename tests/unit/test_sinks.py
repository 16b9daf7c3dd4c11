"""Sink records and their header, the wire format, the shared buffer in front of every built-in
sink, safe file names and choosing a sink from settings."""

from __future__ import annotations

import asyncio
import base64
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamlease.errors import ConfigError, SinkDeadlinePassed, SinkError
from streamlease.settings import Settings
from streamlease.sink_fields import SINK_STAMPED_FIELDS, SinkField
from worker.sinks import (
    BatchHeader,
    BufferedSink,
    FileSink,
    NoDeadline,
    NullSink,
    Sink,
    SinkBatch,
    SinkRecord,
    encode_record,
    load_sink,
    partition_key,
    read_records,
    sink_file_name,
    write_batch,
)

ALWAYS = NoDeadline()
HEADER = BatchHeader("s", 3, "w-1")


def record(seq: int = 1, payload: bytes = b'{"seq":1}') -> SinkRecord:
    return SinkRecord(seq, 1_700_000_000_123, payload)


class Passed:
    def remaining_seconds(self) -> float:
        return -1.0


def test_header_and_record_fields_are_the_schema_sink_fields() -> None:
    """Every name a sink writes comes from streamlease.sink_fields.SinkField: the header's once per
    holding, the record's once per message, and what the sink stamps on them."""
    names = {v for k, v in vars(SinkField).items() if not k.startswith("_")}
    header_fields = {"stream_id", "epoch", "worker_id"}
    assert header_fields | set(SinkRecord._fields) == names - SINK_STAMPED_FIELDS
    assert header_fields.isdisjoint(SinkRecord._fields)
    assert set(json.loads(encode_record(HEADER, record(), 1))) == names


def test_encoded_record_is_one_json_line_with_the_payload_embedded() -> None:
    """Keys are the SinkField names; the payload is a JSON value, not a string."""
    header = BatchHeader('a"b:é', 3, "w-1")
    line = encode_record(header, record(payload=b'{"seq":1,"data":[1,2]}'))
    assert b"\n" not in line
    assert json.loads(line) == {
        SinkField.STREAM_ID: 'a"b:é',
        SinkField.EPOCH: 3,
        SinkField.SEQ: 1,
        SinkField.RECEIVED_AT_MS: 1_700_000_000_123,
        SinkField.WORKER_ID: "w-1",
        SinkField.PAYLOAD_ENCODING: "json",
        SinkField.PAYLOAD: {"seq": 1, "data": [1, 2]},
    }


def test_a_text_frame_is_a_json_string_and_a_binary_frame_base64() -> None:
    """Frames that are not JSON documents stay intact, and the record says how they are held."""
    text = SinkRecord(1, 0, 'plain "text"\nhé'.encode(), "text")
    binary = SinkRecord(2, 0, b"\x00\xff\xfe", "base64")
    decoded_text, decoded_binary = (
        json.loads(encode_record(HEADER, text)),
        json.loads(encode_record(HEADER, binary)),
    )
    assert (decoded_text[SinkField.PAYLOAD_ENCODING], decoded_text[SinkField.PAYLOAD]) == (
        "text",
        'plain "text"\nhé',
    )
    assert decoded_binary[SinkField.PAYLOAD_ENCODING] == "base64"
    assert base64.b64decode(decoded_binary[SinkField.PAYLOAD]) == b"\x00\xff\xfe"
    assert b"\n" not in encode_record(HEADER, text)


def test_a_pretty_printed_payload_still_encodes_to_one_line() -> None:
    """Line breaks between JSON tokens become spaces; the value is unchanged."""
    payload = b'{\r\n  "seq": 1,\n  "text": "a\\nb"\n}'
    line = encode_record(HEADER, record(payload=payload))
    assert b"\n" not in line and b"\r" not in line
    assert json.loads(line)[SinkField.PAYLOAD] == json.loads(payload)


@given(st.text(min_size=1, max_size=400))
def test_sink_file_names_are_always_safe(stream_id: str) -> None:
    """Whatever the stream id: one path component, not hidden, at most 255 bytes."""
    name = sink_file_name(stream_id)
    assert "/" not in name and "\x00" not in name and "\\" not in name
    assert not name.startswith(".")
    assert len(name.encode()) <= 255
    assert name.endswith(".jsonl")


@given(st.text(min_size=1, max_size=60), st.text(min_size=1, max_size=60))
def test_distinct_stream_ids_get_distinct_files(first: str, second: str) -> None:
    """Percent-encoding is one to one, so two streams never share a file."""
    if first != second:
        assert sink_file_name(first) != sink_file_name(second)


@pytest.mark.parametrize(
    ("stream_id", "name"),
    [
        ("orders:eu.1", "orders%3Aeu.1.jsonl"),
        ("../etc/passwd", "%2E.%2Fetc%2Fpasswd.jsonl"),
        (".", "%2E.jsonl"),
    ],
)
def test_sink_file_name_examples(stream_id: str, name: str) -> None:
    """Colons, slashes and leading dots are encoded; dots inside are kept."""
    assert sink_file_name(stream_id) == name


def test_long_stream_ids_are_hashed_into_the_partition_key() -> None:
    """Kinesis allows 256 characters; longer ids map to a stable digest."""
    assert partition_key("s:1") == "s:1"
    long_id = "x" * 300
    assert partition_key(long_id) == partition_key(long_id)
    assert len(partition_key(long_id)) <= 256


async def test_null_sink_counts_and_refuses_after_close() -> None:
    """The null sink stores nothing but counts what it was given."""
    sink = NullSink()
    await write_batch(sink, HEADER, [record(seq=1), record(seq=2)], ALWAYS)
    assert (sink.records, sink.batches) == (2, 1)
    await sink.close()
    with pytest.raises(SinkError):
        await write_batch(sink, HEADER, [record()], ALWAYS)


async def test_batches_of_every_stream_that_come_within_the_linger_are_stored_together() -> None:
    """Group commit: one store for every batch submitted while the first lingered, each
    settled with its own outcome."""
    sink = NullSink(linger_seconds=0.05)
    headers = [BatchHeader(f"s{n}", 1, "w") for n in range(20)]
    await asyncio.gather(*(write_batch(sink, h, [record()], ALWAYS) for h in headers))
    assert (sink.records, sink.batches, sink.stores) == (20, 20, 1)
    await sink.close()


async def test_a_batch_past_its_deadline_is_not_stored() -> None:
    """The sink checks each batch's deadline when it stores it: past it, nothing is sent and
    the batch fails with SinkDeadlinePassed naming every record."""
    sink = NullSink()
    records = [record(seq=1), record(seq=2)]
    with pytest.raises(SinkDeadlinePassed) as failed:
        await write_batch(sink, HEADER, records, Passed())
    assert list(failed.value.unsent or []) == records
    assert sink.records == 0
    await sink.close()


async def test_a_store_that_raises_fails_its_batches_instead_of_losing_them() -> None:
    """A sink's bug never leaves a holder waiting: every batch of that store fails."""

    class Broken(BufferedSink):
        async def store(self, batches: list[SinkBatch]) -> list[SinkError | None]:
            raise RuntimeError("bug")

    sink = Broken()
    with pytest.raises(SinkError, match="RuntimeError"):
        await write_batch(sink, HEADER, [record()], ALWAYS)
    await sink.close()


def test_built_in_sinks_by_name(tmp_path: Path) -> None:
    """``null`` and ``file`` need nothing else; ``file`` writes under sink_dir."""
    assert isinstance(load_sink(Settings(sink="null")), NullSink)
    file_sink = load_sink(Settings(sink="file", sink_dir=str(tmp_path)))
    assert isinstance(file_sink, FileSink)
    assert file_sink.directory == tmp_path


def test_kinesis_sink_without_a_stream_name_is_a_config_error() -> None:
    """Failing at start-up beats failing on the first message."""
    with pytest.raises(ConfigError, match="KINESIS_STREAM_NAME"):
        load_sink(Settings(sink="kinesis", kinesis_stream_name=""))


CUSTOM_MODULE = """
from worker.sinks import BufferedSink


class CountingSink(BufferedSink):
    def __init__(self, settings):
        super().__init__()
        self.settings = settings
        self.records = []

    async def store(self, batches):
        for batch in batches:
            self.records.extend(batch.records)
        return [None] * len(batches)


class Sinks:
    @staticmethod
    def build(settings):
        return CountingSink(settings)


def make(settings):
    return CountingSink(settings)


def not_a_sink(settings):
    return object()


NOT_CALLABLE = 42
"""


@pytest.fixture
def custom_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    (tmp_path / "custom_sink_for_tests.py").write_text(CUSTOM_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    return "custom_sink_for_tests"


@pytest.mark.parametrize("attribute", ["make", "Sinks.build"])
async def test_custom_sink_factory_is_called_with_the_settings(
    custom_module: str, attribute: str
) -> None:
    """``module:factory`` (dotted attributes allowed) builds the sink from the settings."""
    settings = Settings(sink=f"{custom_module}:{attribute}")
    sink = load_sink(settings)
    assert isinstance(sink, Sink)
    await write_batch(sink, HEADER, [record()], ALWAYS)
    assert sink.records == [record()]  # type: ignore[attr-defined]
    assert sink.settings is settings  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("s3", "kinesis, file, null or module:factory"),
        (":make", "kinesis, file, null or module:factory"),
        ("{module}:", "kinesis, file, null or module:factory"),
        ("no_such_module_anywhere:make", "cannot be imported"),
        ("{module}:missing", "not found"),
        ("{module}:NOT_CALLABLE", "not callable"),
        ("{module}:not_a_sink", "not a sink"),
    ],
)
def test_bad_sink_specs_are_config_errors(custom_module: str, spec: str, message: str) -> None:
    """Every way of naming a sink wrongly says what is wrong, at start-up."""
    with pytest.raises(ConfigError, match=message):
        load_sink(Settings(sink=spec.format(module=custom_module)))


class Deadline:
    """A fencing deadline ``seconds`` from now."""

    def __init__(self, seconds: float) -> None:
        self.at = time.monotonic() + seconds

    def remaining_seconds(self) -> float:
        return self.at - time.monotonic()


async def test_the_file_sink_stamps_each_batch_with_the_time_it_was_written(
    tmp_path: Path,
) -> None:
    """Every record of a batch carries ``written_at_ms``: taken in the sink's thread, between
    the call and its return."""
    sink = FileSink(tmp_path)
    before = time.time_ns() // 1_000_000
    await write_batch(sink, HEADER, [record(seq=1), record(seq=2)], ALWAYS)
    after = time.time_ns() // 1_000_000
    await sink.close()
    stamps = {r[SinkField.WRITTEN_AT_MS] for r in read_records(sink.path_for("s"))}
    assert len(stamps) == 1 and before <= stamps.pop() <= after


async def test_a_file_write_queued_behind_a_busy_sink_thread_is_not_written_past_its_deadline(
    tmp_path: Path,
) -> None:
    """The deadline was fine when the batch was submitted, but the sink's thread was busy until
    after it: the last check, in the thread right before the append, refuses the batch."""
    sink = FileSink(tmp_path)
    release = threading.Event()
    busy = sink._thread.run(release.wait, 5.0)
    queued = asyncio.create_task(write_batch(sink, HEADER, [record(seq=1)], Deadline(0.2)))
    await asyncio.sleep(0.4)
    release.set()
    await busy
    with pytest.raises(SinkDeadlinePassed) as refused:
        await queued
    await write_batch(sink, HEADER, [record(seq=2)], ALWAYS)
    await sink.close()
    assert [r.seq for r in refused.value.unsent or []] == [1]
    assert [r[SinkField.SEQ] for r in read_records(sink.path_for("s"))] == [2]


async def test_file_writes_do_not_wait_for_the_event_loops_default_thread_pool(
    tmp_path: Path,
) -> None:
    """Every thread of the loop's default pool (boto3 calls, DNS lookups) is blocked: a sink
    write still completes, on the sink's own thread."""
    loop = asyncio.get_running_loop()
    loop.set_default_executor(ThreadPoolExecutor(max_workers=2))
    release = threading.Event()
    blocked = [loop.run_in_executor(None, release.wait, 10.0) for _ in range(4)]
    sink = FileSink(tmp_path)
    try:
        await asyncio.wait_for(write_batch(sink, HEADER, [record(seq=1)], ALWAYS), 5.0)
    finally:
        release.set()
        await asyncio.gather(*blocked)
    await sink.close()
    assert [r[SinkField.SEQ] for r in read_records(sink.path_for("s"))] == [1]
