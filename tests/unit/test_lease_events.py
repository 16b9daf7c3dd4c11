"""The lease event log's one format: the worker writes it, every reader parses it the same way."""

from __future__ import annotations

import dataclasses
import json

import pytest

from streamlease.lease_events import LeaseEvent, LeaseEventField, LeaseEventKind


def test_record_fields_are_the_lease_event_fields() -> None:
    """Every key of a line comes from LeaseEventField, and every one is an attribute."""
    names = {v for k, v in vars(LeaseEventField).items() if not k.startswith("_")}
    assert {f.name for f in dataclasses.fields(LeaseEvent)} == names


def test_a_line_reads_back_as_the_event_written() -> None:
    """to_dict and from_dict are inverse, through JSON; the kind comes back as the enum."""
    written = LeaseEvent(LeaseEventKind.ACQUIRED, "s1", 3, "w1/1-abcd", 12.5, 1_700, 22.5)
    line = json.dumps(written.to_dict())
    read = LeaseEvent.from_dict(json.loads(line))
    assert read == written
    assert read.event is LeaseEventKind.ACQUIRED


def test_no_deadline_key_without_a_deadline() -> None:
    """``deadline_mono`` appears only on events that carry one."""
    line = LeaseEvent(LeaseEventKind.RELEASED, "s1", 3, "w1", 12.5).to_dict()
    assert LeaseEventField.DEADLINE_MONO not in line
    assert LeaseEvent.from_dict(line).deadline_mono is None


@pytest.mark.parametrize(
    "line",
    [
        {"event": "acquired", "stream_id": "s", "epoch": 1, "worker_id": "w"},  # no mono
        {"event": "moved", "stream_id": "s", "epoch": 1, "worker_id": "w", "mono": 1.0},
        {"event": "acquired", "stream_id": "s", "epoch": "x", "worker_id": "w", "mono": 1.0},
    ],
)
def test_a_malformed_line_raises(line: dict[str, object]) -> None:
    """A missing field, an unknown kind or a wrong type is an error readers count, not a row."""
    with pytest.raises((KeyError, ValueError, TypeError)):
        LeaseEvent.from_dict(line)
