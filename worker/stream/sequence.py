"""Numbering one stream's messages, a batch at a time (pure: no I/O, no clock of its own).

A :class:`Sequencer` turns the messages of one read into sink records: it reads each message's
sequence number where the stream's profile says (one ``orjson`` parse), drops those at or below
the last one delivered (a replay overlap), counts gaps, and counts and skips what cannot be
delivered (:class:`Undeliverable`: not JSON, no seq, a seq that is not an integer or outside
``0 .. MAX_SEQ`` — :mod:`streamlease.seqs`: such a seq never becomes ``last_seq``). Frames
that match one of the profile's control conditions (pongs, heartbeats) are skipped first and
counted apart (:attr:`Sequencer.control`); a profile without any pays nothing for them. A feed
without sequence numbers (profile ``seq: none``) is numbered here, from the checkpoint on, text
and binary frames alike (text must be UTF-8).

Before the first delivery the checkpoint is :data:`~streamlease.seqs.NOTHING_DELIVERED`: any
seq is new (seq 0 included), and the first one is no gap, wherever the feed starts (0, 1, a
timestamp); a ``seq: none`` feed is numbered from 0.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from enum import StrEnum
from typing import Any, Final

from websockets.frames import BINARY, TEXT, Frame

from streamlease.seqs import MAX_SEQ, NOTHING_DELIVERED
from streamlease.sink_fields import PayloadEncoding
from streamlease.templates import Condition
from worker.sinks.base import SinkRecord

try:
    import orjson

    _loads: Callable[[Any], Any] = orjson.loads
except ImportError:  # pragma: no cover - orjson ships in the worker image

    def _loads(frame: Any) -> Any:
        return json.loads(str(frame, "utf-8"))


_JSON: Final = PayloadEncoding.JSON.value
_TEXT: Final = PayloadEncoding.TEXT.value
_BASE64: Final = PayloadEncoding.BASE64.value
_new = tuple.__new__  # a SinkRecord without its generated __new__: a quarter of the cost


class Undeliverable(StrEnum):
    """Why a message could not be delivered (what ``last_error`` of a malformed stream says)."""

    NOT_JSON = "not JSON objects"
    NO_SEQ = "no seq"
    SEQ_NOT_INTEGER = "seq not an integer"
    SEQ_NEGATIVE = "seq negative"
    SEQ_ABOVE_BOUND = "seq above 2^63-1"
    BINARY_NOT_JSON = "binary, not JSON"
    TEXT_NOT_UTF8 = "text that is not UTF-8"


class Sequencer:
    """The sequence of one stream under one holding (see the module docstring).

    ``seq_path``: the profile's path to the seq (``("seq",)``, ``("data", "u")``), or None (the
    sequencer numbers messages). ``last_seq``: the checkpoint it continues from (the last seq
    delivered, or :data:`~streamlease.seqs.NOTHING_DELIVERED`). ``control``:
    conditions of the frames to skip as control frames. Counters only grow;
    :attr:`undeliverable` is the cause of the latest message skipped as undeliverable.
    """

    __slots__ = (
        "control",
        "control_conditions",
        "duplicates",
        "gaps",
        "last_seq",
        "malformed",
        "missing",
        "seq_path",
        "undeliverable",
    )

    def __init__(
        self,
        seq_path: tuple[str, ...] | None,
        last_seq: int,
        control: tuple[Condition, ...] = (),
    ) -> None:
        self.seq_path = seq_path
        self.control_conditions = control
        self.control = 0
        self.last_seq = last_seq
        self.duplicates = 0
        self.gaps = 0
        self.missing = 0
        self.malformed = 0
        self.undeliverable: Undeliverable | None = None

    @property
    def seq_name(self) -> str:
        """The seq's path as a profile spells it (``seq``, ``data.u``, ``none``)."""
        return "none" if self.seq_path is None else ".".join(self.seq_path)

    def take(self, messages: list[Frame], received_at_ms: int) -> list[SinkRecord]:
        """The records of ``messages`` (received at ``received_at_ms``), in order; messages
        that are replays or undeliverable are counted and left out."""
        if self.control_conditions:
            messages = self._without_control(messages)
        path = self.seq_path
        if path is None:
            return self._number(messages, received_at_ms)
        first, rest = path[0], path[1:]
        records: list[SinkRecord] = []
        last = self.last_seq
        # Kept flat: it runs for every message a worker receives.
        for message in messages:
            data = message.data
            try:
                seq = _loads(data)[first]
            except Exception as exc:  # which one it is says what was wrong
                self._skip(_cause(exc, message))
                continue
            if rest:
                try:
                    for name in rest:
                        seq = seq[name]
                except (KeyError, TypeError, IndexError):
                    self._skip(Undeliverable.NO_SEQ)
                    continue
            if type(seq) is not int or not 0 <= seq <= MAX_SEQ:
                self._skip(_seq_cause(seq))
                continue
            if seq <= last:
                self.duplicates += 1
                continue
            if seq != last + 1 and last != NOTHING_DELIVERED:
                self.gaps += 1
                self.missing += seq - last - 1
            last = seq
            records.append(_new(SinkRecord, (seq, received_at_ms, data, _JSON)))
        self.last_seq = last
        return records

    def _number(self, messages: list[Frame], received_at_ms: int) -> list[SinkRecord]:
        """A feed without sequence numbers: every message is the next one (the first of a new
        stream is 0)."""
        records: list[SinkRecord] = []
        last = self.last_seq
        for message in messages:
            data = message.data
            if message.opcode is TEXT:
                try:
                    str(data, "utf-8")
                except UnicodeDecodeError:
                    self._skip(Undeliverable.TEXT_NOT_UTF8)
                    continue
                encoding = _TEXT
            else:
                encoding = _BASE64
            last += 1
            records.append(_new(SinkRecord, (last, received_at_ms, data, encoding)))
        self.last_seq = last
        return records

    def _without_control(self, messages: list[Frame]) -> list[Frame]:
        """``messages`` without the control frames (counted)."""
        conditions = self.control_conditions
        kept = []
        for message in messages:
            try:
                document = _loads(message.data)
            except Exception:  # not JSON: not a control frame (maybe data, maybe malformed)
                kept.append(message)
                continue
            if any(condition.matches(document) for condition in conditions):
                self.control += 1
            else:
                kept.append(message)
        return kept

    def _skip(self, cause: Undeliverable) -> None:
        self.malformed += 1
        self.undeliverable = cause


def _seq_cause(seq: object) -> Undeliverable:
    """Why ``seq`` is not a seq. An integer too large for a 64-bit parser (orjson reads it as
    a float) is out of range, not "not an integer"."""
    if type(seq) is int:
        return Undeliverable.SEQ_NEGATIVE if seq < 0 else Undeliverable.SEQ_ABOVE_BOUND
    if type(seq) is float and seq.is_integer() and abs(seq) > MAX_SEQ:
        return Undeliverable.SEQ_ABOVE_BOUND
    return Undeliverable.SEQ_NOT_INTEGER


def _cause(exc: Exception, message: Frame) -> Undeliverable:
    """Why reading the top of the seq's path in ``message`` raised ``exc``."""
    if isinstance(exc, KeyError):
        return Undeliverable.NO_SEQ
    if message.opcode is BINARY:
        return Undeliverable.BINARY_NOT_JSON
    return Undeliverable.NOT_JSON  # not JSON at all, or not an object where the path goes
