"""The local dashboard's per-stream panel: the streams in trouble (state, cause, since when)
and the busiest streams by rate, from the API's stream list (``GET /streams``, as ``ls`` reads
it).

Each figure says how old it is: a stream's rate and delivered seq are as of its last renewal
(``last_seq_at``), its trouble state as of its holder's last state write
(``connection_since``). CloudWatch has no per-stream metrics (a stream id is no dimension: a
metric per stream would cost more than the streams), so this panel is the local page's own; on
AWS, ``streamlease ls`` and ``watch`` show the same.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from streamlease.cli.client import ApiClient, ApiError
from streamlease.cli.render import age_ms, trouble_of
from streamlease.cli.stream_text import api_rate, error_headline
from streamlease.cli.transport import TransportError
from streamlease.schema import DesiredState

PANEL_ROWS: Final = 10
"""Most rows of each list (the rest are counted)."""
ORPHANED: Final = "orphaned"
"""The state shown for a started stream that no live holder has."""


def _trouble_row(stream: Mapping[str, Any], state: str, now_ms: int) -> dict[str, Any]:
    since = stream.get("connection_since") if state != ORPHANED else stream.get("updated_at")
    error = stream.get("last_error")
    return {
        "id": stream.get("id"),
        "state": state,
        "cause": error_headline(" ".join(str(error).split())) if error else None,
        "since": since,
        "since_age_ms": age_ms(since, now_ms),
    }


def stream_panel(streams: Iterable[Mapping[str, Any]], now_ms: int) -> dict[str, Any]:
    """The panel at wall time ``now_ms`` (epoch ms): ``trouble`` (state, cause, since, and the
    age of that), ``busiest`` (rate, delivered seq and the age of both), each at most
    :data:`PANEL_ROWS` long, and how many there were in all."""
    trouble, rated = [], []
    started = [s for s in streams if s.get("desired_state") == DesiredState.STARTED]
    for stream in started:
        state = trouble_of(stream)
        if state is not None:
            trouble.append(_trouble_row(stream, str(state), now_ms))
        elif stream.get("lease_state") != "held":
            trouble.append(_trouble_row(stream, ORPHANED, now_ms))
        rate = api_rate(stream)
        if rate is not None and stream.get("lease_state") == "held":
            rated.append((rate, stream))
    rated.sort(key=lambda pair: (-pair[0], str(pair[1].get("id"))))
    busiest = [
        {
            "id": stream.get("id"),
            "msgs_per_s": rate,
            "last_seq": stream.get("last_seq"),
            "last_seq_at": stream.get("last_seq_at"),
            "last_seq_age_ms": age_ms(stream.get("last_seq_at"), now_ms),
            "rate_since_age_ms": age_ms(stream.get("rate_since"), now_ms),
        }
        for rate, stream in rated[:PANEL_ROWS]
    ]
    return {
        "read_at_ms": now_ms,
        "started": len(started),
        "trouble": trouble[:PANEL_ROWS],
        "trouble_count": len(trouble),
        "busiest": busiest,
        "rated_count": len(rated),
    }


def read_stream_panel(api: ApiClient, now_ms: int) -> dict[str, Any]:
    """:func:`stream_panel` of every stream the API lists; ``{"error": …}`` when it cannot be
    read (the graphs are drawn all the same)."""
    try:
        return stream_panel(api.list_streams(), now_ms)
    except (ApiError, TransportError) as exc:
        return {"error": str(exc), "read_at_ms": now_ms}
