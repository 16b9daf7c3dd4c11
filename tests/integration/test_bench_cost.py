"""The cost section runs end to end at its smallest size: a real worker per rate on the local moto
server and the upstream simulator, the Kinesis records read back, DynamoDB's units from the
write-cost method, then both tables.

``make bench`` is not part of ``make test``; this catches the section breaking when an interface
it uses changes (the worker's flush records, the sink's records, the write-cost windows, the
price lines). Nothing is asserted about speed or about what the figures come to: every line is
there, with positive finite dollars, and the total is their sum.
"""

from __future__ import annotations

import io
import math
import re

import pytest

from bench import consumer_cost, cost, cost_bill
from bench.common import Progress, Table
from bench.context import DEFAULT_SCALE, BenchContext
from cdk.presets import DEFAULT_PRESET, Preset
from local.moto_process import MotoProcess

pytestmark = pytest.mark.slow

SMOKE = cost.Size(
    streams=6,
    seconds=6.0,
    flush_seconds=0.5,
    dynamo_sizes=(2, 4),
    dynamo_heartbeats=2,
    timer_scale=DEFAULT_SCALE,
    payloads=(cost_bill.PRICED_PAYLOAD,),
)
"""The smallest run, at the tests' timers (lease 2 s): the Kinesis read-back leaves out a
window's last 2 s (records still in flight), so a window is well longer than that — about 24
messages read back at 1 msg/s (a 2.5 s window of 3 streams left ~1.5, sometimes none). One
payload size, the priced one, as the full run measures (every other size is a run of the same
code: each one more costs two worker runs, a third of this test's time)."""
LINES = (
    "Fargate",
    "public IPv4",
    "DynamoDB (sessions)",
    "Kinesis (provisioned)",
    "CloudWatch",
    cost_bill.DTO_LINE,
    "Lambda (scheduled auditor)",
    "X-Ray",
    "SQS",
    "VPC flow logs",
    "KMS (sink encryption)",
    "API method metrics",
)
"""Every line of the bill, as deployed by each preset (the default's sink is provisioned)."""
TOTAL = "**total**"
TOTAL_BUT_TRANSFER = "**total but data transfer out**"


def dollars(cell: object) -> float | None:
    """The $ figure of a bill cell (None for a line a configuration does not have)."""
    text = str(cell)
    if text in ("None", "–", ""):
        return None
    match = re.fullmatch(r"\**\$(-?[\d,]+\.\d\d)\**", text)
    assert match, f"not a dollar figure: {text!r}"
    return float(match.group(1).replace(",", ""))


@pytest.fixture(scope="module")
def tables(moto_server: MotoProcess, tmp_path_factory: pytest.TempPathFactory) -> list[Table]:
    ctx = BenchContext(
        quick=True,
        progress=Progress(1, stream=io.StringIO()),
        work_dir=tmp_path_factory.mktemp("cost"),
        _moto=moto_server,
    )
    return cost.run(ctx, SMOKE)


def test_the_bill_has_every_line_and_a_total_that_is_their_sum(tables: list[Table]) -> None:
    """A column per preset and rate; every line a finite figure (an unused API costs $0), the
    total their sum, and the total but data transfer out that sum less its line."""
    bill = tables[0]
    rows = {str(row[0]): row[1:] for row in bill.rows}
    assert set(LINES) | {TOTAL, TOTAL_BUT_TRANSFER} == set(rows)
    columns = len(Preset) * len(cost.RATES)
    assert bill.headers[1].startswith(f"{DEFAULT_PRESET} (deployed default) @ 1 msg/s")
    for column in range(columns):
        figures = {line: dollars(rows[line][column]) for line in LINES}
        assert all(f is not None and math.isfinite(f) and f >= 0 for f in figures.values())
        assert all(figures[line] for line in ("Fargate", "CloudWatch", cost_bill.DTO_LINE))
        total, but_transfer = (
            dollars(rows[TOTAL][column]),
            dollars(rows[TOTAL_BUT_TRANSFER][column]),
        )
        present = [f for f in figures.values() if f is not None]
        assert total == pytest.approx(sum(present), abs=0.01 * len(present))
        assert but_transfer == pytest.approx(
            sum(present) - (figures[cost_bill.DTO_LINE] or 0.0), abs=0.01 * len(present)
        )


def test_the_notes_price_private_networking_and_judge_both_goals(tables: list[Table]) -> None:
    notes = "\n".join(tables[0].notes)
    for rate, (goal, _) in cost_bill.GOALS.items():
        assert f"Goal, deployed default @ {rate:g} msg/s, " in notes
        assert f": ≤ ${goal:g}: $" in notes
        assert f"Private networking, deployed default @ {rate:g} msg/s:" in notes
    assert "Counted from the synthesized templates" in notes


def test_the_bill_by_payload_has_a_row_per_preset_rate_and_size(tables: list[Table]) -> None:
    by_payload = tables[1]
    rows = {(str(row[0]), str(row[1]), str(row[2]).split(" ")[0]) for row in by_payload.rows}
    assert rows == {
        (str(preset), f"{rate:g} msg/s", f"{size}")
        for preset in Preset
        for rate in cost.RATES
        for size in SMOKE.payloads
    }


def test_the_inputs_have_a_row_per_rate_and_size_with_messages_and_log_bytes(
    tables: list[Table],
) -> None:
    inputs = tables[2]
    assert sorted(str(row[0]) for row in inputs.rows) == sorted(
        f"{rate:g} msg/s, {size} B" for rate in cost.RATES for size in SMOKE.payloads
    )
    for row in inputs.rows:
        messages, log_bytes_per_second = row[1], row[8]
        assert isinstance(messages, int) and messages > 0, row
        assert isinstance(log_bytes_per_second, float) and log_bytes_per_second > 0, row


def test_the_consumer_state_has_a_row_per_rate_and_id_shape_and_judges_its_goal(
    tables: list[Table],
) -> None:
    state = tables[3]
    expected = [
        (f"{rate:g} msg/s", shape) for rate in cost.RATES for shape in consumer_cost.ID_SHAPES
    ]
    assert [(row[0], row[1]) for row in state.rows] == expected
    for row in state.rows:
        assert all("$" in str(cell) for cell in row[4:]), row
    assert sum(note.startswith("Goal, 10 msg/s") for note in state.notes) == len(
        consumer_cost.ID_SHAPES
    )
