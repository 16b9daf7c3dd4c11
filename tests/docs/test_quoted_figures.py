"""A figure a page quotes in prose is the stored benchmark result's: the page says it, and the
result file it comes from holds it (``make bench`` rewrites the files; a stale quote fails here).
Tables of results are not quoted at all: the pages include the files (``--8<--``)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

QUOTES = [
    # (page, as the page says it, result file, as the file says it)
    ("docs/deploying.md", "every line\nbut data transfer out is $73.23", "cost.md", "**$73.23**"),
    ("docs/deploying.md", "data transfer out adds $11.45", "cost.md", "$11.45"),
    ("docs/deploying.md", "127 GB of acknowledgements", "cost.md", "127 GB"),
    ("docs/deploying.md", "**$84.69, over the $60 goal**", "cost.md", "≤ $60: $84.69 (not met"),
    (
        "docs/deploying.md",
        "at 650 streams at 1 msg/s",
        "capacity.json",
        '"capacity_per_worker": 650',
    ),
    (
        "docs/deploying.md",
        "holding up to\n   650 streams",
        "capacity.json",
        '"capacity_per_worker": 650',
    ),
    ("docs/deploying.md", "holds 200 a task", "capacity.json", '"capacity_per_worker": 200'),
    ("docs/deploying.md", "47 % of the task's vCPU", "cost.md", "CPU is 47% of the task's vCPU"),
    ("docs/deploying.md", "over its CPU (134 %)", "cost.md", "CPU is 134% of the task's vCPU"),
    ("docs/deploying.md", "its one\nshard (4 needed)", "cost.md", "need 4 shard(s), 1 deployed"),
    ("docs/deploying.md", "$165.24 a month without", "cost.md", "**$165.24**"),
    ("docs/deploying.md", "plus $114.27 of data\ntransfer out", "cost.md", "$114.27"),
    ("docs/operating.md", "100 streams: 8.55 s", "stop-wait.md", "| stop --wait -f | 100 | 8.55 |"),
    (
        "docs/operating.md",
        "100 streams right after a stop: 4.47 s",
        "stop-wait.md",
        "| rm --wait -f (right after stop) | 100 | 4.47 |",
    ),
    ("docs/proof.md", "57.5 / 28.8 / 14.4 write units", "latest.md", "| 25 (25) | 28.8 | 57.5 |"),
    ("docs/proof.md", "8,000 (the capacity\n  limit", "latest.md", "| sessions | 8,000 |"),
    ("docs/proof.md", "against 800 with\n  per-stream", "latest.md", "| per-stream | 800 |"),
    ("docs/proof.md", "about 1.7× the null sink's", "throughput.md", "1.72× the null sink's"),
    (
        "docs/how-it-works.md",
        "(12.9 against 12.8 µ$",
        "fleet_model.md",
        "| 10 × 100 | flat | 12.9 |",
    ),
    (
        "docs/how-it-works.md",
        "5.69 against 5.38 at 1,000",
        "fleet_model.md",
        "| 10 × 1,000 | flat | 5.69 |",
    ),
    (
        "docs/how-it-works.md",
        "3 at 1,000 × 1,000 (the goal)",
        "fleet_model.md",
        "| 1,000 × 1,000 | scale-out (+25% workers) | > 15 leases (≈ 56 at that pace)"
        " | 3.00 leases |",
    ),
    (
        "docs/architecture.md",
        "recovered in 1.99 leases",
        "fleet_model.md",
        "| 1.99 leases | ≤ 3 leases | met |",
    ),
]


def page_text(page: str) -> str:
    return " ".join((REPO / page).read_text(encoding="utf-8").split())


@pytest.mark.parametrize(("page", "quoted", "result", "stored"), QUOTES)
def test_the_quoted_figure_is_the_stored_one(
    page: str, quoted: str, result: str, stored: str
) -> None:
    assert " ".join(quoted.split()) in page_text(page), f"{page} no longer says {quoted!r}"
    assert stored in (REPO / "bench" / "results" / result).read_text(encoding="utf-8")


def test_the_idle_stream_cost_lies_in_the_quoted_range() -> None:
    """Proof quotes 7–9 µs of CPU per idle stream-second: the stored run's is within it."""
    assert "7–9 µs of CPU per second" in page_text("docs/proof.md")
    text = (REPO / "bench" / "results" / "latest.md").read_text(encoding="utf-8")
    row = next(line for line in text.splitlines() if line.startswith("| sessions | 1,000 (40 s)"))
    assert 7.0 <= float(row.split("|")[5]) <= 9.0


def test_the_rebalance_sums_are_the_stored_table() -> None:
    """Proof quotes 24 moves for an excess of 30 over three joins: the stored rows add up so."""
    assert "moved 24\n  streams" in (REPO / "docs/proof.md").read_text(encoding="utf-8")
    text = (REPO / "bench" / "results" / "latest.md").read_text(encoding="utf-8")
    rows = [r.split("|") for r in text.splitlines() if re.match(r"\| \d → \d workers", r)]
    assert len(rows) == 3
    assert sum(int(r[3]) for r in rows) == 30 and sum(int(r[4]) for r in rows) == 24
