"""The command format: the body of an SQS message that asks a worker to look at a stream.

Sent by the control plane (start, handoff) and by workers (handoff); read by every worker's
command poller.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from typing import Final


class CommandType(StrEnum):
    """Why a command was sent. Every command is a hint: the worker re-reads the item."""

    START = "START"
    HANDOFF = "HANDOFF"


COMMAND_VERSION: Final = 1

COMMAND_MAX_RECEIVES: Final = 5
"""Deliveries of one command before it moves to the dead-letter queue (poison messages)."""


@dataclass(frozen=True)
class Command:
    """An SQS command: "look at this stream, it may need an owner".

    ``generation`` is the stream's generation when the command was sent; a worker ignores a
    command whose generation is older than the item's (it is stale). ``rebalance``: a handoff
    from a worker above its fair share, meant for a worker below it (one at its share passes it
    on): a move that does not reduce the imbalance is a wasted handover.
    """

    type: CommandType
    stream_id: str
    generation: int
    rebalance: bool = False

    def to_json(self) -> str:
        """The message body."""
        body: dict[str, object] = {
            "v": COMMAND_VERSION,
            "type": self.type.value,
            "stream_id": self.stream_id,
            "generation": self.generation,
        }
        if self.rebalance:
            body["rebalance"] = True
        return json.dumps(body, separators=(",", ":"))

    @classmethod
    def from_json(cls, body: str) -> Command:
        """Parse a message body. Raises ``ValueError`` for anything malformed (a poison message)."""
        try:
            data = json.loads(body)
        except (TypeError, ValueError) as exc:
            raise ValueError("command is not JSON") from exc
        if not isinstance(data, dict):
            raise ValueError("command is not a JSON object")
        version = data.get("v")
        if type(version) is not int or version != COMMAND_VERSION:
            raise ValueError("unsupported command version")
        stream_id = data.get("stream_id")
        generation = data.get("generation")
        if not isinstance(stream_id, str) or not stream_id:
            raise ValueError("command has no stream_id")
        if not isinstance(generation, int) or isinstance(generation, bool) or generation < 0:
            raise ValueError("command has no valid generation")
        try:
            kind = CommandType(str(data.get("type")))
        except ValueError as exc:
            raise ValueError("unknown command type") from exc
        rebalance = data.get("rebalance", False)
        if not isinstance(rebalance, bool):
            raise ValueError("command rebalance is not a boolean")
        return cls(type=kind, stream_id=stream_id, generation=generation, rebalance=rebalance)
