"""Bounded polling (local.polling): what the local stack and the tests wait with."""

from __future__ import annotations

import itertools

import pytest

from local.polling import ExitedWhileWaiting, wait_until


def test_the_first_truthy_result_is_returned() -> None:
    """The condition is asked until it answers something truthy, which the caller gets."""
    answers = iter([None, [], ["s1"]])
    assert wait_until(lambda: next(answers), 1.0, "streams", every_seconds=0) == ["s1"]


def test_a_condition_never_met_times_out_naming_what_was_awaited() -> None:
    """TimeoutError says what did not happen and how long it was given."""
    with pytest.raises(TimeoutError, match=r"the API: not within 0\.05 s"):
        wait_until(lambda: False, 0.05, "the API", every_seconds=0.01)


def test_waiting_stops_as_soon_as_the_process_has_exited() -> None:
    """An exited process cannot make the condition true: no need to wait out the timeout."""
    checks = itertools.count()
    with pytest.raises(ExitedWhileWaiting, match="moto"):
        wait_until(lambda: next(checks) > 5, 60.0, "moto", every_seconds=0, alive=lambda: False)


def test_a_condition_met_is_success_even_if_the_process_exited_after() -> None:
    """The condition is checked before liveness, so a process that did its job and left is
    not a failure."""
    assert wait_until(lambda: True, 1.0, "moto", alive=lambda: False) is True
