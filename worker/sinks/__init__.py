"""Sinks: where delivered upstream messages go. Chosen by ``Settings.sink``.

``kinesis`` (AWS default), ``file`` (local default: JSONL per stream under ``sink_dir``),
``null`` (counts only), or ``module:factory`` where ``factory(settings)`` returns a :class:`Sink`
(the simplest: a :class:`BufferedSink` subclass with its own ``store``).
"""

from __future__ import annotations

import importlib
from typing import Any

from streamlease.errors import ConfigError
from streamlease.settings import Settings
from worker.sinks.base import (
    BatchHeader,
    BatchOwner,
    BufferedSink,
    Deadline,
    NoDeadline,
    Sink,
    SinkBatch,
    SinkRecord,
    encode_record,
    write_batch,
)
from worker.sinks.file import FileSink, read_records, sink_file_name
from worker.sinks.kinesis import KinesisSink, partition_key
from worker.sinks.null import NullSink

BUILT_IN = ("kinesis", "file", "null")


def load_sink(settings: Settings) -> Sink:
    """The sink ``settings.sink`` names. Raises :class:`ConfigError` for an unknown name, a
    ``module:factory`` that does not import or resolve, or a factory that returns no sink."""
    spec = settings.sink.strip()
    if spec == "kinesis":
        return KinesisSink(settings)
    if spec == "file":
        return FileSink(settings.sink_dir)
    if spec == "null":
        return NullSink()
    module_name, colon, attribute = spec.partition(":")
    if not colon or not module_name or not attribute:
        raise ConfigError(
            f"STREAMLEASE_SINK must be kinesis, file, null or module:factory, got {spec!r}"
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"sink module {module_name!r} cannot be imported: {exc}") from exc
    factory: Any = module
    for part in attribute.split("."):
        factory = getattr(factory, part, None)
        if factory is None:
            raise ConfigError(f"sink factory {spec!r} not found in module {module_name!r}")
    if not callable(factory):
        raise ConfigError(f"sink factory {spec!r} is not callable")
    sink = factory(settings)
    if not isinstance(sink, Sink):
        raise ConfigError(f"sink factory {spec!r} returned {type(sink).__name__}, not a sink")
    return sink


__all__ = [
    "BUILT_IN",
    "BatchHeader",
    "BatchOwner",
    "BufferedSink",
    "Deadline",
    "FileSink",
    "KinesisSink",
    "NoDeadline",
    "NullSink",
    "Sink",
    "SinkBatch",
    "SinkRecord",
    "encode_record",
    "load_sink",
    "partition_key",
    "read_records",
    "sink_file_name",
    "write_batch",
]
