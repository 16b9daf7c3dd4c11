"""A stream's upstream side as the worker runs it, without lease or sink, for the tests that
drive it against real sockets: an :class:`~worker.stream.link.UpstreamLink` whose batches go
through a :class:`~worker.stream.sequence.Sequencer`, everything it delivers and reports kept."""

from __future__ import annotations

import asyncio
import dataclasses
from types import TracebackType
from typing import Any

from websockets.frames import Frame

from streamlease.profile import DEFAULT_PROFILE, Profile
from streamlease.settings import Settings, UpstreamLibrary
from worker.sinks import SinkRecord
from worker.stream.link import UpstreamEvent, UpstreamEventKind, UpstreamLink
from worker.stream.sequence import Sequencer

LIBRARY: UpstreamLibrary | None = None
"""The upstream library every :class:`LinkRun` uses instead of its settings' (set by the
``each_upstream_library`` fixture of ``conftest.py``)."""


class LinkRun:
    """``async with LinkRun(...) as run:`` runs the link; leaving closes it (1000, or 1001 on
    an error). ``records`` are the messages delivered, ``batches`` their sizes, ``events`` what
    the link reported."""

    def __init__(
        self,
        stream_id: str,
        url: str,
        settings: Settings,
        *,
        last_seq: int = 0,
        profile: Profile = DEFAULT_PROFILE,
        **options: Any,
    ) -> None:
        if LIBRARY is not None:
            settings = dataclasses.replace(settings, upstream_library=LIBRARY)
        self.sequencer = Sequencer(profile.seq_path, last_seq, profile.control)
        self.records: list[SinkRecord] = []
        self.batches: list[int] = []
        self.events: list[UpstreamEvent] = []
        self._changed = asyncio.Event()
        options.setdefault("on_event", self._event)
        self.link = UpstreamLink(
            stream_id,
            url,
            settings,
            self._received,
            resume_from=lambda: self.sequencer.last_seq,
            profile=profile,
            **options,
        )
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> LinkRun:
        self._task = asyncio.create_task(self.link.run())
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.link.close(1000 if exc_type is None else 1001)
        task = self._task
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    @property
    def done(self) -> bool:
        """True once the link stopped by itself (the upstream ended the stream)."""
        return self._task is not None and self._task.done()

    @property
    def seqs(self) -> list[int]:
        return [r.seq for r in self.records]

    def kinds(self, kind: UpstreamEventKind) -> list[UpstreamEvent]:
        return [e for e in self.events if e.kind is kind]

    async def take(self, count: int, limit_seconds: float = 10.0) -> list[SinkRecord]:
        """The first ``count`` records delivered (fails the test after ``limit_seconds``)."""
        await self.until(lambda: len(self.records) >= count, limit_seconds)
        return self.records[:count]

    async def until(self, condition: Any, limit_seconds: float = 10.0) -> None:
        """Wait until ``condition()`` holds (checked at every batch and event)."""
        async with asyncio.timeout(limit_seconds):
            while not condition():
                self._changed.clear()
                await self._changed.wait()

    async def event(self, kind: UpstreamEventKind, limit_seconds: float = 10.0) -> UpstreamEvent:
        """The first event of ``kind`` (waiting for it)."""
        await self.until(lambda: self.kinds(kind), limit_seconds)
        return self.kinds(kind)[0]

    async def ended(self, limit_seconds: float = 10.0) -> None:
        """Wait until the link stopped by itself."""
        assert self._task is not None
        await asyncio.wait_for(asyncio.shield(self._task), limit_seconds)

    def _received(self, batch: list[Frame]) -> None:
        records = self.sequencer.take(batch, 0)
        self.batches.append(len(batch))
        self.records += records
        self._changed.set()

    def _event(self, event: UpstreamEvent) -> None:
        self.events.append(event)
        self._changed.set()
