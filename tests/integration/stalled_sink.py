"""A file sink whose own thread a test can stall (a disk that hangs), loaded by worker
processes as ``STREAMLEASE_SINK=stalled_sink:fenced`` (or ``:unfenced``, the same sink with its
last-moment deadline check removed: the mutant the fence test must catch), and the Kinesis sink
the same way (``:kinesis_fenced``, ``:kinesis_unfenced``).

Run a worker with :data:`RUN_WORKER` so this folder is importable. The test drives it through
files next to the worker's health file: it writes ``<health>.stall``; the next write then
occupies the sink's thread until ``<health>.resume`` exists (at most :data:`MAX_STALL_SECONDS`),
and the store of its own batch queues behind it, already checked against the holder's deadline.
``<health>.stalled`` says the stall began, ``<health>.resumed`` that it ended.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Final

import worker.sinks.file
import worker.sinks.kinesis
from streamlease.settings import Settings
from worker.sinks import FileSink, KinesisSink, SinkBatch
from worker.sinks.base import Deadline, SinkThread

RUN_WORKER: Final = (
    "-c",
    "import sys; sys.path.insert(0, 'tests/integration'); "
    "from worker.__main__ import main; sys.exit(main())",
)
"""``python`` arguments that run the worker with this folder importable."""
MAX_STALL_SECONDS: Final = 30.0


def control_file(settings: Settings, suffix: str) -> Path:
    """The file of ``suffix`` (``stall``, ``stalled``, ``resume``, ``resumed``) of a worker."""
    return Path(f"{settings.health_file}.{suffix}")


class _Stalling:
    """What both stalled sinks add: the sink's thread stalls once, on the first batch after
    ``.stall`` exists."""

    _thread: SinkThread

    def _init_stall(self, settings: Settings) -> None:
        self._settings = settings
        self._stalling: object = None  # the stall's future: kept, never awaited

    def _maybe_stall(self) -> None:
        stall = control_file(self._settings, "stall")
        if stall.exists():
            stall.unlink()
            self._stalling = self._thread.run(self._stall)
            control_file(self._settings, "stalled").touch()

    def _stall(self) -> None:
        resume = control_file(self._settings, "resume")
        until = time.monotonic() + MAX_STALL_SECONDS
        while not resume.exists() and time.monotonic() < until:
            time.sleep(0.01)
        control_file(self._settings, "resumed").touch()


class StalledFileSink(_Stalling, FileSink):
    """:class:`FileSink` whose thread stalls once (see :class:`_Stalling`)."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings.sink_dir)
        self._init_stall(settings)

    def submit(self, batch: SinkBatch) -> None:
        self._maybe_stall()
        super().submit(batch)


class StalledKinesisSink(_Stalling, KinesisSink):
    """:class:`KinesisSink` whose thread stalls once (see :class:`_Stalling`)."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self._init_stall(settings)

    def submit(self, batch: SinkBatch) -> None:
        self._maybe_stall()
        super().submit(batch)


def fenced(settings: Settings) -> StalledFileSink:
    """The sink as built: the deadline is checked again in its thread before each append."""
    return StalledFileSink(settings)


class _NeverPassed:
    """A deadline check that never refuses."""

    def __init__(self, *clock: object) -> None:
        return

    def open(self, deadline: Deadline) -> bool:
        return True


def unfenced(settings: Settings) -> StalledFileSink:
    """The mutant: the check in the sink's thread never refuses (only the holder's check before
    the batch is submitted remains)."""
    worker.sinks.file.DeadlineClock = _NeverPassed  # type: ignore[attr-defined,misc,assignment]
    return StalledFileSink(settings)


def kinesis_fenced(settings: Settings) -> StalledKinesisSink:
    """The Kinesis sink as built, stalling once."""
    return StalledKinesisSink(settings)


def kinesis_unfenced(settings: Settings) -> StalledKinesisSink:
    """The Kinesis mutant: its deadline checks (taking a batch into a call, and in its thread
    right before ``PutRecords``) never refuse."""
    worker.sinks.kinesis.DeadlineClock = _NeverPassed  # type: ignore[attr-defined,misc,assignment]
    return StalledKinesisSink(settings)
